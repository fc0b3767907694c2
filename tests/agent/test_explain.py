"""`infralab explain`: attribution on constructed runs whose answer is known, the GIL case study
pointing at its cause, and the JSON schema of docs/explain.md."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.agent.explain import PHASES, explain, gil_waits, request_phases
from infralab.agent.interval_sets import parse_selector
from infralab.agent.run_dir import LoadedRun, load_run
from infralab.cli import dispatch, parse
from infralab.errors import InputError
from infralab.metrics.records import Interval, RequestRecord, RunRecord
from infralab.metrics.timeline import save_trace

from infralab.metrics.requests_csv import write_requests_csv
from infralab.metrics.run_metrics import queue_phase_s, summarize
from infralab.metrics.schema import SLOConfig
from infralab.metrics.summary import RunSummary
from infralab.results import dump_json

ROOT = Path(__file__).resolve().parents[2]


def write_run_folder(folder: Path, run: RunRecord) -> Path:
    """A results folder as `infralab sim run` writes it (summary.json, requests.csv, trace.json)."""
    folder.mkdir(parents=True)
    dump_json(summarize(run, SLOConfig()).to_json(), folder / "summary.json")
    write_requests_csv(run, folder / "requests.csv")
    save_trace(run, folder / "trace.json")
    return folder


# ---- constructed cluster runs -------------------------------------------------------------------


def cluster_run(transfer_s) -> RunRecord:
    """Five requests on one prefill and one decode instance; request i's KV transfer takes
    transfer_s(i) seconds after its prefill; everything else is identical between calls."""
    run = RunRecord()
    for i in range(5):
        t0 = 2.0 * i
        sched, first, kv_end = t0 + 0.1, t0 + 0.4, t0 + 0.4 + transfer_s(i)
        finish = kv_end + 1.0
        req = RequestRecord(id=i, arrival_s=t0, prompt_tokens=1000, output_tokens=11, prefill_instance="prefill-0",
                            decode_instance="decode-0", first_scheduled_s=sched, first_token_s=first,
                            kv_transfer_start_s=first, kv_transfer_end_s=kv_end, finish_s=finish)
        req.token_times_s.extend([first] + [kv_end + 0.1 * k for k in range(1, 11)])
        run.requests.append(req)
        run.intervals.append(Interval("instance/prefill-0", "batch", sched, first, (("prefill_tokens", 1000),)))
        run.intervals.append(Interval("link/nic-prefill-0", "transfer", first, kv_end,
                                      (("bytes", 10**6), ("label", "kv"), ("request", i))))
        run.intervals.append(Interval("instance/decode-0", "batch", kv_end, finish, (("prefill_tokens", 0),)))
    run.end_s = max(r.finish_s for r in run.requests)
    return run


@pytest.fixture(scope="module")
def slower_transfer(tmp_path_factory):
    """(run, baseline) folders where only KV transfers got slower, request 2's the most."""
    root = tmp_path_factory.mktemp("explain")
    base = write_run_folder(root / "base", cluster_run(lambda i: 0.05))
    run = write_run_folder(root / "run", cluster_run(lambda i: 0.35 if i == 2 else 0.15))
    return load_run(run), load_run(base)


