"""One serving instance as a SimPy process: plan a step, hold the cost model's step time, apply it.
The decisions are its scheduler policy's (`engine.scheduler`: "fast", `scheduler.Scheduler`, or
"reference", `reference_scheduler.ReferenceScheduler`; see `infralab.sim.protocols.SchedulerPolicy`).

The instance sleeps on an event while it has nothing to run (no polling); `submit`, `reserve`,
`deliver` and `release` wake it. Each step is one `env.timeout`, one "batch" Interval on track
`instance/<name>` (without a timeline only its busy span, folded into the run's tally), and
CounterSamples ("waiting", "running", "kv_used_blocks", "kv_cached_blocks") whenever a value
changed. Counters are sampled wherever the state can change: at a step's start
(after its admissions), at its end, and when a request or its KV arrives from outside, so each
counter is the exact step function of the state and its time-weighted mean the exact time average
(a request admitted and finished within one step counts as running for that step).

Speed: a run of identical decode-only steps that the policy offers (`SchedulerPolicy.repeats`; the
fast scheduler's `QuietRun`: nothing to admit, block growth covered by free blocks, no finish before
its last step) is timed with one timeout and recorded as one Interval (arg "steps"). Each step
still gets its own end time, bit for bit what a single step would get (the cost model computes a
run's ends in one call, `decode_run_ends`), so token times are those of single steps. The run
stops at the first step end at or after the next arrival, and any outside event (`_kick`)
interrupts it at the step end in progress, exactly where a single step would have noticed the
event. Block growth inside a run is applied at the run's end, and "kv_used_blocks" sampled then at
the start of each step that grew (`StepResult.kv_used_at`), as single steps would have. Step ends
are accumulated as t_end = t_start + duration (the instance keeps its own clock, so SimPy's rounding of relative delays never moves a
recorded time), and the instance waits until SimPy's clock reads each end exactly
(`_hold`), so that what others do at a step boundary happens at the same time whether the
step was timed alone or in a run.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Generator
from typing import cast
import simpy

from infralab.metrics.records import CounterSample, CounterSeries, Interval, IntervalLog, RunRecord
from infralab.sim.config import EngineConfig
from infralab.sim.engine.hf_scheduler import HF_SCHEDULERS
from infralab.sim.engine.reference_scheduler import ReferenceScheduler
from infralab.sim.engine.request_state import Seq
from infralab.sim.engine.scheduler import Scheduler
from infralab.sim.engine.step import StepPlan, StepResult
from infralab.sim.protocols import SchedulerPolicy, ServedRequest, StepCostModel, StepListener

COUNTERS = ("waiting", "running", "kv_used_blocks", "kv_cached_blocks")
# Longest run of decode-only steps timed with one SimPy event (bounds the cost evaluations wasted
# when an outside event cuts a run short).
MAX_QUIET_STEPS = 256
# Step ends computed ahead of `allows` at first (then twice as many each time): runs are short
# when requests come and go often, so this bounds the ends computed in vain.
FIRST_BATCH = 8
# `engine.scheduler` -> the policy class (each takes the keyword arguments of `Instance.__init__`,
# plus `engine.policy_options()`).
SCHEDULERS: dict[str, Callable[..., SchedulerPolicy]] = {"fast": Scheduler, "reference": ReferenceScheduler, **HF_SCHEDULERS}


class Instance:
    """An engine instance. `role` is "colocated", "prefill" or "decode"."""

    def __init__(
        self,
        env: simpy.Environment,
        name: str,
        index: int,
        role: str,
        engine: EngineConfig,
        cost: StepCostModel,
        capacity_blocks: int,
        record: RunRecord,
        listener: StepListener | None = None,
        check_invariants: bool = False,
        next_arrival_s: Callable[[], float] | None = None,
        scheduler_options: dict[str, object] | None = None,
    ) -> None:
        self.env = env
        self.name = name
        self.index = index
        self.role = role
        self.cost = cost
        self.record = record
        self.listener = listener
        self.track = f"instance/{name}"
        self.scheduler: SchedulerPolicy = SCHEDULERS[engine.scheduler](
            max_num_seqs=engine.max_num_seqs,
            max_batched_tokens=engine.max_batched_tokens,
            block_size=engine.block_size,
            capacity_blocks=capacity_blocks,
            prefix_cache=engine.prefix_cache,
            prefix_block_tokens=engine.prefix_block_tokens,
            **engine.policy_options(),
            **(scheduler_options or {}),
        )
        self._check = check_invariants
        # Time of the next request arrival anywhere (s): a run of quiet steps stops there.
        self._horizon = next_arrival_s or (lambda: math.inf)
        self._wake: simpy.Event | None = None
        self._quiet_run = False
        self._interrupting = False
        self._run_ends: list[float] = []  # step ends of the run in progress (s)
        self._run_decode_seqs = 0
        self._last_counters: list[int] = [-1] * len(COUNTERS)  # counts: ints, as the trace shows them
        self._last_values: tuple[int, ...] = ()  # what `scheduler.counters()` gave last
        # Told when a request completes here (the closed-loop gate, infralab.sim.concurrency_gate).
        self.on_finished: Callable[[Seq], None] | None = None
        # Seconds a step with prefill chunks spends before its forward pass (a multimodal request's
        # encoder, infralab.sim.encode_pool.InlineEncoder), from (plan, start_s); None: none.
        self.extra_step_s: Callable[[StepPlan, float], float] | None = None
        self._tally_only = isinstance(record.intervals, IntervalLog) and record.intervals.tally_only
        # Without a timeline, counter samples go straight into their series in the run's tally
        # (what CounterLog does with a CounterSample, without making one); found on first use.
        self._series: list[CounterSeries | None] | None = [None] * len(COUNTERS) if self._tally_only else None
        record.resources[self.track] = {
            "kind": "instance",
            "role": role,
            "kv_capacity_blocks": capacity_blocks,
            "block_size": engine.block_size,
            "max_num_seqs": engine.max_num_seqs,
            "max_batched_tokens": engine.max_batched_tokens,
        }
        self.process = env.process(self._run())

    # ---- what routers read ------------------------------------------------------------------

    @property
    def outstanding_tokens(self) -> int:
        """Queued and running work: prefill tokens left + decode steps left (tokens). Inside a run
        of quiet steps, the steps already over count as done, as they would with single steps."""
        outstanding = self.scheduler.outstanding
        if self._quiet_run:
            outstanding -= self._run_decode_seqs * bisect.bisect_right(self._run_ends, self.env.now)
        return outstanding

    def cached_prefix_tokens(self, request: ServedRequest) -> int:
        """Prompt tokens of `request` this instance's prefix cache holds now."""
        return self.scheduler.cached_prefix_tokens(request.block_hashes, request.prompt_tokens)

    # ---- what the cluster calls -------------------------------------------------------------

    def submit(self, seq: Seq) -> None:
        """Queue a request for prefill (and, unless this is a prefill instance, decode)."""
        self.scheduler.add_waiting(seq)
        self._sample_counters(self.env.now)
        self._kick()

    def reserve(self, seq: Seq) -> simpy.Event:
        """Ask for blocks for `seq.target` tokens of incoming KV; the event fires when granted."""
        granted = self.env.event()
        self.scheduler.add_reservation(seq, granted)
        self._sample_counters(self.env.now)
        self._kick()
        return granted

    def deliver(self, seq: Seq) -> None:
        """The reserved KV of `seq` has arrived: it decodes from the next step on."""
        self.scheduler.deliver(seq)
        self._kick()

    def release(self, seq: Seq) -> None:
        """A handed-off request's KV transfer ended: free its blocks here."""
        self.scheduler.release(seq)
        self._sample_counters(self.env.now)
        self._kick()

    # ---- the process ------------------------------------------------------------------------

    def _kick(self) -> None:
        """Something changed from outside: wake the sleeping process, or end a run of quiet steps
        at the step boundary in progress (so the change is seen exactly when a single step would
        see it)."""
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        elif self._quiet_run and not self._interrupting:
            self._interrupting = True
            self.process.interrupt()

    def _run(self) -> Generator[simpy.Event, object, None]:
        env = self.env
        sched = self.scheduler
        # End of the last step. After a step the next one starts exactly there: env.now may differ
        # from it by the rounding of a relative delay, and must not leak into recorded times.
        clock = env.now
        self._sample_counters(clock)
        start = clock
        while True:
            plan = sched.plan(start)
            if plan is None:
                self._sample_counters(start)
                self._wake = env.event()
                yield self._wake
                self._wake = None
                start = max(env.now, clock)
                continue
            self._sample_counters(start)
            ends = self._step_ends(plan, start, sched.repeats(plan))
            if self.listener is not None and plan.chunks:
                self.listener.step_started(self, plan, start, ends[0] - start)
            self._run_decode_seqs = plan.decode_seqs
            if len(ends) > 1:
                ends = yield from self._hold(ends)
            else:  # a single step: `_hold` without the interrupt handling (only runs are interrupted)
                end = ends[0]
                if end > env.now:
                    if env.now < end / 2:
                        yield env.timeout(0.75 * end - env.now)
                    yield env.timeout(end - env.now)
            clock = ends[-1]
            result = sched.finish(plan, ends)
            self._record_batch(plan, start, ends, result)
            for t, used in result.kv_used_at:
                self._sample_counter(2, t, used)
            self._sample_counters(clock)
            if self._check:
                sched.check_invariants()
            if self.listener is not None:
                for seq in result.handed_off:
                    self.listener.prefill_done(self, seq)
            if self.on_finished is not None:
                for seq in result.finished:
                    self.on_finished(seq)
            start = clock

    def _step_ends(self, plan: StepPlan, start: float, allows: Callable[[int], bool] | None) -> list[float]:
        """End times (s) of the planned step and of the decode-only repeats the policy `allows`, up
        to the first step that ends at or after the next known arrival (and MAX_QUIET_STEPS).

        The ends are computed in growing batches (`StepCostModel.decode_run_ends`, one call for
        many steps) and then offered to `allows` step by step, as one step at a time would."""
        if allows is None:
            if self.extra_step_s is not None:
                return [start + self.cost.step(plan.work).total_s + self.extra_step_s(plan, start)]
            return [start + self.cost.step(plan.work).total_s]
        # A decode-only plan: its first step is decode_step_s's too (== step(work).total_s).
        horizon = self._horizon()
        seqs = plan.work.decode_seqs
        context = plan.work.decode_context_tokens
        n = plan.step_no
        batch = FIRST_BATCH
        ends = self.cost.decode_run_ends(seqs, context, start, min(batch, MAX_QUIET_STEPS), horizon)
        k = 1  # steps in the run so far
        while True:
            while k < len(ends):
                if not allows(n + k):
                    del ends[k:]
                    return ends
                k += 1
            if ends[-1] >= horizon or k >= MAX_QUIET_STEPS:
                return ends
            batch *= 2
            ends += self.cost.decode_run_ends(
                seqs, context + k * seqs, ends[-1], min(batch, MAX_QUIET_STEPS - k), horizon
            )

    def _hold(self, ends: list[float]) -> Generator[simpy.Event, object, list[float]]:
        """Wait until the last of `ends`; an interrupt (`_kick`) cuts the run at the first step end
        not before it. Returns the step ends actually run."""
        env = self.env
        self._quiet_run = len(ends) > 1
        self._run_ends = ends
        try:
            while True:
                try:
                    end = ends[-1]
                    if end > env.now:
                        # Land SimPy's clock exactly on `end`, so that what others do at a step
                        # boundary (a KV flow's start) happens at the same time whether the step
                        # was timed alone or in a run. `end - now` is exact when now >= end / 2;
                        # from earlier, wait first until about 3/4 of `end`.
                        if env.now < end / 2:
                            yield env.timeout(0.75 * end - env.now)
                        yield env.timeout(end - env.now)
                    return ends
                except simpy.Interrupt:
                    self._interrupting = False
                    ends = self._run_ends = ends[: bisect.bisect_left(ends, env.now) + 1]
        finally:
            self._quiet_run = False

    def _record_batch(self, plan: StepPlan, start: float, ends: list[float], result: StepResult) -> None:
        """One Interval for the step, or for a run of identical decode-only steps ("steps" > 1;
        decode_context_tokens is then the first step's, output_tokens the run's total)."""
        if self._tally_only:  # the same fold into the run's tally, without the Interval
            cast(IntervalLog, self.record.intervals).tally.add_busy(self.track, start, ends[-1])  # _tally_only: a log
            return
        work = plan.work
        self.record.add_interval(
            Interval(
                self.track,
                "batch",
                start,
                ends[-1],
                (
                    ("prefill_seqs", work.prefill_seqs),
                    ("prefill_tokens", work.prefill_tokens),
                    ("decode_seqs", work.decode_seqs),
                    ("decode_context_tokens", work.decode_context_tokens),
                    ("output_tokens", work.output_tokens * len(ends)),
                    ("steps", len(ends)),
                    ("preempted", result.preempted),
                    ("finished", len(result.finished)),
                ),
            )
        )

    def _sample_counters(self, now: float) -> None:
        values = self.scheduler.counters()
        if values == self._last_values:
            return  # nothing changed since the last look (the usual case)
        self._last_values = values
        last = self._last_counters
        for i, value in enumerate(values):
            if value != last[i]:
                last[i] = value
                self._add_sample(i, now, value)

    def _sample_counter(self, i: int, now: float, value: int) -> None:
        if value != self._last_counters[i]:
            self._last_counters[i] = value
            self._last_values = ()  # no longer what the scheduler's counters gave
            self._add_sample(i, now, value)

    def _add_sample(self, i: int, now: float, value: int) -> None:
        series = self._series
        if series is None:
            self.record.add_counter(CounterSample(self.track, COUNTERS[i], now, value))
            return
        found = series[i]
        if found is None:
            # series exist only when _tally_only, when the record's intervals are an IntervalLog
            found = series[i] = cast(IntervalLog, self.record.intervals).tally.series(self.track, COUNTERS[i])
        found.add(now, value)

