"""Continuous batching with chunked prefill, paged KV blocks, a prefix cache and recompute
preemption: the decisions of one instance, step by step, without SimPy (see `instance.py`).

One step (vLLM-like; `plan` then `finish`):
1. Requests whose KV arrived from a prefill instance (`deliver`) with their first token (the
   prefill-side first token, `cluster.transfer.first_token = "prefill"`) start decoding, in delivery
   order, while a sequence slot is free.
2. Every decoding request takes one token of the step's budget (`max_batched_tokens`). One whose
   context crosses into a new KV block gets a block; if none can be had, the most recently
   admitted running request is preempted (recompute: its blocks are freed, it goes back to the
   front of the waiting queue, and later computes prompt + generated tokens again as a prefill).
   That victim may be the request itself.
3. Partially prefilled running requests, oldest first, take prompt chunks of what is left of the
   budget (blocks allocated per chunk, preempting as in 2).
4. Unless this step preempted (vLLM v1 schedules no waiting request in a step that preempted;
   a step that would then be empty stands for an empty step of no time: planning starts again at
   1, where the slots that the preemptions freed may start delivered requests),
   requests whose KV arrived without their first token (the decode-side first token, the default)
   are admitted in delivery order, each with one token to compute: the last prompt token, whose
   logits give token 1 (vLLM's P/D connectors load all prompt KV but that token's). They hold
   their blocks already, so they go before the waiting queue (vLLM keeps one FCFS queue, where a
   preempted request at its head can wait forever for blocks that such requests hold). Then
   waiting requests are admitted in order while budget, a sequence slot (`max_num_seqs`) and KV
   blocks are available; admission never preempts. A prefix-cache hit (the longest run of the
   request's leading whole-prompt block hashes in the cache) counts as computed; at least one token
   is always computed, to produce the logits. Blocks come from free ones first, then by evicting
   unpinned cache entries (LRU); a failed allocation changes nothing.
5. On a decode-pool instance (again unless this step preempted), reservations for incoming KV
   are granted in order when the prompt's blocks are free and a sequence slot is free. Whether a
   granted reservation then holds its slot until its KV arrives is `reservation_takes_slot`: False
   (the default, vLLM v1: a request waiting for remote KV holds blocks in the waiting queue, not a
   running slot; a grant needs only a free slot at that moment) or True (it holds one).
A request whose prompt is complete emits an output token at the step's end; decoding requests emit
one token at each step's end. Whole prompt blocks become (pinned) prefix-cache entries as soon as a
chunk completes them; they are unpinned when the request finishes or is preempted. The token
budget also caps the running set (min(max_num_seqs, max_batched_tokens)), since every running
request decodes each step. On a prefill-pool instance a request leaves after its first token and
keeps its blocks (`held`) until its KV transfer ends (`release`).

`reference_scheduler.ReferenceScheduler` applies these rules plainly, one step at a time; this
scheduler must give identical request records (tests/sim/test_scheduler_reference.py). Both satisfy
`infralab.sim.protocols.SchedulerPolicy`.

Speed: a step costs O(changes), not O(running requests): decode contexts are summed in aggregate,
token times are kept per step and copied into a request's record when it stops decoding, and block
growth and finishes are filed under the step at which they happen.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable
from collections import deque
from typing import cast
import simpy

from infralab.metrics.records import TokenTimes
from infralab.sim.cost import StepWork
from infralab.sim.engine.kv_blocks import BlockPool
from infralab.sim.engine.prefix_cache import PrefixCache
from infralab.sim.engine.request_state import Seq
from infralab.sim.engine.step import StepPlan, StepResult


def _engine_times(seq: Seq) -> TokenTimes:
    """The token times of a record the engine fills: a TokenTimes (RequestRecord's default; only
    records made by hand hold a plain array('d'))."""
    return cast(TokenTimes, seq.rec.token_times_s)


class QuietRun:
    """Steps that repeat a decode-only plan exactly: no prefill, no finish before the last, and block
    growth that the free blocks cover (so no eviction or preemption). Without outside events (which
    end a run early, see `Instance`), single steps would do exactly the same, so they can be timed
    together; `Scheduler.finish` then applies the growth in step order."""

    def __init__(self, sched: Scheduler, first_step: int, last_step: int) -> None:
        self._grow_at = sched._grow_at
        self._block_size = sched.block_size
        self._last = last_step  # the first finish at or after the plan's step
        self._free = sched.pool.free
        self._regrow: dict[int, int] = {}  # growth that growth inside the run files again, by step
        self.growth_steps: list[int] = []  # steps of the run with block growth, ascending

    def allows(self, m: int) -> bool:
        """May step `m` (the next one after those already allowed) join the run?"""
        if m > self._last:
            return False
        entries = self._grow_at.get(m)
        count = len(entries) if entries else 0  # stale entries count too (harmless)
        if self._regrow:
            count += self._regrow.pop(m, 0)
        if count:
            self._free -= count
            if self._free < 0:
                return False
            later = m + self._block_size
            self._regrow[later] = self._regrow.get(later, 0) + count
            self.growth_steps.append(m)
        return True


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _stamp_decode_start(seq: Seq, now: float) -> None:
    """`now` (s) starts the first decode-instance step of a handed-off request."""
    if math.isnan(seq.rec.decode_scheduled_s):
        seq.rec.decode_scheduled_s = now


class Scheduler:
    """The queues and KV accounting of one instance. Units: tokens, KV blocks, step numbers."""

    def __init__(
        self,
        *,
        max_num_seqs: int,
        max_batched_tokens: int,
        block_size: int,
        capacity_blocks: int,
        prefix_cache: bool,
        prefix_block_tokens: int,
        reservation_takes_slot: bool = False,
        snapshot_blocks: int = 0,
    ) -> None:
        # Every running request decodes each step, so the token budget also caps the running set.
        self.max_seqs = min(max_num_seqs, max_batched_tokens)
        self.max_tokens = max_batched_tokens
        self.block_size = block_size
        self.reservation_takes_slot = reservation_takes_slot
        self.cache = PrefixCache(
            prefix_block_tokens, prefix_block_tokens // block_size, prefix_cache, snapshot_blocks
        )
        self.pool = BlockPool(capacity_blocks, self.cache)
        self.waiting: deque[Seq] = deque()
        self.running: dict[int, Seq] = {}  # admission order: the last one is preempted first
        self.prefilling: dict[int, Seq] = {}  # running, prompt not complete
        self.decoding: dict[int, Seq] = {}  # running, emitting one token per step
        self.held: dict[int, Seq] = {}  # prefill done, KV kept until its transfer ends
        self.inbound: deque[tuple[Seq, simpy.Event]] = deque()  # reservations not yet granted
        self.reserved: dict[int, Seq] = {}  # granted, not running yet (blocks; a slot if reservation_takes_slot)
        self.ready: deque[Seq] = deque()  # reserved and KV arrived, not running yet (delivery order)
        self.step_no = 0
        self.step_end = array("d")  # end time of step n, s
        # Per-step reminders: (seq, epoch) whose context needs a new block / who emit their last
        # token at that step.
        self._grow_at: dict[int, list[tuple[Seq, int]]] = {}
        self._finish_at: dict[int, list[tuple[Seq, int]]] = {}
        # Steps at which a decoding request emits its last token: a quiet run ends there at the
        # latest. A min-heap; stale entries are harmless (they only shorten a run).
        self._bounds: list[int] = []
        # Sum over decoding requests of (prompt + dec_gen0 - dec_step0): the context of all of
        # them at step n is this + n * len(decoding).
        self._decode_ctx_base = 0
        self.outstanding = 0  # tokens of work left (prefill tokens + decode steps), see Seq
        self.preemptions = 0
        self._planned_preemptions = 0
        self._run: QuietRun | None = None  # the repeats offered after the last plan

    # ---- from outside ---------------------------------------------------------------------------

    def add_waiting(self, seq: Seq) -> None:
        self.waiting.append(seq)
        self.outstanding += seq.remaining_work()

    def add_reservation(self, seq: Seq, granted: simpy.Event) -> None:
        """Ask for KV blocks for `seq.target` tokens that will arrive; `granted` succeeds then."""
        self.inbound.append((seq, granted))
        self.outstanding += seq.remaining_work()

    def deliver(self, seq: Seq) -> None:
        """The KV of a granted reservation has arrived: decode from the next step on."""
        self.ready.append(seq)

    def release(self, seq: Seq) -> None:
        """Free the blocks of a handed-off request (its KV transfer ended)."""
        del self.held[seq.id]
        self.pool.free_seq(seq)

    def cached_prefix_tokens(self, hashes: tuple[int, ...], prompt: int) -> int:
        """Prompt tokens of a request with these hashes the prefix cache would serve now."""
        return self.cache.match(hashes, self.cache.max_hit_entries(prompt, prompt)) * self.cache.block_tokens

    # ---- one step -------------------------------------------------------------------------------

    def plan(self, now: float) -> StepPlan | None:
        """Decide the next step (see the module docstring); None when there is nothing to run."""
        n = self.step_no
        preempted_before = self.preemptions
        while True:
            preempted_in_pass = self.preemptions
            # (Each rule's queue is tested here first: most steps have nothing for most rules.)
            if self.ready:
                self._start_ready(n, now)
            self._grow_decodes(n)
            chunks: list[tuple[Seq, int]] = []
            taken = self._continue_prefills(n, chunks) if self.prefilling else 0
            if self.preemptions == preempted_in_pass:
                if self.ready:
                    taken = self._admit_ready(now, chunks, taken)
                if self.waiting:
                    self._admit_waiting(now, chunks, taken)
                if self.inbound:
                    self._grant_reservations()
                break
            if chunks or self.decoding:
                break  # a step that preempted admits nothing
            # Empty: as if an empty step of no time had passed, plan again from rule 1 (the slots
            # the preemptions freed may start delivered requests; otherwise a preempted request
            # could be readmitted, and preempt itself, forever against their reserved blocks).
            # Nothing runs now, so a further pass preempts only requests it started: it ends.
        if not chunks and not self.decoding:
            return None
        prefill_tokens = attn_pairs = context = completing = 0
        for seq, new in chunks:
            done = seq.computed
            prefill_tokens += new
            attn_pairs += new * done + new * (new + 1) // 2
            context += done + new
            if done + new == seq.target:
                completing += 1
            if math.isnan(seq.rec.first_scheduled_s):
                seq.rec.first_scheduled_s = now
        n_dec = len(self.decoding)
        work = StepWork(
            prefill_seqs=len(chunks),
            prefill_tokens=prefill_tokens,
            prefill_attn_pairs=attn_pairs,
            prefill_context_tokens=context,
            decode_seqs=n_dec,
            decode_context_tokens=self._decode_ctx_base + n * n_dec,
            output_tokens=n_dec + completing,
        )
        assert prefill_tokens + n_dec <= self.max_tokens
        self._planned_preemptions = self.preemptions - preempted_before
        return StepPlan(n, chunks, n_dec, work)

    def repeats(self, plan: StepPlan) -> Callable[[int], bool] | None:
        """`QuietRun.allows` for the run of decode-only repeats that may follow `plan`, or None
        when the plan is not decode-only."""
        self._run = None
        # After a step that preempted (and so admitted nothing), the next one may admit.
        if plan.chunks or self.ready or self._planned_preemptions:
            return None
        n = plan.step_no
        bounds = self._bounds
        while bounds and bounds[0] < n:
            heapq.heappop(bounds)
        self._run = QuietRun(self, n, bounds[0] if bounds else n)
        return self._run.allows

    def finish(self, plan: StepPlan, ends_s: list[float]) -> StepResult:
        """Apply `plan` and, if `ends_s` has more than one entry, its decode-only repeats (see
        `repeats`); `ends_s` are the steps' end times (s). Emits tokens, completes prefills and
        requests."""
        n = plan.step_no
        k = len(ends_s)
        run = self._run
        self._run = None
        assert n == self.step_no and (k == 1 or (run is not None and not plan.chunks))
        self.step_end.extend(ends_s)
        last_step = n + k - 1
        end_s = ends_s[-1]
        kv_used_at: list[tuple[float, int]] = []
        if k > 1:
            assert run is not None  # (asserted above: repeats come from a QuietRun)
            # A run ends at the first step with a finish, so only growth happens inside it. QuietRun
            # counted the free blocks for it (stale entries too), so each growth is `allocate(1)`
            # without eviction: the private count, checked once per step.
            pool = self.pool
            cache = self.cache
            grow_at = self._grow_at
            file_growth = self._file_growth
            step_end = self.step_end
            for m in run.growth_steps:
                if m > last_step:
                    break  # the run was cut short
                for seq, epoch in grow_at.pop(m, ()):
                    if seq.epoch == epoch:
                        pool.private += 1
                        seq.blocks += 1
                        file_growth(seq, m)
                assert pool.private + cache.blocks <= pool.capacity, "QuietRun promised free blocks"
                kv_used_at.append((step_end[m - 1], pool.private + cache.pinned_blocks))  # as at step m's start
        self.step_no = last_step + 1
        finished: list[Seq] = []
        handed_off: list[Seq] = []
        for seq, epoch in self._finish_at.pop(last_step, ()):
            if seq.epoch != epoch:
                continue
            self._stop_decode(seq, last_step=last_step)
            del self.running[seq.id]
            self._complete(seq, end_s)
            finished.append(seq)
        computed = 0
        for seq, new in plan.chunks:
            seq.computed += new
            seq.prefill_total += new
            computed += new
            self.pool.cache_full_prompt_blocks(seq)
            if seq.computed < seq.target:
                continue
            del self.prefilling[seq.id]
            seq.generated += 1
            if seq.streams_tokens:
                # The token ends with this step: a reference into the step ends, not a copy (a
                # following decode run continues the same piece, see TokenTimes).
                _engine_times(seq).add_steps(self.step_end, last_step, last_step)
                if seq.generated == 1 and math.isnan(seq.rec.first_token_s):
                    seq.rec.first_token_s = end_s
            if seq.generated == seq.output:
                del self.running[seq.id]
                self._complete(seq, end_s)
                finished.append(seq)
            elif not seq.decodes_here:
                del self.running[seq.id]
                self.held[seq.id] = seq
                seq.rec.prefill_end_s = end_s
                handed_off.append(seq)
            else:
                self._start_decode(seq, n + 1)
        self.outstanding -= computed + plan.decode_seqs * k
        return StepResult(finished, handed_off, self._planned_preemptions, tuple(kv_used_at))

    # ---- planning steps -------------------------------------------------------------------------

    def _grow_decodes(self, n: int) -> None:
        entries = self._grow_at.pop(n, None)
        if entries is None:
            return
        pool = self.pool
        for seq, epoch in entries:
            if seq.epoch != epoch:
                continue
            if pool.allocate(1) or self._allocate_or_preempt(seq, 1, n):
                seq.blocks += 1
                self._file_growth(seq, n)

    def _continue_prefills(self, n: int, chunks: list[tuple[Seq, int]]) -> int:
        taken = 0
        for seq in list(self.prefilling.values()):
            if seq.id not in self.prefilling:
                continue  # preempted while making room for an earlier one
            budget = self.max_tokens - len(self.decoding) - taken
            if budget <= 0:
                break
            new = min(seq.target - seq.computed, budget)
            need = _ceil_div(seq.computed + new - seq.base, self.block_size) - seq.blocks
            if self._allocate_or_preempt(seq, need, n):
                seq.blocks += need
                chunks.append((seq, new))
                taken += new
        return taken

    def _slot_free(self) -> bool:
        """Is a sequence slot free (granted reservations count when `reservation_takes_slot`)?"""
        held = len(self.reserved) if self.reservation_takes_slot else 0
        return len(self.running) + held < self.max_seqs

    def _ready_slot_free(self) -> bool:
        """May a request whose KV arrived start running? It holds its own slot already when
        reservations take one."""
        return self.reservation_takes_slot or len(self.running) < self.max_seqs

    def _start_ready(self, n: int, now: float) -> None:
        """Delivered requests that arrived with their first token start decoding at step `n`."""
        ready = self.ready
        while ready and ready[0].computed == ready[0].target and self._ready_slot_free():
            seq = ready.popleft()
            del self.reserved[seq.id]
            self.running[seq.id] = seq
            _stamp_decode_start(seq, now)
            self._start_decode(seq, n)

    def _admit_ready(self, now: float, chunks: list[tuple[Seq, int]], taken: int) -> int:
        """Delivered requests that still compute their last prompt token (decode-side first token)
        join the step, in delivery order, while a slot and budget last; their blocks are reserved.
        Returns the step's prefill tokens so far."""
        ready = self.ready
        while ready and ready[0].computed < ready[0].target and self._ready_slot_free():
            budget = self.max_tokens - len(self.decoding) - taken
            if budget <= 0:
                return taken
            seq = ready.popleft()
            new = min(seq.target - seq.computed, budget)
            assert _ceil_div(seq.computed + new - seq.base, self.block_size) <= seq.blocks
            del self.reserved[seq.id]
            self.running[seq.id] = seq
            self.prefilling[seq.id] = seq
            _stamp_decode_start(seq, now)
            chunks.append((seq, new))
            taken += new
        return taken

    def _admit_waiting(self, now: float, chunks: list[tuple[Seq, int]], taken: int) -> int:
        """Admit waiting requests (rule 4); returns the step's prefill tokens so far."""
        while self.waiting and self._slot_free():
            budget = self.max_tokens - len(self.decoding) - taken
            if budget <= 0:
                return taken
            seq = self.waiting[0]
            hit = self.cache.match(seq.hashes, self.cache.max_hit_entries(seq.prompt, seq.target))
            hit_hashes = list(seq.hashes[:hit])
            cached = hit * self.cache.block_tokens
            new = min(seq.target - cached, budget)
            need = _ceil_div(new, self.block_size)
            self.cache.pin(hit_hashes)  # before allocating, so eviction cannot take them
            if not self.pool.allocate(need):
                self.cache.unpin(hit_hashes)
                return taken
            self.waiting.popleft()
            seq.pinned = hit_hashes
            seq.blocks = need
            seq.computed = seq.cached = seq.base = cached
            seq.rec.cached_tokens = cached
            self.outstanding -= cached
            self.running[seq.id] = seq
            self.prefilling[seq.id] = seq
            chunks.append((seq, new))
            taken += new
        return taken

    def _grant_reservations(self) -> None:
        while self.inbound and self._slot_free():
            seq, granted = self.inbound[0]
            need = _ceil_div(seq.target, self.block_size)
            if not self.pool.allocate(need):
                return
            self.inbound.popleft()
            seq.blocks = need
            self.reserved[seq.id] = seq
            granted.succeed()

    # ---- KV blocks and preemption ---------------------------------------------------------------

    def _allocate_or_preempt(self, seq: Seq, need: int, n: int) -> bool:
        """Give `seq` (running) `need` more blocks, preempting the most recently admitted running
        requests until they fit; False if `seq` itself had to go."""
        while not self.pool.allocate(need):
            victim = next(reversed(self.running.values()))
            self._preempt(victim, n)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Seq, n: int) -> None:
        """Recompute preemption before step `n`: drop its KV, queue it first."""
        del self.running[seq.id]
        if seq.id in self.decoding:
            self._stop_decode(seq, last_step=n - 1)
        else:
            del self.prefilling[seq.id]
        self.pool.free_seq(seq)
        # Everything in KV must be computed again: outstanding work grows by that much.
        self.outstanding += seq.computed
        seq.target = seq.prompt + seq.generated
        seq.computed = seq.cached = seq.base = 0
        seq.epoch += 1
        seq.rec.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    # ---- decoding -------------------------------------------------------------------------------

    def _start_decode(self, seq: Seq, n: int) -> None:
        """`seq` emits its next token at the end of step `n` and one per step after that."""
        seq.dec_step0 = n
        seq.dec_gen0 = seq.generated
        self.decoding[seq.id] = seq
        self._decode_ctx_base += seq.prompt + seq.generated - n
        last = n + seq.output - seq.generated - 1
        self._finish_at.setdefault(last, []).append((seq, seq.epoch))
        heapq.heappush(self._bounds, last)
        self._file_growth(seq, n - 1)

    def _file_growth(self, seq: Seq, n: int) -> None:
        """File the step after `n` at which the context outgrows the blocks held, if it decodes then."""
        # At step m the context (KV tokens incl. the token fed) is prompt + dec_gen0 + (m - dec_step0);
        # it decodes up to step dec_step0 + output - dec_gen0 - 1.
        step0_less_gen0 = seq.dec_step0 - seq.dec_gen0
        m = step0_less_gen0 + seq.base + seq.blocks * self.block_size + 1 - seq.prompt
        assert m > n
        if m < step0_less_gen0 + seq.output:
            entries = self._grow_at.get(m)
            if entries is None:
                self._grow_at[m] = [(seq, seq.epoch)]
            else:
                entries.append((seq, seq.epoch))

    def _stop_decode(self, seq: Seq, last_step: int) -> None:
        """`seq` stops decoding after step `last_step`: record the tokens it emitted meanwhile."""
        first = seq.dec_step0
        emitted = last_step - first + 1
        _engine_times(seq).add_steps(self.step_end, first, last_step)
        seq.generated = seq.dec_gen0 + emitted
        # The last emitted token is not in KV yet (it is the next step's input).
        seq.computed = seq.target = seq.prompt + seq.generated - 1
        self._decode_ctx_base -= seq.prompt + seq.dec_gen0 - first
        del self.decoding[seq.id]
        seq.epoch += 1

    def _complete(self, seq: Seq, end_s: float) -> None:
        self.pool.free_seq(seq)
        rec = seq.rec
        rec.finish_s = end_s
        rec.recomputed_tokens = seq.prefill_total - (seq.prompt - rec.cached_tokens)
        assert len(rec.token_times_s) == seq.output, (rec.id, len(rec.token_times_s), seq.output)

    # ---- what the instance samples and checks --------------------------------------------------

    def counters(self) -> tuple[int, int, int, int]:
        """waiting (queued here: for admission, for a reservation, or for their KV or a slot after
        one), running, KV blocks in use, KV blocks held by the prefix cache."""
        waiting = len(self.waiting) + len(self.inbound) + len(self.reserved)
        cache = self.cache
        return waiting, len(self.running), self.pool.private + cache.pinned_blocks, cache.blocks

    # ---- checks (tests) -------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Recount the aggregates from scratch (O(requests)); raises AssertionError on a mismatch."""
        n = self.step_no
        holders = (*self.running.values(), *self.held.values(), *self.reserved.values())
        assert sum(s.blocks for s in holders) == self.pool.private
        assert 0 <= self.pool.used <= self.pool.capacity
        assert self.pool.private + self.cache.blocks <= self.pool.capacity
        ctx = sum(s.prompt + s.dec_gen0 + (n - s.dec_step0) for s in self.decoding.values())
        assert ctx == self._decode_ctx_base + n * len(self.decoding)
        work = sum(s.remaining_work() for s in self.waiting)
        work += sum(s.remaining_work() for s in self.prefilling.values())
        work += sum(s.output - s.dec_gen0 - (n - s.dec_step0) for s in self.decoding.values())
        work += sum(s.remaining_work() for s, _ in self.inbound)
        work += sum(s.remaining_work() for s in self.reserved.values())
        assert work == self.outstanding, (work, self.outstanding)
        assert len(self.running) + (len(self.reserved) if self.reservation_takes_slot else 0) <= self.max_seqs
