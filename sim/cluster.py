"""Cluster layouts and the simulator's entry point, `simulate`.

- "colocated": `cluster.instances` engines, each doing prefill and decode; `cluster.router` picks one
  per request on arrival.
- "disaggregated": a prefill pool (`cluster.prefill_instances`, picked by `cluster.router`) and a
  decode pool (`cluster.decode_instances`, picked by `cluster.decode_router`); the KV moves between
  them over links (`infralab.sim.kv_transfer`): the prefill instance's NICs ("per_prefill_nic",
  link "nic-prefill-<i>": one NIC per accelerator, so an instance with hardware.tp = t has t of
  them, each rank sending its share of the KV over its own; modelled as one link of t x the link
  spec's bandwidth) or one fabric link for the whole cluster ("shared", link "kv-shared", at the
  spec's bandwidth).

- "epd": the disaggregated layout with an encode pool (`cluster.encode_instances`, picked by
  `cluster.encode_router`) in front, for requests with images (`infralab.sim.encode_pool`).

Every instance of a pool has the same hardware (`infralab.sim.pool_hardware`: a pool may differ
from `[hardware]`); its KV capacity = cost.kv_capacity_tokens(gpu_memory_utilization,
max_num_seqs, max_batched_tokens) // block_size blocks. The run is deterministic: virtual time only, no randomness, ties broken by
arrival order and instance index.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator, Sequence
import simpy

from infralab.errors import InputError
from infralab.metrics.records import RequestRecord, RunRecord
from infralab.sim.concurrency_gate import ConcurrencyGate, concurrency_gate
from infralab.sim.config import EngineConfig, SimConfig
from infralab.metrics.encode_records import EncodeRecord
from infralab.sim.encode_pool import EncodeInstance, EncodePool, InlineEncoder, encode_records
from infralab.sim.engine.instance import Instance
from infralab.sim.engine.kv_blocks import state_snapshot_blocks
from infralab.sim.engine.request_state import Seq
from infralab.sim.kv_transfer import KVTransfer
from infralab.sim.link import Link
from infralab.sim.pool_hardware import ClusterPools
from infralab.sim.protocols import LinkRate, Router, ServedRequest, StepCostModel, StepListener
from infralab.sim.routers import make_router

Admit = Callable[[ServedRequest, RequestRecord], None]  # hands an arrived request to a pool


def simulate(
    cfg: SimConfig,
    requests: Sequence[ServedRequest],
    cost: StepCostModel,
    transfer_link: LinkRate | None = None,
    *,
    check_invariants: bool = False,
    timeline: bool = True,
    max_timeline_events: int | None = None,
    pools: ClusterPools | None = None,
) -> RunRecord:
    """Run `requests` (each with id, arrival_s, prompt_tokens, output_tokens, block_hashes) through
    the cluster `cfg.cluster`, each step timed by `cost.step(work).total_s` (s); returns the run's
    record, one RequestRecord per request in the given order. `transfer_link` (a LinkSpec:
    bandwidth B/s, latency s) is required for disaggregated layouts. `check_invariants` recounts
    every instance's aggregates after each step (slow; for tests). `timeline=False`: the record
    keeps no intervals or counter samples; `max_timeline_events`: only those a timeline of that
    many events shows (`RunRecord.with_timeline`; the summary is the same either way).

    `pools` (`infralab.sim.pool_hardware.ClusterPools`): per-pool cost models where a pool's
    hardware differs, and the multimodal requests' images and encoder (`infralab.sim.encode_pool`).

    Raises InputError for an engine config or request the cluster can never serve.
    """
    # The language model's pools: each with its cost model, vLLM batch defaults and KV capacity.
    roles = ("colocated",) if cfg.cluster.layout == "colocated" else ("prefill", "decode")
    costs = {role: pools.costs.get(role, cost) if pools is not None else cost for role in roles}
    engines = {role: _with_batch_defaults(cfg.engine, c) for role, c in costs.items()}
    capacities = {role: _kv_capacity_blocks(c, engines[role]) for role, c in costs.items()}
    _check_requests(requests, engines[roles[0]], min(capacities.values()))
    env = simpy.Environment(initial_time=0.0)  # float from the start: a time recorded at 0 is 0.0, compiled or not
    record = RunRecord.with_timeline(timeline, max_timeline_events)
    records = [
        RequestRecord(id=r.id, arrival_s=r.arrival_s, prompt_tokens=r.prompt_tokens, output_tokens=r.output_tokens)
        for r in requests
    ]

    arrivals = _ArrivalClock()

    policies = {role: _policy_options(cfg, c) for role, c in costs.items()}
    encodes = encode_records(requests, pools.images, pools.image_tokens) if pools and pools.encoder else None
    inline = pools is not None and pools.encoder is not None and cfg.cluster.layout != "epd"

    def instance(name: str, index: int, role: str, listener: StepListener | None = None) -> list[Instance]:
        """The engines of one instance: one, or with pipeline stages run as virtual engines (vLLM),
        one per stage, each with its share of the KV blocks (`CostModel.virtual_engines`)."""
        horizon = None if role == "decode" else arrivals.next_s
        ves = getattr(costs[role], "virtual_engines", 1)
        made = []
        for k in range(ves):
            ve_name = name if ves == 1 else f"{name}.ve{k}"
            engine = Instance(
                env, ve_name, index * ves + k, role, engines[role], costs[role], capacities[role] // ves, record,
                listener, check_invariants, horizon, policies[role]
            )
            if inline and role != "decode":
                assert pools is not None and pools.encoder is not None and encodes is not None  # inline
                engine.extra_step_s = InlineEncoder(ve_name, pools.encoder, encodes)
            made.append(engine)
        return made

    cluster = cfg.cluster
    if cluster.layout == "colocated":
        front = [ve for i in range(cluster.instances) for ve in instance(f"instance-{i}", i, "colocated")]
    else:
        if transfer_link is None:
            raise ValueError("a disaggregated layout needs transfer_link (the KV-transfer LinkSpec)")
        decode_pool = [ve for i in range(cluster.decode_instances) for ve in instance(f"decode-{i}", i, "decode")]
        prefill_names = [f"prefill-{i}" for i in range(cluster.prefill_instances)]
        if cluster.transfer.topology == "shared":
            shared = Link(env, transfer_link, "kv-shared", record)
            links = {name: shared for name in prefill_names}
        else:
            # One NIC per accelerator; between pools of different tp, the side with fewer NICs bounds the flow.
            nics = min(getattr(costs[role], "tp", cfg.hardware.tp) for role in roles)
            links = {name: Link(env, transfer_link, f"nic-{name}", record, lanes=nics) for name in prefill_names}
        # The bytes that cross are the decode instance's KV layout (what its ranks hold).
        transfer = KVTransfer(env, cluster.transfer, costs["decode"], links, decode_pool,
                              make_router(cluster.decode_router))
        front = [ve for i, name in enumerate(prefill_names) for ve in instance(name, i, "prefill", transfer)]
        for ve in front:  # a prefill instance's virtual engines share its NICs
            links.setdefault(ve.name, links[ve.name.split(".ve")[0]])
    record.resources["cluster"] = {
        "layout": cluster.layout,
        "kv_capacity_blocks_per_instance": capacities[roles[0]],
        # who stamps token 1 (the summary labels TTFT with it)
        "first_token": cluster.transfer.first_token if cluster.layout != "colocated" else "instance",
    }
    if pools is not None and pools.costs:
        record.resources["cluster"]["kv_capacity_blocks_per_pool"] = capacities
    lm_pools = [*front, *(decode_pool if cluster.layout != "colocated" else [])]
    arrivals.gate = concurrency_gate(env, cfg.workload.max_concurrency, lm_pools)  # closed loop, or None

    decode_emits_first = cluster.layout != "colocated" and cluster.transfer.first_token == "decode"
    admit = _admission(make_router(cluster.router), front, decode_emits_first)
    if cluster.layout == "epd":
        assert pools is not None and pools.encoder is not None and pools.embedding_link is not None and encodes is not None
        admit = _encode_pool(env, cfg, pools, encodes, record, admit).admit
    env.process(_arrivals(env, requests, records, admit, arrivals))
    env.run()

    unfinished = [rec.id for rec in records if math.isnan(rec.finish_s)]
    if unfinished:
        raise RuntimeError(f"simulation stalled with {len(unfinished)} unfinished requests, e.g. {unfinished[:5]}")
    record.requests = records
    record.encodes = None if encodes is None else [encodes[r.id] for r in requests]
    record.close()
    # The last recorded time (SimPy's own clock can differ from it by the rounding of a delay).
    last_interval_end = record.tally().last_end_s
    interval_ends = [last_interval_end] if last_interval_end > -math.inf else []
    record.end_s = max([rec.finish_s for rec in records] + interval_ends, default=0.0)
    return record


class _ArrivalClock:
    """When the next request arrives (s); instances stop runs of quiet steps there. With a
    closed-loop `gate`, a request waits for a free slot too, and while it waits the next arrival
    is a finish, not a known time."""

    def __init__(self) -> None:
        self.next = 0.0
        self.gate: ConcurrencyGate | None = None

    def next_s(self) -> float:
        return self.next

    def wait_for_slot(self, rec: RequestRecord) -> Generator[simpy.Event, object, None]:
        if self.gate is not None:
            self.next = math.inf
            yield from self.gate.enter(rec)


def _arrivals(
    env: simpy.Environment,
    requests: Sequence[ServedRequest],
    records: list[RequestRecord],
    admit: Admit,
    clock: _ArrivalClock,
) -> Generator[simpy.Event, object, None]:
    """Hand each request to `admit` (the front pool) at its arrival time (ties: input order).
    Each request is read once in the loop (a `RequestTable` builds one per access)."""
    latest, in_order = -math.inf, True
    for request in requests:
        if latest > request.arrival_s:
            in_order = False
            break
        latest = request.arrival_s
    stream: Iterator[tuple[ServedRequest, RequestRecord]]
    if in_order:
        stream = zip(requests, records)
    else:  # stable: in order, as given
        order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_s)
        stream = ((requests[i], records[i]) for i in order)
    following = next(stream, None)
    while following is not None:
        request, rec = following
        clock.next = request.arrival_s
        if request.arrival_s > env.now:
            yield env.timeout(request.arrival_s - env.now)
        if clock.gate is not None:
            yield from clock.wait_for_slot(rec)
        following = next(stream, None)
        clock.next = following[0].arrival_s if following is not None else math.inf
        admit(request, rec)


def _admission(router: Router, front: list[Instance], decode_emits_first: bool) -> Admit:
    """Submit a request to the front instance `router` picks. With `decode_emits_first`, a
    prefill instance's tokens of a request that goes on to a decode instance are not the client's."""

    def admit(request: ServedRequest, rec: RequestRecord) -> None:
        target = router.choose(request, front)
        rec.prefill_instance = target.name
        if target.role == "colocated":
            rec.decode_instance = target.name
        seq = Seq(request, rec, decodes_here=target.role != "prefill")
        seq.streams_tokens = not (decode_emits_first and target.role == "prefill" and request.output_tokens > 1)
        target.submit(seq)

    return admit


def _encode_pool(env: simpy.Environment, cfg: SimConfig, pools: ClusterPools, encodes: dict[int, EncodeRecord],
                 record: RunRecord, to_prefill: Admit) -> EncodePool:
    """The EPD layout's encode pool, each instance with its NIC link ("nic-encode-<i>", one lane
    per accelerator) for the embeddings."""
    assert pools.encoder is not None and pools.embedding_link is not None
    lanes = pools.encoder.cost.tp
    instances = [
        EncodeInstance(env, i, pools.encoder, Link(env, pools.embedding_link, f"nic-encode-{i}", record, lanes=lanes),
                       record, to_prefill)
        for i in range(cfg.cluster.encode_instances)
    ]
    return EncodePool(instances, make_router(cfg.cluster.encode_router), encodes, to_prefill)


def _policy_options(cfg: SimConfig, cost: StepCostModel) -> dict[str, object]:
    """Scheduler-policy options beyond the engine config: whether a granted KV reservation holds a
    sequence slot, and the KV blocks a prefix-cache entry's recurrent-state snapshot takes."""
    if cfg.engine.scheduler not in ("fast", "reference"):
        return {}  # the mirrored engine (hf_*) serves colocated instances without a prefix cache
    snapshot = 0
    if cfg.engine.prefix_cache:
        state, kv = cost.linear_state_bytes_per_seq(), cost.kv_bytes_per_token()
        snapshot = state_snapshot_blocks(state, kv, cfg.engine.block_size)
    return {"reservation_takes_slot": cfg.cluster.transfer.reservation_takes_slot, "snapshot_blocks": snapshot}


