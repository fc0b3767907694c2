"""The host-only schedule that the real-threads probe (`threads.py` here) runs,
simulated: the same threads and segments, with durations the agent measures on the machine.

Main thread, per step and layer: Python (`launch_s`) -> dispatch native call (`dispatch_s`, holds
or releases the GIL) -> post the layer's chunk (per-layer granularity) -> Python (`launch_s`) ->
combine native call (`combine_s`). Transfer thread: started by the main thread before the prefill (Thread.start); then per chunk: blocking queue get (GIL released),
Python (`chunk_python_s`; with `native_descriptors_s`, only the loop's own overhead, the
descriptors being built in a GIL-releasing native call that long), native copy (`copy_s` of CPU
time, releases the GIL).
`cores`: the CPU cores the threads share (sim/host/cpu.py; None: a core per thread). Dispatch and
combine poll on their core (`native_busy`) or sleep; either way their length is the device's.
Seconds throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import simpy

from infralab.metrics.records import RunRecord
from infralab.random_streams import stream
from infralab.sim.host.cpu import Cpu, Placement
from infralab.sim.host.gil import Gil, GilParams
from infralab.sim.host.thread import HostThread


@dataclass(frozen=True)
class HostSchedule:
    steps: int
    layers: int
    launch_s: float
    dispatch_s: float
    combine_s: float
    chunk_python_s: float
    copy_s: float
    granularity: Literal["per_layer", "after_prefill"]
    holds_gil: bool
    gil: GilParams
    native_busy: bool = True  # dispatch/combine spin (True) or sleep (False) on their core
    cores: int | None = None  # CPU cores the process may run on (None: one per thread)
    quantum_s: float = 4e-3  # the OS scheduler's round-robin quantum (sim/host/cpu.py)
    wake_delay_samples_s: tuple[float, ...] = ()  # measured waits of a thread woken on a busy core
    slice_s: float = 0.0  # a holder that got its core less than this ago is not preempted by a wake-up
    # Measured wake-up delays by the holder's age on its core ((held_s, samples), ...; sim/host/cpu.py).
    wake_delays_by_held_s: tuple[tuple[float, tuple[float, ...]], ...] = ()
    # Measured waits of a thread woken by the core's holder (a GIL release, a queue put; sim/host/cpu.py).
    waker_delay_samples_s: tuple[float, ...] = ()
    # Where a woken thread is placed by its previous core (Linux's wake-up placement, measured by the
    # waker-placement micro-probe; sim/host/cpu.py). None: a free core at once, no placement rule.
    placement: Placement | None = Placement()
    native_descriptors_s: float = 0.0  # > 0: descriptors built in a GIL-releasing native call this long


@dataclass
class HostScheduleRun:
    record: RunRecord
    prefill_s: float
    # Per thread: seconds runnable without a core until the prefill ended (empty without cores).
    core_wait_s: dict[str, float] = field(default_factory=dict)
    # Share of the chunks built before the prefill ended whose descriptors ran on the core the main
    # thread last ran on (None: no cores modelled, or no chunk).
    chunks_on_mains_core: float | None = None


def _device_wait(thread: HostThread, duration_s: float, holds_gil: bool, label: str, busy: bool):
    """A native call that waits `duration_s` of wall time for the device, polling or sleeping."""
    env = thread.env
    yield from thread.native_until(lambda: env.timeout(duration_s), holds_gil, label, busy)


def run_host_schedule(sched: HostSchedule, with_transfer: bool, seed: int = 0) -> HostScheduleRun:
    """Simulate the schedule once; deterministic for a `seed` (which only matters when the GIL's
    hand-off latencies or the cores' wake-up delays are drawn from samples)."""
    env = simpy.Environment()
    record = RunRecord()
    cpu = None
    if sched.cores is not None:
        cpu = Cpu(env, sched.cores, sched.quantum_s, sched.wake_delay_samples_s, stream(seed, "host.cpu.wake"),
                  sched.slice_s, sched.wake_delays_by_held_s, sched.waker_delay_samples_s,
                  placement=sched.placement)
    gil = Gil(env, sched.gil, stream(seed, "host.gil.handoff"), cpu)
    main = HostThread(env, "main", gil, record.intervals, cpu)
    mover = HostThread(env, "kv-transfer", gil, record.intervals, cpu)
    inbox = simpy.Store(env)
    done: dict[str, float] = {}
    waits: dict[str, float] = {}
    stacked: list[bool] = []  # per chunk built during the prefill: on main's core?

    started = env.event()

    def transfer():
        yield from mover.start(parent="main")
        started.succeed()
        while True:
            get = inbox.get()
            yield from mover.wait(get, "queue", woken_by="main")  # only the main thread posts chunks
            if get.value is None:
                mover.finish()
                return
            if sched.native_descriptors_s > 0:
                yield from mover.python(sched.chunk_python_s, "descriptors")
                yield from mover.native(sched.native_descriptors_s, holds_gil=False, label="descriptors", busy=True)
            else:
                yield from mover.python(sched.chunk_python_s, "descriptors")
            if cpu is not None and "prefill" not in done:
                stacked.append(cpu.last_core.get("kv-transfer") == cpu.last_core.get("main"))
            yield from mover.native(sched.copy_s, holds_gil=False, label="copy", busy=True)

    def prefill():
        if with_transfer:
            # As the probe does: the running main thread starts the transfer thread and blocks
            # until it runs (Thread.start), before the timed prefill; where the new thread
            # starts decides whether the two share a core (sim/host/cpu.py's placement).
            yield from main.python(0.0, "start")
            env.process(transfer())
            yield from main.wait(started, "start", woken_by="kv-transfer")
        begun = env.now  # the probe's clock starts after Thread.start returns
        for _ in range(sched.steps):
            for _ in range(sched.layers):
                yield from main.python(sched.launch_s, "launch")
                yield from _device_wait(main, sched.dispatch_s, sched.holds_gil, "dispatch", sched.native_busy)
                if with_transfer and sched.granularity == "per_layer":
                    inbox.put("chunk")
                yield from main.python(sched.launch_s, "launch")
                yield from _device_wait(main, sched.combine_s, sched.holds_gil, "combine", sched.native_busy)
            if with_transfer and sched.granularity == "after_prefill":
                for _ in range(sched.layers):
                    inbox.put("chunk")
        done["prefill"] = env.now - begun
        if cpu is not None:
            waits.update(cpu.core_wait_s)
        main.finish()
        inbox.put(None)

    env.process(prefill())
    env.run()
    record.end_s = env.now
    return HostScheduleRun(record, done["prefill"], waits, sum(stacked) / len(stacked) if stacked else None)
