"""The Perfetto/Chrome trace: valid JSON, one process per track, microseconds, counters, lanes, cap."""

from __future__ import annotations

import io
import json

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.metrics.records import CounterSample, Interval, RunRecord
from infralab.metrics.timeline import assign_lanes, save_trace, write_trace


def sample_run() -> RunRecord:
    return RunRecord(
        intervals=[
            Interval("instance/prefill-0", "batch", 0.5, 1.25, (("tokens", 512),)),
            Interval("instance/prefill-0", "prefill", 0.5, 1.0),  # nested in the batch
            Interval("link/nic-prefill-0", "transfer", 1.0, 2.0, (("bytes", 10), ("request", 3))),
            Interval("link/nic-prefill-0", "transfer", 1.5, 2.5, (("bytes", 20), ("request", 4))),
            Interval("thread/kv-transfer", "gil-wait", 0.0, 0.001),
        ],
        counters=[
            CounterSample("instance/prefill-0", "waiting", 0.0, 3),
            CounterSample("instance/prefill-0", "waiting", 1.25, 0),
        ],
        resources={"instance/decode-0": {"role": "decode"}},
        end_s=2.5,
    )


def load(run: RunRecord, **kw) -> dict:
    buf = io.StringIO()
    write_trace(run, buf, **kw)
    return json.loads(buf.getvalue())


def test_one_named_process_per_track_sorted():
    doc = load(sample_run())
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert sorted(names.values()) == [
        "instance/decode-0",
        "instance/prefill-0",
        "link/nic-prefill-0",
        "thread/kv-transfer",
    ]
    assert [names[p] for p in sorted(names)] == sorted(names.values())


def test_complete_events_in_microseconds_with_args():
    doc = load(sample_run())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    batch = next(e for e in xs if e["name"] == "batch")
    assert batch["ts"] == 500000.0 and batch["dur"] == 750000.0
    assert batch["args"] == {"tokens": 512}
    odd = RunRecord(intervals=[Interval("t/x", "y", 0, 1, (("z", 0.25), ("a", True), ("m", "s%"), ("n", None)))])
    args = next(e for e in load(odd)["traceEvents"] if e["ph"] == "X")["args"]
    assert args == {"z": 0.25, "a": True, "m": "s%", "n": None}
    gil = next(e for e in xs if e["name"] == "gil-wait")
    assert gil["ts"] == 0.0 and gil["dur"] == 1000.0


def test_nested_intervals_share_a_lane_overlapping_ones_do_not():
    doc = load(sample_run())
    ev = doc["traceEvents"]
    pid_of = {e["args"]["name"]: e["pid"] for e in ev if e["name"] == "process_name"}
    inst = [e for e in ev if e["ph"] == "X" and e["pid"] == pid_of["instance/prefill-0"]]
    assert {e["tid"] for e in inst} == {0}
    link = [e for e in ev if e["ph"] == "X" and e["pid"] == pid_of["link/nic-prefill-0"]]
    assert sorted(e["tid"] for e in link) == [0, 1]
    lanes = [e["args"]["name"] for e in ev if e["name"] == "thread_name" and e["pid"] == pid_of["link/nic-prefill-0"]]
    assert lanes == ["link/nic-prefill-0 #0", "link/nic-prefill-0 #1"]


def test_counters_are_C_events():
    doc = load(sample_run())
    cs = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [(e["name"], e["ts"], e["args"]) for e in cs] == [
        ("waiting", 0.0, {"waiting": 3}),
        ("waiting", 1250000.0, {"waiting": 0}),
    ]


def test_output_is_deterministic(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    save_trace(sample_run(), a)
    run = sample_run()
    run.intervals.reverse()  # recording order across tracks must not matter
    save_trace(run, b)
    assert a.read_bytes() == b.read_bytes()


def test_cap_keeps_earliest_events_and_says_so():
    run = RunRecord(intervals=[Interval("instance/x", "batch", float(i), i + 0.5) for i in range(100)])
    doc = load(run, max_events=10)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 10 and max(e["ts"] for e in xs) == 9e6
    meta = doc["metadata"]
    assert meta["truncated"] is True and meta["events_total"] == 100 and meta["events_written"] == 10
    assert meta["truncated_after_s"] == 10.0
    assert load(run)["metadata"]["truncated"] is False


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), max_size=30))
def test_lanes_never_hold_partial_overlaps(spans):
    ivs = [Interval("t", "x", float(s), float(s + d)) for s, d in spans]
    placed = assign_lanes(ivs)
    assert len(placed) == len(ivs)
    by_lane: dict[int, list[Interval]] = {}
    for lane, iv in placed:
        by_lane.setdefault(lane, []).append(iv)
    for members in by_lane.values():
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                disjoint = a.end_s <= b.start_s or b.end_s <= a.start_s
                nested = (a.start_s <= b.start_s and b.end_s <= a.end_s) or (
                    b.start_s <= a.start_s and a.end_s <= b.end_s
                )
                assert disjoint or nested


# ---- a record that keeps only the earliest events writes the same timeline ---------------------


@st.composite
def nearly_ordered_runs(draw):
    """Intervals recorded at their end (starts out of order), counters, ties in time."""
    events = []
    t = 0.0
    for i in range(draw(st.integers(0, 60))):
        t += draw(st.sampled_from([0.0, 0.5, 1.0]))
        back = draw(st.sampled_from([0.0, 0.5, 2.0]))
        if draw(st.booleans()):
            events.append(Interval(draw(st.sampled_from(["instance/a", "link/b"])), "batch", t - back, t, (("i", i),)))
        else:
            name = draw(st.sampled_from(["waiting", "running"]))
            events.append(CounterSample("instance/a", name, t - back, float(i)))
    return events


@settings(max_examples=150, deadline=None)
@given(nearly_ordered_runs(), st.integers(0, 40), st.integers(0, 40))
def test_keeping_only_the_earliest_events_writes_the_same_trace(events, cap, smaller):
    full = RunRecord()
    capped = RunRecord.with_timeline(True, max_events=cap)
    for record in (full, capped):
        for e in events:
            (record.intervals if isinstance(e, Interval) else record.counters).append(e)
        record.close()
    assert len(capped.intervals) + len(capped.counters) <= cap + 1
    for max_events in (cap, min(cap, smaller)):
        a, b = io.StringIO(), io.StringIO()
        write_trace(full, a, max_events=max_events)
        write_trace(capped, b, max_events=max_events)
        assert a.getvalue() == b.getvalue()
    if len(events) > cap:
        with pytest.raises(ValueError):
            write_trace(capped, io.StringIO(), max_events=cap + 1)
