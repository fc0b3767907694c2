"""`infralab search`: the Pareto front on hand-made points, constraint filtering and ranking,
determinism of a real (tiny) search, and one clear InputError per kind of bad SPACE file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.agent.search import METRICS, build_report, format_text, load_space, pareto_front, run_points, run_search
from infralab.errors import InputError
from support.toml_fixtures import synthetic_config

BASE = synthetic_config(num_requests=12, rate=4.0, prompt=256, output=8)

SPACE = """
[search]
name = "tiny"
base = "base.toml"
seed = 3
objective = "maximize output_throughput_per_accelerator"
constraints = ["ttft_p90_s <= 1.0", "not saturated"]

[fixed]
"workload.num_requests" = 10

[axes]
"cluster.instances" = [1, 2]
engine.max_num_seqs = [2, 64]
"""


def write_space(folder: Path, space: str = SPACE, base: str = BASE) -> Path:
    (folder / "base.toml").write_text(base)
    path = folder / "space.toml"
    path.write_text(space)
    return path


# ---- the Pareto front ---------------------------------------------------------------------------


def test_pareto_front_on_hand_made_points():
    # (latency, throughput): lower latency and higher throughput are better.
    points = [(1.0, 1.0), (2.0, 3.0), (3.0, 2.0), (0.5, 0.5), (2.0, 3.0), (1.0, 0.9)]
    # (3, 2) is dominated by (2, 3); (1, 0.9) by (1, 1); the two equal (2, 3) both stay.
    assert pareto_front(points, "min", "max") == [3, 0, 1, 4]
    assert pareto_front(points, "max", "max") == [1, 4, 2]  # sorted by x
    assert pareto_front([], "min", "max") == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=12))
def test_pareto_front_is_exactly_the_non_dominated(points):
    def dominates(a, b):  # min x, max y
        return a[0] <= b[0] and a[1] >= b[1] and a != b

    front = set(pareto_front([(float(x), float(y)) for x, y in points], "min", "max"))
    for i, p in enumerate(points):
        assert (i in front) == (not any(dominates(q, p) for q in points))


# ---- constraints and ranking on fake metrics ----------------------------------------------------


def fake_metrics(ttft, tput, saturated=False):
    m = {name: 1.0 for name in METRICS}
    m.update(ttft_p90_s=ttft, output_throughput_per_accelerator=tput, saturated=saturated)
    return m


def test_constraints_filter_best_and_front(tmp_path):
    space = load_space(write_space(tmp_path))
    assert [dict(k) for k in space.knobs] == [
        {"cluster.instances": 1, "engine.max_num_seqs": 2},
        {"cluster.instances": 1, "engine.max_num_seqs": 64},
        {"cluster.instances": 2, "engine.max_num_seqs": 2},
        {"cluster.instances": 2, "engine.max_num_seqs": 64},
    ]
    results = [
        fake_metrics(0.5, 100.0),
        fake_metrics(2.0, 500.0),  # violates the TTFT constraint, though the best throughput
        fake_metrics(None, 0.0),  # nothing finished: an undefined metric cannot meet a constraint
        fake_metrics(0.8, 300.0, saturated=True),
    ]
    report = build_report(space, results)
    assert [p["feasible"] for p in report["points"]] == [True, False, False, False]
    assert report["points"][1]["violated"] == ["ttft_p90_s <= 1.0"]
    assert report["points"][3]["violated"] == ["not saturated"]
    assert [b["index"] for b in report["best"]] == [0]
    assert report["pareto_front"] == [0]
    results[3] = fake_metrics(0.8, 300.0)
    report = build_report(space, results)
    assert [b["index"] for b in report["best"]] == [3, 0]
    assert report["pareto_front"] == [0, 3]
    assert [p["on_pareto_front"] for p in report["points"]] == [True, False, False, True]


# ---- a real tiny search -------------------------------------------------------------------------


def test_tiny_search_is_reproducible_across_process_counts(tmp_path):
    path = write_space(tmp_path)
    one = run_search(path, tmp_path / "one", jobs=1, progress=False)
    two = run_search(path, tmp_path / "two", jobs=2, progress=False)
    for name in ("search.json", "search.csv"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert (tmp_path / "two" / "pareto.png").stat().st_size > 0
    assert one == two
    doc = json.loads((tmp_path / "one" / "search.json").read_text())
    assert doc["schema"] == "infralab.search/1" and len(doc["points"]) == 4
    for p in doc["points"]:
        assert p["metrics"]["completed"] == 10  # the [fixed] change reached every point
        assert p["metrics"]["accelerators"] == p["knobs"]["cluster.instances"]
        assert set(p["metrics"]) == set(METRICS)
    assert all(doc["points"][i]["feasible"] for i in doc["pareto_front"])
    objective = [b["objective"] for b in doc["best"]]
    assert objective == sorted(objective, reverse=True)
    lines = (tmp_path / "one" / "search.csv").read_text().splitlines()
    assert lines[0].startswith("index,cluster.instances,engine.max_num_seqs,feasible,pruned,on_pareto_front,")
    assert len(lines) == 5


def test_seed_changes_the_workload(tmp_path):
    a = run_search(write_space(tmp_path), tmp_path / "a", jobs=1, progress=False)
    (tmp_path / "space.toml").write_text(SPACE.replace("seed = 3", "seed = 4"))
    b = run_search(tmp_path / "space.toml", tmp_path / "b", jobs=1, progress=False)
    assert [p["metrics"] for p in a["points"]] != [p["metrics"] for p in b["points"]]


# ---- bad SPACE files ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new, where",
    [
        ("engine.max_num_seqs = [2, 64]", "engine.bogus = [1]", "axes.engine.bogus"),
        ("engine.max_num_seqs = [2, 64]", "engine.max_num_seqs = []", "axes.engine.max_num_seqs"),
        ("engine.max_num_seqs = [2, 64]", "engine.max_num_seqs = [2, 0]", "axes (cluster.instances = 1, engine.max_num_seqs = 0)"),
        ("engine.max_num_seqs = [2, 64]", "pools = [\"1:1\"]", "axes.pools"),
        ('"ttft_p90_s <= 1.0"', '"ttft_p95_s <= 1.0"', "search.constraints[0]"),
        ('"ttft_p90_s <= 1.0"', '"__import__(1)"', "search.constraints[0]"),
        ('base = "base.toml"', 'base = "missing.toml"', "search.base"),
        ('objective = "maximize output_throughput_per_accelerator"', 'objective = "best"', "search.objective"),
        ('"workload.num_requests" = 10', '"workload.nope" = 10', "fixed.workload.nope"),
        ('name = "tiny"', 'name = "tiny"\ncolour = "red"', "search.colour"),
    ],
)
def test_bad_space_file_names_file_and_key(tmp_path, old, new, where):
    assert old in SPACE
    path = write_space(tmp_path, SPACE.replace(old, new))
    with pytest.raises(InputError) as err:
        load_space(path)
    assert err.value.where.startswith(f"{path}: {where}"), err.value.where


def test_missing_axes_and_bad_toml(tmp_path):
    path = write_space(tmp_path, SPACE.split("[axes]")[0])
    with pytest.raises(InputError, match="axes"):
        load_space(path)
    path.write_text("[search\n")
    with pytest.raises(InputError, match="TOML"):
        load_space(path)


# ---- one pipeline: search and the cluster validator agree --------------------------------------

CLUSTER_HYPOTHESIS = """
[hypothesis]
name = "same_numbers"
claim = "two instances serve the tiny workload"
kind = "cluster"
metrics = ["goodput", "ttft_p90_s"]
validators = ["sim"]
acceptance = ["baseline.goodput > 0"]
seeds = [3]

