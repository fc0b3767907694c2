"""The prefill step of an MoE layer stack under expert parallelism, as one EP rank's host thread
and device streams see it.

Per layer (DeepEP "normal" kernels, as used for prefill):
1. launch the attention block (compute stream);
2. **dispatch**, a native call: it launches a notify kernel on the comm stream (which waits for
   the attention block: the router output decides where tokens go) and busy-waits on the CPU
   until the GPU reports the receive counts (DeepEP's dispatch needs them to allocate the
   receive buffers: an implicit CPU-GPU synchronisation); then it queues the token all-to-all;
3. launch the experts (compute stream, after the dispatched tokens arrived);
4. **combine**, a native call that queues the reverse all-to-all (no CPU wait);
the next layer's attention waits for the combine. After the last layer: LM head, synchronise.

Whether dispatch/combine keep the GIL while they run is the launch parameter `holds_gil`.
All EP ranks are assumed to run the same work in lockstep, so one rank is simulated.
Times are seconds, sizes bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import simpy

from infralab.sim.host.streams import Stream, launch, synchronize
from infralab.sim.host.thread import HostThread, Segment

_NODE_GPUS = 8  # GPUs per node sharing NVLink (HGX H100/H200 boards)


@dataclass(frozen=True)
class LayerWork:
    """One layer's device work on one EP rank (seconds, bytes)."""

    attention_s: float  # attention/KDA block incl. projections and router
    experts_s: float  # routed + shared experts over the tokens this rank receives
    dispatch_intra_bytes: float  # sent to other GPUs of the node (NVLink)
    dispatch_inter_bytes: float  # sent to other nodes (RDMA NIC)
    combine_intra_bytes: float
    combine_inter_bytes: float
    notify_s: float  # the counts exchange the CPU waits for


@dataclass(frozen=True)
class HostCosts:
    """Host-side costs of the main thread (seconds)."""

    launch_s: float  # Python + framework dispatch per kernel launch
    launches_attention: int  # launches of the attention block (before dispatch)
    launches_experts: int  # launches between dispatch and combine
    native_call_s: float  # entering/leaving a native call (binding overhead)


@dataclass(frozen=True)
class MoePrefillPlan:
    num_layers: int
    layer: LayerWork
    lm_head_s: float
    host: HostCosts


class EpDevice:
    """One GPU: a compute and a comm stream, plus the links its all-to-all uses."""

    def __init__(self, compute: Stream, comm: Stream, intra: Callable[[float], simpy.Event],
                 inter: Callable[[float], simpy.Event]) -> None:
        self.compute, self.comm = compute, comm
        self._intra, self._inter = intra, inter

    def all_to_all(self, intra_bytes: float, inter_bytes: float) -> Callable[[], simpy.Event]:
        """Work for the comm stream: both legs in flight at once, done when the slower one is."""

        def start() -> simpy.Event:
            legs = [self._intra(intra_bytes)]
            if inter_bytes > 0:
                legs.append(self._inter(inter_bytes))
            return legs[0].env.all_of(legs)

        return start


def all_to_all_bytes(tokens: int, hidden: int, experts: int, top_k: int, ep: int,
                     bytes_per_elem: float) -> tuple[float, float]:
    """(intra-node, inter-node) bytes one rank sends in a dispatch of `tokens` tokens.

    A token goes once to each distinct rank holding one of its k experts (DeepEP deduplicates per
    rank); with uniform routing that is ep * (1 - (1 - 1/ep)^k) ranks in expectation, of which
    (min(ep, 8) - 1) / ep are other GPUs of the node and (ep - min(ep, 8)) / ep other nodes."""
    if ep <= 1:
        return 0.0, 0.0
    per_rank = experts // ep
    if per_rank < 1:
        raise ValueError(f"ep={ep} exceeds the {experts} experts")
    ranks_hit = ep * (1.0 - (1.0 - 1.0 / ep) ** top_k)
    token_bytes = hidden * bytes_per_elem
    node = min(ep, _NODE_GPUS)
    intra = tokens * ranks_hit * (node - 1) / ep * token_bytes
    inter = tokens * ranks_hit * (ep - node) / ep * token_bytes
    return intra, inter


def prefill_step(
    thread: HostThread,
    device: EpDevice,
    plan: MoePrefillPlan,
    holds_gil: bool,
    on_layer_kv: Callable[[int, simpy.Event], None] = lambda layer, ready: None,
) -> Segment:
    """One prefill step on `thread`; `on_layer_kv(layer, ready)` is told when each layer's KV will
    be written (`ready` fires when the attention block finishes)."""
    host, work = plan.host, plan.layer
    previous_combine: simpy.Event | None = None
    for layer in range(plan.num_layers):
        after = [previous_combine] if previous_combine is not None else []
        attention = yield from launch(
            thread, device.compute, work.attention_s, "attention",
            launch_s=host.launches_attention * host.launch_s, after=after,
        )
        on_layer_kv(layer, attention)

        def notify() -> simpy.Event:
            done = device.comm.enqueue(work.notify_s, "notify", after=[device.compute.idle_event()])
            return thread.env.all_of([done, thread.env.timeout(host.native_call_s)])

        yield from thread.native_until(notify, holds_gil, "dispatch")
        dispatched = device.comm.enqueue(
            device.all_to_all(work.dispatch_intra_bytes, work.dispatch_inter_bytes), "dispatch"
        )
        experts = yield from launch(
            thread, device.compute, work.experts_s, "experts",
            launch_s=host.launches_experts * host.launch_s, after=[dispatched],
        )
        yield from thread.native(host.native_call_s, holds_gil, "combine")
        previous_combine = device.comm.enqueue(
            device.all_to_all(work.combine_intra_bytes, work.combine_inter_bytes), "combine", after=[experts]
        )
    after = [previous_combine] if previous_combine is not None else []
    yield from launch(thread, device.compute, plan.lm_head_s, "lm_head", launch_s=host.launch_s, after=after)
    yield from synchronize(thread, device.compute)


def blocks(tokens: int, page_tokens: int) -> int:
    """KV pages (one transfer descriptor each) for `tokens` tokens."""
    return math.ceil(tokens / page_tokens)
