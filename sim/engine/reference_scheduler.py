"""The reference scheduler: the rules in `scheduler.py`'s docstring, one step at a time, with every
request's counters kept current. It is the executable specification of the fast `Scheduler`
(tests/sim/test_scheduler_reference.py checks that both give identical request records on random
workloads) and the place to try a new admission or preemption rule first. It offers no repeats, so
its instance runs one SimPy timeout per step (`engine.scheduler = "reference"`); a step costs
O(running requests).

A running request is prefilling while `computed < target` and decoding after: then its KV holds
`computed = target = prompt + generated - 1` tokens (the last token emitted is the next input), so
a step's context for it is `computed + 1`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import simpy

from infralab.sim.cost import StepWork
from infralab.sim.engine.kv_blocks import BlockPool
from infralab.sim.engine.prefix_cache import PrefixCache
from infralab.sim.engine.request_state import Seq
from infralab.sim.engine.step import StepPlan, StepResult


class ReferenceScheduler:
    """Queues and KV accounting of one instance (`SchedulerPolicy`). Units: tokens, KV blocks."""

    def __init__(self, *, max_num_seqs: int, max_batched_tokens: int, block_size: int, capacity_blocks: int,
                 prefix_cache: bool, prefix_block_tokens: int, reservation_takes_slot: bool = False,
                 snapshot_blocks: int = 0) -> None:
        self.max_seqs = min(max_num_seqs, max_batched_tokens)  # every running request decodes each step
        self.max_tokens = max_batched_tokens
        self.block_size = block_size
        self.reservation_takes_slot = reservation_takes_slot
        self.cache = PrefixCache(prefix_block_tokens, prefix_block_tokens // block_size, prefix_cache,
                                 snapshot_blocks)
        self.pool = BlockPool(capacity_blocks, self.cache)
        self.waiting: deque[Seq] = deque()
        self.running: dict[int, Seq] = {}  # admission order: the last one is preempted first
        self.decoding: dict[int, Seq] = {}  # running, prompt complete; in the order they started
        self.held: dict[int, Seq] = {}  # prefill-pool instance: prompt done, KV kept until sent
        self.inbound: deque[tuple[Seq, simpy.Event]] = deque()  # decode pool: reservations asked
        self.reserved: dict[int, Seq] = {}  # granted, not running yet (blocks; a slot if reservation_takes_slot)
        self.ready: deque[Seq] = deque()  # reserved and KV arrived, not running yet (delivery order)
        self.step_no = 0
        self.preemptions = 0
        self._preempted = 0  # during the last plan

    # ---- from outside -----------------------------------------------------------------------

    def add_waiting(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def add_reservation(self, seq: Seq, granted: simpy.Event) -> None:
        self.inbound.append((seq, granted))

    def deliver(self, seq: Seq) -> None:
        self.ready.append(seq)

    def release(self, seq: Seq) -> None:
        del self.held[seq.id]
        self.pool.free_seq(seq)

    def cached_prefix_tokens(self, hashes: tuple[int, ...], prompt: int) -> int:
        return self.cache.match(hashes, self.cache.max_hit_entries(prompt, prompt)) * self.cache.block_tokens

    @property
    def outstanding(self) -> int:
        """Prefill tokens left + decode steps left, over every request here."""
        queued = [*self.waiting, *self.reserved.values(), *(seq for seq, _ in self.inbound)]
        prefilling = [seq for seq in self.running.values() if seq.id not in self.decoding]
        return sum(s.remaining_work() for s in queued + prefilling) + sum(
            s.output - s.generated for s in self.decoding.values())

    # ---- one step ---------------------------------------------------------------------------

    def plan(self, now: float) -> StepPlan | None:
        """Rules 1-5 of `scheduler.py`'s docstring, in order, for a step starting at `now` (s)."""
        preempted_before = self.preemptions
        while True:
            chunks, admits = self._plan_pass(now)
            if admits or chunks or self.decoding:
                break
            # It preempted and would be empty: an empty step of no time; plan again from rule 1.
        if not chunks and not self.decoding:
            return None
        decode_context = sum(seq.computed + 1 for seq in self.decoding.values())
        work = StepWork.decode(len(self.decoding), decode_context)
        for seq, new in chunks:
            work += StepWork.prefill_chunk(new, seq.computed, finishes=seq.computed + new == seq.target)
            if math.isnan(seq.rec.first_scheduled_s):
                seq.rec.first_scheduled_s = now
        self._preempted = self.preemptions - preempted_before
        return StepPlan(self.step_no, chunks, len(self.decoding), work)

    def _plan_pass(self, now: float) -> tuple[list[tuple[Seq, int]], bool]:
        """Rules 1-5 once: the step's prompt chunks, and whether it admitted (no preemption)."""
        preempted_before = self.preemptions
        # 1. KV arrived from a prefill instance with the first token
        while self.ready and self.ready[0].computed == self.ready[0].target and self._ready_slot_free():
            seq = self.ready.popleft()
            del self.reserved[seq.id]
            self.running[seq.id] = seq
            self.decoding[seq.id] = seq
            if math.isnan(seq.rec.decode_scheduled_s):
                seq.rec.decode_scheduled_s = now
        for seq in list(self.decoding.values()):  # 2. a block when the context outgrows its blocks
            if seq.id in self.decoding and seq.computed + 1 > seq.base + seq.blocks * self.block_size:
                if self._allocate_or_preempt(seq, 1):
                    seq.blocks += 1
        chunks: list[tuple[Seq, int]] = []
        for seq in list(self.running.values()):  # 3. prompts in progress, oldest first
            if seq.id not in self.running or seq.id in self.decoding:
                continue
            budget = self.max_tokens - len(self.decoding) - sum(new for _, new in chunks)
            if budget <= 0:
                break
            new = min(seq.target - seq.computed, budget)
            need = -(-(seq.computed + new - seq.base) // self.block_size) - seq.blocks
            if self._allocate_or_preempt(seq, need):
                seq.blocks += need
                chunks.append((seq, new))
        # 4. admit, unless this pass preempted
        admits = self.preemptions == preempted_before
        # KV that arrived without the first token first: its last prompt token, blocks reserved
        while admits and self.ready and self.ready[0].computed < self.ready[0].target \
                and self._ready_slot_free():
            budget = self.max_tokens - len(self.decoding) - sum(new for _, new in chunks)
            if budget <= 0:
                break
            seq = self.ready.popleft()
            del self.reserved[seq.id]
            self.running[seq.id] = seq
            chunks.append((seq, min(seq.target - seq.computed, budget)))
            if math.isnan(seq.rec.decode_scheduled_s):
                seq.rec.decode_scheduled_s = now
        while admits and self.waiting and self._slot_free():
            budget = self.max_tokens - len(self.decoding) - sum(new for _, new in chunks)
            if budget <= 0 or not self._admit(self.waiting[0], budget, chunks):
                break
            self.waiting.popleft()
        while admits and self.inbound and self._slot_free():  # 5. reserve
            seq, granted = self.inbound[0]
            need = -(-seq.target // self.block_size)
            if not self.pool.allocate(need):
                break
            self.inbound.popleft()
            seq.blocks = need
            self.reserved[seq.id] = seq
            granted.succeed()
        return chunks, admits

    def repeats(self, plan: StepPlan) -> Callable[[int], bool] | None:
        return None  # one step at a time

    def finish(self, plan: StepPlan, ends_s: list[float]) -> StepResult:
        """The step ended at `ends_s[0]` (s): decoding requests emit a token (in the order they
        started decoding), then prompt chunks are applied (in plan order)."""
        (end_s,) = ends_s
        self.step_no += 1
        finished: list[Seq] = []
        handed_off: list[Seq] = []
        for seq in list(self.decoding.values()):  # every decoding request emits a token
            self._emit(seq, end_s)
            seq.computed = seq.target = seq.prompt + seq.generated - 1
            if seq.generated == seq.output:
                del self.decoding[seq.id], self.running[seq.id]
                self._complete(seq, end_s, finished)
        for seq, new in plan.chunks:
            seq.computed += new
            seq.prefill_total += new
            self.pool.cache_full_prompt_blocks(seq)
            if seq.computed < seq.target:
                continue
            self._emit(seq, end_s)  # a complete prompt gives a token
            if seq.generated == seq.output:
                del self.running[seq.id]
                self._complete(seq, end_s, finished)
            elif not seq.decodes_here:
                del self.running[seq.id]
                self.held[seq.id] = seq
                seq.rec.prefill_end_s = end_s
                handed_off.append(seq)
            else:
                self.decoding[seq.id] = seq
        return StepResult(finished, handed_off, self._preempted)

    # ---- helpers ----------------------------------------------------------------------------

    def _admit(self, seq: Seq, budget: int, chunks: list[tuple[Seq, int]]) -> bool:
        """Start `seq`'s prefill after its prefix-cache hit, if its first chunk's blocks can be had
        (admission never preempts, and a failed attempt changes nothing)."""
        hit = self.cache.match(seq.hashes, self.cache.max_hit_entries(seq.prompt, seq.target))
        cached = hit * self.cache.block_tokens
        new = min(seq.target - cached, budget)
        self.cache.pin(list(seq.hashes[:hit]))  # before allocating, so eviction cannot take them
        if not self.pool.allocate(-(-new // self.block_size)):
            self.cache.unpin(list(seq.hashes[:hit]))
            return False
        seq.pinned = list(seq.hashes[:hit])
        seq.blocks = -(-new // self.block_size)
        seq.computed = seq.cached = seq.base = seq.rec.cached_tokens = cached
        self.running[seq.id] = seq
        chunks.append((seq, new))
        return True

    def _allocate_or_preempt(self, seq: Seq, need: int) -> bool:
        """`need` more blocks for `seq`, preempting the most recently admitted running requests
        until they fit; False if `seq` itself had to go."""
        while not self.pool.allocate(need):
            victim = next(reversed(self.running.values()))
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Seq) -> None:
        """Recompute preemption: drop its KV, queue it first, compute prompt + output again."""
        del self.running[seq.id]
        self.decoding.pop(seq.id, None)
        self.pool.free_seq(seq)
        seq.target = seq.prompt + seq.generated
        seq.computed = seq.cached = seq.base = 0
        seq.rec.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def _slot_free(self) -> bool:
        held = len(self.reserved) if self.reservation_takes_slot else 0
        return len(self.running) + held < self.max_seqs

    def _ready_slot_free(self) -> bool:
        """May a request whose KV arrived start running? It holds its own slot already when
        reservations take one."""
        return self.reservation_takes_slot or len(self.running) < self.max_seqs

    def _emit(self, seq: Seq, end_s: float) -> None:
        seq.generated += 1
        if not seq.streams_tokens:
            return  # a prefill instance's token that the decode instance emits again
        seq.rec.token_times_s.append(end_s)
        if math.isnan(seq.rec.first_token_s):
            seq.rec.first_token_s = end_s

    def _complete(self, seq: Seq, end_s: float, finished: list[Seq]) -> None:
        self.pool.free_seq(seq)
        seq.rec.finish_s = end_s
        seq.rec.recomputed_tokens = seq.prefill_total - (seq.prompt - seq.rec.cached_tokens)
        finished.append(seq)

    # ---- what the instance samples and checks -----------------------------------------------

    def counters(self) -> tuple[int, int, int, int]:
        waiting = len(self.waiting) + len(self.inbound) + len(self.reserved)
        return waiting, len(self.running), self.pool.used, self.cache.blocks

    def check_invariants(self) -> None:
        holders = (*self.running.values(), *self.held.values(), *self.reserved.values())
        assert sum(s.blocks for s in holders) == self.pool.private
        assert self.pool.private + self.cache.blocks <= self.pool.capacity
        assert all(s.id in self.running and s.computed == s.target for s in self.decoding.values())
        assert len(self.running) + (len(self.reserved) if self.reservation_takes_slot else 0) <= self.max_seqs
