"""The GIL study's real-threads probe: this machine's threads running the prefill + KV-transfer
host schedule (its thread structure), and the costs the simulator's mirror of it is calibrated with
(the generic micro-probes are infralab.kernels.host_probe.micro).

Main thread ("prefill"), per step and layer:
    Python work (`launch_units`)  ->  native "dispatch" (`dispatch_ns`)  ->  post the layer's
    KV chunk  ->  Python work (`launch_units`)  ->  native "combine" (`combine_ns`)
The native calls go through ctypes.PyDLL (they keep the GIL, `holds_gil=True`) or ctypes.CDLL
(they release it). They stand for the host waiting on the device: a busy spin, as DeepEP's
dispatch polls, or a sleep (`native_wait`), which leaves the core to other threads.

Transfer thread ("kv-transfer"), per chunk: block on a queue (GIL released), Python work building
one descriptor per KV block (`blocks_per_chunk` units; or, with `native_descriptors_ns`, a native
call of that length that releases the GIL), then a native memcpy of `chunk_bytes`
through CDLL (releases the GIL), as a Mooncake-style transfer engine does. With
`granularity="per_layer"` a chunk is posted after each layer's dispatch; with "after_prefill"
all of a step's chunks are posted when the step ends.

With `cores`, the probe pins its main thread to that many cores (affinity.py) before it starts the
transfer thread, so both share them as the simulator's `host.cores` says.

Every segment is recorded as a `ProbeInterval` with `time.perf_counter_ns` (Python segments,
stamped every SLICE_UNITS units so that a slice during which the thread lost the GIL shows up as
"stalled") or the native code's own CLOCK_MONOTONIC stamps (the same clock on Linux); the time
from a releasing call's return to the next bytecode is recorded as "gil-wait". One "unit" of Python work
is one iteration of `python_work`'s descriptor loop, so that the simulator can be given the
measured cost of a unit (see `microbenchmarks`).

Timing results are benchmarks of this machine, not facts about any other.
"""

from __future__ import annotations

import ctypes
import os
import queue
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

from infralab.kernels.host_probe.affinity import current_cpu, pinned, skip_reason
from infralab.kernels.host_probe.build import NativeLibs, load
from infralab.kernels.host_probe.contention import Contention, CpuSnapshot, thread_sched_ns
from infralab.kernels.host_probe.micro import (
    SLICE_UNITS,
    PlacementRule,
    _time_call,
    _time_copy,
    _time_overshoot,
    _time_python_unit,
    handoff_samples,
    python_work,
    wake_delay_samples,
    wake_delays_by_held,
    waker_delay_samples,
)

PYTHON = "python"
NATIVE_HOLD = "native-hold-gil"
NATIVE_RELEASE = "native-release-gil"
GIL_WAIT = "gil-wait"  # inferred: from a releasing call's native end to the next Python stamp
STALLED = "stalled"  # a slice of Python work that took far longer than the others (GIL lost, or OS)


@dataclass(frozen=True)
class ProbeSchedule:
    """The host schedule, in units of this machine (ns, bytes, Python-work units)."""

    steps: int = 4
    layers: int = 12
    launch_units: int = 500  # Python work before dispatch and before combine, per layer
    dispatch_ns: int = 1_500_000
    combine_ns: int = 300_000
    blocks_per_chunk: int = 2000  # Python work per KV chunk (one descriptor per block)
    chunk_bytes: int = 4 << 20  # bytes copied per chunk
    granularity: Literal["per_layer", "after_prefill"] = "per_layer"
    holds_gil: bool = True  # dispatch/combine through PyDLL (True) or CDLL (False)
    # How dispatch/combine wait for "the device": busy-spin (as DeepEP polls) or sleep (leaves
    # the core to the other thread, which matters on a small shared machine).
    native_wait: Literal["spin", "sleep"] = "spin"
    cores: int | None = None  # CPU cores both threads run on (None: the process's affinity as is)
    # Each thread pinned to a core of its own (main to the first of `cores`, the transfer thread
    # to the second), as the published servers run them; False: both share the `cores` and Linux
    # places them (a new thread mostly starts on its parent's CPU and they stay stacked there).
    own_cores: bool = False
    # > 0: the descriptor work runs as one GIL-releasing native call of this many ns (busy on its
    # core) instead of the Python loop (the "next fix": per-page work out of the Python loop).
    native_descriptors_ns: int = 0