def test_only_transfer_slower_ranks_transfer_first(slower_transfer):
    run, base = slower_transfer
    doc = explain(run, base)
    m = doc["metric"]
    assert m["name"] == "e2e_s_mean" and m["units"] == 5
    assert m["delta"] == pytest.approx((4 * 0.1 + 0.3) / 5)
    first = doc["causes"][0]
    assert (first["kind"], first["key"]) == ("phase", "kv_transfer")
    # Per request (the metric's unit): 0.7 s more transfer over 5 requests; the total is labelled.
    assert first["delta_s"] == pytest.approx(0.7 / 5)
    assert first["details"]["delta_total_s"] == pytest.approx(0.7) and first["details"]["requests"] == 5
    assert first["share_of_metric_delta"] == pytest.approx(1.0)
    assert first["details"]["top_requests"][0]["id"] == 2
    assert first["intervals"][0]["args"]["request"] == 2
    # No other phase changed, so none is listed as a cause.
    assert [c["key"] for c in doc["causes"] if c["kind"] == "phase"] == ["kv_transfer"]
    top = doc["units"]["top"][0]
    assert top["id"] == 2 and top["dominant_phase"] == "kv_transfer"
    assert top["delta_s"] == pytest.approx(0.3)
    # The transfer is never hidden under prefill: the default overlap pair says so.
    (ov,) = doc["overlaps"]
    assert ov["name"] == "kv flows vs prefill batches"
    assert ov["run"]["a_covered_by_b"] == 0.0 and ov["run"]["a_exposed_s"] == pytest.approx(4 * 0.15 + 0.35)
    link = next(r for r in doc["resources"] if r["track"] == "link/nic-prefill-0")
    assert link["delta_busy_s"] > 0


def test_ttft_metric_excludes_transfer(slower_transfer):
    run, base = slower_transfer
    doc = explain(run, base, metric="ttft")
    assert doc["metric"]["delta"] == pytest.approx(0.0, abs=1e-9)
    assert [c["name"] for c in doc["breakdown"]["categories"]] == ["queue", "prefill"]
    assert all(c["kind"] != "phase" for c in doc["causes"])


def test_single_run_explains_where_time_goes(slower_transfer):
    run, _ = slower_transfer
    doc = explain(run)
    assert doc["baseline"] is None and doc["metric"]["delta"] is None
    assert all(c["delta_s"] is None for c in doc["causes"])
    # Phases (seconds per request) first, largest first; then the overlaps (seconds over the run).
    kinds = [c["kind"] for c in doc["causes"]]
    assert kinds == sorted(kinds, key=lambda k: k != "phase")
    runs = [c["run_s"] for c in doc["causes"] if c["kind"] == "phase"]
    assert runs == sorted(runs, reverse=True)
    # Decode (1 s per request) dominates a single request's life here.
    assert doc["causes"][0]["key"] == "decode"


def test_comparing_a_folder_with_a_timeline_is_refused(slower_transfer, tmp_path):
    run, _ = slower_transfer
    timeline = LoadedRun(source="t.json", kind="timeline", intervals=())
    with pytest.raises(InputError, match="--against"):
        explain(run, timeline)
    with pytest.raises(InputError, match="--metric"):
        explain(timeline, metric="e2e")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.0, 5.0), min_size=5, max_size=5),
    st.booleans(),
)
def test_phases_add_up_to_e2e(gaps, layerwise):
    t = [0.0]
    for g in gaps:
        t.append(t[-1] + g)
    arrival, sched, first, kv_start, kv_end, finish = t[0], t[1], t[2], t[3], t[4], t[5]
    if layerwise:  # transfer starts during prefill and may end before the first token
        kv_start = sched
    req = RequestRecord(id=0, arrival_s=arrival, prompt_tokens=1, output_tokens=2, first_scheduled_s=sched,
                        first_token_s=first, kv_transfer_start_s=kv_start, kv_transfer_end_s=kv_end, finish_s=finish)
    ph = request_phases(req)
    assert set(ph) == set(PHASES) and min(ph.values()) >= 0
    assert sum(ph.values()) == pytest.approx(finish - arrival, abs=1e-9)
    assert ph["queue"] + ph["prefill"] == pytest.approx(first - arrival, abs=1e-9)
    assert ph["queue"] == queue_phase_s(req)  # the simulator's one definition of the queue phase
    colocated = dataclasses.replace(req, kv_transfer_start_s=math.nan, kv_transfer_end_s=math.nan)
    assert request_phases(colocated)["kv_transfer"] == 0.0


# ---- constructed GIL-like timelines -------------------------------------------------------------


def iv(track, state, start, end, op):
    return Interval(track, state, start, end, (("op", op),))


