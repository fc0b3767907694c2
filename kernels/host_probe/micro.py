"""Micro-probes of this machine's host: what the host model (sim/host/) is calibrated with.

Each measures one thing on real threads, calling the project's native helpers (build.py) through
ctypes, once via `PyDLL` (the call keeps the GIL) and once via `CDLL` (the call releases it):
- the cost of a unit of Python work (`python_work`, a descriptor-building loop), a ctypes call,
  a memcpy with hot or cold caches;
- the GIL hand-off: from a release to the waiter's first bytecode (`handoff_samples`);
- the OS's wake-up delays on ONE busy core: a sleeper woken by a timer (`wake_delay_samples`,
  `wake_delays_by_held`: by how long the core's holder has had it) and a thread woken by the
  core's holder itself (`waker_delay_samples`: the waker rule of sim/host/cpu.py);
- where Linux places a thread woken by a computing waker on 2+ cores, by the wakee's previous
  CPU, and where and when the displaced waker runs again (`waker_placements`, `placement_rule`:
  sim/host/cpu.py's `Placement`); where a thread started by a running parent first runs, and
  where a sleeper runs when its timer ends while its previous CPU is busy (`start_placements`).
Timing results are benchmarks of this machine, not facts about any other.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from infralab.kernels.host_probe.affinity import current_cpu, pinned
from infralab.kernels.host_probe.build import NativeLibs
from infralab.kernels.host_probe.contention import processor_of

SLICE_UNITS = 50  # Python work is stamped every this many units, to see where it was stalled


def python_work(units: int, stamps: list[int] | None = None) -> int:
    """`units` iterations of pure-Python bookkeeping: one (src, dst, length) descriptor per block,
    as a transfer engine's Python side builds them. With `stamps`, a perf_counter_ns stamp is
    appended after every SLICE_UNITS units. Returns the count, so nothing is optimised out."""
    src, dst, length = 0x7F00_0000_0000, 0x7E00_0000_0000, 4096
    descriptors = []
    clock = time.perf_counter_ns
    for first in range(0, units, SLICE_UNITS):
        for i in range(first, min(first + SLICE_UNITS, units)):
            descriptors.append((src + i * length, dst + i * length, length))
        if stamps is not None:
            stamps.append(clock())
    return len(descriptors)



def _median_s(samples_ns: list[int]) -> float:
    return statistics.median(samples_ns) * 1e-9


def _time_python_unit(units: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        python_work(units)
        samples.append(time.perf_counter_ns() - t0)
    return _median_s(samples) / units


def _time_call(fn, repeats: int) -> float:
    stamps = (ctypes.c_uint64 * 2)()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(0, stamps)
        samples.append(time.perf_counter_ns() - t0)
    return _median_s(samples)


EVICT_BYTES = 64 << 20  # copied between timed copies to push the chunk out of the caches


def _time_copy(libs: NativeLibs, nbytes: int, repeats: int, cold: bool = False) -> float:
    """memcpy rate (bytes/s) of `nbytes`, back to back (hot caches) or `cold`: after copying
    EVICT_BYTES elsewhere, as a KV chunk written long ago is not in cache."""
    src, dst = (ctypes.c_char * nbytes)(), (ctypes.c_char * nbytes)()
    stamps = (ctypes.c_uint64 * 2)()
    copy = libs.releasing.infralab_copy
    copy(ctypes.addressof(dst), ctypes.addressof(src), nbytes, stamps)  # touch the pages
    evict = ((ctypes.c_char * EVICT_BYTES)(), (ctypes.c_char * EVICT_BYTES)()) if cold else None
    samples = []
    for _ in range(repeats):
        if evict is not None:
            copy(ctypes.addressof(evict[1]), ctypes.addressof(evict[0]), EVICT_BYTES, stamps)
        copy(ctypes.addressof(dst), ctypes.addressof(src), nbytes, stamps)
        samples.append(stamps[1] - stamps[0])
    return nbytes / _median_s(samples)


def _time_overshoot(fn, ns: int, repeats: int) -> float:
    stamps = (ctypes.c_uint64 * 2)()
    samples = []
    for _ in range(repeats):
        fn(ns, stamps)
        samples.append(stamps[1] - stamps[0] - ns)
    return _median_s(samples)



def handoff_samples(libs: NativeLibs, repeats: int, native_wait: str, cores: int | None = None,
                    release_ns: int = 1_000_000) -> tuple[float, ...]:
    """A waiter blocked on the GIL while main holds it in a PyDLL spin; main then enters a CDLL
    spin or sleep of `release_ns` (releases). Hand-off = the waiter's first bytecode stamp - that
    call's start. Trials where the waiter was not yet waiting when main released are discarded.
    Both threads run on `cores` cores (None: as the process is). Returns the valid samples
    (seconds), sorted. On one core with a spin longer than a scheduler tick this is how long a
    thread woken by the core's holder waits for it (`waker_delay_samples`)."""
    with pinned(cores):
        return _handoff_samples(libs, repeats, native_wait, release_ns)


