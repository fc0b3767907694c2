"""The error and spread arithmetic of the fidelity study, on plain numbers (seconds).

Per case, metric (TTFT, TPOT, ITL, E2E) and statistic (mean, p50, p90): the real runs' values
(one per repetition) and the simulated one. The claim rule (notes of issue 9):

- error = simulated / mean of the real runs - 1;
- spread = the real runs' coefficient of variation (sample standard deviation / mean);
- where a target applies (means 5 %, p90 10 %, loads below `TARGET_MAX_LOAD`) and the spread is
  below it, the claim is the target: "met" when |error| <= target, else "missed";
- elsewhere (a wider spread, p50, or the load at capacity's edge) the claim is only that the
  simulated value lies within the real runs' range [min, max]: "in range" or "out of range".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90")
TARGETS: dict[str, float] = {"mean": 0.05, "p90": 0.10}
"""Relative error targets per statistic (issue 9); p50 has none."""
TARGET_MAX_LOAD = 0.85
"""Targets hold at loads below this fraction of capacity (issue 9: 'at every load below 85 %')."""

Verdict = Literal["met", "missed", "in range", "out of range"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """One metric statistic of one case: the real runs against the simulation (seconds)."""

    real: tuple[float, ...]
    sim: float
    target: float | None

    @property
    def real_mean(self) -> float:
        return statistics.fmean(self.real)

    @property
    def real_std(self) -> float:
        """Sample standard deviation over the repetitions (0 for one run)."""
        return statistics.stdev(self.real) if len(self.real) > 1 else 0.0

    @property
    def spread(self) -> float:
        """Coefficient of variation of the real runs (std / mean; inf when the mean is 0)."""
        return self.real_std / self.real_mean if self.real_mean > 0 else math.inf

    @property
    def error(self) -> float:
        """sim / real mean - 1 (inf when the real mean is 0)."""
        return self.sim / self.real_mean - 1.0 if self.real_mean > 0 else math.inf

    @property
    def in_range(self) -> bool:
        return min(self.real) <= self.sim <= max(self.real)

    @property
    def target_applies(self) -> bool:
        """The target is the claim: there is one, and the real spread is below it."""
        return self.target is not None and self.spread < self.target

    @property
    def verdict(self) -> Verdict:
        if self.target_applies:
            assert self.target is not None
            return "met" if abs(self.error) <= self.target else "missed"
        return "in range" if self.in_range else "out of range"

    @property
    def fails(self) -> bool:
        return self.verdict in ("missed", "out of range")

    def as_dict(self) -> dict[str, object]:
        return {"real": list(self.real), "real_mean": self.real_mean, "real_std": self.real_std,
                "real_min": min(self.real), "real_max": max(self.real), "spread": self.spread, "sim": self.sim,
                "error": self.error, "in_range": self.in_range, "target": self.target,
                "target_applies": self.target_applies, "verdict": self.verdict}


def target_for(stat: str, load: float) -> float | None:
    """The error target of `stat` at `load` (fraction of capacity), or None where none is claimed."""
    return TARGETS.get(stat) if load < TARGET_MAX_LOAD else None


def compare(real_runs: Sequence[dict[str, dict[str, float]]], sim: dict[str, dict[str, float]],
            load: float) -> dict[str, dict[str, Comparison]]:
    """Every metric statistic of one case: `real_runs` and `sim` map metric -> stat -> seconds
    (`latency_stats`'s form), one dict per repetition."""
    if not real_runs:
        raise ValueError("a case needs at least one real run")
    return {metric: {stat: Comparison(tuple(run[metric][stat] for run in real_runs), sim[metric][stat],
                                      target_for(stat, load))
                     for stat in STATS}
            for metric in METRICS}
