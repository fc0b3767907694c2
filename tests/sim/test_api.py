"""The Python API (infralab.sim.api): the same run as `infralab sim run`, as arrays, no files."""

from __future__ import annotations

import csv
import json
import math
import os
import tomllib
from pathlib import Path

import numpy as np
import pytest

from infralab.cli import main
from infralab.errors import InputError
from infralab.sim import api

CONFIG = """\
model = "llama-3-8b"

[run]
seed = 3

[hardware]
accelerator = "H100"

[workload]
kind = "synthetic"
num_requests = 40

[workload.arrival]
kind = "gamma"
rate = 8.0
cv = 2.0

[workload.prompt]
kind = "uniform"
low = 20
high = 900

[workload.output]
kind = "uniform"
low = 1
high = 40

[cluster]
layout = "disaggregated"
prefill_instances = 2
"""


def test_the_api_gives_the_cli_s_summary_and_requests_table(tmp_path: Path) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text(CONFIG)
    sets = ["engine.max_batched_tokens=1024", "metrics.percentiles=[50, 95]"]
    result = api.run(path, overrides=sets, seed=9)
    assert main(["sim", "run", str(path), "--out", str(tmp_path / "cli"), "--seed", "9", "--no-timeline",
                 *(f"--set={s}" for s in sets)]) == 0
    cli = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert json.loads(json.dumps(result.summary.to_json())) == cli
    assert result.metrics["ttft_p95_s"] == cli["ttft_s"]["p95"]
    assert result.resolved_config == (tmp_path / "cli" / "resolved_config.toml").read_text()
    with (tmp_path / "cli" / "requests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert list(result.requests) == list(rows[0])  # requests.csv's columns, in its order
    for name, column in result.requests.items():
        assert len(column) == len(rows)
        for value, row in zip(column, rows):
            text = row[name]
            if column.dtype.kind == "f":
                assert (math.isnan(value) and text == "") or value == float(text)
            else:
                assert str(value) == text
    assert result.requests["id"].dtype == np.int64 and result.requests["ttft_s"].dtype == np.float64


def test_a_dict_config_runs_without_writing_anything(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    doc = tomllib.loads(CONFIG)
    result = api.run(doc, overrides=["cluster.decode_instances=2"])
    assert os.listdir(tmp_path) == [] and capsys.readouterr() == ("", "")
    assert result.config.cluster.decode_instances == 2 and "decode_instances" not in doc["cluster"]
    assert "cluster.transfer.mode = 'after_prefill'" in result.layout_defaults
    assert result.record is None
    with pytest.raises(ValueError, match="timeline=True"):
        result.save_trace(tmp_path / "t.json")
    assert api.run(doc, overrides=["cluster.decode_instances=2"]).summary == result.summary  # deterministic


def test_timeline_true_keeps_the_record_and_writes_a_trace(tmp_path: Path) -> None:
    result = api.run(tomllib.loads(CONFIG), timeline=True)
    assert result.record is not None and result.record.intervals
    facts = result.save_trace(tmp_path / "trace.json")
    assert facts["truncated"] is False and (tmp_path / "trace.json").exists()


def test_bad_input_is_one_input_error() -> None:
    with pytest.raises(InputError, match="overrides 'cluster.instances'"):
        api.run(tomllib.loads(CONFIG), overrides=["cluster.instances"])
    with pytest.raises(InputError, match=r"<config dict>: cluster\.instances: does not apply"):
        api.run(tomllib.loads(CONFIG), overrides=["cluster.instances=3"])