# The releasing spin of the waker micro-probe: longer than two 4 ms ticks, so that its samples are
# not cut short by the spin's end.
WAKER_RELEASE_NS = 10_000_000


def waker_delay_samples(libs: NativeLibs, repeats: int) -> tuple[float, ...]:
    """On ONE core: how long a GIL waiter, woken by the release of the thread that holds the
    core and goes on computing, waits to run (seconds, sorted; sim/host/cpu.py's waker rule)."""
    return handoff_samples(libs, repeats, "spin", cores=1, release_ns=WAKER_RELEASE_NS)


@dataclass(frozen=True)
class WakePlacement:
    """One wake-up of a GIL waiter by the release of a thread that goes on computing."""

    waker_cpu: int  # where the releasing thread ran when it released
    prev_cpu: int  # where the waiter last ran before it blocked on the GIL
    woken_cpu: int  # where the waiter ran its first bytecode after the wake-up
    delay_s: float  # from the release to the waiter's first bytecode
    run_delay_s: float  # the waiter's run-queue wait across the wake-up (schedstat)
    waker_end_cpu: int | None = None  # where the releaser ran when its computing call ended
    waker_wait_s: float | None = None  # the releaser's run-queue wait over that call (schedstat)

    @property
    def on_waker_cpu(self) -> bool:
        return self.woken_cpu == self.waker_cpu

    @property
    def waker_pulled(self) -> bool:
        """The waiter was queued on the waker's CPU and the waker, displaced, ended on another
        one: an idle CPU pulled it (a migration) after `waker_wait_s`."""
        return self.on_waker_cpu and self.waker_end_cpu is not None and self.waker_end_cpu != self.waker_cpu


def waker_placements(libs: NativeLibs, repeats: int, cores: int = 2,
                     release_ns: int = WAKER_RELEASE_NS) -> tuple[WakePlacement, ...]:
    """On `cores` cores (both threads share the mask): where Linux runs a GIL waiter woken by the
    release of a thread that goes on computing (a CDLL spin of `release_ns`), and how long it
    waits. The trial is handoff_samples's; the releaser reads its own CPU (sched_getcpu) and, while
    the waiter sleeps on the GIL, the waiter's last CPU (field 39 of /proc/self/task/<tid>/stat) and
    run-queue wait (its schedstat); the waiter reads its CPU and wait again at its first bytecode.
    The releaser's call records its CPU at its start and end (`infralab_spin_ns_cpu`), and the
    releaser reads its own run-queue wait before and after it (a displaced releaser waits on its
    CPU until the waiter blocks or an idle CPU pulls it: `WakePlacement.waker_pulled`).
    Every reading keeps the GIL (libc through PyDLL), so none hands the GIL to the waiter early. Linux's wake-affine placement
    (kernel/sched/fair.c, select_task_rq_fair: wake_affine, then select_idle_sibling) may queue it
    on the waker's busy CPU although another is idle. Trials where the waiter was not yet waiting
    when the releaser released, or a reading is missing, are discarded."""
    with pinned(cores):
        return _waker_placements(libs, repeats, release_ns)


# libc called through PyDLL keeps the GIL: a Python file read releases it, which would hand the GIL
# to the very waiter whose wake-up is being timed.
_LIBC = ctypes.PyDLL(None)
_LIBC.pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long)
_LIBC.pread.restype = ctypes.c_ssize_t


