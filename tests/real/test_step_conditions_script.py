"""benchmarks/step_conditions.py, the GPU step-time experiment (docs/gpu.md), runs end to end on the
CPU with a tiny engine: every condition it is asked for becomes a row with a positive median."""

from __future__ import annotations

import json

import pytest

from support.scripts import load_benchmark

pytest.importorskip("transformers")


def test_step_conditions_writes_one_row_per_condition(tmp_path, capsys):
    script = load_benchmark("step_conditions")
    code = script.main(["--repeats", "2", "--contended-repeats", "0", "--poll-output", "0", "--batch", "2",
                        "--past", "8", "--output", "3", "--out", str(tmp_path)])
    assert code == 0
    rows = json.loads((tmp_path / "step_conditions.json").read_text())["rows"]
    assert set(rows) == {"alone", "worker thread", "replay", "replay: host before", "replay: host after"}
    assert all(row["median_s"] > 0 for row in rows.values())
    assert rows["replay"]["n"] == 2  # 3 output tokens: the first comes from the prefill, two decode steps
    assert "x1.00 of alone" in capsys.readouterr().out
