"""Contention: other work on this machine's cores while a replay ran, seen from /proc and from the
replay's own steps.

On a 2-core machine another CPU-bound process makes the engine's torch (OpenMP) threads wait for a
core: some steps then take 10-30x as long, for tens of seconds, and latencies measured that way are
not the engine's (docs/fidelity.md). Nothing in a run's output used to say so. Two views, both cheap:

- **/proc** (psutil): a sampler thread reads the machine's CPU times and this process's own (all its
  threads) every `interval_s`; per window, other processes' share of the machine's cores is
  (machine busy - own) / (window x cores), and the hypervisor's steal is reported beside it. Which
  processes used the time is read once at the start and once at the end (the top few by CPU
  seconds in between, this process left out).
- **the steps**: each step's forward against the median forward of the replay's steps of its shape
  class (prefill or decode; query tokens, sequences and KV tokens read in power-of-two buckets); a
  step over SLOW_FACTOR x its class's median (classes of at least MIN_CLASS steps) is slow.

A replay is flagged when other processes held at least WINDOW_SHARE_LIMIT of the cores over any
SPAN_S of it (a 0.25 s blip of a kernel thread is not contention), OTHER_SHARE_LIMIT over the whole
replay, or more than SLOW_STEP_SHARE_LIMIT of its steps
were slow. The limits are set from first principles, not fitted: on 2 cores a process that holds
a fifth of the machine is 40 % of a core, enough to displace one of the engine's two threads for
whole steps; one step in fifty at 3x is the tail a p90 or p99 reads. A flagged replay's latencies
are still written, but the summary says so and the fidelity study leaves it out of its verdict.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

WINDOW_SHARE_LIMIT = 0.2  # other processes' share of the machine's cores over any SPAN_S of the replay
SPAN_S = 1.0  # a kernel thread's blip (kdamond: 0.15 s of CPU in a 0.25 s window) is not contention
OTHER_SHARE_LIMIT = 0.1  # ... over the whole replay
SLOW_FACTOR = 3.0  # a step this many times its shape class's median forward is slow
MIN_CLASS = 5  # steps a shape class needs before its median is trusted
SLOW_STEP_SHARE_LIMIT = 0.02  # share of the replay's steps that may be slow
TOP_PROCESSES = 3


@dataclass(frozen=True, slots=True)
class CpuSample:
    """Cumulative CPU seconds at one instant (`t_s`: perf_counter): the machine's busy and steal
    time over all cores, its total, and this process's own (user + system, all threads)."""

    t_s: float
    busy_s: float
    steal_s: float
    total_s: float
    own_s: float


@dataclass(frozen=True, slots=True)
class Window:
    """One sampling window (seconds from the replay's origin) and what other work held in it, as
    shares of the machine's cores (0 = none, 1 = every core)."""

    start_s: float
    end_s: float
    other_share: float
    steal_share: float


