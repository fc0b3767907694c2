"""`infralab sim run` end to end: the results folder, atomic writes, same seed -> same bytes."""

from __future__ import annotations

import csv
import json
from array import array
from pathlib import Path

import pytest

from infralab.cli import main
from infralab.metrics.records import CounterSample, Interval, RequestRecord, RunRecord
from infralab.metrics.summary import RunSummary
from infralab.results import MARKER, dump_json
from infralab.sim import run as sim_run
from infralab.sim.config import looks_like_path, resolve_path

TINY = """\
model = "llama-3-8b"

[run]
name = "tiny"
seed = 7

[hardware]
accelerator = "H100"

[workload]
kind = "synthetic"
num_requests = 40

[workload.arrival]
kind = "poisson"
rate = 4.0

[workload.prompt]
kind = "uniform"
low = 32
high = 600

[workload.output]
kind = "uniform"
low = 1
high = 24

[cluster]
layout = "{layout}"
{sizes}
router = "least_outstanding_tokens"
"""
# The pool sizes of each layout (a field the layout does not read is an error).
SIZES = {"colocated": "instances = 2", "disaggregated": "prefill_instances = 2\ndecode_instances = 1"}

FILES = ("config.toml", "requests.csv", "resolved_config.toml", "summary.json", "trace.json")


def tiny_config(tmp_path: Path, layout: str = "colocated") -> Path:
    path = tmp_path / f"tiny_{layout}.toml"
    path.write_text(TINY.format(layout=layout, sizes=SIZES[layout]))
    return path


def fake_record(cfg, base_dir, source="", **_) -> RunRecord:
    """A hand-made run standing in for the simulator (for tests of the output side alone)."""
    reqs = [
        RequestRecord(
            id=i,
            arrival_s=0.5 * i,
            prompt_tokens=100,
            output_tokens=2,
            prefill_instance="instance/colocated-0",
            decode_instance="instance/colocated-0",
            first_scheduled_s=0.5 * i,
            first_token_s=0.5 * i + 0.1,
            token_times_s=array("d", [0.5 * i + 0.1, 0.5 * i + 0.2]),
            finish_s=0.5 * i + 0.2,
        )
        for i in range(3)
    ]
    reqs.append(RequestRecord(id=3, arrival_s=1.6, prompt_tokens=5, output_tokens=3))  # unfinished
    return RunRecord(
        requests=reqs,
        intervals=[Interval("instance/colocated-0", "batch", 0.0, 0.1, (("tokens", 100),))],
        counters=[CounterSample("instance/colocated-0", "waiting", 0.0, 1.0)],
        resources={"instance/colocated-0": {"role": "colocated"}},
        end_s=1.2,
    )


def cli_run(cfg: Path, out: Path, *extra: str) -> int:
    return main(["sim", "run", str(cfg), "--out", str(out), *extra])


def test_results_folder_contents(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sim_run, "simulate_config", fake_record)
    cfg = tiny_config(tmp_path)
    out = tmp_path / "res"
    assert cli_run(cfg, out) == 0
    assert "Successful requests:" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES + (MARKER,))
    assert (out / "config.toml").read_bytes() == cfg.read_bytes()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == {"total": 4, "completed": 3}
    assert summary["run"]["seed"] == 7 and summary["run"]["name"] == "tiny"
    rows = list(csv.DictReader((out / "requests.csv").open()))
    assert [r["id"] for r in rows] == ["0", "1", "2", "3"]
    assert "token_times_s" not in rows[0]
    assert float(rows[0]["ttft_s"]) == pytest.approx(0.1)
    assert float(rows[0]["tpot_s"]) == pytest.approx(0.1)
    assert float(rows[0]["e2e_s"]) == pytest.approx(0.2)
    assert rows[3]["ttft_s"] == "" and rows[3]["finish_s"] == ""  # unfinished: empty, not NaN
    trace = json.loads((out / "trace.json").read_text())
    assert any(e["ph"] == "X" for e in trace["traceEvents"])
    assert trace["metadata"]["run"]["name"] == "tiny"


def test_seed_flag_overrides_config(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(sim_run, "simulate_config", lambda cfg, *a, **k: seen.append(cfg.run.seed) or fake_record(cfg, None))
    assert cli_run(tiny_config(tmp_path), tmp_path / "a", "--seed", "123") == 0
    assert cli_run(tiny_config(tmp_path), tmp_path / "b") == 0
    assert seen == [123, 7]


def test_failing_run_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(sim_run, "simulate_config", fake_record)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(sim_run, "save_trace", broken)  # fails after other files are written
    out = tmp_path / "res"
    with pytest.raises(RuntimeError):
        cli_run(tiny_config(tmp_path), out)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".res")] == []


