"""CPU cores as a host resource: the runnable threads of one process share `cores` cores.

Scheduling: round-robin with a quantum, as a time-sliced OS scheduler does (Linux at HZ=250 with
no wake-up preemption of a busy thread: a tick every 4 ms decides). A thread is either BLOCKED
(waiting for the GIL, for an event, in a sleeping native call: it holds no core) or RUNNABLE; a
runnable thread holds a core or waits in one FIFO run queue. A thread that becomes runnable takes
a free core at once; if every core is busy it waits until a core frees (its holder blocks) or a
holder's quantum ends: a holder keeps its core for `quantum_s` counted from when it got it, and
at each quantum's end yields it to the head of the queue if anyone waits (it goes to the back,
keeping the work it has left), else runs on into a new quantum. Work (`compute`) progresses at one
core-second per second while its thread holds a core, and not at all while it waits.

Two consequences the processor-sharing picture misses and the real-threads probe shows: a thread
woken from a sleep on a busy core waits for the holder's quantum to end (up to `quantum_s`), and
two CPU-bound threads on one core alternate in quantum-long slices.

Wake-up preemption (optional): Linux sometimes lets a woken thread take the core at once and
sometimes makes it wait for a tick. Given measured `wake_delay_samples_s` and an `rng`, a thread
that becomes runnable while every core is busy takes the core of the longest-running holder after
a delay drawn from the samples (0: at once), unless a quantum ends first; but not before that
holder has had its core for `slice_s` (Linux's EEVDF protects the slice of a task that just got
the CPU: a thread freshly woken itself is not preempted by the next wake-up). Without samples only
quantum ends move threads.

Whether Linux preempts at once depends on how long the holder has had its core (EEVDF compares the
two threads' virtual deadlines, which move as the holder runs). `wake_delays_by_held_s` gives
measured samples per holder age: ((held_s, samples), ...), ascending in held_s; a wake-up draws
from the samples of the largest `held_s` not above the age of the core's longest holder at that
moment (the first entry below all of them). It replaces `wake_delay_samples_s` when given.

A thread woken BY the thread holding the core (its waker signalled it: a GIL release, a queue put)
is another case: Linux does not let it preempt its waker at once (on one core, a GIL waiter woken
by a release runs some 2 ms later while the releaser keeps computing; measured by
kernels/host_probe/probe.py: handoff_samples with a long busy release). With
`waker_delay_samples_s`, such a wake-up (`run(who, waker=...)`) takes the waker's core after a
delay drawn from them, unless the waker blocks or its quantum ends first.

Wake-affine placement (optional, `waker_affine_share`): with a core free, Linux may still queue a
thread woken by a running waker on the WAKER's CPU (kernel/sched/fair.c, select_task_rq_fair:
wake_affine picks the waker's or the wakee's previous CPU, select_idle_sibling looks for an idle one
only within limits), so it waits for its waker although a core idles (measured by
kernels/host_probe/probe.py: waker_placements, two threads on two cores). With the share set, such
a wake-up (`run(who, waker=...)` while a core is free) is placed on the waker's core with that
probability, drawn per wake-up (0 and 1 draw nothing), and then waits as a wake-up by the waker on
a busy core does: until the waker blocks, its quantum ends, or the waker delay passes; the waker,
displaced, takes the free core at once. Otherwise the thread takes the free core at once. None (the
default) and 0: no such placement.

`cores=None` means as many cores as runnable threads (nobody ever waits). Simulated seconds.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import simpy

_DONE = 1e-12  # remaining core-seconds below this are float residue, not work


@dataclass
class _Thread:
    """The scheduler's view of one thread."""

    core_event: simpy.Event  # fires when it (next) gets a core
    on_core_since: float | None = None  # None: waiting in the queue
    remaining_s: float = 0.0  # work left of its current `compute`
    done: simpy.Event | None = None  # fires when that work is complete
    resumed_at: float = 0.0  # when its work last started progressing
    generation: int = 0  # bumps when its completion timer goes stale
    queued_at: float = 0.0  # when it last joined the run queue


