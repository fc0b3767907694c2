"""The step-speed fingerprint: one fixed reference step, timed before and after a replay.

Identical step sequences ran 1.6-1.7x slower on one 2-core machine than on another, and one
machine's per-step speed drifted by 5-25 % within 40 minutes (docs/fidelity.md). A replay's
latencies are only comparable with a simulation (or another replay) at a known step speed, so each
replay times this step before and after itself: the two medians say how fast the machine was, and
how much it drifted while the replay ran.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from infralab.real.engine import RealEngine
from infralab.real.step_shape import StepShape
from infralab.real.synthetic_step import fits, time_step

REFERENCE_STEPS: tuple[StepShape, ...] = (StepShape(q_tokens=64, kv_tokens=256, seqs=1),
                                          StepShape(q_tokens=8, kv_tokens=520, seqs=8))
"""A prefill chunk and a decode batch: the two kinds of step a replay is made of. Fixed, so that
fingerprints from different runs and machines compare. Shapes that do not fit a small test engine
are shrunk by `reference_shapes`."""


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """Median forward seconds of each reference step (in `REFERENCE_STEPS` order) over `repeats` runs."""

    shapes: tuple[StepShape, ...]
    forward_s: tuple[float, ...]
    repeats: int

    def as_dict(self) -> dict[str, object]:
        return {"repeats": self.repeats,
                "steps": [{"q_tokens": s.q_tokens, "kv_tokens": s.kv_tokens, "seqs": s.seqs, "forward_s": t}
                          for s, t in zip(self.shapes, self.forward_s)]}


def reference_shapes(engine: RealEngine) -> tuple[StepShape, ...]:
    """The reference steps this engine can run (a tiny test engine gets them halved until they fit)."""
    shapes = []
    for shape in REFERENCE_STEPS:
        while fits(engine, shape) is not None and shape.q_tokens > shape.seqs:
            q_tokens = max(shape.seqs, shape.q_tokens // 2)
            shape = StepShape(q_tokens, max(q_tokens, shape.kv_tokens // 2), shape.seqs)
        if fits(engine, shape) is None:
            shapes.append(shape)
    return tuple(shapes)


def fingerprint(engine: RealEngine, repeats: int = 9) -> Fingerprint:
    """Time the reference steps `repeats` times each (interleaved, after one untimed run of each)."""
    shapes = reference_shapes(engine)
    times: list[list[float]] = [[] for _ in shapes]
    with engine.quiet():
        for shape in shapes:
            time_step(engine, shape)
        for _ in range(repeats):
            for shape, column in zip(shapes, times):
                column.append(time_step(engine, shape).forward_s)
    return Fingerprint(shapes, tuple(statistics.median(column) for column in times), repeats)


def midpoint(before: Fingerprint, after: Fingerprint) -> Fingerprint:
    """The reference steps' speed over a span: the mean of the times `before` and `after` it (a
    profile or a replay drifts while it runs)."""
    return Fingerprint(before.shapes, tuple((b + a) / 2 for b, a in zip(before.forward_s, after.forward_s)),
                       before.repeats)


def drift(before: Fingerprint, after: Fingerprint) -> float:
    """Relative change of the reference steps' total time from `before` to `after` (0.1 = 10 % slower)."""
    return sum(after.forward_s) / sum(before.forward_s) - 1.0