MAIN, KV = "thread/main", "thread/kv-transfer"
# The pairs a host-thread study declares in its timelines' metadata (agent/interval_sets.py).
PAIRS = {"overlap_pairs": [
    [["kv-transfer python", "thread/kv-transfer:python:descriptors,transfer,copy"],
     ["dispatch/combine", "thread/main:native-hold-gil,native-release-gil:dispatch,combine"]],
    [["kv-transfer work", "thread/kv-transfer:python,native-hold-gil,native-release-gil:descriptors,transfer,copy"],
     ["dispatch/combine", "thread/main:native-hold-gil,native-release-gil:dispatch,combine"]],
]}


def held_timeline() -> LoadedRun:
    """dispatch/combine hold the GIL: the transfer thread waits through dispatch, then its
    Python delays the main thread's launch; its Python never overlaps dispatch/combine."""
    ivs = (
        iv(MAIN, "native-hold-gil", 0.0, 1.0, "dispatch"),
        iv(MAIN, "gil-wait", 1.0, 1.2, "launch"),
        iv(MAIN, "python", 1.2, 1.3, "launch"),
        iv(MAIN, "native-hold-gil", 1.3, 2.0, "combine"),
        iv(KV, "gil-wait", 0.2, 1.0, "descriptors"),
        iv(KV, "python", 1.0, 1.2, "descriptors"),
        iv(KV, "native-release-gil", 1.2, 1.5, "transfer"),
        Interval("prefill/steps", "prefill-step", 0.0, 2.0, (("step", 0),)),
    )
    return LoadedRun(source="held", kind="timeline", intervals=ivs, trace_metadata=PAIRS)


def released_timeline() -> LoadedRun:
    ivs = (
        iv(MAIN, "native-release-gil", 0.0, 1.0, "dispatch"),
        iv(MAIN, "python", 1.0, 1.1, "launch"),
        iv(MAIN, "native-release-gil", 1.1, 1.8, "combine"),
        iv(KV, "python", 0.2, 0.4, "descriptors"),
        iv(KV, "native-release-gil", 0.4, 0.7, "transfer"),
        Interval("prefill/steps", "prefill-step", 0.0, 1.8, (("step", 0),)),
    )
    return LoadedRun(source="released", kind="timeline", intervals=ivs, trace_metadata=PAIRS)


def test_gil_like_runs_point_at_gil_wait_and_overlap():
    doc = explain(held_timeline(), released_timeline())
    assert doc["metric"]["name"] == "prefill_span_s"
    assert doc["metric"]["delta"] == pytest.approx(0.2)
    ranked = [(c["kind"], c["key"]) for c in doc["causes"]]
    assert ranked[:4] == [
        ("gil_wait", KV),
        ("overlap", "kv-transfer work vs dispatch/combine"),
        ("gil_wait", MAIN),  # ties with the next at 0.2 s; gil_wait sorts before overlap
        ("overlap", "kv-transfer python vs dispatch/combine"),
    ]
    kv_wait = doc["causes"][0]
    assert kv_wait["delta_s"] == pytest.approx(0.8)
    assert kv_wait["details"]["blocked_by"][0] == {
        "thread": MAIN, "state": "native-hold-gil", "op": "dispatch", "run_s": pytest.approx(0.8),
        "baseline_s": 0.0, "delta_s": pytest.approx(0.8)}
    main_wait = doc["causes"][2]
    assert main_wait["on_critical_path"] and main_wait["share_of_metric_delta"] == pytest.approx(1.0)
    assert main_wait["details"]["blocked_by"][0]["thread"] == KV
    # The telltale: the transfer thread's Python overlaps 0 % of dispatch/combine, and is reported.
    py = next(o for o in doc["overlaps"] if o["name"] == "kv-transfer python vs dispatch/combine")
    assert py["run"]["b_covered_by_a"] == 0.0 and py["run"]["a_covered_by_b"] == 0.0
    assert py["baseline"]["a_covered_by_b"] == pytest.approx(1.0)
    assert py["delta"]["a_exposed_s"] == pytest.approx(0.2)
    # The critical thread's breakdown adds up to the metric change.
    assert sum(c["delta_s"] for c in doc["breakdown"]["categories"]) == pytest.approx(0.2)
    assert doc["breakdown"]["critical_track"] == MAIN