def _pread_keeping_gil(fd: int, size: int = 1024) -> str:
    buf = ctypes.create_string_buffer(size)
    n = _LIBC.pread(fd, buf, size, 0)
    return buf.raw[:max(n, 0)].decode()


def _waker_placements(libs: NativeLibs, repeats: int, release_ns: int) -> tuple[WakePlacement, ...]:
    out: list[WakePlacement] = []
    for _ in range(repeats * 4):
        if len(out) >= repeats:
            break
        back: list[int] = []
        after: list = []
        fds: list[int] = []
        own = (ctypes.c_uint64 * 2)()
        inside = threading.Event()
        stamps = (ctypes.c_uint64 * 2)()
        cpus = (ctypes.c_int * 2)()

        def waiter() -> None:
            task = f"/proc/self/task/{threading.get_native_id()}"
            fds.extend(os.open(f"{task}/{name}", os.O_RDONLY) for name in ("stat", "schedstat"))
            inside.set()
            libs.releasing.infralab_spin_ns(2_000_000, own)  # returns while main holds the GIL
            back.append(time.perf_counter_ns())
            after.extend((current_cpu(), _pread_keeping_gil(fds[1])))

        t = threading.Thread(target=waiter)
        t.start()
        inside.wait()
        libs.holding.infralab_spin_ns(3_000_000, stamps)  # the waiter now sleeps on the GIL
        prev, before, waker_cpu = _pread_keeping_gil(fds[0]), _pread_keeping_gil(fds[1]), current_cpu()
        mine = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        own_before = _pread_keeping_gil(mine)
        libs.releasing.infralab_spin_ns_cpu(release_ns, stamps, cpus)
        own_after = _pread_keeping_gil(mine)
        os.close(mine)
        t.join()
        for fd in fds:
            os.close(fd)
        if not (back and own[1] < stamps[0] <= back[0]) or not prev or not before or not after[1]:
            continue
        waited = (int(after[1].split()[1]) - int(before.split()[1])) * 1e-9
        waker_wait = (int(own_after.split()[1]) - int(own_before.split()[1])) * 1e-9 if own_before and own_after else None
        out.append(WakePlacement(waker_cpu, processor_of(prev), after[0], (back[0] - stamps[0]) * 1e-9, waited,
                                 int(cpus[1]), waker_wait))
    return tuple(out)


def placement_share(placements: tuple[WakePlacement, ...]) -> float | None:
    """The share of wake-ups run on the waker's CPU (None: no sample)."""
    return sum(p.on_waker_cpu for p in placements) / len(placements) if placements else None


@dataclass(frozen=True)
class PlacementRule:
    """sim/host/cpu.py's `Placement`, measured: shares by the wakee's previous CPU (None: no trial
    in that state), pull delays of displaced wakers, and how many trials each rests on."""

    stay_with_waker: float | None  # previous CPU = the waker's: share queued there
    to_idle_previous: float | None  # previous CPU = the other, idle one: share run there
    pull_delay_samples_s: tuple[float, ...]  # run-queue waits of displaced wakers that were pulled
    trials_prev_waker: int
    trials_prev_other: int
    pulled: int
    new_on_parent: float | None = None  # a new thread: share whose first bytecode ran on its parent's CPU
    stay_on_busy_previous: float | None = None  # a timer wake-up, previous CPU busy: share run there
    trials_start: int = 0
    trials_prev_busy: int = 0


def placement_rule(placements: tuple[WakePlacement, ...], starts: tuple[StartPlacement, ...] = ()) -> PlacementRule:
    """The placement rule the trials measure, by state (see PlacementRule): wake-ups by a
    computing waker (`waker_placements`) and thread starts and timer wake-ups (`start_placements`)."""
    busy = [t for t in starts if t.previous_busy]
    same = [p for p in placements if p.prev_cpu == p.waker_cpu]
    other = [p for p in placements if p.prev_cpu != p.waker_cpu]
    pulled = sorted(p.waker_wait_s for p in placements if p.waker_pulled and p.waker_wait_s is not None)
    return PlacementRule(
        stay_with_waker=sum(p.on_waker_cpu for p in same) / len(same) if same else None,
        to_idle_previous=sum(p.woken_cpu == p.prev_cpu for p in other) / len(other) if other else None,
        pull_delay_samples_s=tuple(pulled), trials_prev_waker=len(same), trials_prev_other=len(other),
        pulled=len(pulled),
        new_on_parent=sum(t.on_parent_cpu for t in starts) / len(starts) if starts else None,
        stay_on_busy_previous=sum(t.sleeper_woken_cpu == t.sleeper_prev_cpu for t in busy) / len(busy) if busy else None,
        trials_start=len(starts), trials_prev_busy=len(busy),
    )


