"""Communication between the ranks of one instance, on one rank (seconds):

- ``tp_collectives`` (`Collectives.time`): two all-reduces of the hidden states per layer (after
  attention and after the MLP/experts), plus an all-gather of the logits when the LM head is
  vocabulary-parallel. Each collective is timed by `collective_s`: the engine's own all-reduce for
  small messages where the link has one and `cost.allreduce` is "custom" (vLLM's one-stage /
  two-stage kernel: `custom_stages`), else the link's NCCL curve for that number of ranks
  (`floor_s` + bytes moved per rank / bus bandwidth; a world size the link's table lacks takes the
  nearest one's), else bytes / (link bytes/s x collective efficiency) + a link latency per ring
  step. A calibration table's `all_reduce` rows replace them all. Zero when tp = 1. With a parallel
  degree per layer class (`linear_tp`, `moe_ep`) each class all-reduces over its own ranks.
- ``kv_broadcast`` (`Collectives.kv_broadcast_time`, Layer Split): the owner of a full-attention
  layer's KV broadcasts it to the other ranks of its group, overlapped with the compute since the
  previous full-attention layer.
- ``ep_all_to_all`` (`Collectives.ep_all_to_all_time`, expert parallelism): a dispatch and a
  combine all-to-all per MoE layer, on the link's all-gather curve (the same ring traffic,
  (w-1)/w of each rank's buffer).

The curves' sources: the link files (sim/catalog/links/*.toml), fitted by
`benchmarks/fit_collectives.py` on Vidur's NCCL profiles and the calibration points of
experiments/fidelity_public (docs/calibration.md, "Collectives").

Assumptions (stated, not hidden): collectives are not overlapped with compute (Layer Split's
prefetched broadcast excepted).

Units: seconds, bytes, tokens.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from infralab.errors import InputError
from infralab.sim.cost.geometry import LOGITS_BYTES, Geometry
from infralab.sim.cost.work import StepWork
from infralab.sim.specs import CollectiveCurve, LinkSpec

COLLECTIVES = ("all_reduce", "custom_all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
ONE_STAGE_BYTES = {4: 512 * 1024, 8: 256 * 1024}  # vLLM custom_all_reduce.cuh: one stage below these


def custom_stages(world: int, nbytes: float) -> tuple[int, float]:
    """(stages, bytes each rank reads from its peers) of vLLM's custom all-reduce of `nbytes` over
    `world` fully connected ranks, as its kernel chooses (csrc/custom_all_reduce.cuh, vllm-project/vllm
    @ c9eabec): one stage, every rank reading every peer's whole buffer, on 2 ranks, on up to 4
    under 512 KiB or up to 8 under 256 KiB; else two (reduce-scatter, then all-gather)."""
    if world == 2 or any(world <= w and nbytes < limit for w, limit in ONE_STAGE_BYTES.items()):
        return 1, (world - 1) * nbytes
    return 2, 2.0 * (world - 1) / world * nbytes


def curve_for(table: dict[str, CollectiveCurve] | None, world: int) -> CollectiveCurve | None:
    """The curve of `world` ranks in a link's table, else of the nearest number of ranks in it (by
    ratio; the larger on a tie), else None."""
    if not table:
        return None
    if str(world) in table:
        return table[str(world)]
    nearest = min(table, key=lambda k: (abs(math.log2(int(k) / world)), -int(k)))
    return table[nearest]


def uses_custom(link: LinkSpec, world: int, nbytes: float) -> bool:
    """Whether an engine with its own all-reduce runs this one on it (else NCCL)."""
    spec = link.custom_all_reduce
    return spec is not None and world in spec.world_sizes and nbytes < spec.max_bytes


def collective_s(link: LinkSpec, kind: str, world: int, nbytes: float, efficiency: float = 0.7,
                 allreduce: str = "nccl") -> float:
    """Seconds of one collective `kind` (COLLECTIVES) of `nbytes` (the message of an all-reduce, the
    whole buffer of an all-gather / reduce-scatter / all-to-all, as nccl-tests counts its `size`)
    over `world` ranks of `link`. An "all_reduce" uses the engine's own kernel when `allreduce` is
    "custom" and the link has one that takes it (`uses_custom`); "custom_all_reduce" asks for that
    kernel outright. `efficiency`: the fraction of link bandwidth where no curve is measured."""
    if world < 2 or nbytes <= 0:
        return 0.0
    rate = link.bandwidth * efficiency
    if kind == "custom_all_reduce" or (kind == "all_reduce" and allreduce == "custom" and uses_custom(link, world, nbytes)):
        spec = link.custom_all_reduce
        if spec is None:
            raise InputError(f"link {link.name}", "has no custom_all_reduce table", "a link that describes one")
        stages, moved = custom_stages(world, nbytes)
        return stages * spec.stage_floor_s + moved / rate
    if kind == "sendrecv":
        return nbytes / link.bandwidth + link.latency
    if kind == "all_reduce":
        moved, steps, table = 2.0 * (world - 1) / world * nbytes, 2 * (world - 1), link.all_reduce
    elif kind in ("all_gather", "reduce_scatter", "alltoall"):
        moved, steps, table = (world - 1) / world * nbytes, world - 1, link.all_gather
    else:
        raise InputError("collective", f"unknown {kind!r}", f"one of {COLLECTIVES}")
    curve = curve_for(table, world)
    if curve is not None:
        return curve.floor_s + moved / curve.bus_bandwidth
    return moved / rate + steps * link.latency

if TYPE_CHECKING:
    from infralab.sim.cost.calibrated import Calibration


class Collectives:
    """All-reduces, the logits gather, Layer Split's KV broadcast and EP's all-to-all (module
    docstring)."""

    def __init__(self, g: Geometry, calibrated: Calibration | None) -> None:
        self._g, self._calibrated = g, calibrated
        # Layer Split: the full layers after the first as runs of equal KV bytes, in layer order
        # (one run when every layer has the KV dtype): kv_broadcast_s sums a run's equal terms
        # in one call, in the same order as one term per layer.
        self._broadcast_runs = tuple((nbytes, len(list(run))) for nbytes, run in itertools.groupby(g.kv_layer_bytes[1:]))

    def all_reduce_s(self, payload_bytes: float) -> float:
        """Seconds of one all-reduce of `payload_bytes` over the instance's TP ranks (0 at tp 1)."""
        if self._g.tp == 1:
            return 0.0
        measured = self._calibrated.all_reduce(self._g.tp, payload_bytes) if self._calibrated else None
        return measured if measured is not None else self._all_reduce(payload_bytes)

    def _all_reduce(self, payload: float, ranks: int | None = None) -> float:
        """Seconds of one all-reduce of `payload` bytes over `ranks` (default tp) ranks of the TP
        link (`collective_s`, with the engine's all-reduce `cost.allreduce`)."""
        g = self._g
        link = g.tp_link
        assert link is not None
        return collective_s(link, "all_reduce", g.tp if ranks is None else ranks, payload,
                            g.cfg.efficiency.collective, g.cfg.allreduce)

    def time(self, tokens: int, output_tokens: int) -> float:
        """``tp_collectives`` of a step of `tokens` tokens emitting `output_tokens`."""
        g = self._g
        tp = g.tp
        if tp == 1 or (tokens == 0 and output_tokens == 0):
            return 0.0
        link = g.tp_link
        assert link is not None  # checked in Geometry.of
        total = 0.0
        if tokens and g.plain_collectives:
            payload = tokens * g.model.hidden_size * g.act_width
            measured = self._calibrated.all_reduce(tp, payload) if self._calibrated else None
            total += 2 * g.model.num_layers * (measured if measured is not None else self._all_reduce(payload))
        elif tokens:
            total += self._class_all_reduces(tokens * g.model.hidden_size * g.act_width)
        head = g.lm_head_tp
        if output_tokens and head > 1:  # vocab-parallel LM head: gather the logit shards
            payload = output_tokens * g.model.vocab_size * LOGITS_BYTES
            total += collective_s(link, "all_gather", head, payload, g.cfg.efficiency.collective)
        return total

    def _class_all_reduces(self, payload: float) -> float:
        """All-reduces of one step with a parallel degree per layer class: after full attention
        over tp ranks, after linear attention over `linear_tp` (none when 1), after a dense MLP over
        tp, after an MoE layer over the tp / moe_ep ranks that split each expert (none when 1; EP's
        all-to-all is `ep_all_to_all`)."""
        g = self._g
        m = g.model

        def all_reduce(ranks: int) -> float:
            if ranks == 1:
                return 0.0
            measured = self._calibrated.all_reduce(ranks, payload) if self._calibrated else None
            return measured if measured is not None else self._all_reduce(payload, ranks)

        return (g.full_layers * all_reduce(g.tp) + g.linear_layers * all_reduce(g.linear_tp)
                + m.num_dense_mlp_layers * all_reduce(g.tp)
                + m.num_moe_layers * all_reduce(g.tp // g.moe_ep))

    def kv_broadcast_time(self, work: StepWork, compute_s: float) -> float:
        """Layer Split: before a full-attention layer runs, its owner broadcasts that layer's KV of
        the step's context (decode sequences' context, prefill chunks' cached + new tokens) to the
        other `layer_split - 1` ranks of its group: per layer, bytes / (link bytes/s x collective
        efficiency) + ceil(log2 g) message latencies (a pipelined tree broadcast). As in
        vllm-ascend's KVPP (two scratch buffers, one layer prefetched ahead), layer l's broadcast
        overlaps the compute since the previous full-attention layer (an F-th of the step's other
        operators, `compute_s`); the first layer's is exposed. Returns the exposed seconds."""
        return self.kv_broadcast_s(work.decode_context_tokens + work.prefill_context_tokens, compute_s)

    def kv_broadcast_s(self, tokens: int, compute_s: float) -> float:
        """`kv_broadcast_time` of a step whose context is `tokens` tokens: the first layer's
        broadcast, then each later layer's beyond `compute_s / F`, added in layer order."""
        if tokens == 0:
            return 0.0
        g = self._g
        link = g.tp_link
        assert link is not None
        rate = link.bandwidth * g.cfg.efficiency.collective
        latency = math.ceil(math.log2(g.layer_split)) * link.latency
        hidden = compute_s / g.full_layers
        exposed = 0.0
        for nbytes, count in self._broadcast_runs:  # equal terms: one C-level sum per run, same order
            exposed = sum(itertools.repeat(max(0.0, tokens * nbytes / rate + latency - hidden), count), exposed)
        return tokens * g.kv_layer_bytes[0] / rate + latency + exposed

    def ep_all_to_all_time(self, tokens: int) -> float:
        """Expert parallelism: per MoE layer a dispatch and a combine all-to-all over the `moe_ep`
        ranks. Each rank starts from its 1/ep share of the step's tokens (data-parallel attention
        style) and sends the (ep - 1)/ep of its routed copies (k per token) that go to other ranks
        (`collective_s` "alltoall"), each way."""
        if tokens == 0:
            return 0.0
        g = self._g
        m, ep, link = g.model, g.moe_ep, g.tp_link
        assert link is not None
        buffer = tokens / ep * m.experts_per_token * m.hidden_size * g.act_width
        one_way = collective_s(link, "alltoall", ep, buffer, g.cfg.efficiency.collective)
        return m.num_moe_layers * 2 * one_way