def test_causes_against_the_metric_change_rank_last():
    """Holding the GIL made the transfer thread wait much longer, but the span got shorter: the
    critical thread's smaller GIL wait explains the change; the transfer thread's wait cannot."""
    held = LoadedRun(source="held", kind="timeline", intervals=(
        iv(MAIN, "native-hold-gil", 0.0, 1.0, "dispatch"),
        iv(MAIN, "python", 1.0, 1.1, "launch"),
        iv(KV, "gil-wait", 0.1, 1.0, "descriptors"),
        iv(KV, "python", 1.1, 1.2, "descriptors"),
        Interval("prefill/steps", "prefill-step", 0.0, 1.1, (("step", 0),)),
    ))
    released = LoadedRun(source="released", kind="timeline", intervals=(
        iv(MAIN, "native-release-gil", 0.0, 1.0, "dispatch"),
        iv(MAIN, "gil-wait", 1.0, 1.05, "launch"),
        iv(MAIN, "python", 1.05, 1.15, "launch"),
        iv(KV, "python", 0.95, 1.05, "descriptors"),
        Interval("prefill/steps", "prefill-step", 0.0, 1.15, (("step", 0),)),
    ))
    doc = explain(held, released)
    assert doc["metric"]["delta"] == pytest.approx(-0.05)
    first = doc["causes"][0]
    assert (first["kind"], first["key"], first["agrees_with_metric"]) == ("gil_wait", MAIN, True)
    assert first["share_of_metric_delta"] == pytest.approx(1.0)
    kv = next(c for c in doc["causes"] if c["key"] == KV)
    assert kv["agrees_with_metric"] is False and kv["delta_s"] == pytest.approx(0.9)  # the largest change
    agreeing = [c["rank"] for c in doc["causes"] if c["agrees_with_metric"]]
    assert kv["rank"] == max(agreeing) + 1  # first of those going against the change, after all others


def test_gil_wait_blockers_and_handoff():
    run = LoadedRun(source="x", kind="timeline", intervals=(
        iv("thread/a", "gil-wait", 0.0, 1.0, "work"),
        iv("thread/b", "python", 0.0, 0.6, "loop"),
        iv("thread/b", "native-release-gil", 0.6, 2.0, "sleep"),
    ))
    waits = gil_waits(run)
    assert waits["thread/a"]["total_s"] == pytest.approx(1.0)
    assert waits["thread/a"]["blockers"] == {("thread/b", "python", "loop"): pytest.approx(0.6),
                                             ("(hand-off)", "", ""): pytest.approx(0.4)}
    assert waits["thread/b"]["total_s"] == 0.0


def test_user_overlap_pairs_replace_defaults():
    pair = (parse_selector("thread/kv-transfer:python"), parse_selector("thread/main:native-*:dispatch"))
    doc = explain(held_timeline(), released_timeline(), overlaps=[pair])
    (ov,) = doc["overlaps"]
    assert ov["a"]["selector"] == "thread/kv-transfer:python"
    assert ov["run"]["a_s"] == pytest.approx(0.2) and ov["run"]["both_s"] == 0.0
    assert ov["baseline"]["both_s"] == pytest.approx(0.2)
    with pytest.raises(InputError, match="TRACK"):
        parse_selector("a:b:c:d")


# ---- the GIL case study itself ------------------------------------------------------------------


