"""The real-threads probe: native calls through PyDLL really keep the GIL and through CDLL really
release it, and runs record the intervals of the schedule. Orderings and counts only, never speed."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import sys
import threading

import pytest

from pathlib import Path

from infralab.agent.studies import load_hook
from infralab.kernels.host_probe.build import load
from infralab.kernels.host_probe.micro import python_work

# The GIL study's real-threads probe (its thread structure); the micro-probes are generic.
_threads = load_hook(Path(__file__).resolve().parents[2] / "experiments" / "gil_kv_transfer" / "threads.py")
GIL_WAIT, NATIVE_HOLD, NATIVE_RELEASE, PYTHON, STALLED = (_threads.GIL_WAIT, _threads.NATIVE_HOLD,
                                                         _threads.NATIVE_RELEASE, _threads.PYTHON, _threads.STALLED)
ProbeSchedule, microbenchmarks, run_probe, running_spans = (_threads.ProbeSchedule, _threads.microbenchmarks,
                                                            _threads.run_probe, _threads.running_spans)


@pytest.fixture(scope="module")
def libs():
    return load()


def _counter_during_call(lib) -> tuple[int, int]:
    """Another Python thread increments a counter; the native call reads it at its start and end."""
    counter, before, after = ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0)
    stop = threading.Event()
    started = threading.Event()

    def bump() -> None:
        started.set()
        while not stop.is_set():
            counter.value += 1

    t = threading.Thread(target=bump)
    t.start()
    started.wait()
    while counter.value == 0:
        pass
    try:
        lib.infralab_spin_observe(100_000_000, ctypes.byref(counter), ctypes.byref(before), ctypes.byref(after))
    finally:
        stop.set()
        t.join()
    return before.value, after.value


def test_a_pydll_call_blocks_other_python_threads(libs) -> None:
    before, after = _counter_during_call(libs.holding)
    assert after == before  # the other thread ran no bytecode while the call held the GIL


def test_a_cdll_call_lets_other_python_threads_run(libs) -> None:
    before, after = _counter_during_call(libs.releasing)
    assert after > before


def test_python_work_counts_units_and_stamps_every_slice() -> None:
    stamps: list[int] = []
    assert python_work(120, stamps) == 120
    assert len(stamps) == 3 and stamps == sorted(stamps)


def test_running_spans_cut_out_a_stalled_slice() -> None:
    stamps = [0, 10, 20, 30, 10_030, 10_040, 10_050]  # one slice took 10 us, the others 10 ns
    running, stalled = running_spans(stamps, stall_factor=8, min_stall_ns=1000)
    assert running == [(0, 30), (10_030, 10_050)]
    assert stalled == [(30, 10_030)]


@pytest.mark.parametrize("granularity", ["per_layer", "after_prefill"])
@pytest.mark.parametrize("holds", [True, False])
def test_a_probe_run_records_the_schedule(libs, granularity: str, holds: bool) -> None:
    sched = ProbeSchedule(steps=2, layers=3, launch_units=60, dispatch_ns=100_000, combine_ns=20_000,
                          blocks_per_chunk=100, chunk_bytes=64 << 10, granularity=granularity,
                          holds_gil=holds, native_wait="sleep")
    run = run_probe(sched, with_transfer=True, libs=libs)
    main = [iv for iv in run.intervals if iv.track == "thread/main"]
    mover = [iv for iv in run.intervals if iv.track == "thread/kv-transfer"]
    native = NATIVE_HOLD if holds else NATIVE_RELEASE
    assert sum(1 for iv in main if iv.name == native and iv.op == "dispatch") == 6
    assert sum(1 for iv in main if iv.name == native and iv.op == "combine") == 6
    assert sum(1 for iv in mover if iv.name == NATIVE_RELEASE and iv.op == "copy") == 6
    assert any(iv.name in (PYTHON, STALLED) and iv.op == "descriptors" for iv in mover)
    assert all(iv.start_ns <= iv.end_ns for iv in run.intervals)
    assert run.start_ns <= run.prefill_end_ns <= run.end_ns
    without = run_probe(sched, with_transfer=False, libs=libs)
    assert not any(iv.track == "thread/kv-transfer" for iv in without.intervals)


def test_microbenchmarks_measure_every_cost(libs) -> None:
    m = microbenchmarks(chunk_bytes=1 << 16, native_wait="sleep", repeats=3, libs=libs, blocks_per_chunk=200,
                        layer_ns=200_000)
    assert m.python_unit_s > 0 and m.copy_bytes_per_s > 0
    # The transfer thread's chunk timed alone in each schedule's pattern (seconds), none left out.
    assert [c.granularity for c in m.chunk_costs] == ["per_layer", "after_prefill"]
    assert all(0 < c.hold_s < 1.0 and 0 < c.copy_s < 1.0 and c.samples >= 2 for c in m.chunk_costs)
    assert m.chunk_cost("after_prefill") is m.chunk_costs[1] and m.chunk_cost("other") is None
    assert m.native_call_hold_s > 0 and m.native_call_release_s > 0
    assert m.switch_interval_s == sys.getswitchinterval()
    assert m.copy_cold_bytes_per_s > 0
    assert all(d >= 0 for d in m.wake_delay_samples_s) and list(m.wake_delay_samples_s) == sorted(m.wake_delay_samples_s)
    held = [h for h, _ in m.wake_delays_by_held_s]
    assert held == sorted(held) and all(samples and min(samples) >= 0 for _, samples in m.wake_delays_by_held_s)


def test_pinning_applies_to_threads_started_inside_and_is_undone() -> None:
    from infralab.kernels.host_probe.affinity import pinned, skip_reason, usable_cores

    before = usable_cores()
    seen: list[set[int]] = []
    with pinned(1) as chosen:
        assert chosen == before[:1] and os.sched_getaffinity(0) == set(chosen)
        t = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        t.start()
        t.join()
    assert seen == [set(before[:1])]  # the thread inherited the mask of the thread that started it
    assert usable_cores() == before
    assert skip_reason(len(before) + 1) is not None and "sched_getaffinity" in skip_reason(len(before) + 1)
    with pytest.raises(ValueError, match="may use"):
        with pinned(len(before) + 1):
            pass


def test_a_probe_run_on_one_core_keeps_both_threads_there(libs) -> None:
    # Long enough dispatches that chunks are built before the prefill ends.
    sched = ProbeSchedule(steps=1, layers=3, launch_units=20, dispatch_ns=1_000_000, combine_ns=10_000,
                          blocks_per_chunk=20, chunk_bytes=4 << 10, native_wait="sleep", cores=1, holds_gil=False)
    before = os.sched_getaffinity(0)
    run = run_probe(sched, with_transfer=True, libs=libs)
    assert any(iv.track == "thread/kv-transfer" for iv in run.intervals)
    assert os.sched_getaffinity(0) == before
    assert _threads.chunks_on_mains_cpu(run) == 1.0  # one CPU: every chunk is built on main's


def test_a_probe_run_with_own_cores_pins_each_thread_to_a_core_of_its_own(libs) -> None:
    from infralab.kernels.host_probe.affinity import skip_reason, usable_cores

    sched = ProbeSchedule(steps=1, layers=3, launch_units=20, dispatch_ns=1_000_000, combine_ns=10_000,
                          blocks_per_chunk=20, chunk_bytes=4 << 10, native_wait="sleep", cores=2, own_cores=True,
                          holds_gil=False)
    with pytest.raises(ValueError, match="own_cores needs cores >= 2"):
        run_probe(dataclasses.replace(sched, cores=1), with_transfer=True, libs=libs)
    if skip_reason(2) is not None:
        pytest.skip(skip_reason(2))
    before = os.sched_getaffinity(0)
    run = run_probe(sched, with_transfer=True, libs=libs)
    first, second = usable_cores()[:2]
    assert run.affinity == {"thread/main": (first,), "thread/kv-transfer": (second,)}
    assert {cpu for _, track, _, cpu in run.cpus if track == "thread/kv-transfer"} == {second}
    assert _threads.chunks_on_mains_cpu(run) == 0.0
    assert any(iv.track == "thread/kv-transfer" for iv in run.intervals)
    assert os.sched_getaffinity(0) == before  # the main thread's mask is restored
    shared = run_probe(dataclasses.replace(sched, own_cores=False), with_transfer=True, libs=libs)
    assert shared.affinity == {"thread/main": (first, second), "thread/kv-transfer": (first, second)}


def test_native_descriptors_run_as_one_releasing_call_per_chunk(libs) -> None:
    sched = ProbeSchedule(steps=1, layers=3, launch_units=20, dispatch_ns=50_000, combine_ns=10_000,
                          blocks_per_chunk=500, chunk_bytes=4 << 10, native_wait="sleep", holds_gil=False,
                          native_descriptors_ns=30_000)
    run = run_probe(sched, with_transfer=True, libs=libs)
    mover = [iv for iv in run.intervals if iv.track == "thread/kv-transfer" and iv.op == "descriptors"]
    calls = [iv for iv in mover if iv.name != GIL_WAIT]  # a releasing call may wait to get the GIL back
    assert [iv.name for iv in calls] == [NATIVE_RELEASE] * 3
    assert all(iv.end_ns - iv.start_ns >= 30_000 for iv in calls)


def test_waker_placements_record_where_a_woken_thread_runs(libs) -> None:
    from infralab.kernels.host_probe.affinity import skip_reason, usable_cores
    from infralab.kernels.host_probe.micro import placement_rule, placement_share, waker_placements

    if skip_reason(2) is not None:
        pytest.skip(skip_reason(2))
    before = os.sched_getaffinity(0)
    placements = waker_placements(libs, 4, cores=2, release_ns=2_000_000)
    assert os.sched_getaffinity(0) == before
    assert placements
    pinned_to = set(usable_cores()[:2])
    assert all({p.waker_cpu, p.prev_cpu, p.woken_cpu} <= pinned_to for p in placements)
    assert all(p.delay_s > 0 and p.run_delay_s >= 0 for p in placements)
    assert placement_share(placements) == sum(p.woken_cpu == p.waker_cpu for p in placements) / len(placements)
    assert placement_share(()) is None
    # The displaced releaser's CPU at the end of its call and its run-queue wait are read too.
    assert all(p.waker_end_cpu in pinned_to and (p.waker_wait_s is None or p.waker_wait_s >= 0) for p in placements)
    rule = placement_rule(placements)
    assert rule.trials_prev_waker + rule.trials_prev_other == len(placements)
    assert rule.pulled == len(rule.pull_delay_samples_s) == sum(p.waker_pulled for p in placements)
    for share in (rule.stay_with_waker, rule.to_idle_previous):
        assert share is None or 0 <= share <= 1


def test_a_placement_rule_is_measured_by_the_wakees_previous_cpu() -> None:
    from infralab.kernels.host_probe.micro import WakePlacement, placement_rule

    trials = (
        WakePlacement(0, 0, 0, 2e-3, 2e-3, 0, 1e-3),  # previous CPU the waker's: stayed there
        WakePlacement(0, 0, 0, 2e-3, 2e-3, 1, 3e-3),  # stayed; the displaced waker was pulled after 3 ms
        WakePlacement(0, 0, 1, 5e-5, 0.0, 0, 0.0),  # previous CPU the waker's: took the other one
        WakePlacement(0, 1, 1, 5e-5, 0.0, 0, 0.0),  # previous CPU the idle other one: ran there
    )
    rule = placement_rule(trials)
    assert (rule.stay_with_waker, rule.to_idle_previous) == (pytest.approx(2 / 3), 1.0)
    assert (rule.trials_prev_waker, rule.trials_prev_other, rule.pull_delay_samples_s) == (3, 1, (3e-3,))
    assert placement_rule(()).stay_with_waker is None


def test_start_placements_record_where_a_new_thread_and_a_sleeper_run(libs) -> None:
    from infralab.kernels.host_probe.affinity import skip_reason, usable_cores
    from infralab.kernels.host_probe.micro import start_placements

    if skip_reason(2) is not None:
        pytest.skip(skip_reason(2))
    before = os.sched_getaffinity(0)
    calls: list[int] = []
    trials = start_placements(libs, 3, cores=2, before=lambda: calls.append(1))
    assert os.sched_getaffinity(0) == before and len(trials) == 3 and len(calls) == 3
    pinned_to = set(usable_cores()[:2])
    for t in trials:
        assert {t.parent_cpu, t.child_cpu, t.spinner_cpu, t.sleeper_prev_cpu, t.sleeper_woken_cpu} <= pinned_to


def test_thread_starts_and_timer_wake_ups_are_measured_by_state() -> None:
    from infralab.kernels.host_probe.micro import StartPlacement, placement_rule

    starts = (
        StartPlacement(0, 0, 0, 0, 0),  # started on the parent's CPU; the parent woke there, busy
        StartPlacement(1, 1, 1, 1, 0),  # on the parent's CPU; the parent woke on the idle other one
        StartPlacement(0, 1, 1, 0, 0),  # on the other CPU; the parent's previous CPU idle
    )
    rule = placement_rule((), starts)
    assert rule.new_on_parent == pytest.approx(2 / 3) and rule.stay_on_busy_previous == 0.5
    assert (rule.trials_start, rule.trials_prev_busy) == (3, 2)
    assert placement_rule(()).new_on_parent is None and placement_rule(()).stay_on_busy_previous is None


def test_chunks_on_mains_cpu_follows_the_main_threads_last_cpu() -> None:
    run = _threads.ProbeRun(ProbeSchedule(), True, start_ns=0, prefill_end_ns=100)
    run.cpus[:] = [(1, "thread/main", "launch", 0), (2, "thread/kv-transfer", "descriptors", 0),
                   (3, "thread/main", "dispatch", 1), (4, "thread/kv-transfer", "descriptors", 0),
                   (5, "thread/kv-transfer", "copy", 1), (200, "thread/kv-transfer", "descriptors", 1)]
    assert _threads.chunks_on_mains_cpu(run) == 0.5  # the chunk after the prefill's end is not counted
    assert _threads.chunks_on_mains_cpu(_threads.ProbeRun(ProbeSchedule(), False)) is None