[setup]
config = "base.toml"
processes = 1

[baseline]
"cluster.instances" = 2
"engine.max_num_seqs" = 2
"workload.num_requests" = 10
"""


def test_search_and_cluster_validator_give_the_same_numbers(tmp_path):
    from infralab.agent.hypothesis import load_hypothesis, setup_of
    from infralab.agent.sim_pool import Execution
    from infralab.agent.validators.sim import CLUSTER_METRICS, measure_cluster

    space = load_space(write_space(tmp_path))  # point 2: cluster.instances = 2, max_num_seqs = 2
    point = dict(space.knobs[2])
    assert point == {"cluster.instances": 2, "engine.max_num_seqs": 2}
    searched = run_points(space, jobs=1, show_progress=False)[2]

    (tmp_path / "h.toml").write_text(CLUSTER_HYPOTHESIS)
    hyp = load_hypothesis(tmp_path / "h.toml")
    measured = measure_cluster(hyp, setup_of(hyp), None, Execution()).samples["baseline"][0]

    shared = [name for name in CLUSTER_METRICS if name in METRICS]
    assert len(shared) >= 10 and "ttft_p90_s" in shared and "goodput" in shared
    assert {name: measured[name] for name in shared} == {name: searched[name] for name in shared}
    # tp = 1: per instance and per accelerator are the same division
    assert measured["goodput_per_instance"] == searched["goodput_per_accelerator"]


def test_search_metric_names_are_flat_summary_names():
    from infralab.metrics.summary import ALL_METRIC_NAMES

    assert set(METRICS) <= set(ALL_METRIC_NAMES)


# ---- pruning, nearest misses, labels --------------------------------------------------------------

PRUNED_SPACE = SPACE.replace('constraints = ["ttft_p90_s <= 1.0", "not saturated"]',
                             'constraints = ["accelerators <= 1", "ttft_p90_s <= 1.0", "not saturated"]')


def test_points_over_the_accelerator_budget_are_never_simulated(tmp_path, monkeypatch):
    import infralab.agent.search as search

    simulated = []
    real_pool = search.run_pool

    def recording_pool(jobs, **kwargs):
        simulated.extend(job.config["cluster"]["instances"] for job in jobs)
        return real_pool(jobs, **kwargs)

    monkeypatch.setattr(search, "run_pool", recording_pool)
    report = run_search(write_space(tmp_path, PRUNED_SPACE), tmp_path / "out", jobs=1, progress=False)
    assert simulated == [1, 1]  # the two 2-instance points were pruned before the pool
    assert [p["pruned"] for p in report["points"]] == [False, False, True, True]
    assert report["pruned"] == 2
    for p in report["points"][2:]:
        assert not p["feasible"] and p["violated"] == ["accelerators <= 1"]
        assert p["metrics"]["accelerators"] == 2 and p["metrics"]["ttft_p90_s"] is None
    rows = (tmp_path / "out" / "search.csv").read_text().splitlines()
    assert rows[3].startswith("2,2,2,False,True,False,2,,")


def test_nearest_misses_rank_fewest_violations_then_smallest_shortfall(tmp_path):
    space = load_space(write_space(tmp_path))  # constraints: ttft_p90_s <= 1.0, not saturated
    results = [
        fake_metrics(1.5, 100.0),  # one miss, 33 % over (|1.5 - 1| / 1.5)
        fake_metrics(1.1, 100.0),  # one miss, 9 % over: the nearest
        fake_metrics(0.5, 100.0, saturated=True),  # one miss, `not saturated` counts 1
        fake_metrics(3.0, 100.0, saturated=True),  # two misses: last
    ]
    report = build_report(space, results)
    assert report["best"] == [] and report["feasible"] == 0
    misses = report["nearest_misses"]
    assert [m["index"] for m in misses] == [1, 0, 2, 3]
    assert misses[0]["violated"] == [{"constraint": "ttft_p90_s <= 1.0", "shortfall": pytest.approx(0.1 / 1.1)}]
    assert misses[0]["label"] == "#1 instances=1, max_num_seqs=64"
    assert "nearest misses" in format_text(report) and "#1 instances=1, max_num_seqs=64" in format_text(report)
    results[0] = fake_metrics(0.5, 100.0)
    assert build_report(space, results)["nearest_misses"] == []  # a feasible point: no near misses


def test_shortfall_of_comparisons():
    from infralab.agent.acceptance import parse_criterion, shortfall

    le = parse_criterion("ttft_p90_s <= 2.0")
    assert shortfall(le, {"ttft_p90_s": 1.0}) == 0.0
    assert shortfall(le, {"ttft_p90_s": 4.0}) == 0.5
    assert shortfall(parse_criterion("goodput >= 10"), {"goodput": 8.0}) == pytest.approx(0.2)
    assert shortfall(parse_criterion("not saturated"), {"saturated": True}) == 1.0
    assert shortfall(le, {"ttft_p90_s": None}) == float("inf")


def test_set_overrides_the_space_file(tmp_path):
    path = write_space(tmp_path)
    report = run_search(path, tmp_path / "o", jobs=1, progress=False,
                        overrides=["fixed.workload.num_requests=5", "search.seed=4"])
    assert report["seed"] == 4 and report["overrides"] == ["fixed.workload.num_requests=5", "search.seed=4"]
    assert {p["metrics"]["completed"] for p in report["points"]} == {5}
    with pytest.raises(InputError, match="--set"):
        load_space(path, ["search.seed"])


# ---- layouts switched by an axis -------------------------------------------------------------------

LAYOUT_SPACE = """
[search]
name = "layouts"
base = "base.toml"
objective = "maximize output_throughput_per_accelerator"

