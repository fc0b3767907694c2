"""Pipeline parallelism (`hardware.pp`, `hardware.pp_micro_batches`): a step over `pp` stages in
`m` micro-batches (GPipe schedule) takes m + p - 1 slots, each the slowest stage's time on one
micro-batch (its share of the layers' operators, the LM head and sampler counted on it too: an
upper bound, the last stage carries them) plus ``pp_transfer``, the activation hand-over to the
next stage over the instance's link. Each stage idles p - 1 of the slots: the bubble fraction
(p - 1) / (m + p - 1) (`pipeline_bubble_fraction`). Layers are split over the stages as evenly as
possible (`stage_layers`).

Units: seconds, bytes, tokens.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from infralab.sim.cost.geometry import Geometry
from infralab.sim.cost.work import StepWork


def pipeline_bubble_fraction(stages: int, micro_batches: int) -> float:
    """Fraction of a pipelined step each stage idles (GPipe's bubble): (p - 1) / (m + p - 1) for
    p stages and m micro-batches of equal stage time."""
    return (stages - 1) / (micro_batches + stages - 1)


def stage_layers(num_layers: int, stages: int) -> tuple[int, ...]:
    """Layers per pipeline stage: as even as possible, the first `num_layers % stages` stages one
    layer more (27 layers in 2 stages: 14 + 13)."""
    base, extra = divmod(num_layers, stages)
    return tuple(base + (1 if i < extra else 0) for i in range(stages))


def micro_batch(work: StepWork, micro_batches: int) -> StepWork:
    """One of `micro_batches` equal micro-batches of `work` (every count divided, rounded up)."""
    counts = (getattr(work, f.name) for f in dataclasses.fields(work))
    return StepWork(*(math.ceil(count / micro_batches) for count in counts))


class Pipeline:
    """The pipelined step and the stage transfers of one instance (module docstring)."""

    def __init__(self, g: Geometry) -> None:
        self._g = g

    def bubble(self) -> float:
        """The bubble fraction of this instance's pipeline (0 without pp)."""
        return pipeline_bubble_fraction(self._g.pp, self._g.micro_batches)

    def step(self, work: StepWork, op_times: Callable[[StepWork], dict[str, float]]) -> dict[str, float]:
        """Seconds (one rank) of each operator of the pipelined step doing `work`, from the
        `op_times` of one micro-batch, plus ``pp_transfer``."""
        g = self._g
        m = g.micro_batches
        micro = micro_batch(work, m)
        ops = op_times(micro)
        share = max(stage_layers(g.model.num_layers, g.pp)) / g.model.num_layers
        slots = m + g.pp - 1
        out = {name: slots * (t if name in ("lm_head", "sampler") else share * t) for name, t in ops.items()}
        out["pp_transfer"] = slots * self.stage_transfer_s(micro.tokens)
        return out

    def stage_transfer_s(self, tokens: int) -> float:
        """Seconds to hand `tokens` tokens' hidden states from one pipeline stage to the next over
        the instance's link (point to point: bytes / link bandwidth + one message latency)."""
        g = self._g
        if tokens == 0 or g.pp == 1:
            return 0.0
        link = g.tp_link
        assert link is not None  # checked in Geometry.of
        return tokens * g.model.hidden_size * g.act_width / link.bandwidth + link.latency