def _with_batch_defaults(engine: EngineConfig, cost: StepCostModel) -> EngineConfig:
    """Unset batch limits filled in as vLLM does on the cost model's accelerator (a cost model
    without one, a test's fake, gets vLLM's defaults for an unknown device)."""
    accel, model = getattr(cost, "accel", None), getattr(cost, "model", None)
    if accel is None or model is None:
        return engine.with_vllm_defaults()
    return engine.with_vllm_defaults(accel.usable_memory, accel.calibration_device, model.context_length)


def _kv_capacity_blocks(cost: StepCostModel, engine: EngineConfig) -> int:
    if engine.prefix_block_tokens % engine.block_size:
        raise InputError(
            "engine.prefix_block_tokens",
            f"{engine.prefix_block_tokens} is not a multiple of engine.block_size {engine.block_size}",
            "a prefix block made of whole KV blocks",
        )
    assert engine.max_num_seqs is not None and engine.max_batched_tokens is not None  # _with_batch_defaults
    tokens = cost.kv_capacity_tokens(
        engine.gpu_memory_utilization, engine.max_num_seqs, max_batched_tokens=engine.max_batched_tokens
    )
    blocks = int(tokens) // engine.block_size
    if blocks <= 0:
        raise InputError(
            "engine.gpu_memory_utilization",
            f"no memory is left for the KV cache ({int(tokens)} tokens) after the model's weights",
            "a larger gpu_memory_utilization, more tensor parallelism (hardware.tp) or a smaller model",
        )
    return blocks


