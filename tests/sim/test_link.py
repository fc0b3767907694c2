"""The bandwidth-shared link against closed forms and an independent fluid simulation."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.metrics.records import CounterSample, Interval, RunRecord
from infralab.sim.link import Link

try:  # the real spec once it lands; Link only reads .name/.bandwidth/.latency
    from infralab.sim.specs import LinkSpec
except ImportError:

    @dataclass(frozen=True)
    class LinkSpec:  # type: ignore[no-redef]
        name: str
        bandwidth: float
        latency: float


def _run_flows(spec, flows, record=None):
    """flows: [(start_s, nbytes)]; returns (finish times in flow order, link, env)."""
    env = simpy.Environment()
    link = Link(env, spec, spec.name, record)
    finish = [math.nan] * len(flows)

    def start(i, at, nbytes):
        yield env.timeout(at)
        finish[i] = yield link.transfer(nbytes, label=f"f{i}")

    for i, (at, nbytes) in enumerate(flows):
        env.process(start(i, at, nbytes))
    env.run()
    return finish, link, env


def test_lone_transfer_takes_latency_plus_bytes_over_bandwidth():
    spec = LinkSpec("rdma", bandwidth=50e9, latency=7e-6)
    nbytes = 123_456_789
    finish, link, _ = _run_flows(spec, [(0.25, nbytes)])
    expected = 0.25 + 7e-6 + nbytes / 50e9
    assert finish[0] == pytest.approx(expected, rel=1e-12, abs=0)
    assert link.bytes_delivered == nbytes
    assert link.busy_s == pytest.approx(nbytes / 50e9, rel=1e-12)
    assert link.active_flows == 0


def test_two_equal_concurrent_transfers_each_get_half_the_bandwidth():
    spec = LinkSpec("nvlink", bandwidth=400e9, latency=2e-6)
    nbytes = 10**9
    finish, _, _ = _run_flows(spec, [(0.0, nbytes), (0.0, nbytes)])
    expected = 2e-6 + 2 * nbytes / 400e9
    assert finish == pytest.approx([expected, expected], rel=1e-12)


def test_staggered_pair_matches_hand_computed_times_and_records():
    # bw 100 B/s, latency 1 s. A: 300 B sent at 0 -> bytes from 1, alone until 2 (100 B done).
    # B: 100 B sent at 1 -> bytes from 2; both at 50 B/s: B done at 4, A has 100 B left,
    # alone again at 100 B/s: done at 5.
    record = RunRecord()
    spec = LinkSpec("l", bandwidth=100.0, latency=1.0)
    finish, link, env = _run_flows(spec, [(0.0, 300), (1.0, 100)], record)
    assert finish == pytest.approx([5.0, 4.0], rel=1e-12)
    assert link.busy_s == pytest.approx(4.0)
    assert link.bytes_delivered == pytest.approx(400.0)
    assert [c.t_s for c in record.counters] == pytest.approx([1.0, 2.0, 4.0, 5.0])
    assert [c.value for c in record.counters] == [1, 2, 1, 0]
    assert all(c.track == "link/l" and c.name == "active_flows" for c in record.counters)
    by_label = {dict(i.args)["label"]: i for i in record.intervals}
    assert (by_label["f0"].start_s, by_label["f0"].end_s) == pytest.approx((0.0, 5.0))
    assert (by_label["f1"].start_s, by_label["f1"].end_s) == pytest.approx((1.0, 4.0))
    assert dict(by_label["f0"].args)["bytes"] == 300
    assert record.resources["link/l"]["bandwidth_Bps"] == 100.0


def test_partial_progress_is_visible_mid_transfer():
    spec = LinkSpec("l", bandwidth=100.0, latency=1.0)
    env = simpy.Environment()
    link = Link(env, spec, "l")
    link.transfer(300)
    env.process(_later(env, 1.0, lambda: link.transfer(100)))
    env.run(until=3.0)
    # From the staggered example: at t=3, A has 100 + 50 bytes, B has 50.
    assert link.bytes_delivered == pytest.approx(200.0)
    assert link.active_flows == 2
    assert link.busy_s == pytest.approx(2.0)


def _later(env, delay, action):
    yield env.timeout(delay)
    action()


def test_flows_in_latency_phase_do_not_share_bandwidth():
    spec = LinkSpec("l", bandwidth=10.0, latency=5.0)
    env = simpy.Environment()
    link = Link(env, spec, "l")
    done = link.transfer(10)
    env.run(until=4.0)
    assert link.active_flows == 0 and not done.triggered
    env.run()
    assert done.value == pytest.approx(6.0)


def test_zero_byte_transfer_finishes_after_latency_without_becoming_active():
    record = RunRecord()
    spec = LinkSpec("l", bandwidth=1e9, latency=3e-6)
    finish, link, _ = _run_flows(spec, [(1.0, 0)], record)
    assert finish[0] == pytest.approx(1.0 + 3e-6, rel=1e-12)
    assert record.counters == [] and link.busy_s == 0.0
    args = (("bytes", 0), ("label", "f0"))
    assert record.intervals[0] == Interval("link/l", "transfer", 1.0, finish[0], args)


def test_interval_carries_caller_args():
    record = RunRecord()
    env = simpy.Environment()
    link = Link(env, LinkSpec("nic", 1e3, 0.0), "nic-0", record)
    link.transfer(500, label="kv", args=(("request", 7),))
    env.run()
    args = (("bytes", 500), ("label", "kv"), ("request", 7))
    assert record.intervals == [Interval("link/nic-0", "transfer", 0.0, 0.5, args)]
    assert record.counters == [
        CounterSample("link/nic-0", "active_flows", 0.0, 1),
        CounterSample("link/nic-0", "active_flows", 0.5, 0),
    ]


def test_negative_or_infinite_size_is_rejected():
    link = Link(simpy.Environment(), LinkSpec("l", 1.0, 0.0), "l")
    for bad in (-1, math.inf, math.nan):
        with pytest.raises(ValueError):
            link.transfer(bad)


def _reference_finish_times(flows, bandwidth, latency):
    """An independent O(n^2) fluid simulation: step from event to event, share bandwidth equally."""
    n = len(flows)
    enter = [at + latency for at, _ in flows]
    remaining = [float(b) for _, b in flows]
    finish = [math.nan] * n
    waiting = sorted(range(n), key=lambda i: (enter[i], i))
    active: list[int] = []
    t = 0.0
    while waiting or active:
        next_entry = enter[waiting[0]] if waiting else math.inf
        rate = bandwidth / len(active) if active else 0.0
        next_done = t + min(remaining[i] for i in active) / rate if active else math.inf
        t_next = min(next_entry, next_done)
        for i in active:
            remaining[i] -= (t_next - t) * rate
        t = t_next
        while waiting and enter[waiting[0]] <= t:
            active.append(waiting.pop(0))
        for i in list(active):
            if remaining[i] <= 1e-9 * max(flows[i][1], 1):
                finish[i] = t
                active.remove(i)
    return finish


flow_lists = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0.0, 2.0, allow_nan=False),
        st.integers(0, 10**6),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(flows=flow_lists, bandwidth=st.floats(1e5, 1e7), latency=st.sampled_from([0.0, 1e-3, 0.05]))
def test_random_flows_match_fluid_reference_and_conserve_bytes(flows, bandwidth, latency):
    spec = LinkSpec("l", bandwidth=bandwidth, latency=latency)
    finish, link, env = _run_flows(spec, flows)
    reference = _reference_finish_times(flows, bandwidth, latency)
    assert finish == pytest.approx(reference, rel=1e-9, abs=1e-12)
    total = sum(b for _, b in flows)
    assert link.bytes_delivered == pytest.approx(total, rel=1e-9, abs=1e-6)
    # Work conservation: whenever a flow is moving bytes, the link runs at full bandwidth.
    assert link.busy_s * bandwidth == pytest.approx(total, rel=1e-9, abs=1e-6)
    for (at, nbytes), end in zip(flows, finish):
        assert end >= (at + latency + nbytes / bandwidth) * (1 - 1e-12)
    first_entry = min(at for at, _ in flows) + latency
    assert max(finish) >= (first_entry + total / bandwidth) * (1 - 1e-12)
    assert link.active_flows == 0
    # Superseded completion timers never outlive the last real completion.
    assert env.now == pytest.approx(max(finish), rel=1e-12, abs=1e-15)


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 10**6), min_size=2, max_size=30))
def test_simultaneous_flows_finish_in_size_order(sizes):
    finish, _, _ = _run_flows(LinkSpec("l", 1e6, 0.0), [(0.0, b) for b in sizes])
    order = sorted(range(len(sizes)), key=lambda i: finish[i])
    assert [sizes[i] for i in order] == sorted(sizes)
