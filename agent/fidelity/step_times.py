"""Which step times the mirror charges: the synthetic step profile as measured, the profile scaled
per kind of step to the calibration replays, or the linear model fitted on the calibration
replays' steps (`real/step_fit.py`), whichever predicts held-apart calibration steps best.

Calibration steps: the capacity burst's and the calibration replay's (other requests of the shape,
never the evaluated ones). The candidates, each predicting a step's duration (seconds):
- **profile**: forward + batch building as profiled, + the host time per step outside them (one
  constant: the calibration steps' mean, `host_per_step_s`);
- **scaled**: the profile's prediction x a factor per kind of step (steps that carry prompt
  tokens; decode-only steps), each factor = the calibration steps' measured total / the profile's
  total for that kind: the synthetic steps' shape across the grid, the replays' level;
- **fitted**: `real.step_fit`'s linear form in (q, k, s), non-negative least squares.
Scaled and fitted are cross-validated (k folds by step index: fitted on k - 1, predicting the
held-out one); the profile was not fitted on these steps (but for its one host constant). The
criterion is the worse of the two totals by kind (`step_errors`), the sums a TTFT and a TPOT are
made of. A chosen model is written as a step table on the profile's grid (its host time inside
the `engine_prepare` rows, so the mirror adds none), so the mirror reads any of them the same way.
All candidates are also scored on every evaluated replay's steps, as evaluation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infralab.agent.fidelity.sim_side import host_per_step_s, table_predictor
from infralab.real.engine import RealEngine
from infralab.real.profile import Profile
from infralab.real.step_fit import (FOLDS, StepFit, fit_notes, fit_steps, fitted_profile, held_out, observed,
                                    predict_steps, step_errors, write_step_table)
from infralab.real.synthetic_step import StepTiming

Predictor = Callable[[int, int, int], tuple[float, float]]


def _is_prefill(step: Any) -> bool:
    return bool(step.batch.prefill_tokens)


def kind_factors(predicted: np.ndarray, steps: Sequence[Any]) -> tuple[float, float]:
    """(prefill factor, decode factor): measured total / predicted total per kind (1.0 for a kind
    with no step)."""
    measured = np.array([st.duration_s for st in steps])
    prefill = np.array([_is_prefill(st) for st in steps], dtype=bool)
    return tuple(float(measured[m].sum() / predicted[m].sum()) if m.any() and predicted[m].sum() > 0 else 1.0
                 for m in (prefill, ~prefill))


def scaled_cv(predicted: np.ndarray, steps: Sequence[Any], folds: int = FOLDS) -> dict[str, float]:
    """`step_errors` of the scaled profile, each fold's factors from the other folds."""
    prefill = np.array([_is_prefill(st) for st in steps], dtype=bool)

    def predict_fold(test: np.ndarray) -> np.ndarray:
        fp, fd = kind_factors(predicted[~test], [st for st, t in zip(steps, test) if not t])
        return predicted[test] * np.where(prefill[test], fp, fd)

    return step_errors(held_out(len(steps), predict_fold, folds), steps)


def kind_factor(q_tokens: int, seqs: int, factors: tuple[float, float]) -> float:
    """The factor of a grid point's kind: a point with more query tokens than sequences carries
    prompt tokens (`factors` = (prompt, decode-only))."""
    return factors[0] if q_tokens > seqs else factors[1]


def scaled_profile(measured: Profile, host: float, factors: tuple[float, float]) -> Profile:
    """The profile's times x the factor of each grid point's kind (`kind_factor`), its host
    constant inside the prepare time."""
    medians = []
    for point, timing in zip(measured.points, measured.medians):
        f = kind_factor(point.q_tokens, point.seqs, factors)
        medians.append(StepTiming(prepare_s=f * (timing.prepare_s + host), forward_s=f * timing.forward_s))
    return dataclasses.replace(measured, medians=tuple(medians))


def choose_step_times(engine: RealEngine, measured: Profile, profile_csv: Path, steps: Sequence[Any],
                      folder: Path, name: str, fitted_on: str) -> tuple[Path, float, dict[str, Any], dict[str, Predictor]]:
    """(the chosen step table, the host time per step the mirror adds to it, the record of the
    choice, every candidate's predictor by name) from the calibration `steps` (module docstring).
    The candidates' tables are written into `folder` as `<name>-scaled.csv`, `<name>-fitted.csv`."""
    dtype, device = engine.settings.dtype, engine.settings.device
    kept = observed(steps)
    host = host_per_step_s(profile_csv, kept, dtype, device)
    profiled = table_predictor(profile_csv, dtype, device, host)
    as_profiled = np.array(predict_steps(profiled, kept))
    tables: dict[str, tuple[Path, float]] = {"profile": (profile_csv, host)}
    predictors: dict[str, Predictor] = {"profile": profiled}
    errors: dict[str, dict[str, float]] = {"profile": step_errors(as_profiled, kept)}
    record: dict[str, Any] = {"calibration_steps": len(kept), "profile": errors["profile"], "scaled": None, "fitted": None}
    if len(kept) >= FOLDS:
        factors = kind_factors(as_profiled, kept)
        path = write_step_table(engine, scaled_profile(measured, host, factors), folder / f"{name}-scaled.csv",
                                [f"infralab step table: the synthetic profile x {factors[0]:.4f} (steps with prompt "
                                 f"tokens) / {factors[1]:.4f} (decode-only), the totals of {fitted_on}"])
        errors["scaled"] = scaled_cv(as_profiled, kept)
        record["scaled"] = {"factors": {"prefill": factors[0], "decode": factors[1]}, "table": path.name,
                            "cross_validated": errors["scaled"]}
        tables["scaled"], predictors["scaled"] = (path, 0.0), table_predictor(path, dtype, device, 0.0)
    try:
        fit: StepFit | None = fit_steps(kept)
    except ValueError as exc:
        fit, record["fitted_not_run"] = None, str(exc)
    if fit is not None:
        path = write_step_table(engine, fitted_profile(fit, measured), folder / f"{name}-fitted.csv",
                                fit_notes(fit, fitted_on))
        errors["fitted"] = fit.cv
        record["fitted"] = {**fit.as_dict(), "table": path.name}
        tables["fitted"], predictors["fitted"] = (path, 0.0), table_predictor(path, dtype, device, 0.0)
    chosen = min(errors, key=lambda k: _worst(errors[k]))
    record["chosen"] = chosen
    record["why"] = "worse total by kind on the calibration steps: " + ", ".join(
        f"{k} {errors[k]['worst_total']:.1%}" + (" (cross-validated)" if k != "profile" else "") for k in errors)
    return (*tables[chosen], record, predictors)


def _worst(errors: dict[str, float]) -> float:
    value = errors["worst_total"]
    return math.inf if math.isnan(value) else value


def score_on(predictors: dict[str, Predictor], steps: Sequence[Any]) -> dict[str, dict[str, float]]:
    """Each predictor's `step_errors` on `steps` (an evaluated replay's: evaluation only)."""
    kept = observed(steps)
    return {name: step_errors(predict_steps(predict, kept), kept) for name, predict in predictors.items()}
