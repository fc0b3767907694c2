"""A step-time model fitted on the steps of real replays: its form, the fit, its cross-validated
error, and the step table it writes for the mirror.

The synthetic step profile (`real.profile`) times steps alone, on an engine whose cache holds only
that step's keys; in a replay the same shapes run interleaved with other work, on a warm allocator
and a cache at its real occupancy, and took 3-44 % longer than the profile said (docs/fidelity.md).
This model is fitted on a replay's own steps instead.

Form (seconds; of one step: q = query tokens, s = sequences, k = keys attended, past + query):

    forward_s = b0 + b1 q + b2 s + b3 k + b4 q k
    host_s    = c0 + c1 q + c2 s + c3 k + c4 q k        (the step's duration minus its forward)

Why these terms: the layers' GEMMs are per query token (q); each sequence adds a row of logits,
sampling and its own bookkeeping (s); attention reads the cache (k); the engine's general path
builds an additive mask of query tokens x keys and applies it (q k). Every term is multilinear in
(q, k, s), so the step table written on the profile's grid (`fitted_profile`, `write_step_table`)
interpolates the fitted model exactly (`CalibrationTable.lookup(grid=True)` is multilinear in the box around a step).

Fit: non-negative least squares in seconds (no coefficient is negative, so no term makes a step
faster; squared errors in seconds, so the fitted steps' total time is the measured total, the sum a
latency is made of). Error: k-fold cross-validation over the steps (folds by index modulo k, so each
fold spans the replays), reported as `step_errors` does: the held-out steps' total time against
the measured total, apart for steps that carry prompt tokens (what a TTFT waits on) and decode-only
steps (what a TPOT is), and the median |predicted / measured - 1| of single steps.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from infralab.kernels.calibration import write_table
from infralab.real.engine import RealEngine
from infralab.real.profile import Profile, calibration_rows, engine_comments
from infralab.real.synthetic_step import StepTiming

TERMS = ("1", "q", "s", "k", "q*k")
FOLDS = 5
MIN_STEPS = 2 * len(TERMS)  # fewer steps than this cannot be fitted and cross-validated


@dataclass(frozen=True, slots=True)
class StepFit:
    """Coefficients (seconds per unit of each TERMS entry) of forward and host time, the steps it
    was fitted on and its cross-validated errors (`step_errors` of the held-out predictions)."""

    forward: tuple[float, ...]
    host: tuple[float, ...]
    steps: int
    cv: dict[str, float]

    def predict(self, q: float, k: float, s: float) -> tuple[float, float]:
        """(forward_s, host_s) of a step of q query tokens, k keys attended, s sequences."""
        t = terms(q, k, s)
        return float(np.dot(self.forward, t)), float(np.dot(self.host, t))

    def as_dict(self) -> dict[str, object]:
        return {"form": "seconds = sum(coef x term), terms " + ", ".join(TERMS) + " (q query tokens, s sequences, "
                        "k keys attended)", "forward": dict(zip(TERMS, self.forward)), "host": dict(zip(TERMS, self.host)),
                "steps": self.steps, "cross_validated": self.cv}


def terms(q: float, k: float, s: float) -> np.ndarray:
    """The form's terms of one step (module docstring)."""
    return np.array([1.0, q, s, k, q * k])


def observed(steps: Sequence[object]) -> list[object]:
    """The `StepRecord`s whose batch shape was observed."""
    return [st for st in steps if not st.batch.missing]


