"""`infralab fidelity calibrate`: a real-run config's step table scaled per kind of step to a run's
own steps. A fake run folder (steps at the table's grid points, slower than profiled by a known
amount per kind) stands in for a real run: the scaled table must charge the run's totals by kind
exactly, keep the table's provenance, and refuse to overwrite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infralab.agent.fidelity.calibrate import scale_rows
from infralab.agent.fidelity.sim_side import table_predictor
from infralab.calibration_table import read_provenance, read_table
from infralab.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "experiments" / "real" / "token_budget_small_llama.toml"
TABLE = CONFIG.parent / "small_llama_cpu_steps.csv"


def _step(index: int, start: float, q: int, k: int, s: int, forward: float, host: float) -> dict:
    prompt = q - s if q > s else 0  # one prompt sequence of q - s + 1 tokens beside s - 1 decoding ones
    return {"index": index, "start_s": start, "forward_start_s": start + host / 2, "forward_end_s": start + host / 2 + forward,
            "end_s": start + host + forward, "q_tokens": q, "kv_tokens_read": k - q, "seqs": s,
            "prefill_seqs": 1 if prompt else 0, "prefill_tokens": prompt + 1 if prompt else 0, "new_tokens": s}


def _fake_run(folder: Path) -> list[tuple[int, int, int]]:
    """A run folder whose steps sit on grid points: prompt steps 1.3x the profiled forward, decode-only
    steps 0.8x, each with 2 ms outside the forward."""
    rows = [r.shape_dict for r in read_table(TABLE) if r.kernel == "engine_step"]
    points = [(d["q_tokens"], d["kv_tokens"], d["seqs"]) for d in rows][::7]
    predict = table_predictor(TABLE, "fp32", "cpu", 0.0)
    steps, t = [], 0.0
    for i, (q, k, s) in enumerate(points):
        forward = predict(q, k, s)[0] * (1.3 if q > s else 0.8)
        steps.append(_step(i, t, q, k, s, forward, 0.002))
        t += forward + 0.002
    folder.mkdir(parents=True)
    (folder / "replay.json").write_text(json.dumps({"steps": steps}))
    return points


def test_the_scaled_table_charges_the_runs_totals_by_kind_and_keeps_its_provenance(tmp_path, capsys):
    points = _fake_run(tmp_path / "run")
    out = tmp_path / "scaled.csv"
    assert main(["fidelity", "calibrate", str(CONFIG), "--run", str(tmp_path / "run"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "factors" in printed and "batch-size class" in printed and f'step_table = "{out}"' in printed
    assert "per kind and batch-size class" in out.read_text().splitlines()[0]
    assert read_provenance(out) == read_provenance(TABLE)
    steps = json.loads((tmp_path / "run" / "replay.json").read_text())["steps"]
    scaled = table_predictor(out, "fp32", "cpu", 0.0)
    for prompt_kind in (True, False):
        kind = [(p, st) for p, st in zip(points, steps) if (p[0] > p[2]) == prompt_kind]
        charged = sum(sum(scaled(*p)) for p, _ in kind)
        measured = sum(st["end_s"] - st["start_s"] for _, st in kind)
        # a factor per batch-size class, each drawn a little towards its kind's (the host time is not
        # scaled, so the classes' ratios differ slightly): the kind's total to within 0.1 %
        assert len(kind) >= 3 and charged == pytest.approx(measured, rel=1e-3)
    assert main(["fidelity", "calibrate", str(CONFIG), "--run", str(tmp_path / "run"), "--out", str(out)]) == 2
    assert "exists; refusing to overwrite" in capsys.readouterr().err


def test_scale_rows_scales_each_kind_and_puts_the_host_time_in_prepare():
    rows = read_table(TABLE)[:4]
    scaled = scale_rows(rows, lambda q, s: 2.0 if q > s else 0.5, 0.001)
    for before, after in zip(rows, scaled):
        shape = before.shape_dict
        f = 2.0 if shape["q_tokens"] > shape["seqs"] else 0.5
        expected = f * before.median_s if before.kernel == "engine_step" else f * (before.median_s + 0.001)
        assert after.median_s == pytest.approx(expected)


def test_a_folder_without_a_replay_is_named_and_nothing_is_written(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert main(["fidelity", "calibrate", str(CONFIG), "--run", str(tmp_path / "run"), "--out", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run/replay.json" in err and "infralab real run" in err
    assert not (tmp_path / "t.csv").exists()
