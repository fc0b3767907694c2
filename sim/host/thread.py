"""A host thread: a SimPy process running a program of segments, recording its states.

A program is a generator function that takes the thread and yields from its segment methods:

    def program(t: HostThread):
        yield from t.python(20e-6, "launch")           # bytecode: needs the GIL, interruptible
        yield from t.native(1e-3, holds_gil=True, label="dispatch")   # cannot be interrupted
        yield from t.native(2e-3, holds_gil=False, label="memcpy")    # lets others run
        yield from t.wait(event, label="sync")          # blocked (GIL released) until `event`
        t.finish()

With a `Cpu` (sim/host/cpu.py) the thread also needs a core for what it runs on the CPU: Python,
and native calls that are `busy` (they compute, or poll until their event). Waiting for the GIL,
for an event, or in a native call that blocks (`busy=False`) takes no core. Without one, every
thread has a core of its own (the model before CPU cores existed).

States recorded on track "thread/<name>" (interval name = state, args = (("op", label),)):
"python", "native-hold-gil", "native-release-gil", "gil-wait". Times are simulated seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from infralab.metrics.records import Interval
from infralab.sim.host.cpu import Cpu
from infralab.sim.host.gil import Gil

PYTHON = "python"
NATIVE_HOLD = "native-hold-gil"
NATIVE_RELEASE = "native-release-gil"
GIL_WAIT = "gil-wait"
STATES = (PYTHON, NATIVE_HOLD, NATIVE_RELEASE, GIL_WAIT)

_EPS = 1e-12  # remaining work below this (seconds) is float residue, not work
_COMPUTE, _SPIN, _BLOCK = "compute", "spin", "block"  # what a native call does with its core

Segment = Generator[simpy.Event, Any, Any]


class HostThread:
    """One Python thread of a process sharing `gil`; appends its intervals to `intervals`."""

    def __init__(self, env: simpy.Environment, name: str, gil: Gil, intervals: list[Interval],
                 cpu: Cpu | None = None) -> None:
        self.env = env
        self.cpu = cpu
        self.name = name
        self.track = f"thread/{name}"
        self.gil = gil
        self.intervals = intervals
        self.has_gil = False
        self.gil_wait_s = 0.0  # total time spent waiting for the GIL
        self.forced_drops = 0  # times this thread gave the GIL up on a drop request

    # ---- segments ------------------------------------------------------------------------

    def python(self, duration_s: float, label: str = "") -> Segment:
        """Run `duration_s` of bytecode. Holds the GIL; gives it up at a bytecode boundary when a
        waiter has requested a drop, then continues after getting it back."""
        yield from self._on_core()
        yield from self._acquire(label)
        remaining = duration_s
        while remaining > _EPS:
            if self.gil.drop_requested:  # eval breaker at a bytecode boundary
                yield from self._forced_drop(label)
            start = self.env.now
            if self.cpu is None:
                yield self.env.timeout(remaining) | self.gil.drop_event
                remaining -= self.env.now - start
            else:
                yield self.cpu.compute(self.name, remaining) | self.gil.drop_event
                remaining = self.cpu.stop(self.name)
            self._record(PYTHON, start, label)

    def native(self, duration_s: float, holds_gil: bool, label: str = "", busy: bool = True) -> Segment:
        """A native call that keeps the GIL (uninterruptible) or releases it. `busy`: it computes
        or copies for `duration_s` of CPU time on its core (with a `Cpu`, it waits whenever it
        has no core); False: it blocks (sleeps) for `duration_s`, holding no core."""
        if busy and self.cpu is not None:
            cpu = self.cpu
            yield from self._native(lambda: cpu.compute(self.name, duration_s), holds_gil, label, busy, _COMPUTE)
        else:
            kind = _SPIN if busy else _BLOCK
            yield from self._native(lambda: self.env.timeout(duration_s), holds_gil, label, busy, kind)

    def native_until(
        self, call: Callable[[], simpy.Event], holds_gil: bool, label: str = "", busy: bool = True,
        woken_by: str | None = None,
    ) -> Segment:
        """A native call that starts when the thread runs it (`call()` starts the work and returns
        its completion event, e.g. a device stream or a link finishing) and returns when that fires.

        Holding the GIL, it blocks every other thread meanwhile; releasing it, it gives the GIL
        to a waiter and re-acquires it on return (waiting like any other thread). `busy`: the
        thread polls on its core until the event (with a `Cpu` it stays runnable, and may lose
        its core to another thread at a quantum's end); False: it blocks, holding no core. Either
        way it needs a core again to return. `woken_by`: the thread whose signal fires the event
        (sim/host/cpu.py: a thread woken by a core's holder does not preempt it at once)."""
        yield from self._native(call, holds_gil, label, busy, _SPIN if busy else _BLOCK, woken_by)

    def wait(self, event: simpy.Event, label: str = "wait", woken_by: str | None = None) -> Segment:
        """Block with the GIL released until `event` (Event.wait, stream synchronise, queue get).
        An event that has already fired returns at once without touching the GIL, as a
        non-blocking lock acquire does. `woken_by`: the thread that fires it, if one does."""
        if event.triggered:
            return
        yield from self.native_until(lambda: event, holds_gil=False, label=label, busy=False, woken_by=woken_by)

    def start(self, parent: str | None = None) -> Segment:
        """The thread begins to run. `parent`: the running thread that started it, whose core a
        new thread may start on (sim/host/cpu.py's new-thread placement)."""
        yield from self._on_core(parent)

    def finish(self) -> None:
        """The thread ends (or parks): give the GIL back if it holds it, and its core."""
        if self.has_gil:
            self._release()
        self._off_core()

    # ---- internals -----------------------------------------------------------------------

    def _native(self, call: Callable[[], simpy.Event], holds_gil: bool, label: str, busy: bool,
                kind: str, woken_by: str | None = None) -> Segment:
        yield from self._on_core()
        if holds_gil:
            yield from self._acquire(label)
        elif self.has_gil:
            self._release(busy)
        start = self.env.now
        if kind == _BLOCK:
            self._off_core()
        yield call()
        if kind != _COMPUTE:
            yield from self._on_core(woken_by)  # woken (or done polling): it returns once it runs again
        if holds_gil:
            self._record(NATIVE_HOLD, start, label)
            if self.gil.drop_requested:  # the first bytecode boundary after the call
                yield from self._forced_drop(label)
            return
        self._record(NATIVE_RELEASE, start, label)
        yield from self._acquire(label)

    def _on_core(self, woken_by: str | None = None) -> Segment:
        """Runnable from now on; returns once the thread holds a core (at once without a Cpu)."""
        if self.cpu is None:
            return
        ready = self.cpu.run(self.name, waker=woken_by)
        if not ready.triggered:
            yield ready

    def _off_core(self) -> None:
        """Blocked from now on: the thread's core goes to the next runnable thread."""
        if self.cpu is not None:
            self.cpu.block(self.name)

    def _acquire(self, label: str) -> Segment:
        if self.has_gil:
            return
        start = self.env.now
        granted = self.gil.acquire(self.name)
        if not granted.triggered:
            self._off_core()  # waiting on the GIL's condition variable
        yield granted
        self.has_gil = True
        if self.env.now > start:
            self.gil_wait_s += self.env.now - start
            self._record(GIL_WAIT, start, label)
        yield from self._on_core()

    def _release(self, busy: bool = False) -> None:
        self.gil.release(self.name, busy)
        self.has_gil = False

    def _forced_drop(self, label: str) -> Segment:
        self.forced_drops += 1
        start = self.env.now
        switched = self.gil.drop(self.name)
        self.has_gil = False
        self._off_core()
        yield switched  # FORCE_SWITCHING: do not compete until another thread has the GIL
        if self.env.now > start:
            self.gil_wait_s += self.env.now - start
            self._record(GIL_WAIT, start, label)
        yield from self._acquire(label)

    def _record(self, state: str, start: float, label: str) -> None:
        if self.env.now > start:
            self.intervals.append(Interval(self.track, state, start, self.env.now, (("op", label),)))
