"""Communication between the ranks of one instance, on one rank (seconds):

- ``tp_collectives`` (`Collectives.time`): two ring all-reduces of the hidden states per layer
  (after attention and after the MLP/experts), plus a gather of the logits when the LM head is
  vocabulary-parallel. Per all-reduce: the link's measured curve when its spec has one
  (`all_reduce_floor_s` + 2(tp-1)/tp x bytes / `all_reduce_bus_bandwidth`, fitted on Vidur's NCCL
  profiles), else 2(tp-1)/tp x bytes / (link bytes/s x collective efficiency) + 2(tp-1) x link
  latency; a calibration table's `all_reduce` rows replace both. Zero when tp = 1. With a parallel
  degree per layer class (`linear_tp`, `moe_ep`) each class all-reduces over its own ranks.
- ``kv_broadcast`` (`Collectives.kv_broadcast_time`, Layer Split): the owner of a full-attention
  layer's KV broadcasts it to the other ranks of its group, overlapped with the compute since the
  previous full-attention layer.
- ``ep_all_to_all`` (`Collectives.ep_all_to_all_time`, expert parallelism): a dispatch and a
  combine all-to-all per MoE layer.

Assumptions (stated, not hidden): collectives are not overlapped with compute (Layer Split's
prefetched broadcast excepted).

Units: seconds, bytes, tokens.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from infralab.sim.cost.geometry import LOGITS_BYTES, Geometry
from infralab.sim.cost.work import StepWork

if TYPE_CHECKING:
    from infralab.sim.cost.calibrated import Calibration


class Collectives:
    """All-reduces, the logits gather, Layer Split's KV broadcast and EP's all-to-all (module
    docstring)."""

    def __init__(self, g: Geometry, calibrated: Calibration | None) -> None:
        self._g, self._calibrated = g, calibrated

    def all_reduce_s(self, payload_bytes: float) -> float:
        """Seconds of one all-reduce of `payload_bytes` over the instance's TP ranks (0 at tp 1)."""
        if self._g.tp == 1:
            return 0.0
        measured = self._calibrated.all_reduce(self._g.tp, payload_bytes) if self._calibrated else None
        return measured if measured is not None else self._all_reduce(payload_bytes)

    def _all_reduce(self, payload: float, ranks: int | None = None) -> float:
        """Seconds of one ring all-reduce of `payload` bytes over `ranks` (default tp) ranks of the
        TP link (module docstring)."""
        g = self._g
        tp, link = (g.tp if ranks is None else ranks), g.tp_link
        assert link is not None
        moved = 2.0 * (tp - 1) / tp * payload
        if link.all_reduce_bus_bandwidth is not None:
            floor = link.all_reduce_floor_s if link.all_reduce_floor_s is not None else 2 * (tp - 1) * link.latency
            return floor + moved / link.all_reduce_bus_bandwidth
        return moved / (link.bandwidth * g.cfg.efficiency.collective) + 2 * (tp - 1) * link.latency

    def time(self, tokens: int, output_tokens: int) -> float:
        """``tp_collectives`` of a step of `tokens` tokens emitting `output_tokens`."""
        g = self._g
        tp = g.tp
        if tp == 1 or (tokens == 0 and output_tokens == 0):
            return 0.0
        link = g.tp_link
        assert link is not None  # checked in Geometry.of
        rate = link.bandwidth * g.cfg.efficiency.collective
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
            total += (head - 1) / head * payload / rate + (head - 1) * link.latency
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
        tokens = work.decode_context_tokens + work.prefill_context_tokens
        if tokens == 0:
            return 0.0
        g = self._g
        link = g.tp_link
        assert link is not None
        rate = link.bandwidth * g.cfg.efficiency.collective
        hops = math.ceil(math.log2(g.layer_split))
        per_layer = [tokens * nbytes / rate + hops * link.latency for nbytes in g.kv_layer_bytes]
        hidden = compute_s / g.full_layers
        return per_layer[0] + sum(max(0.0, b - hidden) for b in per_layer[1:])

    def ep_all_to_all_time(self, tokens: int) -> float:
        """Expert parallelism: per MoE layer a dispatch and a combine all-to-all over the `moe_ep`
        ranks. Each rank starts from its 1/ep share of the step's tokens (data-parallel attention
        style) and sends the (ep - 1)/ep of its routed copies (k per token) that go to other ranks:
        bytes / (link bytes/s x collective efficiency) + (ep - 1) message latencies, each way."""
        if tokens == 0:
            return 0.0
        g = self._g
        m, ep, link = g.model, g.moe_ep, g.tp_link
        assert link is not None
        moved = tokens / ep * m.experts_per_token * m.hidden_size * g.act_width * (ep - 1) / ep
        one_way = moved / (link.bandwidth * g.cfg.efficiency.collective) + (ep - 1) * link.latency
        return m.num_moe_layers * 2 * one_way