@dataclass(frozen=True)
class ProbeInterval:
    track: str  # "thread/main" or "thread/kv-transfer"
    name: str  # PYTHON, STALLED, NATIVE_HOLD, NATIVE_RELEASE, GIL_WAIT
    op: str  # "launch", "dispatch", "combine", "descriptors", "copy", ...
    start_ns: int
    end_ns: int


@dataclass
class ProbeRun:
    schedule: ProbeSchedule
    with_transfer: bool
    intervals: list[ProbeInterval] = field(default_factory=list)
    start_ns: int = 0
    prefill_end_ns: int = 0  # main thread done with its last step
    end_ns: int = 0  # transfer thread done too
    # Other processes on the run's cores from its start to the prefill's end (contention.py).
    contention: Contention | None = None
    # Per track: seconds the thread was runnable but waited for a core (None: not measurable).
    runqueue_wait_s: dict[str, float | None] = field(default_factory=dict)
    # Per track: the CPUs the thread may run on (its affinity mask once the run began).
    affinity: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # Where each thread ran: (ns, track, op, cpu) at every Python segment's start and every native
    # call's return (sched_getcpu).
    cpus: list[tuple[int, str, str, int]] = field(default_factory=list)

    @property
    def prefill_s(self) -> float:
        return (self.prefill_end_ns - self.start_ns) * 1e-9


def running_spans(stamps: list[int], stall_factor: float = 8.0, min_stall_ns: int = 20_000) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Split a stamped Python segment into (running, stalled) spans. A slice that took more than
    `stall_factor` x the median slice (and over `min_stall_ns`) was stalled: the thread lost the
    GIL, or the OS ran something else; the whole slice counts as stalled (we cannot see where in
    it the stall was)."""
    slices = list(zip(stamps, stamps[1:]))
    if not slices:
        return [], []
    typical = statistics.median(b - a for a, b in slices)
    limit = max(stall_factor * typical, min_stall_ns)
    running: list[tuple[int, int]] = []
    stalled: list[tuple[int, int]] = []
    for a, b in slices:
        target = stalled if b - a > limit else running
        if target and target[-1][1] == a:
            target[-1] = (target[-1][0], b)
        else:
            target.append((a, b))
    return running, stalled


class _Recorder:
    """Appends intervals; list.append is atomic under the GIL, so threads can share one."""

    def __init__(self, out: list[ProbeInterval], affinity: dict[str, tuple[int, ...]] | None = None,
                 cpus: list[tuple[int, str, str, int]] | None = None) -> None:
        self.out = out
        self.affinity = {} if affinity is None else affinity
        self.cpus = [] if cpus is None else cpus

    def python(self, track: str, op: str, units: int) -> None:
        self.cpus.append((time.perf_counter_ns(), track, op, current_cpu()))
        stamps = [time.perf_counter_ns()]
        python_work(units, stamps)
        running, stalled = running_spans(stamps)
        self.out.extend(ProbeInterval(track, PYTHON, op, a, b) for a, b in running)
        self.out.extend(ProbeInterval(track, STALLED, op, a, b) for a, b in stalled)

    def native(self, track: str, op: str, call, holds_gil: bool, *args) -> None:
        stamps = (ctypes.c_uint64 * 2)()
        call(*args, stamps)
        back = time.perf_counter_ns()  # first bytecode after the call: the GIL is ours again
        self.cpus.append((back, track, op, current_cpu()))
        name = NATIVE_HOLD if holds_gil else NATIVE_RELEASE
        self.out.append(ProbeInterval(track, name, op, stamps[0], stamps[1]))
        if not holds_gil and back > stamps[1]:
            self.out.append(ProbeInterval(track, GIL_WAIT, op, stamps[1], back))


def chunks_on_mains_cpu(run: ProbeRun) -> float | None:
    """Share of the transfer thread's chunks whose descriptors started on the CPU the main thread
    last ran on (both threads stacked on one CPU); None without chunks before the prefill ended."""
    main_cpu, on, chunks = None, 0, 0
    for ns, track, op, cpu in sorted(run.cpus):
        if ns > run.prefill_end_ns:
            break
        if track == "thread/main":
            main_cpu = cpu
        elif op == "descriptors" and main_cpu is not None:
            chunks += 1
            on += cpu == main_cpu
    return on / chunks if chunks else None


def _waited_s(start: tuple[int, int] | None) -> float | None:
    """The calling thread's run-queue wait since `start` (a thread_sched_ns reading)."""
    now = thread_sched_ns()
    return None if start is None or now is None else (now[1] - start[1]) * 1e-9


