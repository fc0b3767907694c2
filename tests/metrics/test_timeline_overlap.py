"""Timelines Perfetto keeps whole: integer-nanosecond starts and ends, no two complete events on
one lane (pid, tid) that partially overlap, and a truncated timeline said out loud."""

from __future__ import annotations

import io
import json
import tomllib
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from infralab.metrics.records import Interval, RunRecord
from infralab.metrics.timeline import load_exact, ns, partial_overlaps, write_trace
from infralab.sim.run import run_config_file

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "experiments" / "sim").glob("*.toml"))


def written(run: RunRecord) -> dict:
    buf = io.StringIO()
    write_trace(run, buf)
    return json.loads(buf.getvalue(), parse_float=Decimal)


@settings(max_examples=60, deadline=None)
@given(
    st.floats(min_value=0.0, max_value=1e5, allow_nan=False),
    st.lists(st.floats(min_value=1e-9, max_value=3.0, allow_nan=False), min_size=2, max_size=40),
)
@example(70369.0739440635, [1e-09, 1.0])  # a sub-nanosecond batch: a zero-length event
def test_back_to_back_slices_meet_exactly_and_never_partially_overlap(start: float, durations: list[float]) -> None:
    # Consecutive batches on one track, times accumulated in floats as the engine does.
    times = [start]
    for d in durations:
        times.append(times[-1] + d)
    run = RunRecord(intervals=[Interval("instance/x", "batch", a, b) for a, b in zip(times, times[1:])])
    trace = written(run)
    assert partial_overlaps(trace) == []
    # In time order; a batch shorter than half a nanosecond rounds to a zero-length event at the
    # next one's start, which the writer lists after the longer event (nesting order): put it first.
    events = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X"), key=lambda e: (e["ts"], e["dur"]))
    assert all(e["tid"] == 0 for e in events)  # all on one lane: they only touch
    for a, b in zip(events, events[1:]):
        assert a["ts"] + a["dur"] == b["ts"]  # end of one == start of the next, to the ns
    for e, t in zip(events, times):
        assert e["ts"] * 1000 == ns(t)


def test_the_checker_finds_a_partial_overlap_and_accepts_nesting() -> None:
    def x(ts: str, dur: str, tid: int = 0) -> dict:
        return {"ph": "X", "pid": 1, "tid": tid, "ts": Decimal(ts),
                "dur": Decimal(dur), "name": "b"}

    nested = {"traceEvents": [x("0.000", "10.000"), x("1.000", "2.000"), x("10.000", "1.000")]}
    assert partial_overlaps(nested) == []
    bad = {"traceEvents": [x("0.000", "10.001"), x("10.000", "1.000"), x("5.000", "9.000", tid=1)]}
    found = partial_overlaps(bad)
    assert [lane for lane, _, _ in found] == [(1, 0)]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_shipped_example_writes_a_trace_without_partial_overlaps(example: Path, tmp_path: Path, capsys) -> None:
    # A shortened workload (the first 2,000 requests of a trace) keeps this quick; the full traces
    # were checked by hand with partial_overlaps (docs/sim.md, "Timelines").
    out = tmp_path / "run"
    synthetic = tomllib.loads(example.read_text())["workload"]["kind"] == "synthetic"
    overrides = [] if synthetic else ["workload.max_requests=2000"]
    summary = run_config_file(example, out, overrides=overrides)
    trace = load_exact(out / "trace.json")
    assert sum(1 for e in trace["traceEvents"] if e.get("ph") == "X") > 100
    assert partial_overlaps(trace) == []
    assert summary.timeline is not None and summary.timeline["truncated"] is False
    assert "truncated" not in capsys.readouterr().err


def test_a_truncated_timeline_prints_a_warning_and_the_summary_says_so(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(
        'model = "llama-3-8b"\n[hardware]\naccelerator = "H100"\n'
        '[workload]\nkind = "synthetic"\nnum_requests = 30\n'
        '[workload.arrival]\nkind = "poisson"\nrate = 5.0\n'
        '[workload.prompt]\nkind = "fixed"\nvalue = 200\n[workload.output]\nkind = "fixed"\nvalue = 8\n'
    )
    run_config_file(cfg, tmp_path / "whole")
    assert "warning" not in capsys.readouterr().err
    whole = json.loads((tmp_path / "whole" / "summary.json").read_text())["timeline"]
    assert whole["truncated"] is False and whole["events_written"] == whole["events_total"]

    run_config_file(cfg, tmp_path / "cut", max_trace_events=20)
    err = capsys.readouterr().err
    assert err.count("warning: trace.json is truncated") == 1 and "--max-trace-events" in err
    facts = json.loads((tmp_path / "cut" / "summary.json").read_text())["timeline"]
    assert facts["truncated"] is True and facts["events_written"] <= 20 < facts["events_total"]
    assert facts["max_events"] == 20 and facts["truncated_after_s"] > 0

    run_config_file(cfg, tmp_path / "none", timeline=False)
    assert "timeline" not in json.loads((tmp_path / "none" / "summary.json").read_text())