@dataclass(frozen=True, slots=True)
class Contention:
    """What the replay shared its machine with (module docstring). Shares are of the machine's
    cores; `slow_steps` are step indices; `processes` are the top other processes by CPU seconds."""

    cores: int
    windows: tuple[Window, ...]
    other_share: float
    steal_share: float
    slow_steps: tuple[int, ...]
    steps: int
    processes: tuple[dict[str, Any], ...] = ()
    reasons: tuple[str, ...] = field(default=())

    @property
    def flagged(self) -> bool:
        return bool(self.reasons)

    @property
    def max_window_share(self) -> float:
        return max((w.other_share for w in self.windows), default=0.0)

    def as_dict(self) -> dict[str, Any]:
        return {"flagged": self.flagged, "reasons": list(self.reasons), "cores": self.cores,
                "other_share": self.other_share, "max_window_other_share": self.max_window_share,
                "steal_share": self.steal_share, "slow_steps": len(self.slow_steps), "steps": self.steps,
                "slow_step_indices": list(self.slow_steps), "processes": list(self.processes),
                "windows": [{"start_s": w.start_s, "end_s": w.end_s, "other_share": w.other_share,
                             "steal_share": w.steal_share} for w in self.windows],
                "limits": {"window_other_share": WINDOW_SHARE_LIMIT, "window_s": SPAN_S, "other_share": OTHER_SHARE_LIMIT,
                           "slow_factor": SLOW_FACTOR, "slow_step_share": SLOW_STEP_SHARE_LIMIT}}

    def line(self) -> str:
        """One line for a run's printed summary."""
        seen = (f"other processes {self.other_share:.0%} of {self.cores} cores over the replay "
                f"(most in one window {self.max_window_share:.0%}), steal {self.steal_share:.0%}, "
                f"{len(self.slow_steps)} of {self.steps} steps over {SLOW_FACTOR:g}x their shape's median")
        if not self.flagged:
            return f"none seen: {seen}"
        who = ", ".join(f"{p['name']} (pid {p['pid']}) {p['cpu_s']:.1f} s" for p in self.processes)
        return f"YES, these latencies are not the engine's alone: {'; '.join(self.reasons)} [{seen}]" + (
            f"; busiest: {who}" if who else "")


def cpu_sample() -> CpuSample:
    """The machine's and this process's cumulative CPU seconds now (psutil, /proc on Linux)."""
    import psutil

    m = psutil.cpu_times()
    steal = getattr(m, "steal", 0.0)
    guest = getattr(m, "guest", 0.0) + getattr(m, "guest_nice", 0.0)  # already inside user and nice
    total = sum(m) - guest
    idle = m.idle + getattr(m, "iowait", 0.0)
    own = psutil.Process().cpu_times()
    return CpuSample(time.perf_counter(), total - idle - steal, steal, total, own.user + own.system)


def process_cpu() -> dict[int, tuple[str, float]]:
    """pid -> (name, cumulative CPU seconds) of every process that can be read, this one left out."""
    import psutil

    me, out = psutil.Process().pid, {}
    for proc in psutil.process_iter(["name", "cpu_times"]):
        times = proc.info.get("cpu_times")
        if proc.pid != me and times is not None:
            out[proc.pid] = (proc.info.get("name") or "?", times.user + times.system)
    return out


