"""The probe's noise reading: other processes' CPU time on its cores and its threads' run-queue
waits (kernels/host_probe/contention.py). Arithmetic on hand-made snapshots, and the shape of what
a real run records; never how much it is."""

from __future__ import annotations

from pathlib import Path

import os

import pytest

from infralab.kernels.host_probe.contention import (
    MIN_TICKS,
    Contention,
    CpuSnapshot,
    cpu_busy_ticks,
    processor_of,
    thread_cpu,
    thread_sched_ns,
)
from infralab.agent.studies import load_hook

_threads = load_hook(Path(__file__).resolve().parents[2] / "experiments" / "gil_kv_transfer" / "threads.py")
ProbeSchedule, run_probe = _threads.ProbeSchedule, _threads.run_probe

TICK = 1 / os.sysconf("SC_CLK_TCK")


def _snap(wall_s: float, busy_ticks: int | None, own_s: float, cores: tuple[int, ...] = (0,)) -> CpuSnapshot:
    return CpuSnapshot(cores, round(wall_s * 1e9), busy_ticks, own_s)


def test_others_cpu_time_is_the_cores_busy_time_less_our_own() -> None:
    # One core for 1 s: 80 ticks busy, of which 0.3 s ours: others ran 0.8 - 0.3 = 0.5 s, half the core.
    got = Contention.between(_snap(0.0, 1000, 2.0), _snap(1.0, 1000 + round(0.8 / TICK), 2.3))
    assert got.foreign_cpu_s == pytest.approx(0.5)
    assert got.foreign_share == pytest.approx(0.5)


def test_the_share_is_per_core_and_never_negative() -> None:
    two = (0, 1)
    got = Contention.between(_snap(0.0, 0, 0.0, two), _snap(1.0, round(0.5 / TICK), 0.5, two))
    assert got.foreign_cpu_s == 0.0 and got.foreign_share == 0.0
    ours_charged_late = Contention.between(_snap(0.0, 0, 0.0, two), _snap(1.0, 0, 0.2, two))  # tick rounding
    assert ours_charged_late.foreign_cpu_s == 0.0
    busy = Contention.between(_snap(0.0, 0, 0.0, two), _snap(1.0, round(1.0 / TICK), 0.0, two))
    assert busy.foreign_share == pytest.approx(0.5)  # one of the two cores' capacity


def test_a_window_too_short_for_the_tick_counts_or_without_proc_stat_is_not_measurable() -> None:
    short = (MIN_TICKS - 1) * TICK
    assert Contention.between(_snap(0.0, 0, 0.0), _snap(short, 0, 0.0)).foreign_share is None
    assert Contention.between(_snap(0.0, None, 0.0), _snap(1.0, None, 0.0)).foreign_share is None


def test_two_windows_add_up() -> None:
    a = Contention(1, 0.5, 0.1, 0.2)
    b = Contention(1, 0.5, 0.1, 0.0)
    assert (a + b) == Contention(1, 1.0, pytest.approx(0.2), pytest.approx(0.2))
    assert (a + Contention(1, 0.5, 0.1, None)).foreign_cpu_s is None


def test_an_unknown_core_has_no_reading() -> None:
    assert cpu_busy_ticks((10_000,)) is None


@pytest.mark.skipif(thread_sched_ns() is None, reason="no /proc/thread-self/schedstat here")
def test_a_probe_run_records_its_contention_and_its_threads_run_queue_waits() -> None:
    sched = ProbeSchedule(steps=1, layers=2, launch_units=20, dispatch_ns=50_000, combine_ns=10_000,
                          blocks_per_chunk=20, chunk_bytes=4 << 10, native_wait="sleep", cores=1)
    run = run_probe(sched, with_transfer=True)
    assert run.contention is not None and run.contention.cores == 1
    assert run.contention.wall_s >= run.prefill_s  # the window holds the run (and the readings)
    assert set(run.runqueue_wait_s) == {"thread/main", "thread/kv-transfer"}
    assert all(w is not None and w >= 0 for w in run.runqueue_wait_s.values())


def test_the_processor_field_is_counted_after_a_command_name_with_spaces() -> None:
    # proc(5): field 39 is "processor"; field 2, the command in parentheses, may hold spaces.
    fields = [str(i) for i in range(3, 53)]
    fields[39 - 3] = "7"
    assert processor_of("1234 (a b) c) " + " ".join(fields)) == 7


def test_the_calling_thread_runs_on_one_of_its_cores() -> None:
    cpu = thread_cpu()
    assert cpu is None or cpu in os.sched_getaffinity(0)
