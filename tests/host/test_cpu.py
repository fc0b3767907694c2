"""CPU cores in the host model, against hand-worked schedules (processor sharing, see cpu.py)."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.sim.host.cpu import Cpu
from infralab.sim.host.gil import Gil, GilParams
from infralab.sim.host.thread import HostThread
from infralab.sim.records import Interval

MS = 1e-3


def _threads(cores: int | None, names: tuple[str, ...], with_cpu: bool = True):
    env = simpy.Environment()
    gil = Gil(env, GilParams(switch_interval_s=5 * MS))
    cpu = Cpu(env, cores) if with_cpu else None
    intervals: list[Interval] = []
    return env, cpu, intervals, [HostThread(env, n, gil, intervals, cpu) for n in names]


def _run(env, programs) -> dict[str, float]:
    """Start each (thread, program) pair; returns each thread's finish time (ms)."""
    ends: dict[str, float] = {}

    def body(thread, program):
        yield from program(thread)
        thread.finish()
        ends[thread.name] = env.now / MS

    for thread, program in programs:
        env.process(body(thread, program))
    env.run()
    return ends


def _compute(ms: float):
    return lambda t: t.native(ms * MS, holds_gil=False, label="copy", busy=True)


def test_two_cpu_bound_threads_on_one_core_take_twice_as_long() -> None:
    env, cpu, _, (a, b) = _threads(1, ("a", "b"))
    ends = _run(env, [(a, _compute(10)), (b, _compute(10))])
    assert ends == pytest.approx({"a": 20.0, "b": 20.0})
    assert cpu.busy_core_s == pytest.approx(20 * MS)
    assert cpu.core_wait_s == pytest.approx({"a": 10 * MS, "b": 10 * MS})


def test_on_two_cores_the_same_threads_run_side_by_side() -> None:
    env, _, _, (a, b) = _threads(2, ("a", "b"))
    assert _run(env, [(a, _compute(10)), (b, _compute(10))]) == pytest.approx({"a": 10.0, "b": 10.0})


def test_a_thread_blocked_on_the_gil_frees_its_core() -> None:
    # a holds the GIL in a 10 ms computing native call; b waits for the GIL (no core); c computes
    # 10 ms with the GIL released. Two cores are enough for a and c: both end at 10 ms. Were b
    # holding a core, three runnable threads on two cores would stretch a and c to 15 ms.
    env, cpu, intervals, (a, b, c) = _threads(2, ("a", "b", "c"))
    ends = _run(env, [
        (a, lambda t: t.native(10 * MS, holds_gil=True, label="dispatch", busy=True)),
        (b, lambda t: t.python(1 * MS, "launch")),
        (c, _compute(10)),
    ])
    calls = {iv.track: (iv.start_s / MS, iv.end_s / MS) for iv in intervals if iv.name.startswith("native")}
    assert calls == {"thread/a": pytest.approx((0.0, 10.0)), "thread/c": pytest.approx((0.0, 10.0))}
    # b asked for a drop at 5 ms; a drops the GIL when its call returns and b runs its 1 ms alone.
    assert ends["b"] == pytest.approx(11.0)
    assert cpu.core_wait_s == {}


def test_a_blocking_native_call_holds_no_core() -> None:
    env, _, _, (a, b) = _threads(1, ("a", "b"))
    ends = _run(env, [(a, lambda t: t.native(10 * MS, holds_gil=False, label="sleep", busy=False)), (b, _compute(10))])
    assert ends == pytest.approx({"a": 10.0, "b": 10.0})


def test_a_spin_takes_a_share_but_its_event_decides_when_it_returns() -> None:
    # On one core: a polls for 10 ms (device time); b's 10 ms of work gets half the core meanwhile.
    env, _, _, (a, b) = _threads(1, ("a", "b"))
    ends = _run(env, [
        (a, lambda t: t.native_until(lambda: t.env.timeout(10 * MS), holds_gil=False, label="dispatch", busy=True)),
        (b, _compute(10)),
    ])
    assert ends == pytest.approx({"a": 10.0, "b": 15.0})


def test_python_under_a_forced_gil_switch_keeps_its_unfinished_work() -> None:
    # Two Python threads on one core: the GIL lets one run at a time, so the core is never shared
    # and the schedule is the GIL's alone (5 ms slices, 20 ms each, 40 ms in all).
    env, cpu, _, (a, b) = _threads(1, ("a", "b"))
    ends = _run(env, [(a, lambda t: t.python(20 * MS)), (b, lambda t: t.python(20 * MS))])
    assert ends == pytest.approx({"a": 35.0, "b": 40.0})
    assert cpu.busy_core_s == pytest.approx(40 * MS)


def _mixed(t: HostThread):
    yield from t.python(2 * MS, "launch")
    yield from t.native(3 * MS, holds_gil=True, label="dispatch", busy=True)
    yield from t.native(4 * MS, holds_gil=False, label="copy", busy=True)
    yield from t.native_until(lambda: t.env.timeout(1 * MS), holds_gil=False, label="poll", busy=True)
    yield from t.python(7 * MS, "descriptors")


def test_with_as_many_cores_as_threads_nothing_changes() -> None:
    names = ("a", "b", "c")
    schedules = []
    for cores, with_cpu in ((None, False), (3, True), (8, True)):
        env, _, intervals, threads = _threads(cores, names, with_cpu)
        ends = _run(env, [(t, _mixed) for t in threads])
        schedules.append((ends, [(iv.track, iv.name, round(iv.start_s, 12), round(iv.end_s, 12)) for iv in intervals]))
    assert schedules[1] == schedules[0]
    assert schedules[2] == schedules[0]


@settings(max_examples=60, deadline=None)
@given(
    cores=st.integers(1, 4),
    jobs=st.lists(st.tuples(st.floats(0, 5), st.floats(0.01, 5)), min_size=1, max_size=8),
)
def test_processor_sharing_conserves_work(cores: int, jobs: list[tuple[float, float]]) -> None:
    """Busy core-time equals the work done; nobody beats running alone; no core idles while
    work waits (the last finish is at most the last start plus all work spread over the cores,
    plus the longest job, a work-conserving schedule's bound)."""
    env = simpy.Environment()
    cpu = Cpu(env, cores)
    finish: list[tuple[float, float]] = []

    def job(start: float, work: float):
        yield env.timeout(start)
        yield cpu.compute("t", work).done
        finish.append((work, env.now - start))

    for start, work in jobs:
        env.process(job(start, work))
    env.run()
    works = [w for _, w in jobs]
    assert cpu.busy_core_s == pytest.approx(sum(works), rel=1e-9)
    assert len(finish) == len(jobs)
    assert all(took >= work * (1 - 1e-9) for work, took in finish)
    assert env.now <= max(s for s, _ in jobs) + sum(works) / cores + max(works) + 1e-9
    assert env.now >= sum(works) / cores * (1 - 1e-9)
    assert cpu.runnable == 0