class Cpu:
    """`cores` cores (None: unlimited) shared round-robin with a `quantum_s` quantum."""

    def __init__(self, env: simpy.Environment, cores: int | None = None, quantum_s: float = 4e-3,
                 wake_delay_samples_s: tuple[float, ...] = (), rng: np.random.Generator | None = None,
                 slice_s: float = 0.0,
                 wake_delays_by_held_s: tuple[tuple[float, tuple[float, ...]], ...] = (),
                 waker_delay_samples_s: tuple[float, ...] = (),
                 waker_affine_share: float | None = None) -> None:
        if cores is not None and cores < 1:
            raise ValueError(f"cores must be >= 1 or None, got {cores!r}")
        if not quantum_s > 0:
            raise ValueError(f"quantum_s must be > 0, got {quantum_s!r}")
        self.env = env
        self.cores = cores
        self.quantum_s = quantum_s
        if any(not samples for _, samples in wake_delays_by_held_s):
            raise ValueError("every holder age in wake_delays_by_held_s needs samples")
        if [h for h, _ in wake_delays_by_held_s] != sorted(h for h, _ in wake_delays_by_held_s):
            raise ValueError("wake_delays_by_held_s must be ascending in the holder's age")
        self._wake_delays = wake_delay_samples_s
        self._wake_delays_by_held = wake_delays_by_held_s
        self._waker_delays = waker_delay_samples_s
        if waker_affine_share is not None and not 0 <= waker_affine_share <= 1:
            raise ValueError(f"waker_affine_share must be in [0, 1] or None, got {waker_affine_share!r}")
        self._affine_share = waker_affine_share
        # Threads waiting on their waker's core although a core is free: waiter -> waker.
        self._on_waker_core: dict[str, str] = {}
        self._slice_s = slice_s
        self._rng = rng
        self._threads: dict[str, _Thread] = {}
        self._queue: deque[str] = deque()
        self._quantum_generation = 0
        self._busy_closed_s = 0.0  # core-seconds of finished stretches on a core
        self.preemptions = 0  # holders moved to the back of the queue (quantum ends, wake-ups)
        self.core_wait_s: dict[str, float] = {}  # per thread: seconds runnable without a core

    # ---- queries -----------------------------------------------------------------------------

    @property
    def runnable(self) -> int:
        return len(self._threads)

    def has_free_core(self) -> bool:
        return self._free_cores() > 0

    def on_core(self, who: str) -> bool:
        t = self._threads.get(who)
        return t is not None and t.on_core_since is not None

    @property
    def busy_core_s(self) -> float:
        """Core-seconds held by runnable threads so far."""
        now = self.env.now
        return self._busy_closed_s + sum(now - t.on_core_since for t in self._threads.values()
                                         if t.on_core_since is not None)

    # ---- the thread life cycle ---------------------------------------------------------------

    def run(self, who: str, waker: str | None = None) -> simpy.Event:
        """`who` becomes runnable; the event fires when it holds a core (at once if one is free).
        `waker`: the thread whose signal woke it (see the module's note on wake-ups by the waker)."""
        if who in self._threads:
            known = self._threads[who]
            if known.on_core_since is None:
                return known.core_event
            ready = self.env.event()
            ready.succeed()
            return ready
        thread = _Thread(self.env.event())
        ready = thread.core_event
        self._threads[who] = thread
        if self._free_cores() > 0 and self._placed_on_waker(waker):
            thread.queued_at = self.env.now
            self._on_waker_core[who] = waker
            self._arm_quantum()
            if self._waker_delays:  # else only the waker's blocking or quantum end lets it run
                self._arm_wake_preemption(thread, waker)
        elif self._free_cores() > 0:
            self._give_core(who)
        else:
            thread.queued_at = self.env.now
            self._queue.append(who)
            self._arm_quantum()
            self._arm_wake_preemption(thread, waker)
        return ready

    def block(self, who: str) -> None:
        """`who` stops being runnable (waits for the GIL, an event, sleeps, ends): frees its core."""
        thread = self._threads.pop(who, None)
        if thread is None:
            return
        if thread.on_core_since is None:
            if self._on_waker_core.pop(who, None) is None:
                self._queue.remove(who)
            self._add_wait(who, self.env.now - thread.queued_at)
            return
        self._off_core(thread)
        self._fill_cores()

    def compute(self, who: str, work_s: float) -> simpy.Event:
        """`who` (runnable) needs `work_s` core-seconds; the event fires when they are done."""
        if not 0 <= work_s < math.inf:
            raise ValueError(f"work_s must be finite and >= 0, got {work_s!r}")
        thread = self._threads[who]
        thread.remaining_s = work_s
        thread.done = self.env.event()
        if work_s <= _DONE:
            thread.done.succeed()
        elif thread.on_core_since is not None:
            self._progress(thread)
        return thread.done

    def stop(self, who: str) -> float:
        """`who` abandons its current work (e.g. the GIL asked for a drop); returns what is left."""
        thread = self._threads.get(who)
        if thread is None or thread.done is None:
            return 0.0
        if thread.on_core_since is not None and not thread.done.triggered:
            thread.remaining_s -= self.env.now - thread.resumed_at
        thread.generation += 1
        left = 0.0 if thread.done.triggered else max(thread.remaining_s, 0.0)
        thread.done = None
        thread.remaining_s = 0.0
        return left

    # ---- internals ---------------------------------------------------------------------------

    def _free_cores(self) -> int:
        if self.cores is None:
            return 1
        return self.cores - sum(1 for t in self._threads.values() if t.on_core_since is not None)

    def _give_core(self, who: str) -> None:
        thread = self._threads[who]
        thread.on_core_since = self.env.now
        if thread.done is not None and not thread.done.triggered:
            self._progress(thread)
        event, thread.core_event = thread.core_event, self.env.event()
        if not event.triggered:
            event.succeed()
        self._arm_quantum()

    def _off_core(self, thread: _Thread) -> None:
        now = self.env.now
        self._busy_closed_s += now - thread.on_core_since
        if thread.done is not None and not thread.done.triggered:
            thread.remaining_s -= now - thread.resumed_at
            thread.generation += 1  # its completion timer is stale now
        thread.on_core_since = None

    def _placed_on_waker(self, waker: str | None) -> bool:
        """Whether a wake-up by `waker`, with a core free, is queued on the waker's core."""
        share = self._affine_share
        if not share or waker is None or not self.on_core(waker) or self.cores is None:
            return False
        return share >= 1 or (self._rng is not None and float(self._rng.random()) < share)

    def _fill_cores(self) -> None:
        # A thread queued on its waker's core runs first when that core frees (the waker left it).
        for who, waker in list(self._on_waker_core.items()):
            if not self.on_core(waker) and self._free_cores() > 0:
                del self._on_waker_core[who]
                self._add_wait(who, self.env.now - self._threads[who].queued_at)
                self._give_core(who)
        while self._queue and self._free_cores() > 0:
            who = self._queue.popleft()
            self._add_wait(who, self.env.now - self._threads[who].queued_at)
            self._give_core(who)
        self._arm_quantum()

    def _progress(self, thread: _Thread) -> None:
        thread.resumed_at = self.env.now
        thread.generation += 1
        generation = thread.generation
        timer = self.env.timeout(max(thread.remaining_s, 0.0))
        timer.callbacks.append(lambda _e: self._work_done(thread, generation))

    def _work_done(self, thread: _Thread, generation: int) -> None:
        if thread.generation != generation or thread.done is None or thread.on_core_since is None:
            return
        thread.remaining_s = 0.0
        thread.done.succeed()

    def _arm_quantum(self) -> None:
        """One timer for the earliest quantum end among core holders, while anyone waits (for any
        core, or for its waker's)."""
        self._quantum_generation += 1
        if not (self._queue or self._on_waker_core) or self.cores is None:
            return
        now, q = self.env.now, self.quantum_s
        holders = [(w, t) for w, t in self._threads.items() if t.on_core_since is not None
                   and (self._queue or w in self._on_waker_core.values())]
        if not holders:
            return

        def next_end(t: _Thread) -> float:
            used = now - t.on_core_since
            return t.on_core_since + (math.floor(used / q + _DONE) + 1) * q

        who, thread = min(holders, key=lambda h: (next_end(h[1]), h[1].on_core_since))
        generation = self._quantum_generation
        timer = self.env.timeout(next_end(thread) - now)
        timer.callbacks.append(lambda _e: self._quantum_end(who, generation))

    def _quantum_end(self, who: str, generation: int) -> None:
        thread = self._threads.get(who)
        waited_for = self._queue or who in self._on_waker_core.values()
        if generation != self._quantum_generation or not waited_for or thread is None or thread.on_core_since is None:
            return
        self.preemptions += 1
        self._off_core(thread)
        thread.queued_at = self.env.now
        self._queue.append(who)
        self._fill_cores()

    def _wake_samples(self) -> tuple[float, ...]:
        """The wake-up delays that apply now: by the age of the core's longest holder, if given."""
        if not self._wake_delays_by_held:
            return self._wake_delays
        since = min((t.on_core_since for t in self._threads.values() if t.on_core_since is not None),
                    default=self.env.now)
        age = self.env.now - since
        chosen = self._wake_delays_by_held[0][1]
        for held, samples in self._wake_delays_by_held:
            if held <= age + _DONE:
                chosen = samples
        return chosen

    def _arm_wake_preemption(self, waiter: _Thread, waker: str | None = None) -> None:
        target = waker if waker is not None and self._waker_delays and self.on_core(waker) else None
        samples = self._waker_delays if target is not None else self._wake_samples()
        if not samples or self._rng is None or self.cores is None:
            return
        delay = float(samples[int(self._rng.integers(len(samples)))])
        timer = self.env.timeout(delay)
        timer.callbacks.append(lambda _e: self._wake_preempt(waiter, target))

    def _wake_preempt(self, waiter: _Thread, target: str | None = None) -> None:
        """`waiter` (if still waiting) takes the core of `target` (its waker) if that still holds
        one, or with no target of the holder that has had its core longest."""
        who = next((w for w, t in self._threads.items() if t is waiter), None)
        if who is None or waiter.on_core_since is not None:
            return
        holders = [(t.on_core_since, w) for w, t in self._threads.items() if t.on_core_since is not None]
        if target is not None:
            holders = [(since, w) for since, w in holders if w == target]
            if not holders:
                return  # the waker left its core; the queue decides now
        since, victim = min(holders)
        if self.env.now < since + self._slice_s:  # its slice is protected: try again when it ends
            timer = self.env.timeout(since + self._slice_s - self.env.now)
            timer.callbacks.append(lambda _e: self._wake_preempt(waiter, target))
            return
        self.preemptions += 1
        held = self._threads[victim]
        self._off_core(held)
        held.queued_at = self.env.now
        if self._on_waker_core.pop(who, None) is None:
            self._queue.remove(who)
        self._queue.append(victim)
        self._add_wait(who, self.env.now - waiter.queued_at)
        self._give_core(who)
        if self._free_cores() > 0:  # it was queued on its waker's core: the waker takes the free one
            self._fill_cores()

    def _add_wait(self, who: str, seconds: float) -> None:
        if seconds > 0:
            self.core_wait_s[who] = self.core_wait_s.get(who, 0.0) + seconds
