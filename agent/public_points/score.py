"""Score the simulator on public points: each point's signed relative error, and per family the
median and worst |error| over its scored (evaluation) points, with the sign balance.

Acceptance (issue 22's bar, per family and overall): median |error| <= 10 % and worst <= 25 %.
Calibration points are simulated and shown (as fit residuals) but never enter the statistics.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from infralab.agent.public_points.simulate import Simulated, simulate, step_terms
from infralab.agent.public_points.spec import FAMILIES, Point
from infralab.errors import InputError

MEDIAN_TARGET = 0.10
WORST_TARGET = 0.25


@dataclass(frozen=True)
class Scored:
    point: Point
    simulated: Simulated
    terms: dict[str, float] = field(default_factory=dict)  # seconds per operator of the dominant step

    @property
    def simulated_ok(self) -> bool:
        """False when the simulator refused the point's setting (`simulated.detail` says why)."""
        return not math.isnan(self.simulated.value)

    @property
    def counted(self) -> bool:
        """A scored point the simulator could run: one of the statistics' points."""
        return self.point.scored and self.simulated_ok

    @property
    def error(self) -> float:
        """(simulated - measured) / measured (NaN when not simulated)."""
        return (self.simulated.value - self.point.measured) / self.point.measured

    @property
    def top_term(self) -> str:
        """The operator with the largest share of the dominant step, as 'name 43 %' ('' if none)."""
        total = sum(self.terms.values())
        if not total:
            return ""
        name = max(self.terms, key=lambda k: self.terms[k])
        return f"{name} {100 * self.terms[name] / total:.0f} %"


@dataclass(frozen=True)
class FamilyStats:
    family: str
    n: int
    median_abs: float
    worst_abs: float
    signed_median: float
    over: int  # simulated above measured
    under: int

    @property
    def met(self) -> bool:
        return self.n > 0 and self.median_abs <= MEDIAN_TARGET and self.worst_abs <= WORST_TARGET


def score(points: Sequence[Point], progress: Callable[[str], None] | None = None,
          workers: int | None = None) -> list[Scored]:
    """Simulate every point (calibration ones too, as fit residuals), in point order, over `workers`
    processes (default: the machine's CPUs; 1: in this process). Each point is deterministic, so
    the result does not depend on the number of workers."""
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers <= 1 or len(points) <= 1:
        return _in_order(map(score_one, points), len(points), progress)
    with ProcessPoolExecutor(max_workers=min(workers, len(points))) as pool:
        return _in_order(pool.map(score_one, points, chunksize=4), len(points), progress)


def _in_order(scored: Iterable[Scored], total: int, progress: Callable[[str], None] | None) -> list[Scored]:
    out = []
    for i, s in enumerate(scored, 1):
        if progress is not None and (i == 1 or i % 10 == 0 or i == total):
            progress(f"point {i}/{total}: {s.point.id}")
        out.append(s)
    return out


def score_one(p: Point) -> Scored:
    """One point simulated; a setting the simulator refuses (e.g. weights that do not fit) is shown,
    not scored."""
    try:
        return Scored(p, simulate(p), step_terms(p))
    except InputError as exc:
        return Scored(p, Simulated(math.nan, f"not simulated: {exc}"))


def family_stats(scored: Sequence[Scored]) -> list[FamilyStats]:
    """Statistics per family over the scored points, then 'overall' (families with no scored point
    are left out)."""
    groups = [(f, [s for s in scored if s.point.family == f and s.counted]) for f in FAMILIES]
    groups.append(("overall", [s for s in scored if s.counted]))
    out = []
    for name, members in groups:
        if not members:
            continue
        errors = np.array([s.error for s in members])
        out.append(FamilyStats(name, len(members), float(np.median(np.abs(errors))), float(np.max(np.abs(errors))),
                               float(np.median(errors)), int(np.sum(errors > 0)), int(np.sum(errors < 0))))
    return out


def verdict(stats: Sequence[FamilyStats]) -> str:
    """'accepted' when every family (and overall) meets both targets, 'rejected' when none does,
    else 'partial'; 'unmeasured' with nothing scored."""
    if not stats:
        return "unmeasured"
    met = [s.met for s in stats]
    return "accepted" if all(met) else "rejected" if not any(met) else "partial"
