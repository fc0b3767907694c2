"""CPU cores as a host resource: the runnable threads of one process share `cores` cores.

Scheduling: processor sharing, the fluid limit of Linux's CFS (every runnable thread gets an equal
share of the cores, at most one core each; no quantum). With n runnable threads on c cores each
runs at rate min(1, c / n): two CPU-bound threads on one core each take twice as long. A thread
waiting for the GIL, for I/O, for an event or sleeping is not runnable and holds no core.

Two kinds of demand:
- `compute(work_s)`: CPU-bound work (Python bytecode, a memcpy, a binding's overhead): it needs
  `work_s` seconds of one core, so it stretches while runnable threads outnumber cores;
- `spin()`: a thread polling on its core until something outside the CPU happens (DeepEP's dispatch
  waiting for the GPU's counts): it takes its share of the cores, but its end is set by the event,
  not by how much of a core it got.

Bookkeeping: on every change of the runnable set each task's remaining work is brought up to
date at the old rate, and one timer is set for the next completion (a generation counter makes
older timers no-ops), as `sim/link.py` does for flows. `cores=None` means as many cores as
runnable threads (every task at rate 1). Times are simulated seconds.
"""

from __future__ import annotations

import math

import simpy

_DONE = 1e-12  # remaining core-seconds below this are float residue, not work


class CpuTask:
    """One thread's current demand on the cores; `done` fires when its work is complete (never
    for a spin). `stop()` takes it off the cores and returns the work left (seconds)."""

    __slots__ = ("cpu", "who", "work_s", "remaining_s", "done", "core_wait_s", "running")

    def __init__(self, cpu: Cpu, who: str, work_s: float) -> None:
        self.cpu = cpu
        self.who = who
        self.work_s = work_s  # math.inf for a spin
        self.remaining_s = work_s
        self.done = cpu.env.event()
        self.core_wait_s = 0.0  # seconds runnable but not running (the share it did not get)
        self.running = True

    def stop(self) -> float:
        """Leave the cores (the work is complete, or the thread stops early); the work left, s."""
        if self.running:
            self.cpu._remove(self)
        return 0.0 if self.done.triggered else self.remaining_s


class Cpu:
    """`cores` cores shared by processor sharing (None: unlimited)."""

    def __init__(self, env: simpy.Environment, cores: int | None = None) -> None:
        if cores is not None and cores < 1:
            raise ValueError(f"cores must be >= 1 or None, got {cores!r}")
        self.env = env
        self.cores = cores
        self._tasks: list[CpuTask] = []
        self._since = env.now  # when the tasks' remaining work was last brought up to date
        self._generation = 0
        self.busy_core_s = 0.0  # core-seconds used (the integral of min(cores, runnable))
        self.core_wait_s: dict[str, float] = {}  # per thread: runnable but not running, seconds

    # ---- public ------------------------------------------------------------------------------

    def compute(self, who: str, work_s: float) -> CpuTask:
        """`who` runs `work_s` seconds of CPU-bound work; the task's `done` fires when it is complete."""
        if not 0 <= work_s < math.inf:
            raise ValueError(f"work_s must be finite and >= 0, got {work_s!r}")
        return self._add(CpuTask(self, who, work_s))

    def spin(self, who: str) -> CpuTask:
        """`who` polls on a core until it calls `stop()` on the returned task."""
        return self._add(CpuTask(self, who, math.inf))

    @property
    def runnable(self) -> int:
        return len(self._tasks)

    def rate(self, runnable: int | None = None) -> float:
        """Share of a core each of `runnable` threads gets (default: now)."""
        n = self.runnable if runnable is None else runnable
        if self.cores is None or n <= self.cores:
            return 1.0
        return self.cores / n

    # ---- internals ---------------------------------------------------------------------------

    def _add(self, task: CpuTask) -> CpuTask:
        self._advance()
        self._tasks.append(task)
        if task.remaining_s <= _DONE:
            self._finish(task)
        self._reschedule()
        return task

    def _remove(self, task: CpuTask) -> None:
        self._advance()
        self._tasks.remove(task)
        task.running = False
        self._reschedule()

    def _advance(self) -> None:
        """Bring every task's remaining work and the busy time up to now, at the current rate."""
        now = self.env.now
        dt = now - self._since
        self._since = now
        if dt <= 0 or not self._tasks:
            return
        rate = self.rate()
        self.busy_core_s += dt * rate * len(self._tasks)
        for task in self._tasks:
            task.remaining_s -= dt * rate
            lost = dt * (1.0 - rate)
            if lost > 0:
                task.core_wait_s += lost
                self.core_wait_s[task.who] = self.core_wait_s.get(task.who, 0.0) + lost

    def _finish(self, task: CpuTask) -> None:
        self._tasks.remove(task)
        task.running = False
        task.remaining_s = 0.0
        task.done.succeed()

    def _reschedule(self) -> None:
        self._generation += 1
        finite = [t.remaining_s for t in self._tasks if t.work_s < math.inf]
        if not finite:
            return
        delay = max(min(finite), 0.0) / self.rate()
        generation = self._generation
        timer = self.env.timeout(delay)
        timer.callbacks.append(lambda _event: self._on_timer(generation))

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return  # the runnable set changed after this timer was set
        self._advance()
        # The timer was set for the task with the least work left, at a rate that has not changed
        # since: it (and any tie) is done now, whatever float residue its remaining work shows.
        finite = [t for t in self._tasks if t.work_s < math.inf]
        soonest = min(t.remaining_s for t in finite)
        for task in finite:
            if task.remaining_s - soonest <= _DONE:
                self._finish(task)
        self._reschedule()
