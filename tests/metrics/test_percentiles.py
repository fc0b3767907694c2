"""Configurable percentiles: `[metrics] percentiles` and `--percentiles` drive summary.json, the
printed table and the flat metric names; the default stays p50/p90/p99."""

from __future__ import annotations

import io
import json
from array import array
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from infralab.cli import main
from infralab.errors import InputError
from infralab.metrics.records import RequestRecord, RunRecord
from infralab.metrics.run_metrics import distribution, print_summary, summarize
from infralab.metrics.schema import SLOConfig
from infralab.metrics.summary import PERCENTILES, Distribution, RunSummary
from infralab.sim.config import load_config
from support.toml_fixtures import synthetic_config

CONFIG = synthetic_config(num_requests=20, rate=4.0, prompt=(10, 400), output=(2, 20))


def finished(i: int, arrival: float, ttft: float, step: float, tokens: int) -> RequestRecord:
    times = [arrival + ttft + k * step for k in range(tokens)]
    return RequestRecord(id=i, arrival_s=arrival, prompt_tokens=10, output_tokens=tokens,
                         first_token_s=times[0], finish_s=times[-1], token_times_s=array("d", times))


def a_run() -> RunRecord:
    return RunRecord(requests=[finished(i, i * 0.5, 0.1 + 0.01 * i, 0.02, 3 + i % 4) for i in range(30)])


def test_a_distribution_holds_exactly_the_asked_percentiles() -> None:
    values = np.linspace(0.0, 1.0, 101)
    d = distribution(values, (5, 50, 99.9))
    assert list(d.percentiles) == ["p5", "p50", "p99.9"]
    assert d.percentiles["p99.9"] == pytest.approx(float(np.percentile(values, 99.9)))
    assert distribution(np.array([]), (5, 95)).percentiles == {"p5": None, "p95": None}


def test_the_summary_json_table_and_metric_names_follow_the_percentiles() -> None:
    summary = summarize(a_run(), SLOConfig(), (50, 95, 99.9))
    doc = summary.to_json()
    assert {k for k in doc["ttft_s"] if k.startswith("p")} == {"p50", "p95", "p99.9"}
    assert RunSummary.from_json(json.loads(json.dumps(doc))) == summary
    flat = summary.flat_metrics()
    assert "ttft_p95_s" in flat and "itl_p99.9_s" in flat and "ttft_p90_s" not in flat
    buf = io.StringIO()
    print_summary(summary, file=buf)
    text = buf.getvalue()
    assert "P95 TTFT (ms):" in text and "P99.9 E2EL (ms):" in text and "P90 TTFT" not in text


@given(st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=6, unique=True).map(sorted))
def test_percentile_names_are_distinct_and_read_back(qs: list[float]) -> None:
    d = distribution(np.linspace(0.0, 1.0, 7), qs)
    assert [float(k[1:]) for k in d.percentiles] == qs
    assert Distribution.from_json(json.loads(json.dumps(d.to_json()))) == d


def test_the_default_is_p50_p90_p99_and_the_same_summary_as_before() -> None:
    assert PERCENTILES == (50, 90, 99)
    default = summarize(a_run(), SLOConfig())
    assert default == summarize(a_run(), SLOConfig(), (50.0, 90.0, 99.0))
    assert list(default.latency.ttft_s.percentiles) == ["p50", "p90", "p99"]


def test_cli_percentiles_and_config_agree_and_bad_lists_are_refused(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG)
    assert main(["sim", "run", str(cfg), "--out", str(tmp_path / "a"), "--no-timeline", "--percentiles", "50,75"]) == 0
    (tmp_path / "b.toml").write_text(CONFIG + "\n[metrics]\npercentiles = [50, 75]\n")
    assert main(["sim", "run", str(tmp_path / "b.toml"), "--out", str(tmp_path / "b"), "--no-timeline"]) == 0
    a = json.loads((tmp_path / "a" / "summary.json").read_text())
    b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert a["ttft_s"] == b["ttft_s"] and "p75" in a["ttft_s"]
    for bad in ([50, 50], [90, 50], []):
        (tmp_path / "bad.toml").write_text(CONFIG + f"\n[metrics]\npercentiles = {bad}\n")
        with pytest.raises(InputError, match="metrics.percentiles"):
            load_config(tmp_path / "bad.toml")
    capsys.readouterr()
    assert main(["sim", "run", str(cfg), "--out", str(tmp_path / "c"), "--percentiles", "50,ninety"]) == 2
    assert "--percentiles" in capsys.readouterr().err
