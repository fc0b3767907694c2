"""Loading run folders and timelines for `infralab explain`: round trip of what `sim run` writes,
and one clear InputError per kind of bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from infralab.agent.run_dir import SIM_RUN_FILES, load_run
from infralab.errors import InputError
from infralab.metrics.records import CounterSample, Interval, RequestRecord, RunRecord
from infralab.metrics.requests_csv import write_requests_csv
from infralab.metrics.run_metrics import summarize
from infralab.metrics.schema import SLOConfig
from infralab.metrics.timeline import save_trace
from infralab.results import dump_json


def write_run_folder(folder: Path, run: RunRecord) -> Path:
    """A results folder as `infralab sim run` writes it (summary.json, requests.csv, trace.json)."""
    folder.mkdir(parents=True, exist_ok=True)
    dump_json(summarize(run, SLOConfig()).to_json(), folder / "summary.json")
    write_requests_csv(run, folder / "requests.csv")
    save_trace(run, folder / "trace.json")
    return folder


def small_run() -> RunRecord:
    run = RunRecord()
    req = RequestRecord(id=3, arrival_s=0.5, prompt_tokens=100, output_tokens=4, prefill_instance="p0",
                        decode_instance="d0", first_scheduled_s=0.6, first_token_s=0.8,
                        kv_transfer_start_s=0.8, kv_transfer_end_s=0.9, finish_s=1.2)
    req.token_times_s.extend([0.8, 1.0, 1.1, 1.2])
    unfinished = RequestRecord(id=4, arrival_s=0.7, prompt_tokens=10, output_tokens=2)
    run.requests.extend([req, unfinished])
    run.intervals.append(Interval("instance/p0", "batch", 0.6, 0.8, (("prefill_tokens", 100),)))
    run.intervals.append(Interval("link/nic-p0", "transfer", 0.8, 0.9, (("bytes", 1000), ("label", "kv"), ("request", 3))))
    run.counters.append(CounterSample("instance/p0", "waiting", 0.5, 1.0))
    run.end_s = 1.2
    return run


def test_sim_run_folder_round_trips(tmp_path):
    loaded = load_run(write_run_folder(tmp_path / "run", small_run()))
    assert loaded.kind == "sim-run"
    assert [r.id for r in loaded.requests] == [3, 4]
    first = loaded.requests[0]
    assert (first.prefill_instance, first.decode_instance) == ("p0", "d0")
    assert first.kv_transfer_end_s == 0.9 and first.finish_s == 1.2 and first.output_tokens == 4
    assert math.isnan(loaded.requests[1].finish_s)
    assert loaded.summary["requests"]["completed"] == 1
    by_track = loaded.by_track()
    (flow,) = by_track["link/nic-p0"]
    assert flow.name == "transfer" and dict(flow.args)["request"] == 3
    assert flow.start_s == pytest.approx(0.8, abs=1e-9) and flow.end_s == pytest.approx(0.9, abs=1e-9)
    assert [(c.track, c.name, c.value) for c in loaded.counters] == [("instance/p0", "waiting", 1.0)]
    assert not loaded.truncated


def test_timeline_file_loads_as_timeline(tmp_path):
    path = tmp_path / "t.json"
    save_trace(small_run(), path, metadata={"scenario": "x"})
    loaded = load_run(path)
    assert loaded.kind == "timeline" and loaded.requests is None and loaded.summary is None
    assert {iv.track for iv in loaded.intervals} == {"instance/p0", "link/nic-p0"}
    assert loaded.trace_metadata["scenario"] == "x"


@pytest.mark.parametrize("missing", SIM_RUN_FILES)
def test_missing_file_is_named(tmp_path, missing):
    folder = write_run_folder(tmp_path / "run", small_run())
    (folder / missing).unlink()
    with pytest.raises(InputError) as err:
        load_run(folder)
    assert err.value.where == str(folder / missing)


def test_a_folder_without_a_timeline_loads_and_says_so(tmp_path):
    folder = write_run_folder(tmp_path / "run", small_run())
    (folder / "trace.json").unlink()
    loaded = load_run(folder)
    assert loaded.kind == "sim-run" and loaded.intervals == () and len(loaded.requests) > 0
    assert len(loaded.missing) == 1 and loaded.missing[0].startswith("trace.json")


def test_gil_results_folder_points_at_its_timelines(tmp_path):
    (tmp_path / "gil" / "timelines").mkdir(parents=True)
    with pytest.raises(InputError, match="timelines"):
        load_run(tmp_path / "gil")


def test_nonexistent_path(tmp_path):
    with pytest.raises(InputError) as err:
        load_run(tmp_path / "nope")
    assert err.value.where == str(tmp_path / "nope")


def test_bad_requests_csv(tmp_path):
    folder = write_run_folder(tmp_path / "run", small_run())
    text = (folder / "requests.csv").read_text().splitlines()
    (folder / "requests.csv").write_text("\n".join([text[0].replace("finish_s", "finished")] + text[1:]) + "\n")
    with pytest.raises(InputError, match="finish_s") as err:
        load_run(folder)
    assert str(folder / "requests.csv") in err.value.where
    (folder / "requests.csv").write_text("\n".join([text[0], text[1].replace(",100,", ",lots,", 1)]) + "\n")
    with pytest.raises(InputError, match="line 2, column prompt_tokens"):
        load_run(folder)


def test_bad_trace(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"events": []}))
    with pytest.raises(InputError, match="traceEvents"):
        load_run(path)
    path.write_text("{not json")
    with pytest.raises(InputError, match="line 1"):
        load_run(path)
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "ts": "soon"}]}))
    with pytest.raises(InputError, match=r"traceEvents\[0\]"):
        load_run(path)


def test_a_requests_csv_field_over_the_csv_limit_is_an_error_naming_the_file(tmp_path):
    from infralab.agent.run_dir import REQUIRED_COLUMNS, load_requests_with_gaps
    from infralab.errors import InputError

    path = tmp_path / "requests.csv"
    cells = ["1" * 200_000] + ["0"] * (len(REQUIRED_COLUMNS) - 1)
    path.write_text(",".join(REQUIRED_COLUMNS) + "\n" + ",".join(cells) + "\n")
    with pytest.raises(InputError, match="unreadable CSV") as info:
        load_requests_with_gaps(path)
    assert info.value.where == str(path)
