"""Token-length distributions for synthetic workloads: fixed, uniform, lognormal, empirical."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infralab.errors import InputError
from infralab.field_types import MAX_TOKENS
from infralab.locations import resolve_path
from infralab.workload.schema import EmpiricalLength, FixedLength, LogNormalLength, UniformLength
from infralab.workload.traces import read_trace_column

LengthSpec = FixedLength | UniformLength | LogNormalLength | EmpiricalLength


def sample_lengths(
    spec: LengthSpec, n: int, rng: np.random.Generator, base_dir: Path, where: str
) -> np.ndarray:
    """n token counts (int64, each >= 1) drawn from `spec`.

    `where` names the config field (e.g. "workload.prompt") in errors; relative trace paths of an
    empirical distribution resolve against `base_dir`.
    """
    if isinstance(spec, FixedLength):
        return np.full(n, spec.value, dtype=np.int64)
    if isinstance(spec, UniformLength):
        if spec.low > spec.high:
            raise InputError(
                f"{where}.high", f"{spec.high} is below low = {spec.low}", "high >= low (inclusive range)"
            )
        return rng.integers(spec.low, spec.high, size=n, endpoint=True, dtype=np.int64)
    if isinstance(spec, LogNormalLength):
        return lognormal_lengths(spec.median, spec.sigma, spec.max, n, rng)
    if isinstance(spec, EmpiricalLength):
        pool = read_trace_column(resolve_path(spec.path, Path(base_dir)), spec.format, spec.column)
        return rng.choice(pool, size=n, replace=True)
    raise TypeError(f"unknown length spec {spec!r}")


def lognormal_lengths(
    median: float, sigma: float, clip: int | None, n: int, rng: np.random.Generator
) -> np.ndarray:
    """Lengths exp(N(ln median, sigma)), rounded to whole tokens, at least 1 and at most `clip`
    (without one, at most MAX_TOKENS: a wide sigma must not overflow int64)."""
    values = np.rint(rng.lognormal(np.log(median), sigma, size=n))
    upper = clip if clip is not None else MAX_TOKENS
    return np.clip(values, 1, upper).astype(np.int64)