@pytest.fixture(scope="module")
def gil_case_timelines(tmp_path_factory):
    """Timelines of the shipped experiment's T8k-ep8-after-page1 scenario (4 steps, to stay quick):
    held with transfer, held without, released with transfer."""
    from infralab.agent.studies import load_hook

    study = ROOT / "experiments" / "gil_kv_transfer"
    case, scenario_module = load_hook(study / "case.py"), load_hook(study / "scenario.py")
    build, run = scenario_module.build, scenario_module.run
    meta = load_hook(study / "attribution.py").timeline_metadata()  # the interval sets it is about
    exp = case.load_experiment(study / "experiment.toml")
    scenario = next(s for s in exp.scenario if s.name == "T8k-ep8-after-page1")
    scenario = dataclasses.replace(scenario, steps=4)
    built = build(exp.setup, exp.host, scenario)
    root = tmp_path_factory.mktemp("gil")
    paths = {}
    for name, holds, transfer in (("held", True, True), ("held-no-transfer", True, False), ("released", False, True)):
        paths[name] = root / f"{name}.json"
        save_trace(run(built, scenario, holds, transfer).record, paths[name], metadata=meta)
    return paths


@pytest.mark.parametrize("baseline", ["held-no-transfer", "released"])
def test_gil_case_points_at_the_cause(gil_case_timelines, baseline):
    doc = explain(load_run(gil_case_timelines["held"]), load_run(gil_case_timelines[baseline]))
    assert doc["metric"]["delta"] > 0
    first, second = doc["causes"][0], doc["causes"][1]
    assert (first["kind"], first["key"]) == ("gil_wait", KV)
    assert first["details"]["blocked_by"][0]["op"] == "dispatch"
    assert second["kind"] == "overlap" and "dispatch/combine" in second["key"]
    py = next(o for o in doc["overlaps"] if o["name"] == "kv-transfer python vs dispatch/combine")
    assert py["run"]["b_covered_by_a"] == 0.0


# ---- the JSON schema (docs/explain.md) ----------------------------------------------------------

NUM = (int, float)
OPT_NUM = (int, float, type(None))


def check_types(obj, spec, where="doc"):
    for key, kind in spec.items():
        assert key in obj, f"{where}: missing {key}"
        assert isinstance(obj[key], kind), f"{where}.{key}: {type(obj[key]).__name__}"