def _transfer_loop(libs: NativeLibs, sched: ProbeSchedule, work: queue.Queue, rec: _Recorder,
                   src: ctypes.Array, dst: ctypes.Array, waits: dict[str, float | None],
                   own_core: int | None = None) -> None:
    track = "thread/kv-transfer"
    if own_core is not None:
        os.sched_setaffinity(0, {own_core})  # this thread only
    rec.affinity[track] = tuple(sorted(os.sched_getaffinity(0)))
    copy = libs.releasing.infralab_copy
    start = thread_sched_ns()
    while True:
        chunk = work.get()
        if chunk is None:
            waits[track] = _waited_s(start)
            return
        if sched.native_descriptors_ns > 0:
            spin = libs.releasing.infralab_spin_ns
            rec.native(track, "descriptors", spin, False, sched.native_descriptors_ns)
        else:
            rec.python(track, "descriptors", sched.blocks_per_chunk)
        rec.native(track, "copy", copy, False, ctypes.addressof(dst), ctypes.addressof(src), sched.chunk_bytes)


def run_probe(sched: ProbeSchedule, with_transfer: bool, libs: NativeLibs | None = None) -> ProbeRun:
    """Run the schedule once on real threads (on `sched.cores` cores); returns the recorded
    intervals. ValueError when this machine has fewer usable cores than `sched.cores`."""
    libs = libs or load()
    if sched.own_cores and (sched.cores is None or sched.cores < 2):
        raise ValueError(f"own_cores needs cores >= 2 (a core per thread), got cores={sched.cores!r}")
    with pinned(sched.cores) as cores:  # before the transfer thread starts: it inherits the mask
        return _run_probe(sched, with_transfer, libs, cores)


def _run_probe(sched: ProbeSchedule, with_transfer: bool, libs: NativeLibs, cores: tuple[int, ...]) -> ProbeRun:
    lib = libs.lib(sched.holds_gil)
    spin = lib.infralab_spin_ns if sched.native_wait == "spin" else lib.infralab_sleep_ns
    run = ProbeRun(sched, with_transfer)
    rec = _Recorder(run.intervals, run.affinity, run.cpus)
    work: queue.Queue = queue.Queue()
    transfer = None
    if with_transfer:
        src = (ctypes.c_char * sched.chunk_bytes)()
        dst = (ctypes.c_char * sched.chunk_bytes)()
        ctypes.memmove(dst, src, sched.chunk_bytes)  # touch the pages before timing
        transfer = threading.Thread(target=_transfer_loop, args=(libs, sched, work, rec, src, dst, run.runqueue_wait_s,
                                                                 cores[1] if sched.own_cores else None), daemon=True)
        transfer.start()
    if sched.own_cores:
        os.sched_setaffinity(0, {cores[0]})  # the main thread alone on the first core (pinned() restores)
    run.affinity["thread/main"] = tuple(sorted(os.sched_getaffinity(0)))
    main = "thread/main"
    before = CpuSnapshot.take(cores)
    main_start = thread_sched_ns()
    run.start_ns = time.perf_counter_ns()
    for step in range(sched.steps):
        for layer in range(sched.layers):
            rec.python(main, "launch", sched.launch_units)
            rec.native(main, "dispatch", spin, sched.holds_gil, sched.dispatch_ns)
            if with_transfer and sched.granularity == "per_layer":
                work.put((step, layer))
            rec.python(main, "launch", sched.launch_units)
            rec.native(main, "combine", spin, sched.holds_gil, sched.combine_ns)
        if with_transfer and sched.granularity == "after_prefill":
            for layer in range(sched.layers):
                work.put((step, layer))
    run.prefill_end_ns = time.perf_counter_ns()
    run.runqueue_wait_s[main] = _waited_s(main_start)
    run.contention = Contention.between(before, CpuSnapshot.take(cores))
    if transfer is not None:
        work.put(None)
        transfer.join()
    run.end_ns = time.perf_counter_ns()
    return run


# ---- microbenchmarks: the host profile the simulator is calibrated with --------------------


