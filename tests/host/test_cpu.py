"""CPU cores in the host model, against hand-worked schedules (round-robin, 4 ms quantum; cpu.py)."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.metrics.records import Interval
from infralab.sim.host.cpu import Cpu, Placement
from infralab.sim.host.gil import Gil, GilParams
from infralab.sim.host.thread import HostThread

MS = 1e-3


def _threads(cores: int | None, names: tuple[str, ...], with_cpu: bool = True):
    env = simpy.Environment()
    cpu = Cpu(env, cores) if with_cpu else None
    gil = Gil(env, GilParams(switch_interval_s=5 * MS), cpu=cpu)
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
    # Alternating 4 ms slices: a 0-4, b 4-8, a 8-12, b 12-16, a 16-18 (done), b 18-20 (done).
    env, cpu, _, (a, b) = _threads(1, ("a", "b"))
    ends = _run(env, [(a, _compute(10)), (b, _compute(10))])
    assert ends == pytest.approx({"a": 18.0, "b": 20.0})
    assert cpu.busy_core_s == pytest.approx(20 * MS)
    assert cpu.core_wait_s == pytest.approx({"a": 8 * MS, "b": 10 * MS})


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


def test_a_blocking_native_call_holds_no_core_but_waking_up_needs_one() -> None:
    # a sleeps 10 ms (no core); b computes 20 ms on the one core meanwhile. a wakes at 10 ms but
    # b's quantum runs to 12 ms: a returns from its call at 12, then b finishes its last 8 ms.
    env, cpu, intervals, (a, b) = _threads(1, ("a", "b"))
    ends = _run(env, [(a, lambda t: t.native(10 * MS, holds_gil=False, label="sleep", busy=False)), (b, _compute(20))])
    sleep = next(iv for iv in intervals if iv.track == "thread/a")
    assert (sleep.start_s / MS, sleep.end_s / MS) == pytest.approx((0.0, 12.0))
    assert ends == pytest.approx({"a": 12.0, "b": 20.0})
    assert cpu.core_wait_s == pytest.approx({"a": 2 * MS})


def test_a_spin_holds_its_core_in_turns_and_its_event_decides_when_it_returns() -> None:
    # On one core: a polls 10 ms of device time, b has 10 ms of work. a 0-4, b 4-8, a 8-10 (its
    # event fires at 10: it returns), b 10-16.
    env, _, _, (a, b) = _threads(1, ("a", "b"))
    ends = _run(env, [
        (a, lambda t: t.native_until(lambda: t.env.timeout(10 * MS), holds_gil=False, label="dispatch", busy=True)),
        (b, _compute(10)),
    ])
    assert ends == pytest.approx({"a": 10.0, "b": 16.0})


def test_python_threads_on_one_core_take_turns_by_the_gil() -> None:
    # a runs; b needs the core even to ask for the GIL: it gets it when a's quantum ends (4 ms),
    # asks, blocks, and requests a drop 5 ms later (9 ms); then 5 ms GIL slices. 40 ms of work.
    env, cpu, intervals, (a, b) = _threads(1, ("a", "b"))
    ends = _run(env, [(a, lambda t: t.python(20 * MS)), (b, lambda t: t.python(20 * MS))])
    first_wait = next(iv for iv in intervals if iv.track == "thread/b")
    assert first_wait.name == "gil-wait"
    assert (first_wait.start_s / MS, first_wait.end_s / MS) == pytest.approx((4.0, 9.0))
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
    quantum_ms=st.sampled_from([0.5, 4.0]),
    jobs=st.lists(st.tuples(st.floats(0, 5), st.floats(0.01, 5)), min_size=1, max_size=8),
)
def test_round_robin_conserves_work(cores: int, quantum_ms: float, jobs: list[tuple[float, float]]) -> None:
    """Busy core-time equals the work done; nobody beats running alone; no core idles while
    work waits (the last finish is at most the last start plus all work spread over the cores,
    plus the longest job: a work-conserving schedule's bound); no thread loses its core before a
    whole quantum on it (preemptions at most total work / quantum)."""
    env = simpy.Environment()
    cpu = Cpu(env, cores, quantum_s=quantum_ms * MS)
    finish: list[tuple[float, float]] = []

    def job(name: str, start: float, work: float):
        yield env.timeout(start)
        yield cpu.run(name)
        yield cpu.compute(name, work)
        cpu.block(name)
        finish.append((work, env.now - start))

    for i, (start, work) in enumerate(jobs):
        env.process(job(f"t{i}", start, work))
    env.run()
    works = [w for _, w in jobs]
    assert cpu.busy_core_s == pytest.approx(sum(works), rel=1e-9)
    assert len(finish) == len(jobs)
    assert all(took >= work * (1 - 1e-9) for work, took in finish)
    assert env.now <= max(s for s, _ in jobs) + sum(works) / cores + max(works) + 1e-9
    assert env.now >= sum(works) / cores * (1 - 1e-9)
    assert cpu.runnable == 0
    assert cpu.preemptions <= sum(works) / (quantum_ms * MS) + 1e-9


@pytest.mark.parametrize(("delay_ms", "woken_ms"), [(0.0, 10.0), (1.0, 11.0), (5.0, 12.0)])
def test_a_woken_thread_preempts_after_a_drawn_wake_up_delay_or_at_the_quantum_end(delay_ms, woken_ms) -> None:
    # As test_a_blocking_native_call...: a wakes at 10 ms on b's busy core. A wake-up delay of 0
    # gives it the core at once, 1 ms at 11 ms; 5 ms would be after b's quantum ends (12 ms).
    env = simpy.Environment()
    cpu = Cpu(env, 1, 4 * MS, wake_delay_samples_s=(delay_ms * MS,), rng=np.random.default_rng(0))
    gil = Gil(env, GilParams(switch_interval_s=5 * MS), cpu=cpu)
    intervals: list[Interval] = []
    a, b = HostThread(env, "a", gil, intervals, cpu), HostThread(env, "b", gil, intervals, cpu)
    ends = _run(env, [(a, lambda t: t.native(10 * MS, holds_gil=False, label="sleep", busy=False)), (b, _compute(20))])
    assert ends["a"] == pytest.approx(woken_ms)
    assert ends["b"] == pytest.approx(20.0)
    assert cpu.busy_core_s == pytest.approx(20 * MS)


def test_a_wake_up_does_not_preempt_a_holder_inside_its_slice() -> None:
    # One core. b gets it at 0 for 5 ms of work; a, woken at 0.5 ms, may preempt at once (delay 0)
    # but b's 1.5 ms slice is protected: a runs at 1.5 ms, for its 1 ms; b finishes at 6 ms.
    env = simpy.Environment()
    cpu = Cpu(env, 1, 4 * MS, wake_delay_samples_s=(0.0,), rng=np.random.default_rng(0), slice_s=1.5 * MS)
    ends: dict[str, float] = {}

    def job(name: str, start: float, work: float):
        yield env.timeout(start)
        yield cpu.run(name)
        yield cpu.compute(name, work)
        cpu.block(name)
        ends[name] = env.now / MS

    env.process(job("b", 0.0, 5 * MS))
    env.process(job("a", 0.5 * MS, 1 * MS))
    env.run()
    assert ends == pytest.approx({"a": 2.5, "b": 6.0})
    assert cpu.core_wait_s == pytest.approx({"a": 1 * MS, "b": 1 * MS})


@pytest.mark.parametrize(("woken_ms", "a_ends_ms"), [(0.5, 1.5), (2.5, 5.0)])
def test_a_wake_up_delay_is_drawn_by_how_long_the_holder_has_had_its_core(woken_ms, a_ends_ms) -> None:
    # One core; b has it from 0 for 10 ms of work. Measured: a holder younger than 2 ms is
    # preempted at once, an older one after 3 ms. a woken at 0.5 ms runs at once (ends at 1.5 ms);
    # a woken at 2.5 ms would wait until 5.5 ms, but b's quantum ends at 4 ms: a runs 4-5 ms.
    # Either way b finishes at 11 ms (its 10 ms plus a's 1 ms).
    env = simpy.Environment()
    cpu = Cpu(env, 1, 4 * MS, rng=np.random.default_rng(0),
              wake_delays_by_held_s=((0.0, (0.0,)), (2 * MS, (3 * MS,))))
    ends: dict[str, float] = {}

    def job(name: str, start: float, work: float):
        yield env.timeout(start)
        yield cpu.run(name)
        yield cpu.compute(name, work)
        cpu.block(name)
        ends[name] = env.now / MS

    env.process(job("b", 0.0, 10 * MS))
    env.process(job("a", woken_ms * MS, 1 * MS))
    env.run()
    assert ends == pytest.approx({"a": a_ends_ms, "b": 11.0})


def test_wake_delays_by_holder_age_must_be_ascending_and_non_empty() -> None:
    env = simpy.Environment()
    with pytest.raises(ValueError):
        Cpu(env, 1, wake_delays_by_held_s=((2 * MS, (0.0,)), (0.0, (0.0,))))
    with pytest.raises(ValueError):
        Cpu(env, 1, wake_delays_by_held_s=((0.0, ()),))


@pytest.mark.parametrize(("waker_ms", "ends_ms"), [((), {"m": 3.0, "t": 5.0}), ((2.0,), {"m": 5.0, "t": 4.0})])
def test_a_gil_waiter_woken_by_the_cores_holder_waits_and_the_holder_barges_back(waker_ms, ends_ms) -> None:
    # One core. m sleeps 0-0.5 ms, t takes the GIL and runs 2 ms of Python. m, woken by its timer
    # (by-held delay 0), takes the core at 0.5 ms, finds the GIL taken and blocks again; t goes on.
    # At 2 ms t releases the GIL for a 1 ms copy and so wakes m.
    # - Without the waker rule m preempts t at once: m's Python 2-3 ms; t's copy 3-4, Python 4-5.
    # - With it (measured: woken by the holder, 2 ms later) m waits; t's copy ends at 3 ms, the
    #   GIL is free and t takes it back (a barge), runs its Python 3-4 ms and ends; m runs 4-5 ms.
    env = simpy.Environment()
    cpu = Cpu(env, 1, 4 * MS, rng=np.random.default_rng(0), wake_delays_by_held_s=((0.0, (0.0,)),),
              waker_delay_samples_s=tuple(w * MS for w in waker_ms))
    gil = Gil(env, GilParams(switch_interval_s=5 * MS), cpu=cpu)
    intervals: list[Interval] = []
    m, t = HostThread(env, "m", gil, intervals, cpu), HostThread(env, "t", gil, intervals, cpu)
    ends = _run(env, [
        (m, lambda th: _seq(th.native(0.5 * MS, holds_gil=False, label="sleep", busy=False), th.python(1 * MS))),
        (t, lambda th: _seq(th.python(2 * MS), _compute(1)(th), th.python(1 * MS))),
    ])
    assert ends == pytest.approx(ends_ms)
    assert gil.barges == (1 if waker_ms else 0)


def _seq(*segments):
    for segment in segments:
        yield from segment


def test_a_thread_woken_by_a_core_holder_preempts_it_after_the_waker_delay_or_the_quantum_end() -> None:
    # One core; b computes 10 ms from 0 and at 1 ms wakes a (1 ms of work). Woken by b, a waits a
    # drawn 2 ms: it runs 3-4 ms; with 5 ms b's quantum ends first (4 ms): a runs 4-5 ms.
    for delay_ms, a_end in ((2.0, 4.0), (5.0, 5.0)):
        assert _woken_by_a_computing_waker(1, None, delay_ms) == pytest.approx({"a": a_end, "b": 11.0})


def _woken_by_a_computing_waker(cores: int, a_ran_first: bool | None, delay_ms: float,
                                placement: Placement | None = Placement()) -> dict[str, float]:
    """b computes 10 ms and at 1 ms wakes a (1 ms of work); finish times (ms). `a_ran_first`:
    a ran 0-0.2 ms before b started at 0.5 ms (so b takes the core a left: a's previous core is
    b's); False: a and b both ran from 0 (a on its own core); None: a never ran before."""
    env = simpy.Environment()
    cpu = Cpu(env, cores, 4 * MS, rng=np.random.default_rng(0), wake_delays_by_held_s=((0.0, (0.0,)),),
              waker_delay_samples_s=(delay_ms * MS,), placement=placement)
    ends: dict[str, float] = {}
    b_start = 0.5 * MS if a_ran_first else 0.0

    def b():
        yield env.timeout(b_start)
        yield cpu.run("b")
        yield cpu.compute("b", 10 * MS - b_start)
        cpu.block("b")
        ends["b"] = env.now / MS

    def a():
        if a_ran_first is not None:
            if a_ran_first is False:
                yield env.timeout(0)  # b takes core 0 first
            yield cpu.run("a")
            yield cpu.compute("a", 0.2 * MS)
            cpu.block("a")
        yield env.timeout(1 * MS - env.now)
        yield cpu.run("a", waker="b")
        yield cpu.compute("a", 1 * MS)
        cpu.block("a")
        ends["a"] = env.now / MS

    env.process(b())
    env.process(a())
    env.run()
    return ends


@pytest.mark.parametrize(("delay_ms", "a_end", "b_end"), [(2.0, 4.0, 11.0), (5.0, 5.5, 11.0)])
def test_a_thread_whose_previous_core_is_its_wakers_waits_there_though_a_core_is_free(delay_ms, a_end, b_end) -> None:
    # Two cores. a ran 0-0.2 ms on core 0; b started at 0.5 ms on core 0 (the lowest free one) and
    # computes 9.5 ms. Woken by b at 1 ms, a's previous core is b's: a is queued there although
    # core 1 idles (select_idle_sibling returns the busy target), and runs as on one core: after
    # the drawn waker delay (2 ms: 3-4 ms) or at b's quantum end (0.5 + 4 = 4.5 ms: 4.5-5.5 ms).
    # b, displaced, stays queued on core 0 (no pull within a quantum) and takes it back when a
    # blocks: it loses 1 ms, as on one core.
    ends = _woken_by_a_computing_waker(2, True, delay_ms)
    assert ends == pytest.approx({"a": a_end, "b": b_end})
    # Without the placement rule a takes the free core at once: 1-2 ms, and b loses nothing.
    assert _woken_by_a_computing_waker(2, True, delay_ms, placement=None) == pytest.approx({"a": 2.0, "b": 10.0})


def test_a_thread_whose_previous_core_is_idle_runs_there_at_once() -> None:
    # a ran on core 1 (b on core 0) and blocked; woken by b at 1 ms, its previous core is idle and
    # not the waker's: it runs there at once (wake_affine_idle returns prev), 1-2 ms.
    assert _woken_by_a_computing_waker(2, False, 2.0) == pytest.approx({"a": 2.0, "b": 10.0})
    # A measured share of 0 for that state: queued on the waker's core instead (waker delay 2 ms).
    never = Placement(to_idle_previous=0.0)
    assert _woken_by_a_computing_waker(2, False, 2.0, never) == pytest.approx({"a": 4.0, "b": 11.0})
    # A thread that never ran takes the lowest free core.
    assert _woken_by_a_computing_waker(2, None, 2.0) == pytest.approx({"a": 2.0, "b": 10.0})


def _a_woken_by_b_on_bs_core(env: simpy.Environment, cpu: Cpu, b_work: float, a_waker: str | None = "b") -> dict[str, float]:
    """a runs 0.2 ms on core 0 and sleeps; b starts at 0.5 ms (on core 0, a's previous core) and
    computes `b_work`; at 1 ms b wakes a (`a_waker` None: a's timer ends), which then computes 1 ms.
    Returns each one's end (ms)."""
    ends: dict[str, float] = {}

    def job(name: str, start: float, work: float, waker: str | None = None, first: float = 0.0):
        if first:
            yield cpu.run(name)
            yield cpu.compute(name, first)
            cpu.block(name)
        yield env.timeout(start - env.now)
        yield cpu.run(name, waker=waker)
        yield cpu.compute(name, work)
        cpu.block(name)
        ends[name] = env.now / MS

    env.process(job("a", 1 * MS, 1 * MS, waker=a_waker, first=0.2 * MS))
    env.process(job("b", 0.5 * MS, b_work))
    env.run()
    return ends


@pytest.mark.parametrize(("share", "ends"), [(1.0, {"a": 2.0, "b": 11.0}), (0.0, {"a": 2.0, "b": 10.0})])
def test_a_sleeper_whose_previous_core_is_busy_wakes_there_and_preempts_at_the_measured_delay(share, ends) -> None:
    # a's timer ends at 1 ms on core 0, its previous core, where b now computes (9.5 ms from 0.5
    # ms): the timer fires there, so a is queued on core 0 although core 1 idles, and the measured
    # wake-up delay for a holder of b's age (0 here) lets it preempt b at once: a runs 1-2 ms on
    # core 0; b, displaced and not pulled within a quantum, resumes at 2 ms and loses 1 ms. A
    # measured share of 0: a takes the free core, b loses nothing.
    env = simpy.Environment()
    cpu = Cpu(env, 2, 4 * MS, rng=np.random.default_rng(0), wake_delays_by_held_s=((0.0, (0.0,)),),
              placement=Placement(stay_on_busy_previous=share))
    assert _a_woken_by_b_on_bs_core(env, cpu, b_work=9.5 * MS, a_waker=None) == pytest.approx(ends)
    assert cpu.last_core["a"] == (0 if share else 1)


@pytest.mark.parametrize(("share", "ends", "core"), [(1.0, {"p": 3.0, "c": 4.0}, 0), (0.0, {"p": 3.0, "c": 2.0}, 1)])
def test_a_new_thread_starts_on_its_parents_core_by_the_measured_share(share, ends, core) -> None:
    # p computes 3 ms on core 0 and starts c at 1 ms (c computes 1 ms). Started on its parent's
    # core, c waits there (no waker delay measured, no pull within a quantum) until p blocks at
    # 3 ms, and runs 3-4 ms though core 1 idled; with a share of 0 it takes core 1 at once.
    env = simpy.Environment()
    cpu = Cpu(env, 2, 4 * MS, rng=np.random.default_rng(0), placement=Placement(new_on_parent=share))
    out: dict[str, float] = {}

    def job(name: str, start: float, work: float, parent: str | None = None):
        yield env.timeout(start)
        yield cpu.run(name, waker=parent)
        yield cpu.compute(name, work)
        cpu.block(name)
        out[name] = env.now / MS

    env.process(job("p", 0.0, 3 * MS))
    env.process(job("c", 1 * MS, 1 * MS, parent="p"))
    env.run()
    assert out == pytest.approx(ends)
    assert cpu.last_core["c"] == core and cpu.core_wait_s.get("c", 0.0) == pytest.approx((ends["c"] - 2.0) * MS)


def test_a_stacked_thread_is_pulled_to_a_free_core_after_the_pull_delay() -> None:
    # As above (a queued on b's core at 1 ms), with no waker delay and a measured pull delay of
    # 0.5 ms: core 1 pulls a at 1.5 ms, it runs 1.5-2.5 ms; one migration, 0.5 ms of core wait.
    env = simpy.Environment()
    cpu = Cpu(env, 2, 4 * MS, rng=np.random.default_rng(0), placement=Placement(pull_delay_samples_s=(0.5 * MS,)))
    ends = _a_woken_by_b_on_bs_core(env, cpu, b_work=9.5 * MS)
    assert ends == pytest.approx({"a": 2.5, "b": 10.0})
    assert cpu.migrations == 1 and cpu.core_wait_s == pytest.approx({"a": 0.5 * MS})
    assert cpu.last_core == {"a": 1, "b": 0}


def test_a_stacked_thread_runs_when_the_waker_blocks() -> None:
    # Two cores, no waker delays: a (previous core b's) is woken by b at 1 ms, waits on b's core
    # until b blocks at 3 ms (its work done), then runs 3-4 ms: it waited 2 ms although a core was free.
    env = simpy.Environment()
    cpu = Cpu(env, 2, 4 * MS)
    ends = _a_woken_by_b_on_bs_core(env, cpu, b_work=2.5 * MS)
    assert ends == pytest.approx({"a": 4.0, "b": 3.0})
    assert cpu.core_wait_s == pytest.approx({"a": 2 * MS})


def _gil_waiter_woken_by_a_copying_releaser(cores: int, placement: Placement | None) -> tuple[dict[str, float], int]:
    env = simpy.Environment()
    cpu = Cpu(env, cores, 4 * MS, rng=np.random.default_rng(0), wake_delays_by_held_s=((0.0, (0.0,)),),
              waker_delay_samples_s=(2 * MS,), placement=placement)
    gil = Gil(env, GilParams(switch_interval_s=5 * MS, handoff_s=0.1 * MS), cpu=cpu)
    intervals: list[Interval] = []
    m, t = HostThread(env, "m", gil, intervals, cpu), HostThread(env, "t", gil, intervals, cpu)
    ends = _run(env, [
        (m, lambda th: _seq(th.native(0.5 * MS, holds_gil=False, label="sleep", busy=False), th.python(1 * MS))),
        (t, lambda th: _seq(th.python(2 * MS), _compute(1)(th), th.python(0.8 * MS))),
    ])
    return ends, gil.barges


def test_a_gil_waiter_queued_on_its_releasers_core_waits_while_the_releaser_barges_back() -> None:
    # The GIL case of test_a_gil_waiter_woken_by_the_cores_holder..., with a 0.1 ms hand-off and
    # t's last Python 0.8 ms. m sleeps from 0 (core 0 free), t takes core 0, m wakes at 0.5 ms on
    # core 1 and blocks on the GIL. t releases it at 2 ms for a 1 ms copy and so wakes m (2.1 ms).
    # - m's previous core (1) is idle: m runs there at once and takes the GIL: Python 2.1-3.1 ms;
    #   t, back from its copy at 3 ms, waits for the GIL: signalled at 3.1, it runs 3.2-4.0 ms.
    # - With a measured share of 0 for that state (or on one core) m is queued on t's core: t's copy
    #   ends at 3 ms, t takes the free GIL back (a barge), runs its Python 3-3.8 ms and ends; m gets
    #   t's core and the GIL, runs 3.8-4.8 ms.
    one_core = _gil_waiter_woken_by_a_copying_releaser(1, Placement())
    assert one_core[0] == pytest.approx({"m": 4.8, "t": 3.8}) and one_core[1] == 1
    assert _gil_waiter_woken_by_a_copying_releaser(2, Placement(to_idle_previous=0.0)) == one_core
    ends, barges = _gil_waiter_woken_by_a_copying_releaser(2, Placement())
    assert ends == pytest.approx({"m": 3.1, "t": 4.0}) and barges == 0


def _gil_pair_run(placement: Placement | None, cores: int) -> list[tuple]:
    """Two threads sharing the GIL with drawn hand-offs and wake-up delays: every interval."""
    env = simpy.Environment()
    cpu = Cpu(env, cores, 4 * MS, rng=np.random.default_rng(3), wake_delays_by_held_s=((0.0, (0.0, 1 * MS)),),
              waker_delay_samples_s=(0.5 * MS, 2 * MS), placement=placement)
    gil = Gil(env, GilParams(5 * MS, 30e-6, handoff_samples_s=(20e-6, 30e-6, 60e-6)), np.random.default_rng(4), cpu)
    intervals: list[Interval] = []
    m, t = HostThread(env, "m", gil, intervals, cpu), HostThread(env, "t", gil, intervals, cpu)

    def main(th):
        for _ in range(6):
            yield from th.python(0.2 * MS)
            yield from th.native(1.5 * MS, holds_gil=True, label="dispatch", busy=False)
            yield from th.python(0.2 * MS)
            yield from th.native(0.3 * MS, holds_gil=False, label="combine", busy=True)

    def mover(th):
        for _ in range(6):
            yield from th.python(0.4 * MS)
            yield from th.native(0.3 * MS, holds_gil=False, label="copy", busy=True)
            yield from th.native(0.6 * MS, holds_gil=False, label="wait", busy=False)

    ends = _run(env, [(m, main), (t, mover)])
    return [sorted(ends.items()), sorted(cpu.core_wait_s.items())] + [
        (iv.track, iv.name, iv.start_s, iv.end_s) for iv in intervals]


@pytest.mark.parametrize("cores", [1, 2])
def test_a_placement_that_never_stacks_changes_nothing_bit_for_bit(cores: int) -> None:
    # Shares 0 (never stay with the waker) and 1 (always the idle previous core) never queue a
    # thread on a busy core while one is free: the same as no placement rule, to the bit.
    never = Placement(stay_with_waker=0.0, to_idle_previous=1.0)
    assert _gil_pair_run(never, cores) == _gil_pair_run(None, cores)


def test_placement_shares_must_be_probabilities() -> None:
    with pytest.raises(ValueError):
        Placement(stay_with_waker=1.5)
    with pytest.raises(ValueError):
        Placement(pull_delay_samples_s=(-1.0,))
