"""How much other processes ran on the probe's cores during a run: the probe's noise, measured.

The probe shares its machine, and the simulator knows only the probe's own threads. Two readings
of the Linux kernel's accounting tell a noisy run from a quiet one:

- other processes' CPU time on the probe's cores (`foreign_cpu_s`): the busy time of those cores
  in /proc/stat (user, nice, system, irq, softirq, steal; `steal` is time the hypervisor gave the
  virtual CPU to someone else) less this process's own CPU time (os.times). Both are counted in
  clock ticks (10 ms, USER_HZ), so it is coarse: meaningful over a run of some 0.1 s and more;
- a thread's run-queue wait (`/proc/thread-self/schedstat`, second field: ns spent runnable but
  not running, CONFIG_SCHED_INFO). A thread alone on its cores waits only for other processes;
- the CPU a thread runs on, or last ran on if it sleeps (`/proc/<pid>/task/<tid>/stat`, field 39
  "processor", proc(5)): where the OS placed a woken thread (probe.py's waker_placements).

Readings that this kernel does not expose are None, never a guess. Seconds unless stated.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

_PROC_STAT = Path("/proc/stat")
_THREAD_SCHEDSTAT = Path("/proc/thread-self/schedstat")
_THREAD_STAT = Path("/proc/thread-self/stat")
_PROCESSOR_FIELD = 39  # proc(5): "processor", the CPU number last executed on (1-based fields)
# /proc/stat columns after the cpu name: user nice system idle iowait irq softirq steal ...
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)
# Below this many clock ticks of core capacity the tick counts say nothing about a window.
MIN_TICKS = 10


def _clock_ticks_per_s() -> int:
    return os.sysconf("SC_CLK_TCK")


def cpu_busy_ticks(cores: tuple[int, ...]) -> int | None:
    """Busy clock ticks of `cores` since boot (all processes), or None without /proc/stat."""
    try:
        lines = _PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{c}" for c in cores}
    total, seen = 0, 0
    for line in lines:
        fields = line.split()
        if fields and fields[0] in wanted:
            values = [int(v) for v in fields[1:]]
            total += sum(values[i] for i in _BUSY_COLUMNS if i < len(values))
            seen += 1
    return total if seen == len(wanted) else None


def thread_sched_ns() -> tuple[int, int] | None:
    """The calling thread's (time on a CPU, time runnable waiting for one), ns since it started;
    None where the kernel does not expose it."""
    try:
        run_ns, wait_ns, *_ = _THREAD_SCHEDSTAT.read_text().split()
        return int(run_ns), int(wait_ns)
    except (OSError, ValueError):
        return None


def processor_of(stat: str) -> int:
    """The "processor" field of a /proc/.../stat text: the CPU the task runs on, or last ran on."""
    # The command name (field 2) is in parentheses and may hold spaces: count after its end.
    return int(stat[stat.rindex(")") + 2:].split()[_PROCESSOR_FIELD - 3])


def thread_cpu() -> int | None:
    """The CPU the calling thread runs on; None where the kernel does not expose it."""
    try:
        return processor_of(_THREAD_STAT.read_text())
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class CpuSnapshot:
    """The counters at one moment, for `cores`."""

    cores: tuple[int, ...]
    wall_ns: int
    busy_ticks: int | None
    own_cpu_s: float

    @staticmethod
    def take(cores: tuple[int, ...]) -> CpuSnapshot:
        times = os.times()
        return CpuSnapshot(cores, time.perf_counter_ns(), cpu_busy_ticks(cores), times.user + times.system)


@dataclass(frozen=True)
class Contention:
    """Between two snapshots: wall time, this process's CPU time and other processes' CPU time on
    the same cores (None: not measurable here)."""

    cores: int
    wall_s: float
    own_cpu_s: float
    foreign_cpu_s: float | None

    @staticmethod
    def between(before: CpuSnapshot, after: CpuSnapshot) -> Contention:
        wall = (after.wall_ns - before.wall_ns) * 1e-9
        own = after.own_cpu_s - before.own_cpu_s
        foreign = None
        if before.busy_ticks is not None and after.busy_ticks is not None:
            busy = (after.busy_ticks - before.busy_ticks) / _clock_ticks_per_s()
            foreign = max(busy - own, 0.0)
        return Contention(len(before.cores), wall, own, foreign)

    @property
    def foreign_share(self) -> float | None:
        """Other processes' share of the cores' capacity (0: the cores were ours alone); None when
        not measurable: no /proc/stat, or a window under MIN_TICKS clock ticks of capacity."""
        if self.foreign_cpu_s is None or self.wall_s * self.cores * _clock_ticks_per_s() < MIN_TICKS:
            return None
        return self.foreign_cpu_s / (self.wall_s * self.cores)

    def __add__(self, other: Contention) -> Contention:
        known = self.foreign_cpu_s is not None and other.foreign_cpu_s is not None
        foreign = self.foreign_cpu_s + other.foreign_cpu_s if known else None
        return Contention(self.cores, self.wall_s + other.wall_s, self.own_cpu_s + other.own_cpu_s, foreign)