@dataclass(frozen=True)
class HostMeasurements:
    """Costs measured on this machine (medians), seconds unless stated."""

    python_unit_s: float  # one iteration of `python_work`
    native_call_hold_s: float  # ctypes call overhead of a zero-length spin, PyDLL
    native_call_release_s: float  # same through CDLL (GIL release and re-acquire included)
    copy_bytes_per_s: float  # memcpy bandwidth for `chunk_bytes`, hot caches
    copy_cold_bytes_per_s: float  # the same with the caches flushed before each copy
    handoff_s: float  # from a release by a thread that then sleeps, to the waiter's first bytecode
    handoff_busy_s: float  # the same when the releasing thread spins on (keeps its core busy)
    handoff_samples_s: tuple[float, ...]  # every valid trial behind handoff_s (its median)
    handoff_busy_samples_s: tuple[float, ...]
    switch_interval_s: float  # sys.getswitchinterval()
    spin_overshoot_s: float  # how much longer than asked a spin runs (call overhead excluded)
    sleep_overshoot_s: float  # same for a sleep (timer slack plus wake-up)
    layer_overhead_s: float  # the main loop's own cost per layer (recording, calls) with no work
    wake_delay_s: float  # median wait of a thread woken on a busy core (wake_delay_samples)
    wake_delay_samples_s: tuple[float, ...]
    # The same by how long the core's holder has had it (wake_delays_by_held); () if not measurable.
    wake_delays_by_held_s: tuple[tuple[float, tuple[float, ...]], ...] = ()
    # How long a thread woken by the core's holder waits for it (waker_delay_samples); () if not measurable.
    waker_delay_samples_s: tuple[float, ...] = ()
    # Where a thread woken by a computing waker runs with 2+ cores, by its previous CPU, and when a
    # displaced waker is pulled (waker_placements); None if not measured.
    placement: PlacementRule | None = None
    # The transfer thread's costs per chunk, by the probe's schedule (granularity): its GIL hold
    # (descriptors' first stamp to its copy call) and its copy, its own loop run alone as the
    # schedule feeds it (chunk_samples); () if not measured.
    chunk_costs: tuple[ChunkCost, ...] = ()

    def chunk_cost(self, granularity: str) -> ChunkCost | None:
        """The measured per-chunk costs for `granularity`; None where not measured."""
        return next((c for c in self.chunk_costs if c.granularity == granularity), None)


@dataclass(frozen=True)
class ChunkCost:
    """The transfer thread's medians per chunk for one schedule, seconds: `hold_s` from its
    descriptors' first stamp to its copy call (the GIL held: descriptors, their recording, the
    copy call's setup), `copy_s` the copy call itself (the GIL released)."""

    granularity: str
    hold_s: float
    copy_s: float
    samples: int