def test_existing_user_folder_is_untouched(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sim_run, "simulate_config", fake_record)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    assert cli_run(tiny_config(tmp_path), out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mine" in err[0] and "refusing" in err[0]
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "precious"


def test_rerun_replaces_an_earlier_result(tmp_path, monkeypatch):
    monkeypatch.setattr(sim_run, "simulate_config", fake_record)
    out = tmp_path / "res"
    assert cli_run(tiny_config(tmp_path), out) == 0
    # A file an earlier run wrote (listed in its marker) goes with the old result...
    (out / "stale.txt").write_text("from before")
    with (out / MARKER).open("a") as marker:
        marker.write("stale.txt\n")
    assert cli_run(tiny_config(tmp_path), out) == 0
    assert not (out / "stale.txt").exists() and (out / "summary.json").exists()
    # ...but a file the user put there is never lost: the rerun refuses, before any work.
    (out / "notes.txt").write_text("mine")
    assert cli_run(tiny_config(tmp_path), out) == 2
    assert (out / "notes.txt").read_text() == "mine" and (out / "summary.json").exists()


# ---- with the real simulator ------------------------------------------------------------------


def needs_simulator():
    for module in ("infralab.sim.specs", "infralab.sim.cost", "infralab.sim.cluster"):
        pytest.importorskip(module)


@pytest.mark.parametrize("layout", ["colocated", "disaggregated"])
def test_same_seed_gives_identical_bytes(tmp_path, capsys, layout):
    needs_simulator()
    cfg = tiny_config(tmp_path, layout)
    assert cli_run(cfg, tmp_path / "a") == 0
    assert cli_run(cfg, tmp_path / "b") == 0
    assert cli_run(cfg, tmp_path / "c", "--seed", "8") == 0
    for name in FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert (tmp_path / "a" / "requests.csv").read_bytes() != (tmp_path / "c" / "requests.csv").read_bytes()
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["requests"] == {"total": 40, "completed": 40}
    trace = json.loads((tmp_path / "a" / "trace.json").read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert any(t.startswith("instance/") for t in tracks)
    if layout == "disaggregated":
        assert any(t.startswith("link/") for t in tracks)
        assert summary["links"] and all(s["bytes"] > 0 for s in summary["links"].values())
    # summary.json -> RunSummary -> the same bytes
    written = (tmp_path / "a" / "summary.json").read_bytes()
    dump_json(RunSummary.from_json(json.loads(written)).to_json(), tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == written


def test_catalog_lists_shipped_specs(capsys):
    pytest.importorskip("infralab.sim.specs")
    assert main(["sim", "catalog"]) == 0
    out = capsys.readouterr().out
    for name in ("llama-3-8b", "H100", "H200", "A100", "rdma-400g"):
        assert name in out


@pytest.mark.parametrize(
    "value, is_path",
    [
        ("H100", False), ("llama-3-8b", False), ("rdma-400g", False), ("round_robin", False),
        ("specs/h100.toml", True), ("h100.toml", True), ("C:\\specs\\x", True),
        ("trace.jsonl", True), ("azure.csv", True), ("cal.json", True),
        (4096, False), (None, False), ("4:2", False),
    ],
)
def test_one_path_detection_for_configs_specs_and_knobs(tmp_path, value, is_path):
    from infralab.agent.sim_pool import resolve_value

    assert looks_like_path(value) is is_path
    # Knob values go through the same test: paths resolve against the naming file's folder.
    resolved = resolve_value(value, tmp_path)
    if is_path and "\\" not in str(value):
        assert resolved == str(resolve_path(value, tmp_path).resolve())
    elif not is_path:
        assert resolved == value


def test_a_spec_file_without_a_separator_is_read_as_a_file(tmp_path):
    """sim.specs uses the same path test: "h.toml" (no "/") names a file, not a catalog entry."""
    from infralab.errors import InputError
    from infralab.sim.specs import load_accelerator

    with pytest.raises(InputError) as err:
        load_accelerator("missing-spec.toml", tmp_path)
    assert "missing-spec.toml" in err.value.where


def test_trace_format_names_are_one_tuple():
    from infralab.errors import InputError
    from infralab import workload as workloads
    from infralab.workload import schema as config
    from infralab.workload.traces import parse_trace

    assert workloads.TRACE_FORMATS is config.TRACE_FORMATS == ("mooncake", "azure", "vidur", "csv")
    with pytest.raises(InputError) as err:
        parse_trace(Path("x"), "bogus")
    assert err.value.expected == " / ".join(config.TRACE_FORMATS)