class CpuSampler:
    """Samples `cpu_sample()` every `interval_s` in a daemon thread while entered (one sample at
    entry and one at exit as well); the thread only reads /proc, so it holds the GIL for
    microseconds per sample."""

    def __init__(self, interval_s: float = 0.25) -> None:
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise ValueError(f"interval_s must be a positive number, got {interval_s!r}")
        self.interval_s = interval_s
        self.samples: list[CpuSample] = []
        self.processes_before: dict[int, tuple[str, float]] = {}
        self.processes_after: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> CpuSampler:
        self.processes_before = process_cpu()
        self.samples.append(cpu_sample())
        self._thread = threading.Thread(target=self._run, name="infralab-cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(cpu_sample())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.samples.append(cpu_sample())
        self.processes_after = process_cpu()


def window(a: CpuSample, b: CpuSample, origin: float) -> Window | None:
    """What other work held between two samples (seconds from `origin`, a perf_counter value), or
    None when the machine's CPU total did not advance between them (its clock tick is coarser)."""
    total = b.total_s - a.total_s
    if total <= 0:
        return None
    other = max(0.0, (b.busy_s - a.busy_s) - (b.own_s - a.own_s))
    return Window(a.t_s - origin, b.t_s - origin, min(1.0, other / total), (b.steal_s - a.steal_s) / total)


def windows(samples: Sequence[CpuSample], origin: float) -> tuple[Window, ...]:
    """Consecutive samples as windows; a window whose machine total did not advance is merged into
    the next."""
    out, start = [], 0
    for i in range(1, len(samples)):
        if (w := window(samples[start], samples[i], origin)) is not None:
            out.append(w)
            start = i
    return tuple(out)


def sustained(samples: Sequence[CpuSample], origin: float, span_s: float = SPAN_S) -> tuple[Window, ...]:
    """From each sample, the shortest run of samples covering at least `span_s` seconds, as one
    window: other processes' share over that span (overlapping; what the rule judges)."""
    out = []
    for i, a in enumerate(samples):
        j = next((j for j in range(i + 1, len(samples)) if samples[j].t_s - a.t_s >= span_s), None)
        if j is None:
            break
        if (w := window(a, samples[j], origin)) is not None:
            out.append(w)
    return tuple(out)


def busiest(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
            top: int = TOP_PROCESSES, min_cpu_s: float = 0.01) -> tuple[dict[str, Any], ...]:
    """The `top` processes by CPU seconds between two `process_cpu()` reads (new ones from 0)."""
    used = [(cpu - before.get(pid, (name, 0.0))[1], pid, name) for pid, (name, cpu) in after.items()]
    used = sorted((u for u in used if u[0] >= min_cpu_s), reverse=True)[:top]
    return tuple({"pid": pid, "name": name, "cpu_s": round(cpu, 3)} for cpu, pid, name in used)


def _bucket(n: int | None) -> int:
    return -1 if n is None else (0 if n <= 0 else int(math.log2(n)))


def slow_steps(steps: Sequence[Any]) -> tuple[int, ...]:
    """Indices of the steps whose forward took over SLOW_FACTOR x the median of their shape class
    (`StepRecord`s: prefill or decode; query tokens, sequences, KV tokens read in power-of-two
    buckets); classes under MIN_CLASS steps are not judged."""
    classes: dict[tuple[int, ...], list[Any]] = {}
    for s in steps:
        b = s.batch
        key = (int(bool(b.prefill_tokens)), _bucket(b.q_tokens), _bucket(b.seqs), _bucket(b.kv_tokens_read))
        classes.setdefault(key, []).append(s)
    slow = []
    for members in classes.values():
        if len(members) < MIN_CLASS:
            continue
        median = statistics.median(s.forward_s for s in members)
        slow += [s.index for s in members if s.forward_s > SLOW_FACTOR * median]
    return tuple(sorted(slow))


def judge(samples: Sequence[CpuSample], steps: Sequence[Any], origin: float, cores: int,
          processes: tuple[dict[str, Any], ...] = ()) -> Contention:
    """The replay's contention from its CPU samples and its steps (module docstring's rule)."""
    wins = windows(samples, origin)
    whole = window(samples[0], samples[-1], origin) if len(samples) > 1 else None
    other, steal = (whole.other_share, whole.steal_share) if whole is not None else (0.0, 0.0)
    slow = slow_steps(steps)
    reasons = []
    worst = max(sustained(samples, origin), key=lambda w: w.other_share, default=None)
    if worst is not None and worst.other_share >= WINDOW_SHARE_LIMIT:
        reasons.append(f"other processes held {worst.other_share:.0%} of the cores in "
                       f"{worst.start_s:.2f}-{worst.end_s:.2f} s (limit {WINDOW_SHARE_LIMIT:.0%} over {SPAN_S:g} s)")
    if other >= OTHER_SHARE_LIMIT:
        reasons.append(f"other processes held {other:.0%} of the cores over the replay (limit {OTHER_SHARE_LIMIT:.0%})")
    if steps and len(slow) / len(steps) > SLOW_STEP_SHARE_LIMIT:
        reasons.append(f"{len(slow)} of {len(steps)} steps took over {SLOW_FACTOR:g}x their shape's median "
                       f"(limit {SLOW_STEP_SHARE_LIMIT:.0%} of steps)")
    return Contention(cores, wins, other, steal, slow, len(steps), processes if reasons else (), tuple(reasons))


def machine_cores() -> int:
    """Logical CPUs of the machine (the shares above are of all of them)."""
    import psutil

    return psutil.cpu_count(logical=True) or 1
