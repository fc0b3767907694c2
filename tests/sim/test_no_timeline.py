"""`infralab sim run --no-timeline`: no trace.json, and the same summary and requests as with one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.cli import main
from infralab.metrics.records import Interval, ResourceTally

CONFIG = """\
model = "llama-3-8b"

[run]
name = "no-timeline"
seed = 3

[hardware]
accelerator = "H100"

[engine]
max_num_seqs = 16
max_batched_tokens = 512
gpu_memory_utilization = 0.21

[workload]
kind = "synthetic"
num_requests = 60

[workload.arrival]
kind = "poisson"
rate = 40.0

[workload.prompt]
kind = "uniform"
low = 32
high = 900

[workload.output]
kind = "uniform"
low = 1
high = 40

[cluster]
layout = "{layout}"
{sizes}
router = "least_outstanding_tokens"
"""
# The pool sizes of each layout (a field the layout does not read is an error).
SIZES = {"colocated": "instances = 2", "disaggregated": "prefill_instances = 2\ndecode_instances = 1"}


@pytest.mark.parametrize("layout", ["colocated", "disaggregated"])
def test_no_timeline_writes_the_same_summary_and_requests(tmp_path: Path, layout: str, capsys):
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(layout=layout, sizes=SIZES[layout]))
    with_timeline, without = tmp_path / "with", tmp_path / "without"
    assert main(["sim", "run", str(config), "--out", str(with_timeline)]) == 0
    assert main(["sim", "run", str(config), "--out", str(without), "--no-timeline"]) == 0
    assert (with_timeline / "trace.json").exists() and not (without / "trace.json").exists()
    for name in ("requests.csv", "config.toml", "resolved_config.toml"):
        assert (without / name).read_bytes() == (with_timeline / name).read_bytes()
    # The same summary, but for what the timeline holds (only a run that wrote one says).
    kept = json.loads((with_timeline / "summary.json").read_text())
    assert kept.pop("timeline")["truncated"] is False
    assert json.loads((without / "summary.json").read_text()) == kept
    printed = capsys.readouterr().out.split("=" * 50)
    assert printed[0].strip() == printed[1].strip()  # the same table twice


spans = st.lists(st.tuples(st.floats(0, 100), st.floats(0, 5)), max_size=40)


@settings(max_examples=100, deadline=None)
@given(steps=spans)
def test_a_busy_span_folds_like_its_interval(steps):
    """What an instance does without a timeline (`ResourceTally.add_busy`) is what folding its
    "batch" Interval does."""
    by_interval, by_span = ResourceTally(), ResourceTally()
    for start, length in steps:
        by_interval.add_interval(Interval("instance/x", "batch", start, start + length, (("steps", 1),)))
        by_span.add_busy("instance/x", start, start + length)
    assert by_span.spans.get("instance/x") == by_interval.spans.get("instance/x")
    assert by_span.last_end_s == by_interval.last_end_s


def test_by_default_a_timeline_only_up_to_the_size_rule(tmp_path: Path, monkeypatch, capsys):
    """Neither flag: trace.json for runs of at most DEFAULT_TIMELINE_MAX_REQUESTS requests, none
    (and one line on stderr saying why) above; --timeline keeps one whatever the size."""
    import infralab.sim.run as sim_run

    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(layout="colocated", sizes=SIZES["colocated"]))  # 60 requests
    monkeypatch.setattr(sim_run, "DEFAULT_TIMELINE_MAX_REQUESTS", 60)
    assert main(["sim", "run", str(config), "--out", str(tmp_path / "at")]) == 0
    assert (tmp_path / "at" / "trace.json").exists()
    assert "no trace.json" not in capsys.readouterr().err
    monkeypatch.setattr(sim_run, "DEFAULT_TIMELINE_MAX_REQUESTS", 59)
    assert main(["sim", "run", str(config), "--out", str(tmp_path / "above")]) == 0
    assert not (tmp_path / "above" / "trace.json").exists()
    assert "no trace.json: 60 requests, more than the 59" in capsys.readouterr().err
    assert main(["sim", "run", str(config), "--out", str(tmp_path / "asked"), "--timeline"]) == 0
    assert (tmp_path / "asked" / "trace.json").exists()
    # The same results but the timeline, whichever way it was decided.
    for name in ("requests.csv", "resolved_config.toml"):
        assert (tmp_path / "above" / name).read_bytes() == (tmp_path / "asked" / name).read_bytes()


def test_both_timeline_flags_are_one_error(tmp_path: Path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(layout="colocated", sizes=SIZES["colocated"]))
    code = main(["sim", "run", str(config), "--out", str(tmp_path / "x"), "--timeline", "--no-timeline"])
    assert code != 0 and "--timeline, --no-timeline: both given" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_the_flags_help_names_the_rules_size():
    from infralab.cli import COMMANDS
    from infralab.sim.run import DEFAULT_TIMELINE_MAX_REQUESTS

    (run,) = [c for c in COMMANDS if c.words == ("sim", "run")]
    (flag,) = [a for a in run.args if a.names == ("--timeline",)]
    assert f"{DEFAULT_TIMELINE_MAX_REQUESTS:,} requests" in flag.options["help"]
