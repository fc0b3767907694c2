"""The global interpreter lock, with CPython 3's switching rules (Python/ceval_gil.c, 3.2+).

- One holder at a time.
- A thread that wants the GIL while another holds it waits on a timed condition. Each time a
  whole switch interval (`sys.getswitchinterval()`, 5 ms by default) passes without the GIL
  changing hands, the waiter sets the *drop request*.
- The holder notices the drop request at its next bytecode boundary (the eval breaker) and drops
  the GIL; the waiter takes it ("forced switch": the old holder does not compete until the GIL has
  changed hands, FORCE_SWITCHING), and the old holder queues up again. A native call that keeps the
  GIL runs no bytecode, so it cannot be interrupted: the request waits until the call returns.
- A native call that releases the GIL (Py_BEGIN_ALLOW_THREADS) signals one waiter, and
  re-acquires the GIL when the call returns, waiting like anyone else.
- The GIL is not handed over: a release only wakes a waiter, which takes the GIL when it runs,
  `handoff_s` later (condition-variable signal plus the wake-up). A thread that asks for the GIL
  in that window while it is free takes it at once ("barging", e.g. a thread coming back from a
  short native call); the woken waiter then finds it taken and waits again, its switch-interval
  clock restarted, because its timed wait ended by a signal and not by a time-out. This is the
  convoy effect of CPython's GIL.

Modelling choices (documented, parameterised):
- Waiters are woken in arrival order; CPython's condition variable does not promise an order,
  but with the two or three threads of a serving process FIFO is what one observes.
- With a zero hand-off latency a release gives the GIL to the first waiter at once (no barging
  window). The latency may depend on whether the releasing thread blocks or keeps its core busy
  (`GilParams.handoff_busy_s`), a stand-in for CPU cores when none are modelled.
- With CPU cores modelled (`cpu`, sim/host/cpu.py), a woken waiter must also get a core before
  it can take the GIL: while it waits for one, the GIL stays free and a running thread may barge
  in (the convoy effect gets worse when threads outnumber cores, as on a loaded machine).
- The drop request is cleared when a new holder takes the GIL, as take_gil() does.

Times are simulated seconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import simpy

from infralab.sim.host.cpu import Cpu


@dataclass(frozen=True)
class GilParams:
    """How the GIL switches (seconds).

    `switch_interval_s`: CPython's sys.getswitchinterval() (default 0.005 s).
    `handoff_s`: time from a release until the woken waiter runs, when the releasing thread
    blocks (sleeps, waits on an event), leaving its core free.
    `handoff_busy_s`: the same when the releasing thread keeps its core busy (spins or copies in
    native code); None means `handoff_s`. The two differ only when runnable threads outnumber
    free cores: the woken thread then waits for the OS to give it one. The model has no cores;
    this parameter is where their effect on the GIL enters.
    """

    switch_interval_s: float = 0.005
    handoff_s: float = 0.0
    handoff_busy_s: float | None = None
    # Measured latencies to draw from instead of the constants (an empirical distribution: on a
    # loaded machine wake-ups are bimodal, microseconds or milliseconds). Needs the Gil's `rng`.
    handoff_samples_s: tuple[float, ...] = ()
    handoff_busy_samples_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.switch_interval_s <= 0:
            raise ValueError("switch_interval_s must be > 0")
        latencies = (self.handoff_s, self.handoff_busy_s or 0.0, *self.handoff_samples_s, *self.handoff_busy_samples_s)
        if min(latencies) < 0:
            raise ValueError("hand-off latencies must be >= 0")

    def handoff(self, busy: bool, rng: np.random.Generator | None = None) -> float:
        """Wake-up latency of a waiter after a release by a thread that stays `busy` or blocks:
        a draw from the samples when there are some and `rng` is given, else the constant."""
        samples = self.handoff_busy_samples_s if busy and self.handoff_busy_samples_s else self.handoff_samples_s
        if samples and rng is not None:
            return float(samples[int(rng.integers(len(samples)))])
        return self.handoff_busy_s if busy and self.handoff_busy_s is not None else self.handoff_s


class _Waiter:
    __slots__ = ("who", "granted", "signalled")

    def __init__(self, who: str, granted: simpy.Event, signalled: simpy.Event) -> None:
        self.who = who
        self.granted = granted
        self.signalled = signalled  # fires when a wake-up found the GIL taken (timer restarts)


class Gil:
    """One interpreter's GIL. Threads are named by strings; use through `HostThread`."""

    def __init__(self, env: simpy.Environment, params: GilParams = GilParams(),
                 rng: np.random.Generator | None = None, cpu: Cpu | None = None) -> None:
        self.env = env
        self._cpu = cpu
        self.params = params
        self._rng = rng  # for hand-off latencies drawn from samples (GilParams.handoff_samples_s)
        self.holder: str | None = None
        self.switches = 0  # times the GIL went to a different thread (CPython's switch_number)
        self.drop_requests = 0  # times a waiter set the drop request
        self.barges = 0  # times a thread took the GIL while a woken waiter was on its way
        self._last_holder: str | None = None
        self._waiters: deque[_Waiter] = deque()
        self._waking: _Waiter | None = None  # signalled, not yet running
        self._forced: str | None = None  # a thread that dropped on request and may not barge
        self._switched = env.event()  # fires at the next change of holder
        self._drop = env.event()  # triggered while a drop request is pending

    # ---- queries -------------------------------------------------------------------------

    @property
    def drop_requested(self) -> bool:
        """True while some waiter has asked the holder to drop the GIL."""
        return self._drop.triggered

    @property
    def drop_event(self) -> simpy.Event:
        """An event that fires when a drop request is set (the holder races its work against it)."""
        return self._drop

    @property
    def waiting(self) -> tuple[str, ...]:
        return tuple(w.who for w in self._waiters) + ((self._waking.who,) if self._waking else ())

    # ---- acquire / release ---------------------------------------------------------------

    def acquire(self, who: str) -> simpy.Event:
        """An event that succeeds once `who` holds the GIL (at once if it is free)."""
        if self.holder == who:
            raise RuntimeError(f"{who} already holds the GIL")
        granted = self.env.event()
        if self.holder is None and not self._waiters and who != self._forced:
            if self._waking is not None:
                self.barges += 1
            self._take(who)
            granted.succeed()
            return granted
        waiter = _Waiter(who, granted, self.env.event())
        self._waiters.append(waiter)
        self.env.process(self._watch(waiter))
        if self.holder is None and self._waking is None:
            self._wake_next()
        return granted

    def release(self, who: str, busy: bool = False) -> None:
        """`who` gives the GIL up and signals the longest waiter, if any. `busy`: `who` goes on
        running native code on its core (see GilParams.handoff_busy_s)."""
        if self.holder != who:
            raise RuntimeError(f"{who} releases a GIL held by {self.holder}")
        self.holder = None
        if self._waking is None:
            self._wake_next(busy, waker=who)

    def drop(self, who: str) -> simpy.Event:
        """A forced switch: `who` releases on a drop request; the returned event fires once another
        thread has taken the GIL (until then `who` may not take it back)."""
        self._forced = who
        switched = self._switched
        self.release(who)
        return switched

    # ---- internals -----------------------------------------------------------------------

    def _take(self, who: str) -> None:
        self.holder = who
        if who != self._last_holder:
            self.switches += 1
            self._last_holder = who
            self._forced = None
            switched, self._switched = self._switched, self.env.event()
            switched.succeed()
        if self._drop.triggered:  # the new holder clears any pending request
            self._drop = self.env.event()

    def _wake_next(self, busy: bool = False, waker: str | None = None) -> None:
        """Signal the longest waiter; `waker` is the releasing thread (the signal's sender)."""
        if not self._waiters:
            return
        waiter = self._waiters.popleft()
        latency = self.params.handoff(busy, self._rng)
        if latency == 0 and (self._cpu is None or self._cpu.has_free_core()):
            if self._cpu is not None:
                self._cpu.run(waiter.who)  # it runs at once, on the free core
            self._take(waiter.who)
            waiter.granted.succeed()
            return
        self._waking = waiter
        self.env.process(self._wake(waiter, latency, waker))

    def _wake(self, waiter: _Waiter, latency: float, waker: str | None = None) -> Generator[simpy.Event, object, None]:
        if latency > 0:
            yield self.env.timeout(latency)
        if self._cpu is not None:  # the woken thread must run to take the GIL
            ready = self._cpu.run(waiter.who, waker=waker)
            if not ready.triggered:
                yield ready
        self._waking = None
        if self.holder is None:
            self._take(waiter.who)
            waiter.granted.succeed()
            return
        # Someone barged in: wait again, at the front, with a fresh switch-interval clock.
        if self._cpu is not None:
            self._cpu.block(waiter.who)
        self._waiters.appendleft(waiter)
        signalled, waiter.signalled = waiter.signalled, self.env.event()
        signalled.succeed()

    def _watch(self, waiter: _Waiter) -> Generator[simpy.Event, object, None]:
        """The waiter's timed wait: every full switch interval without a switch, request a drop."""
        while not waiter.granted.triggered:
            seen = self.switches
            timer = self.env.timeout(self.params.switch_interval_s)
            yield timer | waiter.granted | waiter.signalled
            if waiter.granted.triggered:
                return
            if not timer.processed:
                continue  # woken by a signal but beaten to the GIL: a new timed wait
            if self.switches == seen and self.holder is not None and not self._drop.triggered:
                self.drop_requests += 1
                self._drop.succeed()
