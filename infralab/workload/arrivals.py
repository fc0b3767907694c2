"""Synthetic arrival processes: Poisson and Gamma (bursty or smooth) inter-arrival times.

All processes start with a request at t = 0 (as trace workloads do after re-basing), so n
requests span n - 1 inter-arrival gaps.
"""

from __future__ import annotations

import numpy as np

from infralab.workload.schema import GammaArrivals, PoissonArrivals


def poisson_arrivals(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """n arrival times (s) of a Poisson process of `rate` requests/s: exponential gaps, mean 1/rate."""
    return _from_gaps(rng.exponential(1.0 / rate, size=max(n - 1, 0)))


def gamma_arrivals(rate: float, cv: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """n arrival times (s) with Gamma gaps of mean 1/rate and coefficient of variation `cv`.

    Shape k = 1/cv^2 and scale = cv^2/rate give mean k*scale = 1/rate and std/mean = 1/sqrt(k) = cv;
    cv > 1 is burstier than Poisson, cv < 1 smoother, cv = 1 is Poisson.
    """
    shape = 1.0 / (cv * cv)
    return _from_gaps(rng.gamma(shape, 1.0 / (rate * shape), size=max(n - 1, 0)))


def arrival_times(spec: PoissonArrivals | GammaArrivals, n: int, rng: np.random.Generator) -> np.ndarray:
    """n arrival times (s, non-decreasing, first at 0) drawn from the process `spec` describes."""
    if isinstance(spec, PoissonArrivals):
        return poisson_arrivals(spec.rate, n, rng)
    if isinstance(spec, GammaArrivals):
        return gamma_arrivals(spec.rate, spec.cv, n, rng)
    raise TypeError(f"unknown arrival spec {spec!r}")


def _from_gaps(gaps: np.ndarray) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(gaps)))