def _check_requests(requests: Sequence[ServedRequest], engine: EngineConfig, capacity_blocks: int) -> None:
    """Every request must fit one instance's KV cache at its longest (prompt + all outputs but the
    last, which is never fed back); otherwise it could never finish."""
    bs = engine.block_size
    seen: set[int] = set()
    for r in requests:
        if r.id in seen:
            raise InputError(f"request {r.id}", "the id appears more than once", "a unique id per request")
        seen.add(r.id)
        if r.prompt_tokens < 1 or r.output_tokens < 1:
            raise InputError(
                f"request {r.id}",
                f"prompt_tokens={r.prompt_tokens}, output_tokens={r.output_tokens}",
                "at least 1 prompt token and 1 output token",
            )
        if not (r.arrival_s >= 0 and math.isfinite(r.arrival_s)):
            raise InputError(f"request {r.id}", f"arrival_s={r.arrival_s}", "a finite time >= 0 s")
        tokens = r.prompt_tokens + r.output_tokens - 1
        if -(-tokens // bs) > capacity_blocks:
            raise InputError(
                f"request {r.id}",
                f"prompt {r.prompt_tokens} + output {r.output_tokens} tokens need {-(-tokens // bs)} KV blocks "
                f"of {bs} tokens, but an instance holds only {capacity_blocks} blocks ({capacity_blocks * bs} tokens)",
                "requests that fit one instance's KV cache (clip with workload.max_prompt_tokens, or raise "
                "hardware.tp or engine.gpu_memory_utilization)",
            )