def _columns(steps: Sequence[object]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(terms matrix, forward seconds, host seconds: the step's duration minus its forward)."""
    x = np.array([terms(st.batch.q_tokens, st.batch.kv_tokens, st.batch.seqs) for st in steps]).reshape(-1, len(TERMS))
    return x, np.array([st.forward_s for st in steps]), np.array([max(st.duration_s - st.forward_s, 0.0) for st in steps])


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    coef, _ = nnls(x, y, maxiter=50 * x.shape[1])
    return coef


def batch_class(seqs: int) -> int:
    """The batch-size class of a step of `seqs` sequences: the power of two nearest on a log scale
    (1, 2, 4, 8, ...; 3 -> 4, 6 -> 8)."""
    return 1 << max(0, round(math.log2(seqs))) if seqs > 1 else 1


# A class holding less than this share of its kind's measured time is too small to judge alone.
CLASS_SHARE = 0.1


def step_errors(predicted: Sequence[float], steps: Sequence[object]) -> dict[str, float]:
    """Predicted step durations (s) against the measured ones: the total time of the steps that
    carry prompt tokens and of the decode-only ones (predicted / measured - 1; nan where a kind has
    no step), the worse of the two in absolute value; the worst total of one batch-size class of a
    kind (`batch_class`; classes holding at least CLASS_SHARE of their kind's time), since another
    load sums another mix of batch sizes and a total matched by errors that cancel across classes
    does not carry over; and the median |error| of single steps."""
    predicted = np.asarray(predicted, dtype=float)
    measured = np.array([st.duration_s for st in steps])
    prefill = np.array([bool(st.batch.prefill_tokens) for st in steps], dtype=bool)
    classes = np.array([batch_class(st.batch.seqs) for st in steps], dtype=int)
    out = {"steps": len(steps)}
    worst_class = math.nan
    for kind, mask in (("prefill_total", prefill), ("decode_total", ~prefill)):
        out[kind] = float(predicted[mask].sum() / measured[mask].sum() - 1.0) if mask.any() else math.nan
        for c in np.unique(classes[mask]):
            cell = mask & (classes == c)
            if measured[cell].sum() >= CLASS_SHARE * measured[mask].sum():
                err = abs(float(predicted[cell].sum() / measured[cell].sum() - 1.0))
                worst_class = err if math.isnan(worst_class) else max(worst_class, err)
    kinds = [abs(out[k]) for k in ("prefill_total", "decode_total") if not math.isnan(out[k])]
    out["worst_total"] = max(kinds) if kinds else math.nan
    out["worst_class_total"] = worst_class
    out["median_step"] = float(np.median(np.abs(predicted / measured - 1.0))) if len(steps) else math.nan
    return out


def predict_steps(predict: object, steps: Sequence[object]) -> list[float]:
    """`predict(q, k, s)` -> (forward_s, host_s) summed, for each step."""
    return [sum(predict(st.batch.q_tokens, st.batch.kv_tokens, st.batch.seqs)) for st in steps]


def held_out(n: int, predict_fold: Callable[[np.ndarray], np.ndarray], folds: int = FOLDS) -> np.ndarray:
    """k-fold cross-validation over `n` steps, folds by index modulo `folds` (so each spans the
    replays): `predict_fold(test)` fits on the steps outside the boolean mask `test` and returns its
    predictions for the steps inside; the held-out predictions of all the steps."""
    out = np.empty(n)
    fold_of = np.arange(n) % folds
    for fold in range(folds):
        test = fold_of == fold
        out[test] = predict_fold(test)
    return out


def fit_steps(steps: Sequence[object], folds: int = FOLDS) -> StepFit:
    """Fit the form on `steps` (`StepRecord`s of replays; unobserved ones left out) and
    cross-validate it; ValueError when fewer than MIN_STEPS steps were observed."""
    kept = observed(steps)
    if len(kept) < max(MIN_STEPS, folds):
        raise ValueError(f"{len(kept)} observed steps: at least {max(MIN_STEPS, folds)} are needed to fit and "
                         "cross-validate")
    x, forward, host = _columns(kept)
    def predict_fold(test: np.ndarray) -> np.ndarray:
        return x[test] @ _nnls(x[~test], forward[~test]) + x[test] @ _nnls(x[~test], host[~test])

    predicted = held_out(len(kept), predict_fold, folds)
    return StepFit(tuple(_nnls(x, forward)), tuple(_nnls(x, host)), len(kept), step_errors(predicted, kept))


def fitted_profile(fit: StepFit, measured: Profile) -> Profile:
    """`measured` (the synthetic profile) with every point's times replaced by the fit's: the same
    grid, so the mirror's coverage check and lookup are unchanged; forward -> `engine_step`, host
    (batch building and update) -> `engine_prepare`."""
    medians = []
    for point in measured.points:
        forward, host = fit.predict(point.q_tokens, point.kv_tokens, point.seqs)
        medians.append(StepTiming(prepare_s=host, forward_s=forward))
    return dataclasses.replace(measured, medians=tuple(medians))


def write_step_table(engine: RealEngine, times: Profile, path: str | Path, notes: Sequence[str]) -> Path:
    """`times` (a profile whose medians a model gave) as a step table at `path`, atomically; the
    comment lines start with `notes` (what made the times) and then say what engine ran."""
    return write_table(calibration_rows(engine, times), path, [*notes, *engine_comments(engine)])


def fit_notes(fit: StepFit, fitted_on: str) -> list[str]:
    """The comment lines of a table written from `fit`."""
    return [f"infralab step table FITTED on replay steps ({fitted_on}), not timed point by point (real/step_fit.py)",
            f"form: seconds = sum(coef x term), terms {', '.join(TERMS)}; forward {list(fit.forward)}, "
            f"host {list(fit.host)}; {fit.steps} steps, cross-validated: {fit.cv}"]