@dataclass(frozen=True)
class StartPlacement:
    """One trial of `start_placements`: a thread started by a running parent, then the parent's
    sleep ending while the new thread computes (CPUs by sched_getcpu)."""

    parent_cpu: int  # where the parent ran when it started the thread
    child_cpu: int  # where the new thread ran its first bytecode
    spinner_cpu: int  # where the new thread ran when its computing call began
    sleeper_prev_cpu: int  # where the parent ran when it went to sleep
    sleeper_woken_cpu: int  # where the parent ran its first bytecode after the sleep

    @property
    def on_parent_cpu(self) -> bool:
        return self.child_cpu == self.parent_cpu

    @property
    def previous_busy(self) -> bool:
        """The sleeper's previous CPU is the one the new thread computes on."""
        return self.sleeper_prev_cpu == self.spinner_cpu


START_SPIN_NS = 3_000_000  # the new thread's computing call (GIL released)
START_SLEEP_NS = 500_000  # the parent's sleep, which ends while that call runs


def start_placements(libs: NativeLibs, repeats: int, cores: int = 2,
                     before: Callable[[], object] | None = None) -> tuple[StartPlacement, ...]:
    """On `cores` cores (the threads share the mask): where Linux runs a thread a running parent
    starts (its first bytecode), and where the parent, asleep meanwhile, runs when its timer ends
    while the new thread computes (sim/host/cpu.py's `Placement`: `new_on_parent`,
    `stay_on_busy_previous`). Per trial: `before()` (what the process did just before: where
    Linux starts a new thread depends on the CPUs' recent load, so a caller reproduces the
    conditions its own thread start meets; None: nothing), Python work on the parent's CPU, the
    start (Thread.start blocks the parent until the thread runs), then the parent sleeps
    START_SLEEP_NS in native code while the thread spins START_SPIN_NS in native code (both with
    the GIL released). Every CPU reading is sched_getcpu through PyDLL (the GIL kept)."""
    out = []
    with pinned(cores):
        for _ in range(repeats):
            if before is not None:
                before()
            out.append(_start_placement(libs))
    return tuple(out)


def _start_placement(libs: NativeLibs) -> StartPlacement:
    child: list[int] = []
    own = (ctypes.c_uint64 * 2)()
    cpus = (ctypes.c_int * 2)()
    stamps = (ctypes.c_uint64 * 2)()

    def spinner() -> None:
        child.append(current_cpu())
        libs.releasing.infralab_spin_ns_cpu(START_SPIN_NS, own, cpus)

    python_work(SLICE_UNITS)  # the parent runs on its CPU when it starts the thread
    parent = current_cpu()
    t = threading.Thread(target=spinner)
    t.start()
    before = current_cpu()
    libs.releasing.infralab_sleep_ns(START_SLEEP_NS, stamps)
    woken = current_cpu()
    t.join()
    return StartPlacement(parent, child[0], int(cpus[0]), before, woken)


def _handoff_samples(libs: NativeLibs, repeats: int, native_wait: str, release_ns: int) -> tuple[float, ...]:
    release = libs.releasing.infralab_spin_ns if native_wait == "spin" else libs.releasing.infralab_sleep_ns
    samples: list[int] = []
    for _ in range(repeats * 4):
        if len(samples) >= repeats:
            break
        back: list[int] = []
        own = (ctypes.c_uint64 * 2)()
        inside = threading.Event()
        stamps = (ctypes.c_uint64 * 2)()

        def waiter() -> None:
            inside.set()  # main can only run once we release the GIL in the call below
            libs.releasing.infralab_spin_ns(2_000_000, own)  # returns while main holds the GIL
            back.append(time.perf_counter_ns())

        t = threading.Thread(target=waiter)
        t.start()
        inside.wait()
        libs.holding.infralab_spin_ns(3_000_000, stamps)  # the waiter waits < switch interval
        release(release_ns, stamps)
        t.join()
        if back and own[1] < stamps[0] <= back[0]:
            samples.append(back[0] - stamps[0])
    return tuple(sorted(ns * 1e-9 for ns in samples))


