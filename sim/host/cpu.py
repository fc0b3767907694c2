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
kernels/host_probe/micro.py: waker_delay_samples). With
`waker_delay_samples_s`, such a wake-up (`run(who, waker=...)`) takes the waker's core after a
delay drawn from them, unless the waker blocks or its quantum ends first.

Cores have identities, and each thread remembers the core it last ran on (`last_core`). A
thread that becomes runnable while a core is free is placed by the rule of Linux's wake-up path
(kernel/sched/fair.c: select_task_rq_fair -> wake_affine -> select_idle_sibling; docs/gil.md
cites the source and version), by the state of the wakee's previous core and of its waker:
- woken by a thread that runs on core W (`run(who, waker=...)`), previous core P:
  - P == W: select_task_rq_fair calls no wake_affine (the waker's CPU is the previous one) and
    select_idle_sibling(prev=W, target=W) finds W busy; its scan of the cache domain for an idle
    CPU is cut short when the domain is busy (SIS_UTIL), so the wakee is queued on W behind its
    waker (`Placement.stay_with_waker`, measured: the share of such wake-ups that stayed on W;
    the rest take a free core);
  - P != W and P idle: wake_affine_idle returns P: the wakee runs there at once
    (`Placement.to_idle_previous`, measured; the rest are queued on W, as wake_affine_weight may
    choose the waker's CPU);
  - P busy with another thread: select_idle_sibling's scan finds a free core;
- woken by a timer or the device (no waker): its previous core P if free; P busy: the timer
  fires on P (an hrtimer runs on the CPU that armed it), so the waking CPU is P and the case is
  the one above: select_idle_sibling(prev=P, target=P) finds P busy and its scan is cut short, so
  the thread is queued on P (`Placement.stay_on_busy_previous`, measured; the rest take a free
  core) and preempts P's holder after a wake-up delay (`wake_delays_by_held_s`, by that holder's
  age on its core);
- a thread that never ran (a new thread), started by a running parent (`run(who, waker=parent)`):
  the parent's core (`Placement.new_on_parent`, measured: the share of new threads whose first
  bytecode ran on their parent's CPU), where it waits until the parent blocks (Thread.start
  does) or a free core pulls it; the rest, and a new thread with no parent, the lowest-numbered
  free core.
