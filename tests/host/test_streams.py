"""Device streams: launches return at once, work runs in order, synchronise waits for the tail."""

from __future__ import annotations

import pytest
import simpy

from infralab.metrics.records import Interval
from infralab.sim.host.gil import Gil, GilParams
from infralab.sim.host.streams import Stream, launch, synchronize
from infralab.sim.host.thread import NATIVE_RELEASE, HostThread

US = 1e-6


def _world():
    env = simpy.Environment()
    ivs: list[Interval] = []
    thread = HostThread(env, "main", Gil(env, GilParams()), ivs)
    return env, ivs, thread


def _on(ivs, track):
    return [(iv.name, round(iv.start_s / US, 6), round(iv.end_s / US, 6)) for iv in ivs if iv.track == track]


def test_launch_is_asynchronous_and_work_runs_in_launch_order() -> None:
    env, ivs, main = _world()
    compute = Stream(env, "gpu0-compute", ivs)
    host_done = {}

    def program():
        yield from launch(main, compute, 100 * US, "k1", launch_s=10 * US)
        yield from launch(main, compute, 50 * US, "k2", launch_s=10 * US)
        host_done["t"] = env.now  # the host is free long before the device finishes
        yield from synchronize(main, compute)
        host_done["sync"] = env.now
        main.finish()

    env.process(program())
    env.run()
    assert host_done["t"] == pytest.approx(20 * US)
    assert _on(ivs, "stream/gpu0-compute") == [("k1", 10, 110), ("k2", 110, 160)]
    assert host_done["sync"] == pytest.approx(160 * US)
    assert [iv.name for iv in ivs if iv.track == "thread/main"][-1] == NATIVE_RELEASE


def test_cross_stream_dependency_waits_for_the_other_stream() -> None:
    env, ivs, main = _world()
    compute, comm = Stream(env, "gpu0-compute", ivs), Stream(env, "gpu0-comm", ivs)

    def program():
        attn = yield from launch(main, compute, 100 * US, "attention", launch_s=0)
        sent = yield from launch(main, comm, 30 * US, "dispatch", launch_s=0, after=[attn])
        yield from launch(main, compute, 40 * US, "experts", launch_s=0, after=[sent])
        yield from synchronize(main, compute)
        main.finish()

    env.process(program())
    env.run()
    assert _on(ivs, "stream/gpu0-comm") == [("dispatch", 100, 130)]
    assert _on(ivs, "stream/gpu0-compute") == [("attention", 0, 100), ("experts", 130, 170)]
    assert env.now == pytest.approx(170 * US)


def test_callable_work_takes_the_time_of_its_event() -> None:
    env, ivs, _ = _world()
    comm = Stream(env, "gpu0-comm", ivs)
    comm.enqueue(lambda: env.timeout(7 * US), "flow")
    done = comm.enqueue(1 * US, "after-flow")
    env.run(done)
    assert _on(ivs, "stream/gpu0-comm") == [("flow", 0, 7), ("after-flow", 7, 8)]
    assert comm.busy_s == pytest.approx(8 * US)


def test_synchronize_on_an_idle_stream_returns_at_once() -> None:
    env, ivs, main = _world()
    compute = Stream(env, "gpu0-compute", ivs)

    def program():
        yield from synchronize(main, compute)
        main.finish()

    env.process(program())
    env.run()
    assert env.now == 0
