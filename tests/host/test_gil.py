"""The simulated GIL against hand-worked CPython schedules (switch interval 5 ms unless stated)."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.metrics.records import Interval
from infralab.sim.host.gil import Gil, GilParams
from infralab.sim.host.thread import GIL_WAIT, NATIVE_HOLD, NATIVE_RELEASE, PYTHON, HostThread

MS = 1e-3


def _world(switch_s: float = 5 * MS, handoff_s: float = 0.0):
    env = simpy.Environment()
    gil = Gil(env, GilParams(switch_interval_s=switch_s, handoff_s=handoff_s))
    intervals: list[Interval] = []
    return env, gil, intervals


def _spans(intervals, thread, state):
    return [
        (round(iv.start_s / MS, 9), round(iv.end_s / MS, 9))
        for iv in intervals
        if iv.track == f"thread/{thread}" and iv.name == state
    ]


def _start(env, thread, *segments):
    def program():
        for make in segments:
            yield from make(thread)
        thread.finish()

    return env.process(program())


def test_two_cpu_bound_threads_alternate_at_the_switch_interval() -> None:
    env, gil, ivs = _world()
    a, b = HostThread(env, "a", gil, ivs), HostThread(env, "b", gil, ivs)
    _start(env, a, lambda t: t.python(20 * MS))
    _start(env, b, lambda t: t.python(20 * MS))
    env.run()
    # a takes the free GIL; b waits 5 ms, requests a drop, a drops at once (bytecode boundary)...
    assert _spans(ivs, "a", PYTHON) == [(0, 5), (10, 15), (20, 25), (30, 35)]
    assert _spans(ivs, "b", PYTHON) == [(5, 10), (15, 20), (25, 30), (35, 40)]
    assert _spans(ivs, "b", GIL_WAIT) == [(0, 5), (10, 15), (20, 25), (30, 35)]
    assert a.forced_drops == 3 and b.forced_drops == 3
    assert gil.switches == 8 and env.now == pytest.approx(40 * MS)


def test_switch_interval_is_a_parameter() -> None:
    env, gil, ivs = _world(switch_s=2 * MS)
    a, b = HostThread(env, "a", gil, ivs), HostThread(env, "b", gil, ivs)
    _start(env, a, lambda t: t.python(4 * MS))
    _start(env, b, lambda t: t.python(4 * MS))
    env.run()
    assert _spans(ivs, "a", PYTHON) == [(0, 2), (4, 6)]
    assert _spans(ivs, "b", PYTHON) == [(2, 4), (6, 8)]


def test_a_releasing_native_call_lets_the_other_thread_run() -> None:
    env, gil, ivs = _world()
    a, b = HostThread(env, "a", gil, ivs), HostThread(env, "b", gil, ivs)
    _start(env, a, lambda t: t.python(1 * MS), lambda t: t.native(10 * MS, holds_gil=False))
    _start(env, b, lambda t: t.python(3 * MS))
    env.run()
    assert _spans(ivs, "a", NATIVE_RELEASE) == [(1, 11)]
    assert _spans(ivs, "b", GIL_WAIT) == [(0, 1)]
    assert _spans(ivs, "b", PYTHON) == [(1, 4)]  # runs during a's native call
    assert b.gil_wait_s == pytest.approx(1 * MS)


def test_a_holding_native_call_blocks_the_other_thread_and_cannot_be_interrupted() -> None:
    env, gil, ivs = _world()
    a, b = HostThread(env, "a", gil, ivs), HostThread(env, "b", gil, ivs)
    _start(env, a, lambda t: t.native(12 * MS, holds_gil=True), lambda t: t.python(1 * MS))
    _start(env, b, lambda t: t.python(3 * MS))
    env.run()
    # b's drop request at 5 ms (and 10 ms) cannot interrupt the call; a drops at the first
    # bytecode boundary after it returns (12 ms), b runs, then a finishes its Python.
    assert _spans(ivs, "a", NATIVE_HOLD) == [(0, 12)]
    assert _spans(ivs, "b", GIL_WAIT) == [(0, 12)]
    assert _spans(ivs, "b", PYTHON) == [(12, 15)]
    assert _spans(ivs, "a", GIL_WAIT) == [(12, 15)]
    assert _spans(ivs, "a", PYTHON) == [(15, 16)]
    assert gil.drop_requests == 1  # the request stays pending; no second one is set


def test_returning_from_a_released_call_waits_for_the_switch_interval() -> None:
    # The convoy effect: a thread coming back from native code must wait for a CPU-bound holder.
    env, gil, ivs = _world()
    a, b = HostThread(env, "a", gil, ivs), HostThread(env, "b", gil, ivs)
    _start(env, a, lambda t: t.native(1 * MS, holds_gil=False), lambda t: t.python(1 * MS))
    _start(env, b, lambda t: t.python(20 * MS))
    env.run()
    assert _spans(ivs, "a", GIL_WAIT) == [(1, 6)]
    assert _spans(ivs, "a", PYTHON) == [(6, 7)]
    assert _spans(ivs, "b", PYTHON) == [(0, 6), (7, 21)]


def test_handoff_latency_delays_the_next_holder() -> None:
    env, gil, ivs = _world(handoff_s=0.5 * MS)
    a, b = HostThread(env, "a", gil, ivs), HostThread(env, "b", gil, ivs)
    _start(env, a, lambda t: t.python(2 * MS))
    _start(env, b, lambda t: t.python(1 * MS))
    env.run()
    assert _spans(ivs, "b", GIL_WAIT) == [(0, 2.5)]
    assert _spans(ivs, "b", PYTHON) == [(2.5, 3.5)]


def test_gil_rejects_release_by_a_non_holder() -> None:
    env, gil, _ = _world()
    gil.acquire("a")
    with pytest.raises(RuntimeError):
        gil.release("b")


@settings(max_examples=30, deadline=None)
@given(
    work=st.lists(
        st.lists(st.tuples(st.sampled_from(["py", "hold", "release"]), st.integers(1, 9)), min_size=1, max_size=5),
        min_size=1,
        max_size=3,
    )
)
def test_at_most_one_thread_holds_the_gil_and_all_work_is_done(work) -> None:
    env, gil, ivs = _world(switch_s=2 * MS, handoff_s=0.1 * MS)
    threads = []
    for i, program in enumerate(work):
        t = HostThread(env, f"t{i}", gil, ivs)
        threads.append(t)
        segs = []
        for kind, n in program:
            d = n * MS
            if kind == "py":
                segs.append(lambda th, d=d: th.python(d))
            else:
                segs.append(lambda th, d=d, h=(kind == "hold"): th.native(d, holds_gil=h))
        _start(env, t, *segs)
    env.run()
    holding = sorted(
        (iv.start_s, iv.end_s) for iv in ivs if iv.name in (PYTHON, NATIVE_HOLD)
    )
    for (s0, e0), (s1, _) in zip(holding, holding[1:]):
        assert s1 >= e0 - 1e-12  # GIL-holding states never overlap across threads
    for t, program in zip(threads, work):
        done = sum(iv.end_s - iv.start_s for iv in ivs if iv.track == t.track and iv.name != GIL_WAIT)
        assert done == pytest.approx(sum(n for _, n in program) * MS)
    assert gil.holder is None


def test_a_thread_back_from_a_short_call_barges_in_and_the_waiter_convoys() -> None:
    # Hand-off 1 ms: a release only wakes b; a, back from its 0.1 ms native call first, retakes the
    # free GIL. b's timed wait ended by the signal, so its 5 ms clock restarts at 2 ms -> drop at 7.
    env, gil, ivs = _world(handoff_s=1 * MS)
    a, b = HostThread(env, "a", gil, ivs), HostThread(env, "b", gil, ivs)
    _start(env, a, lambda t: t.python(1 * MS), lambda t: t.native(0.1 * MS, holds_gil=False),
           lambda t: t.python(10 * MS))
    _start(env, b, lambda t: t.python(1 * MS))
    env.run()
    assert gil.barges == 1 and gil.drop_requests == 1
    assert _spans(ivs, "a", PYTHON) == [(0, 1), (1.1, 7), (10, 14.1)]
    assert _spans(ivs, "b", GIL_WAIT) == [(0, 8)]  # woken 1 ms after a's forced drop at 7 ms
    assert _spans(ivs, "b", PYTHON) == [(8, 9)]
    # a may not compete until b has the GIL (FORCE_SWITCHING), then waits for b's release + wake-up.
    assert _spans(ivs, "a", GIL_WAIT) == [(7, 8), (8, 10)]


def test_a_forced_drop_waits_for_the_switch_even_with_a_handoff_latency() -> None:
    env, gil, ivs = _world(handoff_s=0.5 * MS)
    a, b = HostThread(env, "a", gil, ivs), HostThread(env, "b", gil, ivs)
    _start(env, a, lambda t: t.python(8 * MS))
    _start(env, b, lambda t: t.python(1 * MS))
    env.run()
    assert _spans(ivs, "a", PYTHON) == [(0, 5), (7, 10)]
    assert _spans(ivs, "b", PYTHON) == [(5.5, 6.5)]
    assert gil.barges == 0


def test_a_busy_release_wakes_the_waiter_later_than_a_blocking_one() -> None:
    # handoff 0.1 ms after a blocking release, 2 ms after a busy one (the releaser keeps its core).
    def schedule(busy: bool):
        env = simpy.Environment()
        gil = Gil(env, GilParams(switch_interval_s=5 * MS, handoff_s=0.1 * MS, handoff_busy_s=2 * MS))
        ivs: list[Interval] = []
        a, b = HostThread(env, "a", gil, ivs), HostThread(env, "b", gil, ivs)
        _start(env, a, lambda t: t.python(1 * MS), lambda t: t.native(3 * MS, holds_gil=False, busy=busy))
        _start(env, b, lambda t: t.python(1 * MS))
        env.run()
        return _spans(ivs, "b", PYTHON)

    assert schedule(busy=False) == [(1.1, 2.1)]
    assert schedule(busy=True) == [(3, 4)]


def test_handoff_latencies_are_drawn_from_samples_with_a_seeded_rng() -> None:
    import numpy as np

    params = GilParams(handoff_s=1.0, handoff_samples_s=(0.1, 0.2), handoff_busy_samples_s=(3.0,))
    rng = np.random.default_rng(0)
    draws = {params.handoff(False, rng) for _ in range(50)}
    assert draws == {0.1, 0.2}
    assert params.handoff(True, rng) == 3.0
    assert params.handoff(False) == 1.0  # no generator: the constant