A thread queued on a busy core although another is free ("stacked") waits as a wake-up by its
waker on a busy core does: until the core's holder blocks, its quantum ends, or the waker delay
passes (the waker rule above); the holder it displaces stays queued on that core, as Linux keeps a
preempted task on its run queue. A free core pulls a stacked thread after a delay drawn from
`Placement.pull_delay_samples_s` (measured: how long a displaced waker waited before it ran
again on the other core; none measured: one quantum, the busy core's next tick that kicks an idle
core's load balance): the migration. Once two threads share a core they keep sharing it until
one of them blocks long enough for the other to be pulled, which is why two cores can behave like
one (docs/gil.md, "Why the schedules miss here"). `placement=None` turns the rule off: a thread
then takes a free core at once, as before cores had identities.

`cores=None` means as many cores as runnable threads (nobody ever waits). Simulated seconds.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import simpy

_DONE = 1e-12  # remaining core-seconds below this are float residue, not work


@dataclass(frozen=True)
class Placement:
    """Where a thread woken while a core is free is queued (the module's note; Linux's rule).

    `stay_with_waker`: share of wake-ups whose previous core is the running waker's that are
    queued there (the rest take a free core); `to_idle_previous`: share of wake-ups whose previous
    core is idle and not the waker's that run there (the rest are queued on the waker's core).
    Both are conditional on that state and measured by a micro-probe (waker placements); 1 and 1
    is the kernel's rule read literally. `pull_delay_samples_s`: how long a thread queued behind
    another waits before a free core pulls it (measured; () means one quantum).
    `stay_on_busy_previous`: share of timer wake-ups (no waker) whose previous core is busy that
    are queued there; `new_on_parent`: share of new threads that start on their running parent's
    core. Both measured (start placements); 0, the default, is the kernel's idle-CPU scan finding
    the free core (fork balancing and select_idle_sibling when SIS_UTIL does not cut the scan)."""

    stay_with_waker: float = 1.0
    to_idle_previous: float = 1.0
    pull_delay_samples_s: tuple[float, ...] = ()
    stay_on_busy_previous: float = 0.0
    new_on_parent: float = 0.0

    def __post_init__(self) -> None:
        for name in ("stay_with_waker", "to_idle_previous", "stay_on_busy_previous", "new_on_parent"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        if any(not 0 <= d < math.inf for d in self.pull_delay_samples_s):
            raise ValueError("pull delays must be finite and >= 0")


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
    core: int | None = None  # the core it runs on (None: none, or cores are unlimited)


def _placed(core: int | None) -> int:
    """A core number where cores are limited and one is known to be free or chosen (`_place`,
    `_first_free` return None only when cores are unlimited or none is free)."""
    assert core is not None
    return core


def _on_core_since(thread: _Thread) -> float:
    """When a thread known to hold a core took it."""
    assert thread.on_core_since is not None
    return thread.on_core_since


class Cpu:
    """`cores` cores (None: unlimited) shared round-robin with a `quantum_s` quantum."""

    def __init__(self, env: simpy.Environment, cores: int | None = None, quantum_s: float = 4e-3,
                 wake_delay_samples_s: tuple[float, ...] = (), rng: np.random.Generator | None = None,
                 slice_s: float = 0.0,
                 wake_delays_by_held_s: tuple[tuple[float, tuple[float, ...]], ...] = (),
                 waker_delay_samples_s: tuple[float, ...] = (),
                 placement: Placement | None = Placement()) -> None:
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
        self._placement = placement
        # Threads queued on a busy core although a core may be free ("stacked"): who -> core.
        self._stacked: dict[str, int] = {}
        self._holders: list[str | None] = [None] * (cores or 0)
        self.last_core: dict[str, int] = {}  # per thread: the core it last ran on
        self.migrations = 0  # stacked threads pulled to a free core
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

    def core_of(self, who: str) -> int | None:
        """The core `who` runs on now (None: not on one, or cores are unlimited)."""
        t = self._threads.get(who)
        return None if t is None or t.on_core_since is None else t.core

    @property
    def busy_core_s(self) -> float:
        """Core-seconds held by runnable threads so far."""
        now = self.env.now
        return self._busy_closed_s + sum(now - t.on_core_since for t in self._threads.values()
                                         if t.on_core_since is not None)

    # ---- the thread life cycle ---------------------------------------------------------------

    def run(self, who: str, waker: str | None = None) -> simpy.Event:
        """`who` becomes runnable; the event fires when it holds a core (at once if one is free).
        `waker`: the thread whose signal woke it (see the module's note on wake-ups by the waker
        and on placement)."""
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
        if self._free_cores() > 0:
            core = self._place(who, waker)
            if self.cores is None or self._holders[_placed(core)] is None:
                self._give_core(who, core)
            else:
                self._stack(who, _placed(core), waker)
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
            if self._stacked.pop(who, None) is None:
                self._queue.remove(who)
            self._add_wait(who, self.env.now - thread.queued_at)
            return
        self._off_core(who, thread)
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
        return sum(1 for h in self._holders if h is None)

    def _first_free(self) -> int | None:
        return next((c for c, h in enumerate(self._holders) if h is None), None)

    def _draw(self, share: float) -> bool:
        """True with probability `share` (0 and 1 draw nothing)."""
        if share >= 1:
            return True
        if share <= 0 or self._rng is None:
            return False
        return float(self._rng.random()) < share

    def _place(self, who: str, waker: str | None) -> int | None:
        """The core a thread becoming runnable (a core being free) is placed on: a free one, or a
        busy one to wait on (the module's placement rule)."""
        if self.cores is None:
            return None
        free = self._first_free()
        prev = self.last_core.get(who)
        rule = self._placement
        waker_core = self.core_of(waker) if waker is not None else None
        if rule is not None and waker_core is not None and prev is not None:
            if prev == waker_core:
                return waker_core if self._draw(rule.stay_with_waker) else free
            if self._holders[prev] is None:
                return prev if self._draw(rule.to_idle_previous) else waker_core
            return free  # its previous core is busy with another thread: the scan finds a free one
        if rule is not None and waker_core is not None and prev is None:
            return waker_core if self._draw(rule.new_on_parent) else free  # a new thread, by its parent
        if prev is not None and self._holders[prev] is None:
            return prev
        if rule is not None and prev is not None and waker is None:
            return prev if self._draw(rule.stay_on_busy_previous) else free  # a timer fires on prev
        return free

    def _stack(self, who: str, core: int, waker: str | None) -> None:
        """`who` waits on busy `core` although a core may be free."""
        thread = self._threads[who]
        thread.queued_at = self.env.now
        self._stacked[who] = core
        self._arm_quantum()
        if waker is not None and self._waker_delays and self._holders[core] == waker:
            self._arm_wake_preemption(thread, waker)
        elif waker is None:
            self._arm_wake_preemption(thread, victim=self._holders[core])
        self._arm_pull(who, thread)

    def _arm_pull(self, who: str, thread: _Thread) -> None:
        """A free core pulls stacked `who` after a pull delay (the migration)."""
        if self._free_cores() == 0:
            return
        samples = self._placement.pull_delay_samples_s if self._placement is not None else ()
        if samples and self._rng is not None:
            delay = float(samples[int(self._rng.integers(len(samples)))])
        else:
            delay = self.quantum_s
        timer = self.env.timeout(delay)
        timer.callbacks.append(lambda _e: self._pull(who, thread))

    def _pull(self, who: str, thread: _Thread) -> None:
        if self._threads.get(who) is not thread or who not in self._stacked or thread.on_core_since is not None:
            return
        free = self._first_free()
        if free is None:
            return
        del self._stacked[who]
        self.migrations += 1
        self._add_wait(who, self.env.now - thread.queued_at)
        self._give_core(who, free)
        self._arm_quantum()

    def _give_core(self, who: str, core: int | None = None) -> None:
        thread = self._threads[who]
        if self.cores is not None:
            if core is None or self._holders[core] is not None:
                prev = self.last_core.get(who)
                core = _placed(prev if prev is not None and self._holders[prev] is None else self._first_free())
            self._holders[core] = who
            self.last_core[who] = core
        thread.core = core
        thread.on_core_since = self.env.now
        if thread.done is not None and not thread.done.triggered:
            self._progress(thread)
        event, thread.core_event = thread.core_event, self.env.event()
        if not event.triggered:
            event.succeed()
        self._arm_quantum()

    def _off_core(self, who: str, thread: _Thread) -> None:
        now = self.env.now
        self._busy_closed_s += now - _on_core_since(thread)
        if thread.done is not None and not thread.done.triggered:
            thread.remaining_s -= now - thread.resumed_at
            thread.generation += 1  # its completion timer is stale now
        if self.cores is not None and thread.core is not None and self._holders[thread.core] == who:
            self._holders[thread.core] = None
        thread.on_core_since = None

    def _requeue(self, who: str, thread: _Thread, core: int | None) -> None:
        """`who`, displaced from `core`, waits again: on that core's queue while another core is
        free (a preempted task stays on its run queue until pulled), else in the run queue."""
        thread.queued_at = self.env.now
        if core is not None and self._free_cores() > 0 and self._placement is not None:
            self._stacked[who] = core
            self._arm_pull(who, thread)
        else:
            self._queue.append(who)

    def _fill_cores(self) -> None:
        # A thread stacked on a core runs first when that core frees.
        for who, core in list(self._stacked.items()):
            if self._holders[core] is None:
                del self._stacked[who]
                self._add_wait(who, self.env.now - self._threads[who].queued_at)
                self._give_core(who, core)
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

    def _waited_for(self, who: str, thread: _Thread) -> bool:
        """Whether someone waits for the core `who` holds (the run queue, or stacked on it)."""
        return bool(self._queue) or thread.core in self._stacked.values()

    def _arm_quantum(self) -> None:
        """One timer for the earliest quantum end among core holders someone waits for."""
        self._quantum_generation += 1
        if not (self._queue or self._stacked) or self.cores is None:
            return
        now, q = self.env.now, self.quantum_s
        holders = [(w, t) for w, t in self._threads.items()
                   if t.on_core_since is not None and self._waited_for(w, t)]
        if not holders:
            return

        def next_end(t: _Thread) -> float:
            since = _on_core_since(t)
            used = now - since
            return since + (math.floor(used / q + _DONE) + 1) * q

        who, thread = min(holders, key=lambda h: (next_end(h[1]), h[1].on_core_since))
        generation = self._quantum_generation
        timer = self.env.timeout(next_end(thread) - now)
        timer.callbacks.append(lambda _e: self._quantum_end(who, generation))

    def _quantum_end(self, who: str, generation: int) -> None:
        thread = self._threads.get(who)
        if generation != self._quantum_generation or thread is None or thread.on_core_since is None:
            return
        if not self._waited_for(who, thread):
            return
        self.preemptions += 1
        core = thread.core
        stacked_here = core is not None and core in self._stacked.values()
        self._off_core(who, thread)
        if stacked_here:  # the thread waiting on this core takes it; the holder waits on it in turn
            waiter = next(w for w, c in self._stacked.items() if c == core)
            del self._stacked[waiter]
            self._add_wait(waiter, self.env.now - self._threads[waiter].queued_at)
            self._give_core(waiter, core)
            self._requeue(who, thread, core)
        else:
            thread.queued_at = self.env.now
            self._queue.append(who)
        self._fill_cores()

    def _wake_samples(self, victim: str | None = None) -> tuple[float, ...]:
        """The wake-up delays that apply now: by the age of `victim` on its core (None: the
        longest holder), if given."""
        if not self._wake_delays_by_held:
            return self._wake_delays
        starts = [t.on_core_since for w, t in self._threads.items() if t.on_core_since is not None and victim in (None, w)]
        since = min(starts, default=self.env.now)
        age = self.env.now - since
        chosen = self._wake_delays_by_held[0][1]
        for held, samples in self._wake_delays_by_held:
            if held <= age + _DONE:
                chosen = samples
        return chosen

    def _arm_wake_preemption(self, waiter: _Thread, waker: str | None = None, victim: str | None = None) -> None:
        """`waiter` takes a core after a drawn wake-up delay: its waker's (the waker rule), else
        `victim`'s (a timer wake-up queued on its previous core), else the longest holder's."""
        target = waker if waker is not None and self._waker_delays and self.on_core(waker) else None
        samples = self._waker_delays if target is not None else self._wake_samples(victim)
        target = target or victim
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
        core = held.core
        self._off_core(victim, held)
        if self._stacked.pop(who, None) is None:
            self._queue.remove(who)
        self._add_wait(who, self.env.now - waiter.queued_at)
        self._give_core(who, core)
        self._requeue(victim, held, core)
        self._fill_cores()

    def _add_wait(self, who: str, seconds: float) -> None:
        if seconds > 0:
            self.core_wait_s[who] = self.core_wait_s.get(who, 0.0) + seconds
