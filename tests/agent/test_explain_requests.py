"""`infralab explain` on results folders: per-request means worked by hand for every request
metric, totals labelled as totals, folders without a timeline (--no-timeline, `test` arms) and
folders lacking summary keys or request columns (runs of other engines)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from infralab.agent.explain import REQUEST_METRICS, explain
from infralab.agent.explain_text import format_text, table
from infralab.agent.run_dir import load_run
from infralab.cli import main
from infralab.metrics.records import RequestRecord, RunRecord
from infralab.metrics.requests_csv import write_requests_csv
from infralab.metrics.run_metrics import summarize
from infralab.metrics.schema import SLOConfig
from infralab.results import dump_json


def hand_run(r0_finish_s: float = 3.0) -> RunRecord:
    """Three requests (times in s):
    r0: arrives 0, scheduled 0.5, first token 1.0, finishes 3.0, 3 tokens (2 gaps of 1.0 s);
    r1: arrives 1, scheduled 1.0, first token 2.0, finishes 2.5, 6 tokens (5 gaps of 0.1 s);
    r2: arrives 2, scheduled 2.2, first token 2.4 = finish, 1 token (no TPOT, no ITL gap)."""
    run = RunRecord()
    for rid, (arrival, sched, first, finish, tokens) in enumerate(
            [(0.0, 0.5, 1.0, r0_finish_s, 3), (1.0, 1.0, 2.0, 2.5, 6), (2.0, 2.2, 2.4, 2.4, 1)]):
        req = RequestRecord(id=rid, arrival_s=arrival, prompt_tokens=100, output_tokens=tokens,
                            prefill_instance="i0", decode_instance="i0", first_scheduled_s=sched,
                            first_token_s=first, finish_s=finish)
        gap = (finish - first) / (tokens - 1) if tokens > 1 else 0.0
        req.token_times_s.extend([first + k * gap for k in range(tokens)])
        run.requests.append(req)
    run.end_s = 3.0
    return run


def write_folder(folder: Path, run: RunRecord) -> Path:
    """A results folder without trace.json, as `infralab sim run --no-timeline` writes it."""
    folder.mkdir(parents=True)
    dump_json(summarize(run, SLOConfig()).to_json(), folder / "summary.json")
    write_requests_csv(run, folder / "requests.csv")
    return folder


@pytest.fixture()
def folder(tmp_path) -> Path:
    return write_folder(tmp_path / "run", hand_run())


# Worked by hand from hand_run's docstring.
EXPECTED = {
    "e2e": ((3.0 + 1.5 + 0.4) / 3, {"queue": 0.7 / 3, "prefill": 1.7 / 3, "decode": 2.5 / 3}),
    "ttft": ((1.0 + 1.0 + 0.4) / 3, {"queue": 0.7 / 3, "prefill": 1.7 / 3}),
    "tpot": ((1.0 + 0.1) / 2, {"decode": (1.0 + 0.1) / 2}),  # r2 has no TPOT
    "itl": ((2.0 + 0.5) / (2 + 5), {"decode": 2.5 / 7}),  # every gap pooled
    "queue": (0.7 / 3, {"queue": 0.7 / 3}),
}


@pytest.mark.parametrize("metric", sorted(REQUEST_METRICS))
def test_per_request_means_by_hand(folder, metric):
    value, parts = EXPECTED[metric]
    doc = explain(load_run(folder), metric=metric)
    assert doc["metric"]["run"] == pytest.approx(value)
    got = {c["name"]: c["run_s"] for c in doc["breakdown"]["categories"] if c["run_s"] > 0}
    assert got == pytest.approx(parts)
    assert sum(c["run_s"] for c in doc["breakdown"]["categories"]) == pytest.approx(value)


def test_means_match_the_summary_and_totals_are_sums(folder):
    run = load_run(folder)
    summary = json.loads((folder / "summary.json").read_text())
    for metric, key in (("e2e", "e2e_s"), ("ttft", "ttft_s"), ("tpot", "tpot_s"), ("itl", "itl_s")):
        assert explain(run, metric=metric)["metric"]["run"] == pytest.approx(summary[key]["mean"]), metric
    decode = next(c for c in explain(run)["breakdown"]["categories"] if c["name"] == "decode")
    assert decode["run_total_s"] == pytest.approx(2.5) and decode["run_s"] == pytest.approx(2.5 / 3)


def test_shares_of_a_change_add_up_to_the_metric_change(tmp_path):
    base = write_folder(tmp_path / "base", hand_run())
    run = write_folder(tmp_path / "slow", hand_run(r0_finish_s=4.0))  # r0's decode takes 1 s longer
    doc = explain(load_run(run), load_run(base))
    assert doc["metric"]["delta"] == pytest.approx(1.0 / 3)
    (decode,) = [c for c in doc["causes"] if c["kind"] == "phase"]
    assert decode["delta_s"] == pytest.approx(1.0 / 3) and decode["share_of_metric_delta"] == pytest.approx(1.0)
    assert decode["details"]["delta_total_s"] == pytest.approx(1.0)


def test_a_folder_without_a_timeline_is_explained_and_says_so(folder, capsys):
    assert main(["explain", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "note:" in text and "trace.json: no timeline" in text
    doc = explain(load_run(folder))
    assert doc["run"]["missing"][0].startswith("trace.json") and doc["overlaps"] == []
    assert main(["explain", str(folder), "--against", str(folder), "--metric", "tpot", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metric"]["name"] == "tpot_s_mean"


def test_a_folder_lacking_summary_keys_and_columns_is_explained(folder, capsys):
    summary = json.loads((folder / "summary.json").read_text())
    for key in ("links", "saturation", "itl_s"):
        del summary[key]
    summary["instances"] = {"instance/i0": {"busy_fraction": 0.5, "role": "colocated"}}  # no counters
    (folder / "summary.json").write_text(json.dumps(summary))
    with (folder / "requests.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    keep = [c for c in rows[0] if c not in ("first_scheduled_s", "kv_transfer_start_s", "kv_transfer_end_s")]
    with (folder / "requests.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, keep, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    run = load_run(folder)
    doc = explain(run, run)
    missing = "\n".join(doc["run"]["missing"])
    for gap in ("links", "saturation", "itl_s", "instances.instance/i0.counters", "first_scheduled_s",
                "kv_transfer_start_s"):
        assert gap in missing
    names = {x["name"] for x in doc["metrics"]}
    assert "goodput" in names and "saturated" not in names and "itl_mean_s" not in names
    (busy,) = [r for r in doc["resources"] if r["track"] == "instance/i0"]
    assert busy["run"]["busy_fraction"] == 0.5  # what the summary has is still used
    # Without first_scheduled_s the queue phase is zero: its time counts as prefill.
    parts = {c["name"]: c["run_s"] for c in doc["breakdown"]["categories"]}
    assert parts["queue"] == 0.0 and parts["prefill"] == pytest.approx((1.0 + 1.0 + 0.4) / 3)
    assert main(["explain", str(folder)]) == 0
    assert "summary.json: no links" in capsys.readouterr().out


def test_a_folder_without_required_columns_is_one_input_error(folder, capsys):
    text = (folder / "requests.csv").read_text().replace("finish_s", "done_s", 1)
    (folder / "requests.csv").write_text(text)
    assert main(["explain", str(folder)]) == 2
    assert "finish_s" in capsys.readouterr().err


def test_text_columns_are_aligned(folder):
    lines = table(["name", "run", "delta"], [["a", "1.0000", "+0.5000"], ["longer name", "12.0000", "-1.0000"]])
    assert lines == ["  name             run    delta",
                     "  a             1.0000  +0.5000",
                     "  longer name  12.0000  -1.0000"]
    text = format_text(explain(load_run(folder)))
    header = next(line for line in text.splitlines() if line.strip().startswith("phase"))
    body = text.splitlines()[text.splitlines().index(header) + 1:][:5]
    assert len({len(line) for line in [header, *body]}) == 1  # one width: the columns line up


def test_the_command_table_offers_explains_metrics():
    from infralab.agent.explain import METRIC_CHOICES
    from infralab.cli import COMMANDS

    (command,) = [c for c in COMMANDS if c.words == ("explain",)]
    (metric,) = [a for a in command.args if a.names == ("--metric",)]
    assert tuple(metric.options["choices"]) == METRIC_CHOICES
