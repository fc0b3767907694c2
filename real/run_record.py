"""A real replay as the run record the shared metrics read (`infralab.metrics.records.RunRecord`),
so that `summarize`, requests.csv and trace.json are computed by the same code as a simulation's.

What maps one to one: per request its arrival (intended, seconds from the replay's start), first
scheduled step (the engine's `lifespan[0]`), every token's time (the engine's stamps) and finish
(`lifespan[1]`); the engine is one colocated instance named as the simulator names its first
(`instance-0`), and each observed step is a "batch" interval on its track (what the busy fraction
counts), with the batch's observed shape as its args. Each step's three phases (scheduling and
batch building, the forward, the update) are intervals on a second track, `engine/instance-0`.

What the engine does not expose is left out, never reconstructed (`NOT_OBSERVED`): the simulator's
counters (waiting, running, KV blocks used), the scheduler's per-candidate decisions, and
preemptions (a replay with a soft reset is refused, so every request here ran without one: its
`preemptions` and `recomputed_tokens` are 0 because none happened, not by default).
"""

from __future__ import annotations

from array import array
from typing import Any

from infralab.metrics.records import Interval, RequestRecord, RunRecord
from infralab.real.engine import EngineSettings
from infralab.real.load_generator import Replay, RequestTiming
from infralab.real.step_trace import StepRecord

INSTANCE = "instance-0"
TRACK = f"instance/{INSTANCE}"
PHASE_TRACK = f"engine/{INSTANCE}"

NOT_OBSERVED = (
    "counters waiting, running, kv_used_blocks, kv_cached_blocks: the engine does not expose its "
    "scheduler's queues or free blocks per step (summary instances.*.counters is empty)",
    "the scheduler's decisions per candidate (skipped, starved, cut by the safety margin)",
    "soft resets (preemptions): a replay in which the engine preempts a request is refused",
    "decode_context_tokens per step: the step's past tokens are observed only summed over all its "
    "sequences (trace.json batch args kv_tokens_read)",
)


def request_record(timing: RequestTiming) -> RequestRecord:
    """One replayed request as the simulator's record (seconds from the replay's start)."""
    return RequestRecord(
        id=timing.id, arrival_s=timing.arrival_s, prompt_tokens=timing.prompt_tokens,
        output_tokens=timing.output_tokens, prefill_instance=INSTANCE, decode_instance=INSTANCE,
        first_scheduled_s=timing.first_scheduled_s, first_token_s=timing.first_token_s,
        token_times_s=array("d", timing.token_times_s), finish_s=timing.finish_s)


def step_intervals(step: StepRecord) -> list[Interval]:
    """The step as a "batch" interval on the instance's track and its three phases on PHASE_TRACK."""
    batch = step.batch
    decode_seqs = None if batch.seqs is None or batch.prefill_seqs is None else batch.seqs - batch.prefill_seqs
    args: tuple[tuple[str, Any], ...] = tuple((name, value) for name, value in (
        ("step", step.index), ("q_tokens", batch.q_tokens), ("kv_tokens_read", batch.kv_tokens_read),
        ("seqs", batch.seqs), ("prefill_seqs", batch.prefill_seqs), ("prefill_tokens", batch.prefill_tokens),
        ("decode_seqs", decode_seqs), ("output_tokens", batch.new_tokens), ("steps", 1),
        ("forward_s", step.forward_s), ("host_s", step.host_s)) if value is not None)
    return [
        Interval(TRACK, "batch", step.start_s, step.end_s, args),
        Interval(PHASE_TRACK, "prepare", step.start_s, step.forward_start_s, (("step", step.index),)),
        Interval(PHASE_TRACK, "forward", step.forward_start_s, step.forward_end_s, (("step", step.index),)),
        Interval(PHASE_TRACK, "update", step.forward_end_s, step.end_s, (("step", step.index),)),
    ]


def run_record(replay: Replay, settings: EngineSettings, cache_blocks: int) -> RunRecord:
    """The replay as a `RunRecord` (requests by id, steps in order) with the instance's facts."""
    record = RunRecord()
    for step in replay.steps:
        record.intervals.extend(step_intervals(step))
    record.requests = [request_record(timing) for timing in replay.requests]
    record.resources[TRACK] = {
        "kind": "instance", "role": "colocated", "kv_capacity_blocks": cache_blocks,
        "block_size": settings.page_size, "max_num_seqs": settings.max_requests_per_batch,
        "max_batched_tokens": settings.max_batch_tokens,
    }
    record.resources["cluster"] = {"layout": "colocated", "kv_capacity_blocks_per_instance": cache_blocks,
                                   "first_token": "instance"}
    record.end_s = max([replay.wall_s, *(step.end_s for step in replay.steps)])
    record.close()
    return record