def check_schema(doc):
    check_types(doc, {"schema": str, "run": dict, "baseline": (dict, type(None)), "ranking_rule": str,
                      "metric": dict, "causes": list, "breakdown": dict, "units": dict, "threads": list,
                      "overlaps": list, "resources": list, "metrics": list})
    assert doc["schema"] == "infralab.explain/1"
    check_types(doc["run"], {"source": str, "kind": str, "intervals": int, "timeline_truncated": bool,
                             "requests": (int, type(None))}, "run")
    check_types(doc["metric"], {"name": str, "unit": str, "description": str, "run": OPT_NUM, "baseline": OPT_NUM,
                                "delta": OPT_NUM, "delta_total_s": OPT_NUM, "relative": OPT_NUM, "units": int}, "metric")
    for i, c in enumerate(doc["causes"]):
        check_types(c, {"rank": int, "kind": str, "key": str, "description": str, "run_s": NUM,
                        "baseline_s": OPT_NUM, "delta_s": OPT_NUM, "on_critical_path": bool,
                        "share_of_metric_delta": OPT_NUM, "agrees_with_metric": (bool, type(None)),
                        "details": dict, "intervals": list}, f"causes[{i}]")
        assert c["rank"] == i + 1 and c["kind"] in ("phase", "thread_activity", "gil_wait", "overlap")
        for j, x in enumerate(c["intervals"]):
            check_types(x, {"track": str, "name": str, "op": str, "start_s": NUM, "end_s": NUM, "duration_s": NUM,
                            "args": dict}, f"causes[{i}].intervals[{j}]")
    check_types(doc["breakdown"], {"unit": str, "critical_track": (str, type(None)), "categories": list})
    for c in doc["breakdown"]["categories"]:
        check_types(c, {"name": str, "run_s": NUM, "baseline_s": OPT_NUM, "delta_s": OPT_NUM}, "category")
    check_types(doc["units"], {"kind": str, "paired": (int, type(None)), "only_run": int,
                               "only_baseline": (int, type(None)), "top": list})
    for u in doc["units"]["top"]:
        check_types(u, {"id": int, "start_s": NUM, "end_s": NUM, "run_s": NUM, "baseline_s": OPT_NUM,
                        "delta_s": OPT_NUM, "phases": dict, "dominant_phase": (str, type(None))}, "unit")
    for t in doc["threads"]:
        check_types(t, {"track": str, "critical": bool, "gil_wait": dict, "activities": list}, "thread")
        check_types(t["gil_wait"], {"run_s": NUM, "baseline_s": OPT_NUM, "delta_s": OPT_NUM, "blocked_by": list})
        for b in t["gil_wait"]["blocked_by"]:
            check_types(b, {"thread": str, "state": str, "op": str, "run_s": NUM, "baseline_s": OPT_NUM,
                            "delta_s": OPT_NUM}, "blocked_by")
    stats = {k: NUM for k in ("a_s", "b_s", "both_s", "a_covered_by_b", "b_covered_by_a", "a_exposed_s")}
    for o in doc["overlaps"]:
        check_types(o, {"name": str, "a": dict, "b": dict, "run": dict, "baseline": (dict, type(None)),
                        "delta": (dict, type(None))}, "overlap")
        check_types(o["a"], {"name": str, "selector": str})
        check_types(o["run"], stats, "overlap.run")
    for r in doc["resources"]:
        check_types(r, {"track": str, "kind": str, "run": dict, "baseline": (dict, type(None)),
                        "delta_busy_s": OPT_NUM, "delta_busy_fraction": OPT_NUM}, "resource")
        check_types(r["run"], {"busy_s": NUM, "busy_fraction": NUM})
    for x in doc["metrics"]:
        check_types(x, {"name": str, "run": (*OPT_NUM, bool), "baseline": (*OPT_NUM, bool), "delta": OPT_NUM})
    # The ranking rule: causes moving with the metric first, then by |delta_s| within each group.
    requests = doc["run"]["requests"] is not None
    keys = [(c["agrees_with_metric"] is False, requests and not c["on_critical_path"],
             -abs(c["delta_s"] if c["delta_s"] is not None else c["run_s"])) for c in doc["causes"]]
    assert keys == sorted(keys)
    json.dumps(doc, allow_nan=False)


def test_summary_metrics_are_the_flat_metric_names(slower_transfer):
    run, base = slower_transfer
    doc = explain(run, base)
    mine = RunSummary.from_json(run.summary).flat_metrics()
    theirs = RunSummary.from_json(base.summary).flat_metrics()
    names = [x["name"] for x in doc["metrics"]]
    assert {"goodput", "completed", "saturated", "ttft_p90_s", "queueing_delay_mean_s"} <= set(names)
    for x in doc["metrics"]:
        assert x["run"] == mine[x["name"]] and x["baseline"] == theirs[x["name"]], x["name"]


def test_schema_of_every_kind_of_explanation(slower_transfer):
    run, base = slower_transfer
    for doc in (explain(run, base), explain(run), explain(held_timeline(), released_timeline()),
                explain(held_timeline())):
        check_schema(doc)


def test_cli_json_and_text(slower_transfer, capsys):
    run, base = slower_transfer
    args = parse(["explain", run.source, "--against", base.source, "--json"])
    assert dispatch(args) == 0
    doc = json.loads(capsys.readouterr().out)
    check_schema(doc)
    assert doc["causes"][0]["key"] == "kv_transfer"
    args = parse(["explain", run.source, "--against", base.source])
    assert dispatch(args) == 0
    text = capsys.readouterr().out
    first = next(line for line in text.splitlines() if line.lstrip().startswith("1. ["))
    assert "[phase] kv_transfer" in first and "s per request" in first
