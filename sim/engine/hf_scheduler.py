"""The real engine's scheduler, mirrored: transformers' continuous-batching `FIFOScheduler` and
`PrefillFirstScheduler` (transformers 5.23, resolved for CPU with sdpa and no prefix sharing, as
docs/fidelity.md "How the engine schedules" specifies them), as a `SchedulerPolicy`.

Selected with `engine.scheduler = "hf_fifo"` or `"hf_prefill_first"`. The engine's knobs map onto
the simulator's: `max_batch_tokens` = `engine.max_batched_tokens` (query tokens per step),
`max_requests_per_batch` = `engine.max_num_seqs` (capped at the token budget, as the engine does),
`page_size` = `engine.block_size`, `num_blocks` = the instance's KV capacity in blocks,
`safety_margin` = `engine.safety_margin` (None: the scheduler's own default, FIFO 0.15,
prefill-first 0.0).

One step (`plan`), as `Scheduler._process_candidates` does it: the candidates in priority order
(FIFO: decoding, then partly computed prompts, then waiting requests; prefill-first: partly
computed prompts, then decoding, then waiting; "active" requests in the order they were first
scheduled, waiting ones in arrival order); the safety margin checked once on the free-block
fraction before the step's allocations; each candidate asks for min(its tokens, budget left),
is skipped (starved, if active) when its blocks cannot be had, else scheduled, chunked to the
budget left; the loop stops on an empty token budget, the request cap or the KV-read budget. When
nothing could be scheduled because an allocation failed, or a step left active requests starved,
starved requests are soft reset newest first (their blocks freed, requeued at the back as a prompt
of prompt + generated tokens, recomputed) until the rest fit or one active request is left, and
new requests are kept out until a request finishes (the engine's `OffloadingManager` with no CPU
swap space).

Every step is planned on its own (no repeats); the sequences of the step last planned are
`last_batch()`, the form `tests/real/test_mirror_schedule.py` compares with the real engine's.
Units: tokens, KV blocks. No prefix cache: the real engine runs with block sharing off.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import simpy

from infralab.metrics.records import RequestRecord
from infralab.sim.cost import StepWork
from infralab.sim.engine.request_state import Seq
from infralab.sim.engine.step import StepPlan, StepResult
from infralab.workload.request import Request

DEFAULT_SAFETY_MARGIN = {False: 0.15, True: 0.0}  # by prefill_first: FIFOScheduler's, PrefillFirstScheduler's


@dataclass(frozen=True, slots=True)
class MirroredSequence:
    """One sequence of a step: request id, query tokens, past tokens (already in the KV cache),
    whether it samples a token (as `infralab.real.schedule_trace.ScheduledSequence`)."""

    request_id: int
    query_tokens: int
    past_tokens: int
    samples: bool


class HFScheduler:
    """The engine's scheduler on one instance (`SchedulerPolicy`). Units: tokens, KV blocks.

    Per request (`Seq`): `computed` is the engine's `position_offset` (tokens in the KV cache),
    `target` the tokens to prefill before it samples (the prompt; prompt + generated after a soft
    reset), `blocks` its allocated blocks."""

    def __init__(self, *, max_num_seqs: int, max_batched_tokens: int, block_size: int, capacity_blocks: int,
                 prefix_cache: bool = False, prefix_block_tokens: int = 0, prefill_first: bool = False,
                 safety_margin: float | None = None) -> None:
        del prefix_cache, prefix_block_tokens  # the mirrored engine shares no blocks
        self.max_tokens = max_batched_tokens
        self.max_requests = min(max_num_seqs, max_batched_tokens)  # the engine's own cap
        self.page = block_size
        self.num_blocks = capacity_blocks
        self.kv_read_budget = capacity_blocks * block_size  # the cache's `max_tokens_read`
        self.prefill_first = prefill_first
        self.margin = DEFAULT_SAFETY_MARGIN[prefill_first] if safety_margin is None else safety_margin
        self.used = 0  # blocks allocated
        self.waiting: deque[Seq] = deque()  # arrival order (soft-reset requests at the back)
        self.active: dict[int, Seq] = {}  # in the order first scheduled
        self.decoding: set[int] = set()  # active, prompt complete
        self.block_new = False  # after a soft reset, until a request finishes
        self.step_no = 0
        self.preemptions = 0
        self._batch: list[tuple[Seq, int, int, bool]] = []  # (seq, query, past, samples) of the planned step
        self._preempted = 0

    # ---- from outside -----------------------------------------------------------------------

    def add_waiting(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def add_reservation(self, seq: Seq, granted: simpy.Event) -> None:
        raise RuntimeError("the engine mirror serves colocated instances only")

    def deliver(self, seq: Seq) -> None:
        raise RuntimeError("the engine mirror serves colocated instances only")

    def release(self, seq: Seq) -> None:
        raise RuntimeError("the engine mirror serves colocated instances only")

    def cached_prefix_tokens(self, hashes: tuple[int, ...], prompt: int) -> int:
        return 0

    @property
    def outstanding(self) -> int:
        """Prefill tokens left + decode steps left, over every request here."""
        return sum(seq.output - seq.generated if seq.id in self.decoding else seq.remaining_work()
                   for seq in (*self.waiting, *self.active.values()))

    # ---- one step ---------------------------------------------------------------------------

    def plan(self, now: float) -> StepPlan | None:
        """The engine's `prepare_next_batch` for a step starting at `now` (s): schedule, soft reset
        when the cache is full; None when nothing can run."""
        preempted_before = self.preemptions
        batch, starved, failed = self._schedule()
        while not batch and failed:  # the cache is full: make room, then try again
            if not self._soft_reset(starved):
                raise RuntimeError("no request can be scheduled and none can be reset (a prompt larger than the cache?)")
            batch, starved, failed = self._schedule()
        if not batch:
            return None
        if starved:  # keep the next step from starving them again
            self._soft_reset(starved)
        self._batch = batch
        self._preempted = self.preemptions - preempted_before
        work = StepWork()
        chunks: list[tuple[Seq, int]] = []
        for seq, query, past, samples in batch:
            if math.isnan(seq.rec.first_scheduled_s):
                seq.rec.first_scheduled_s = now
            if seq.id in self.decoding:
                work += StepWork.decode(1, past + 1)
            else:
                work += StepWork.prefill_chunk(query, past, finishes=samples)
                chunks.append((seq, query))
        return StepPlan(self.step_no, chunks, len(batch) - len(chunks), work)

    def repeats(self, plan: StepPlan) -> Callable[[int], bool] | None:
        return None  # one step at a time

    def finish(self, plan: StepPlan, ends_s: list[float]) -> StepResult:
        """The step ended at `ends_s[0]` (s): each sequence's query enters the cache, sampling ones
        emit a token (in the step's order), requests that reached their length finish."""
        (end_s,) = ends_s
        self.step_no += 1
        finished: list[Seq] = []
        for seq, query, _, samples in self._batch:
            seq.computed += query
            if seq.id not in self.decoding:
                seq.prefill_total += query
            if not samples:
                continue
            self.decoding.add(seq.id)
            seq.generated += 1
            seq.rec.token_times_s.append(end_s)
            if math.isnan(seq.rec.first_token_s):
                seq.rec.first_token_s = end_s
            if seq.generated == seq.output:
                self._complete(seq, end_s)
                finished.append(seq)
        self._batch = []
        return StepResult(finished, [], self._preempted)

    def last_batch(self) -> tuple[MirroredSequence, ...]:
        """The sequences of the step last planned (until it finishes), in the engine's order."""
        return tuple(MirroredSequence(seq.id, query, past, samples) for seq, query, past, samples in self._batch)

    # ---- the engine's rules -----------------------------------------------------------------

    def _candidates(self) -> list[Seq]:
        decoding = [seq for seq in self.active.values() if seq.id in self.decoding]
        prefilling = [seq for seq in self.active.values() if seq.id not in self.decoding]
        first, second = (prefilling, decoding) if self.prefill_first else (decoding, prefilling)
        return first + second + ([] if self.block_new else list(self.waiting))

    def _schedule(self) -> tuple[list[tuple[Seq, int, int, bool]], list[tuple[Seq, int]], bool]:
        """One pass of `_process_candidates`: (scheduled (seq, query, past, samples), starved
        active (seq, tokens asked), whether an allocation failed). Allocates the blocks."""
        tokens_left, kv_left, requests_left = self.max_tokens, self.kv_read_budget, self.max_requests
        # Compared as the engine does: free fraction of the cache before this step's allocations.
        in_margin = (self.num_blocks - self.used) / self.num_blocks >= self.margin
        batch: list[tuple[Seq, int, int, bool]] = []
        starved: list[tuple[Seq, int]] = []
        failed = False
        for seq in self._candidates():
            decoding = seq.id in self.decoding
            if not in_margin and batch and not decoding:
                break
            tokens = 1 if decoding else seq.target - seq.computed
            query = min(tokens, tokens_left)
            past = seq.computed
            if kv_left < past:
                continue
            need = max(0, -(-(past + query) // self.page) - seq.blocks)
            if need > self.num_blocks - self.used:
                failed = True
                if seq.id in self.active:
                    starved.append((seq, query))
                continue
            self.used += need
            seq.blocks += need
            if seq.id not in self.active:  # a waiting request becomes active when first scheduled
                self.waiting.remove(seq)
                self.active[seq.id] = seq
            batch.append((seq, query, past, decoding or query == tokens))
            tokens_left -= query
            kv_left -= past
            requests_left -= 1
            if tokens_left == 0 or kv_left <= 0 or requests_left <= 0:
                break
        return batch, starved, failed

    def _soft_reset(self, starved: list[tuple[Seq, int]]) -> bool:
        """`OffloadingManager.offload_requests` with no CPU swap: reset starved requests, newest
        first, until the rest fit one after another or one active request is left. Returns whether
        any was reset."""
        starved = list(starved)
        reset: list[Seq] = []
        while starved and len(self.active) - len(reset) > 1:
            if self._storable(starved) == len(starved):
                break
            seq, _ = starved.pop()
            reset.append(seq)
            self.used -= seq.blocks
            seq.blocks = 0
        for seq in reversed(reset):  # requeued oldest first
            del self.active[seq.id]
            self.decoding.discard(seq.id)
            seq.target = seq.prompt + seq.generated
            seq.computed = 0
            seq.rec.preemptions += 1
            self.preemptions += 1
            self.waiting.append(seq)
        if reset:
            self.block_new = True
        return bool(reset)

    def _storable(self, starved: list[tuple[Seq, int]]) -> int:
        """How many of `starved`, in order, could allocate what they asked for one after another."""
        free = self.num_blocks - self.used
        for count, (seq, query) in enumerate(starved):
            need = max(0, -(-(seq.computed + query) // self.page) - seq.blocks)
            if need > free:
                return count
            free -= need
        return len(starved)

    def _complete(self, seq: Seq, end_s: float) -> None:
        del self.active[seq.id]
        self.decoding.discard(seq.id)
        self.used -= seq.blocks
        seq.blocks = 0
        seq.rec.finish_s = end_s
        seq.rec.recomputed_tokens = seq.prefill_total - seq.prompt
        self.block_new = False

    # ---- what the instance samples and checks -----------------------------------------------

    def counters(self) -> tuple[int, int, int, int]:
        return len(self.waiting), len(self.active), self.used, 0

    def check_invariants(self) -> None:
        assert sum(seq.blocks for seq in self.active.values()) == self.used <= self.num_blocks
        assert all(seq.blocks == -(-seq.computed // self.page) for seq in self.active.values())
        assert all(seq.computed >= seq.target for seq in self.active.values() if seq.id in self.decoding)
        assert not any(seq.id in self.active for seq in self.waiting)


def schedule_in_steps(policy: HFScheduler, arrivals: Sequence[tuple[int, Request]],
                      max_steps: int = 100_000) -> list[tuple[MirroredSequence, ...]]:
    """Every step `policy` plans for `arrivals`, counted in steps instead of seconds: `(after, request)`
    joins the waiting list once `after` steps have run (the engine takes its input queue at the start
    of each step), and an idle policy runs no step until the next arrival. The form
    `infralab.real.schedule_trace.schedule_without_forward` gives the engine's schedule in, so the two
    compare with no clock involved. RuntimeError if the requests are not finished in `max_steps`."""
    pending = sorted(arrivals, key=lambda pair: (pair[0], pair[1].arrival_s, pair[1].id))
    steps: list[tuple[MirroredSequence, ...]] = []
    clock = 0  # steps run, plus the steps an idle policy skipped while waiting for an arrival
    while (pending or policy.waiting or policy.active) and len(steps) < max_steps:
        if pending and not (policy.waiting or policy.active):
            clock = max(clock, pending[0][0])
        while pending and pending[0][0] <= clock:
            request = pending.pop(0)[1]
            record = RequestRecord(request.id, request.arrival_s, request.prompt_tokens, request.output_tokens)
            policy.add_waiting(Seq(request, record, decodes_here=True))
        plan = policy.plan(float(clock))
        if plan is None:
            raise RuntimeError("the mirror scheduled nothing while requests were waiting")
        steps.append(policy.last_batch())
        policy.finish(plan, [float(clock + 1)])
        policy.check_invariants()
        clock += 1
    if pending or policy.waiting or policy.active:
        raise RuntimeError(f"requests still unfinished after {max_steps} steps")
    return steps


def hf_fifo(**options: object) -> HFScheduler:
    """`engine.scheduler = "hf_fifo"`: transformers' `FIFOScheduler`."""
    return HFScheduler(**options, prefill_first=False)  # type: ignore[arg-type]


def hf_prefill_first(**options: object) -> HFScheduler:
    """`engine.scheduler = "hf_prefill_first"`: transformers' `PrefillFirstScheduler`."""
    return HFScheduler(**options, prefill_first=True)  # type: ignore[arg-type]


HF_SCHEDULERS: dict[str, Callable[..., HFScheduler]] = {"hf_fifo": hf_fifo, "hf_prefill_first": hf_prefill_first}