WAKE_PROBE_SLEEP_NS = 1_000_000  # the sleep whose wake-up on a busy core is timed


def wake_delay_samples(libs: NativeLibs, repeats: int) -> tuple[float, ...]:
    """How long a thread woken on a busy core waits before it runs (seconds, sorted).

    On ONE core, a second thread spins in native code (GIL released) the whole time; main sleeps
    WAKE_PROBE_SLEEP_NS in native code, over and over. Main wakes on time but runs again only when
    the OS gives it the core back: at once (wake-up preemption) or at a later scheduler tick. Each
    sample is one sleep's length less the median length of the same sleep with the core free."""
    stamps = (ctypes.c_uint64 * 2)()
    sleep = libs.releasing.infralab_sleep_ns
    alone = []
    with pinned(1):
        for _ in range(repeats):
            sleep(WAKE_PROBE_SLEEP_NS, stamps)
            alone.append(stamps[1] - stamps[0])
        stop = threading.Event()

        def spinner() -> None:
            own = (ctypes.c_uint64 * 2)()
            while not stop.is_set():
                libs.releasing.infralab_spin_ns(20_000_000, own)

        t = threading.Thread(target=spinner)
        t.start()
        try:
            sleep(WAKE_PROBE_SLEEP_NS, stamps)  # let the spinner start
            shared = []
            for _ in range(repeats):
                sleep(WAKE_PROBE_SLEEP_NS, stamps)
                shared.append(stamps[1] - stamps[0])
        finally:
            stop.set()
            t.join()
    usual = statistics.median(alone)
    return tuple(sorted(max(ns - usual, 0) * 1e-9 for ns in shared))


# Holder ages at which a wake-up on a busy core is timed (wake_delays_by_held), ns; and how long the
# holder spins on after the wake-up, so that a sleeper it keeps off the core waits past a 4 ms tick.
WAKE_HELD_NS = (250_000, 500_000, 1_000_000, 2_000_000)
WAKE_TAIL_NS = 6_000_000


def wake_delays_by_held(libs: NativeLibs, repeats: int,
                        held_ns: tuple[int, ...] = WAKE_HELD_NS) -> tuple[tuple[float, tuple[float, ...]], ...]:
    """How long a thread woken on a busy core waits before it runs, by how long the core's holder
    has had it: ((held_s, sorted samples_s), ...), ascending in held_s.

    On ONE core, per trial: a second thread blocks on a lock; main releases it and sleeps `held`
    ns in native code (GIL released), so that the second thread gets the core as main sleeps (it
    takes the GIL back and spins in native code with the GIL released, `held` + WAKE_TAIL_NS).
    Main wakes on time; each sample is its sleep's length less the median length of the same sleep
    with the core free: 0 when the OS gives the woken thread the core at once."""
    sleep = libs.releasing.infralab_sleep_ns
    spin = libs.releasing.infralab_spin_ns
    stamps = (ctypes.c_uint64 * 2)()
    out = []
    with pinned(1):
        for held in held_ns:
            alone = []
            for _ in range(repeats):
                sleep(held, stamps)
                alone.append(stamps[1] - stamps[0])
            usual = statistics.median(alone)
            shared = []
            for _ in range(repeats):
                go = threading.Lock()
                go.acquire()

                def holder(go: threading.Lock = go, held: int = held) -> None:
                    own = (ctypes.c_uint64 * 2)()
                    go.acquire()
                    spin(held + WAKE_TAIL_NS, own)

                t = threading.Thread(target=holder)
                t.start()
                sleep(1_000_000, stamps)  # the holder is blocked on the lock by now
                go.release()
                sleep(held, stamps)
                shared.append(stamps[1] - stamps[0])
                t.join()
            out.append((held * 1e-9, tuple(sorted(max(ns - usual, 0) * 1e-9 for ns in shared))))
    return tuple(out)


