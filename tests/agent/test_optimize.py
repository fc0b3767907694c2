"""`infralab optimize`: the explain-guided walk reads the feedback of the best point and moves the
knob the simulator declares to act on the limiting cause; the baselines walk the same space; the
comparison counts trials to 95 % of the best found; nothing in the optimiser names a study."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from infralab.agent import optimize
from infralab.agent.optimize import PointResult, cause_weights, compare, explain_guided, predicted_effect
from infralab.agent.search import load_space
from infralab.cli import main
from infralab.errors import InputError
from infralab.sim.knob_effects import CAUSES, KNOB_EFFECTS
from support.sim_fakes import sim_config
from support.toml_fixtures import synthetic_config

ROOT = Path(__file__).resolve().parents[2]

SPACE = """
[search]
name = "tiny"
base = "base.toml"
seed = 1
objective = "maximize output_throughput_per_accelerator"
constraints = ["ttft_p90_s <= 1.0", "not saturated"]

[axes]
"cluster.instances" = [1, 2, 3]
"engine.max_num_seqs" = [4, 64]
"""


@pytest.fixture
def space(tmp_path: Path):
    (tmp_path / "base.toml").write_text(synthetic_config(num_requests=24, rate=40.0, prompt=512, output=8))
    (tmp_path / "space.toml").write_text(SPACE)
    return load_space(tmp_path / "space.toml")


def test_every_declared_knob_is_a_config_field_and_every_cause_is_known() -> None:
    config = dataclasses.asdict(sim_config())
    for path, effect in KNOB_EFFECTS.items():
        table, name = path.split(".")
        assert name in config[table], path
        assert set(effect) <= set(CAUSES) and set(effect.values()) <= {-1, 1}, path


def test_nothing_in_the_optimiser_names_a_study_or_a_knob() -> None:
    text = (ROOT / "agent" / "optimize.py").read_text()
    for word in ("pools", "instances", "max_num_seqs", "max_batched_tokens", "mooncake", "azure", "glm", "gil"):
        assert word not in text.lower(), word


def test_the_effect_of_a_move_is_the_declared_effect_of_the_fields_it_changes(space) -> None:
    # point order: last axis fastest; index 0 = (1 instance, 4 seqs), 3 = (2 instances, 64 seqs)
    assert predicted_effect(space, 0, 2) == {"queue": -1, "accelerators": 1}  # one more instance
    assert predicted_effect(space, 2, 0) == {"queue": 1, "accelerators": -1}
    assert predicted_effect(space, 0, 1) == {"queue": -1, "kv_wait": -1, "decode": 1}  # more running sequences
    assert predicted_effect(space, 0, 3) == {"queue": -2, "accelerators": 1, "kv_wait": -1, "decode": 1}


def test_names_with_a_declared_scale_have_a_direction() -> None:
    from infralab.sim.knob_effects import knob_value

    assert knob_value("cost.dtype", "int8") == 1 and knob_value("cost.dtype", "bf16") == 2  # bytes per element
    assert knob_value("cost.dtype", "mystery") is None and knob_value("run.name", "x") is None
    assert knob_value("engine.max_num_seqs", 64) == 64.0 and knob_value("engine.prefix_cache", True) is None


def _result(index: int, phases: dict[str, float], violated: tuple[str, ...] = (), value: float = 1.0) -> PointResult:
    metrics = {"output_throughput_per_accelerator": value, "ttft_p90_s": 0.5, "saturated": False}
    return PointResult(index, metrics, phases, violated)


def test_feedback_weighs_the_phases_of_the_violated_constraints(space) -> None:
    slow_queue = _result(0, {"queue": 3.0, "prefill": 1.0, "decode": 4.0}, ("ttft_p90_s <= 1.0",))
    assert cause_weights(space, slow_queue) == {"queue": 0.75, "prefill": 0.25}  # TTFT = queue + prefill
    feasible = _result(0, {"queue": 0.1, "prefill": 0.3, "decode": 4.0})
    weights = cause_weights(space, feasible)
    assert weights["accelerators"] == 1.0  # a per-accelerator objective with slack: fewer accelerators
    assert weights["prefill"] == pytest.approx(0.5 * 0.3 / 0.4)  # TTFT at half its bound, prefill 3/4 of it


def test_the_guided_walk_moves_the_knob_that_acts_on_the_limiting_cause(space) -> None:
    # A made-up response: one instance queues (TTFT violated); two meet the SLO; more costs accelerators.
    def evaluate(index: int) -> PointResult:
        instances = (1, 2, 3)[index // 2]
        if instances == 1:
            return _result(index, {"queue": 5.0, "prefill": 0.2, "decode": 1.0}, ("ttft_p90_s <= 1.0",))
        return _result(index, {"queue": 0.1, "prefill": 0.2, "decode": 1.0}, value=10.0 / instances)

    seed = next(s for s in range(50) if __import__("random").Random(s).choice(range(6)) in (0, 1))  # start at 1 instance
    trials = explain_guided(space, evaluate, budget=6, seed=seed)
    second = trials[1]
    assert second.finding["move"] == "guided" and second.finding["cause"] == "queue"
    assert "cluster.instances" in second.finding["knob"] and second.finding["prediction"]["queue"] == "down"
    assert second.objective is not None and second.finding["kept"] is True
    assert all(t.best is None or t.best <= 5.0 for t in trials) and max(t.best or 0 for t in trials) == 5.0


def test_the_comparison_counts_trials_to_95_percent_of_the_best_found(space) -> None:
    values = [None, None, 3.0, 2.0, 4.0, 1.0]

    def evaluate(index: int) -> PointResult:
        if values[index] is None:
            return _result(index, {"queue": 1.0}, ("not saturated",))
        return _result(index, {"queue": 0.1}, value=values[index])

    report = compare(space, evaluate, ("grid", "random"), budget=6, seeds=(0, 1))
    assert report["best"] == 4.0 and report["target"] == pytest.approx(3.8)
    assert report["methods"]["grid"]["trials_to_target"] == {0: 5, 1: 5}  # the grid's order reaches index 4 fifth
    assert optimize.trials_to_reach([], 1.0) is None


def test_infralab_optimize_runs_every_method_and_writes_its_folder(space, tmp_path: Path, capsys) -> None:
    out = tmp_path / "opt"
    assert main(["optimize", space.source, "--out", str(out), "--methods", "explain,grid,random,tpe",
                 "--seeds", "0,1", "--budget", "4", "--jobs", "1"]) == 0
    report = json.loads((out / "optimize.json").read_text())
    assert set(report["methods"]) == {"explain", "grid", "random", "tpe"} and report["points"] == 6
    assert all(len(trials) <= 4 for by_seed in report["trials"].values() for trials in by_seed.values())
    assert (out / "trajectory.png").stat().st_size > 0
    assert "trials to target" in capsys.readouterr().out
    # the same run twice gives the same document
    assert main(["optimize", space.source, "--out", str(tmp_path / "again"), "--methods", "explain,grid,random,tpe",
                 "--seeds", "0,1", "--budget", "4", "--jobs", "1"]) == 0
    assert (tmp_path / "again" / "optimize.json").read_bytes() == (out / "optimize.json").read_bytes()


def test_a_space_where_nothing_meets_the_constraints_is_reported_not_refused(space, tmp_path: Path) -> None:
    def evaluate(index: int) -> PointResult:
        return _result(index, {"queue": 1.0}, ("not saturated",))

    report = compare(space, evaluate, ("explain", "random"), budget=3, seeds=(0,))
    assert report["best"] is None and report["methods"]["explain"]["trials_to_target"] == {0: None}
    assert report["methods"]["random"]["median"] == 4  # budget + 1: not reached
    assert "no method found a point" in optimize.format_text({**report, "space": "s", "objective": "max x", "points": 6})


def test_bad_flags_name_the_flag(space, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--methods: unknown method 'annealing'"):
        optimize.run_optimize(space.source, tmp_path / "x", methods=("annealing",))
    assert not (tmp_path / "x").exists()
