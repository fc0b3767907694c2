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
- **scaled_by_batch**: the profile x a factor per kind and batch-size class (`batch_class` of the
  step's sequences: 1, 2, 4, 8, ...), each the class's measured / predicted total drawn towards
  its kind's factor by PSEUDO_STEPS steps' weight (a class of few steps keeps about its kind's
  factor): the synthetic steps misjudge batch sizes unevenly (decode steps of 3-4 sequences ran
  7-23 % slower than profiled in replays while 16 ran 6 % faster), and a load level sums its own mix;
- **fitted**: `real.step_fit`'s linear form in (q, k, s), non-negative least squares.
The scaled and fitted candidates are cross-validated (k folds by step index: fitted on k - 1,
predicting the held-out one); the profile was not fitted on these steps (but for its one host
constant). The criterion is the worst of the two totals by kind (the sums a TTFT and a TPOT are
made of) and of the batch-size classes' totals (`step_errors`): until 2026-12-07 (third session)
it was the totals by kind alone, changed after a quick study's evaluated replays showed the kind
totals matched by errors of opposite sign across batch sizes, which another load's mix undoes.
A chosen model is written as a step table on the profile's grid (its host time inside the
`engine_prepare` rows, so the mirror adds none), so the mirror reads any of them the same way; a
per-class table scales each grid point by its own class's factor, so a step between two classes'
grid points (3 sequences, between the rows of 2 and 4) is charged a blend of both, where the
cross-validation applied its own class's factor (the evaluated replays are scored on the tables).
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
from infralab.real.step_fit import (FOLDS, StepFit, batch_class, fit_notes, fit_steps, fitted_profile, held_out,
                                    observed, predict_steps, step_errors, write_step_table)
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


# How many steps' weight a batch-size class's factor gives its kind's factor (`batch_factors`).
PSEUDO_STEPS = 8

ClassFactors = dict[tuple[bool, int], float]


def batch_factors(predicted: np.ndarray, steps: Sequence[Any], pseudo: float = PSEUDO_STEPS) -> ClassFactors:
    """{(carries prompt tokens, `batch_class`): factor} for each class the steps hold: (measured
    total + pseudo x m x f) / (predicted total + pseudo x m), where f is the kind's factor
    (`kind_factors`) and m the class's mean predicted step: its own level where it has many steps,
    about its kind's where it has few."""
    measured = np.array([st.duration_s for st in steps])
    kinds = kind_factors(predicted, steps)
    keys = [(_is_prefill(st), batch_class(st.batch.seqs)) for st in steps]
    out: ClassFactors = {}
    for key in sorted(set(keys)):
        cell = np.array([k == key for k in keys])
        base, mean = kinds[0] if key[0] else kinds[1], float(predicted[cell].mean())
        out[key] = float((measured[cell].sum() + pseudo * mean * base) / (predicted[cell].sum() + pseudo * mean))
    return out


def named_class_factors(factors: ClassFactors) -> dict[str, float]:
    """`factors` keyed "prefill/<class>" and "decode/<class>", as records and printouts name them."""
    return {f"{'prefill' if prefill else 'decode'}/{c}": f for (prefill, c), f in factors.items()}


def class_factor(prefill: bool, seqs: int, factors: ClassFactors, kinds: tuple[float, float]) -> float:
    """The factor of a step's kind and batch-size class; its kind's where the class had no step."""
    return factors.get((prefill, batch_class(seqs)), kinds[0] if prefill else kinds[1])