def chunk_samples(libs: NativeLibs, blocks: int, chunk_bytes: int, pause_ns: int, chunks: int,
                  repeats: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The transfer thread's GIL hold and copy per chunk (seconds, each sorted), its own loop
    (`_transfer_loop`) run on ONE thread as a schedule feeds it: `repeats` times, a `pause_ns`
    sleep, then `chunks` chunks queued at once. Per layer the chunks arrive one at a time, a
    layer's time apart (chunks=1, pause = the layer); after prefill a step's chunks arrive
    together and run back to back (chunks = layers, pause = the step). The caches' state is the
    schedule's: after a pause the descriptors take longer (0.26 ms against 0.24 ms for 2000 here)
    and a copy of the same buffers back to back runs near the hot rate, where a copy after the
    flush of `copy_cold_bytes_per_s` does not."""
    sched = ProbeSchedule(blocks_per_chunk=blocks, chunk_bytes=chunk_bytes)
    src, dst = (ctypes.c_char * chunk_bytes)(), (ctypes.c_char * chunk_bytes)()
    ctypes.memmove(dst, src, chunk_bytes)  # touch the pages, as the probe does before timing
    stamps = (ctypes.c_uint64 * 2)()
    out: list[ProbeInterval] = []
    rec = _Recorder(out)
    holds, copies = [], []
    for _ in range(repeats):
        work: queue.Queue = queue.Queue()
        for chunk in range(chunks):
            work.put(chunk)
        work.put(None)
        libs.releasing.infralab_sleep_ns(pause_ns, stamps)
        out.clear()
        _transfer_loop(libs, sched, work, rec, src, dst, {})
        first = None
        for iv in out:
            if iv.op == "descriptors" and first is None:
                first = iv.start_ns
            elif iv.op == "copy" and iv.name == NATIVE_RELEASE and first is not None:
                holds.append((iv.start_ns - first) * 1e-9)
                copies.append((iv.end_ns - iv.start_ns) * 1e-9)
                first = None
    return tuple(sorted(holds)), tuple(sorted(copies))


def chunk_costs(libs: NativeLibs, blocks: int, chunk_bytes: int, layer_ns: int, layers: int,
                repeats: int) -> tuple[ChunkCost, ...]:
    """`ChunkCost` of each granularity, measured alone in its own pattern (`chunk_samples`):
    per layer `repeats` single chunks after a layer's pause; after prefill `layers` chunks back to
    back after a step's pause, enough steps for about as many chunks."""
    patterns = {"per_layer": (layer_ns, 1, repeats),
                "after_prefill": (layer_ns * layers, layers, max(-(-repeats // layers), 2))}
    out = []
    for granularity, (pause_ns, chunks, trials) in patterns.items():
        holds, copies = chunk_samples(libs, blocks, chunk_bytes, pause_ns, chunks, trials)
        out.append(ChunkCost(granularity, statistics.median(holds), statistics.median(copies), len(holds)))
    return tuple(out)


def _time_layer_overhead(libs: NativeLibs, layers: int) -> float:
    empty = ProbeSchedule(steps=1, layers=layers, launch_units=0, dispatch_ns=0, combine_ns=0, native_wait="spin")
    return min(run_probe(empty, False, libs).prefill_s for _ in range(3)) / layers


def microbenchmarks(
    chunk_bytes: int = 4 << 20,
    native_wait: Literal["spin", "sleep"] = "spin",
    repeats: int = 25,
    libs: NativeLibs | None = None,
    blocks_per_chunk: int = 2000,
    layer_ns: int = 1_800_000,
    layers: int = 12,
) -> HostMeasurements:
    """Measure the costs the simulator needs to mirror `run_probe` on this machine. `native_wait`
    is accepted for symmetry with ProbeSchedule; both hand-off flavours are always measured.
    `blocks_per_chunk`, `layer_ns`, `layers`: the chunk whose costs are timed, the schedule's
    layer time (dispatch + combine) and layers per step (`chunk_costs`)."""
    libs = libs or load()
    python_work(1000)  # warm up
    handoff = handoff_samples(libs, repeats, "sleep")
    handoff_busy = handoff_samples(libs, repeats, "spin")
    wake = wake_delay_samples(libs, 2 * repeats) if skip_reason(1) is None else ()
    by_held = wake_delays_by_held(libs, max(repeats // 3, 1)) if skip_reason(1) is None else ()
    waker = waker_delay_samples(libs, max(repeats // 3, 1)) if skip_reason(1) is None else ()
    return HostMeasurements(
        python_unit_s=_time_python_unit(2000, repeats),
        native_call_hold_s=_time_call(libs.holding.infralab_spin_ns, repeats * 20),
        native_call_release_s=_time_call(libs.releasing.infralab_spin_ns, repeats * 20),
        copy_bytes_per_s=_time_copy(libs, chunk_bytes, repeats),
        copy_cold_bytes_per_s=_time_copy(libs, chunk_bytes, max(repeats // 2, 1), cold=True),
        handoff_s=statistics.median(handoff) if handoff else float("nan"),
        handoff_busy_s=statistics.median(handoff_busy) if handoff_busy else float("nan"),
        handoff_samples_s=handoff,
        handoff_busy_samples_s=handoff_busy,
        switch_interval_s=sys.getswitchinterval(),
        spin_overshoot_s=_time_overshoot(libs.releasing.infralab_spin_ns, 200_000, repeats),
        sleep_overshoot_s=_time_overshoot(libs.releasing.infralab_sleep_ns, 200_000, repeats),
        layer_overhead_s=_time_layer_overhead(libs, 200),
        wake_delay_s=statistics.median(wake) if wake else float("nan"),
        wake_delay_samples_s=wake,
        wake_delays_by_held_s=by_held,
        waker_delay_samples_s=waker,
        chunk_costs=chunk_costs(libs, blocks_per_chunk, chunk_bytes, layer_ns, layers, repeats),
    )