[axes]
"cluster.layout" = ["colocated", "disaggregated"]
"""


def test_a_layout_switch_prints_the_new_layout_s_defaults_once(tmp_path, capsys):
    load_space(write_space(tmp_path, LAYOUT_SPACE))
    err = capsys.readouterr().err
    assert err.count("note: the disaggregated layout uses defaults") == 1
    assert "cluster.transfer.mode = " in err


def test_a_knob_the_point_s_layout_does_not_read_is_an_error(tmp_path):
    space = LAYOUT_SPACE.replace('"cluster.layout" = ["colocated", "disaggregated"]',
                                 '"cluster.layout" = ["disaggregated"]\n"cluster.instances" = [3]')
    with pytest.raises(InputError) as info:
        load_space(write_space(tmp_path, space))
    assert "cluster.instances" in info.value.where and "not read by the disaggregated layout" in info.value.problem


def test_a_layout_switch_note_leaves_out_the_pool_sizes_a_pools_axis_sets(tmp_path, capsys):
    space = LAYOUT_SPACE.replace('"cluster.layout" = ["colocated", "disaggregated"]',
                                 '"cluster.layout" = ["disaggregated"]\npools = ["2:1"]')
    load_space(write_space(tmp_path, space))
    err = capsys.readouterr().err
    assert "note: the disaggregated layout uses defaults" in err
    assert "decode_instances" not in err and "prefill_instances" not in err