def scaled_cv(predicted: np.ndarray, steps: Sequence[Any], folds: int = FOLDS, by_batch: bool = False) -> dict[str, float]:
    """`step_errors` of the scaled profile (per kind, or per kind and batch-size class), each
    fold's factors from the other folds."""
    prefill = np.array([_is_prefill(st) for st in steps], dtype=bool)

    def predict_fold(test: np.ndarray) -> np.ndarray:
        train = [st for st, t in zip(steps, test) if not t]
        kinds = kind_factors(predicted[~test], train)
        if not by_batch:
            return predicted[test] * np.where(prefill[test], *kinds)
        classes = batch_factors(predicted[~test], train)
        return predicted[test] * np.array([class_factor(_is_prefill(st), st.batch.seqs, classes, kinds)
                                           for st, t in zip(steps, test) if t])

    return step_errors(held_out(len(steps), predict_fold, folds), steps)


def kind_factor(q_tokens: int, seqs: int, factors: tuple[float, float]) -> float:
    """The factor of a grid point's kind: a point with more query tokens than sequences carries
    prompt tokens (`factors` = (prompt, decode-only))."""
    return factors[0] if q_tokens > seqs else factors[1]


def scaled_profile(measured: Profile, host: float, factor: Callable[[int, int], float]) -> Profile:
    """The profile's times x `factor(q_tokens, seqs)` of each grid point (`kind_factor`, or
    `class_factor` with the point's kind by the same rule), its host constant inside the prepare
    time."""
    medians = []
    for point, timing in zip(measured.points, measured.medians):
        f = factor(point.q_tokens, point.seqs)
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
        path = write_step_table(engine, scaled_profile(measured, host, lambda q, s: kind_factor(q, s, factors)),
                                folder / f"{name}-scaled.csv",
                                [f"infralab step table: the synthetic profile x {factors[0]:.4f} (steps with prompt "
                                 f"tokens) / {factors[1]:.4f} (decode-only), the totals of {fitted_on}"])
        errors["scaled"] = scaled_cv(as_profiled, kept)
        record["scaled"] = {"factors": {"prefill": factors[0], "decode": factors[1]}, "table": path.name,
                            "cross_validated": errors["scaled"]}
        tables["scaled"], predictors["scaled"] = (path, 0.0), table_predictor(path, dtype, device, 0.0)
        classes = batch_factors(as_profiled, kept)
        path = write_step_table(
            engine, scaled_profile(measured, host, lambda q, s: class_factor(q > s, s, classes, factors)),
            folder / f"{name}-scaled_by_batch.csv",
            ["infralab step table: the synthetic profile x a factor per kind and batch-size class "
             f"(prompt/decode-only, sequences): {_class_text(classes)}; the totals of {fitted_on}, each class drawn "
             f"towards its kind's factor by {PSEUDO_STEPS} steps"])
        errors["scaled_by_batch"] = scaled_cv(as_profiled, kept, by_batch=True)
        record["scaled_by_batch"] = {"factors": named_class_factors(classes),
                                     "table": path.name, "cross_validated": errors["scaled_by_batch"]}
        tables["scaled_by_batch"] = (path, 0.0)
        predictors["scaled_by_batch"] = table_predictor(path, dtype, device, 0.0)
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
    record["why"] = "worst total by kind or batch-size class on the calibration steps: " + ", ".join(
        f"{k} {_worst(errors[k]):.1%}" + (" (cross-validated)" if k != "profile" else "") for k in errors)
    return (*tables[chosen], record, predictors)


def _class_text(classes: ClassFactors) -> str:
    return ", ".join(f"{'prompt' if p else 'decode'}/{c} {f:.4f}" for (p, c), f in classes.items())


def _worst(errors: dict[str, float]) -> float:
    """The criterion: the worse of the kinds' totals and the batch-size classes' (inf if none)."""
    values = [v for v in (errors["worst_total"], errors.get("worst_class_total", math.nan)) if not math.isnan(v)]
    return max(values) if values else math.inf


def score_on(predictors: dict[str, Predictor], steps: Sequence[Any]) -> dict[str, dict[str, float]]:
    """Each predictor's `step_errors` on `steps` (an evaluated replay's: evaluation only)."""
    kept = observed(steps)
    return {name: step_errors(predict_steps(predict, kept), kept) for name, predict in predictors.items()}
