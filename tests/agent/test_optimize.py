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


def test_the_real_rung_reverts_a_step_the_simulator_would_keep(space) -> None:
    """With a confirming rung, a step the simulator favours is kept only if the real objective
    also improves; a reverted step leaves the best so far and the walk's anchor where they were."""
    sim_values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # the simulator: every later point better
    real_values = {0: 1.0, 1: 2.0, 2: 1.5, 3: 4.0, 4: 0.5, 5: 6.0}  # the real engine disagrees at 2 and 4
    asked: list[int] = []

    def evaluate(index: int) -> PointResult:
        return _result(index, {"queue": 0.1}, value=sim_values[index])

    def confirm(index: int) -> PointResult:
        asked.append(index)
        return _result(index, {}, value=real_values[index])

    trials = explain_guided(space, evaluate, budget=6, seed=0, confirm=confirm)
    plain = explain_guided(space, evaluate, budget=6, seed=0)
    for t in trials:
        real = t.finding.get("real")
        if real is None:
            assert t.finding["kept"] is False and "decided_by" not in t.finding
            continue
        assert t.finding["decided_by"] == "real" and real["confirms"] is t.finding["kept"]
        assert t.finding["kept"] is (real_values[t.index] > (real["best_before"] or float("-inf")))
    reverted = [t for t in trials if "real" in t.finding and not t.finding["kept"]]
    for t in reverted:  # the best so far does not take a reverted step's simulated objective
        assert t.best == (trials[t.number - 2].best if t.number > 1 else None)
    assert sorted(asked) == sorted({t.index for t in trials if "real" in t.finding})
    assert [t.index for t in reverted] == [4]  # simulated 5.0 > 4.0, real 0.5 < 4.0
    assert next(t for t in plain if t.index == 4).finding["kept"] is True  # the simulator alone keeps it


def test_confirm_needs_one_explain_walk_and_knobs_the_real_engine_reads(space, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--confirm: with --methods explain,grid"):
        optimize.run_optimize(space.source, tmp_path / "x", methods=("explain", "grid"), confirm=True)
    with pytest.raises(InputError, match="--confirm: with --methods explain and 2 seed"):
        optimize.run_optimize(space.source, tmp_path / "x", seeds=(0, 1), confirm=True)
    sim_only = Path(space.source).parent / "sim_only.toml"
    sim_only.write_text(SPACE.replace('"cluster.instances" = [1, 2, 3]', '"hardware.tp" = [1, 2]'))
    with pytest.raises(InputError, match=r"hardware\.tp: is read by the simulator only"):
        optimize.run_optimize(sim_only, tmp_path / "x", confirm=True)
    assert not (tmp_path / "x").exists()


def test_infralab_optimize_confirm_runs_the_kept_steps_on_the_real_engine(tmp_path: Path, capsys) -> None:
    pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")
    from support.toml_fixtures import TINY_REAL_ENGINE, tiny_llama_model

    (tmp_path / "tiny-model.toml").write_text(tiny_llama_model(2048))
    (tmp_path / "tiny.toml").write_text(
        'model = "tiny-model.toml"\n[run]\nname = "tiny"\nseed = 1\n[hardware]\naccelerator = "H100"\n'
        '[workload]\nkind = "synthetic"\nnum_requests = 4\narrival = { kind = "poisson", rate = 50.0 }\n'
        'prompt = { kind = "fixed", value = 16 }\noutput = { kind = "fixed", value = 3 }\n' + TINY_REAL_ENGINE)
    # the simulator's rung times this engine by its own profile (profile/step_table.csv)
    assert main(["real", "profile", str(tmp_path / "tiny.toml"), "--out", str(tmp_path / "profile")]) == 0
    (tmp_path / "space.toml").write_text(
        '[search]\nname = "tiny-real"\nbase = "tiny.toml"\nobjective = "maximize output_throughput"\n'
        '[axes]\n"engine.max_num_seqs" = [1, 4]\n')
    out = tmp_path / "opt"
    assert main(["optimize", str(tmp_path / "space.toml"), "--out", str(out), "--budget", "2", "--confirm"]) == 0
    report = json.loads((out / "optimize.json").read_text())
    assert report["confirm"]["rung"] == "real"
    trials = report["trials"]["explain"]["0"]
    decided = [t for t in trials if "real" in t["finding"]]
    assert decided and decided[0]["number"] == 1  # the start point is run on the real engine too
    for t in decided:
        run = out / "real" / f"point-{t['index']}"
        assert (run / "summary.json").is_file() and (run / "replay.json").is_file()
        real = json.loads((run / "summary.json").read_text())
        assert real["requests"] == {"completed": 4, "total": 4}
        assert t["finding"]["real"]["output_throughput"] > 0
    assert "decided by the real engine" in capsys.readouterr().out


def test_a_latency_objective_to_minimise_weighs_its_own_phases(space) -> None:
    latency = dataclasses.replace(space, objective_metric="ttft_p90_s", objective_goal="min", constraints=())
    feasible = _result(0, {"queue": 1.0, "prefill": 3.0, "decode": 4.0})
    weights = {cause: w for cause, w in cause_weights(latency, feasible).items() if w}
    assert weights == {"queue": 0.25, "prefill": 0.75}  # TTFT = (encode +) queue + prefill
    throughput = dataclasses.replace(latency, objective_metric="output_throughput", objective_goal="max")
    assert cause_weights(throughput, feasible) == {}  # a throughput objective names no phase


TOY_HOOK = '''
METRICS = ("cost",)
EFFECTS = {"size": {"slow": -1}, "style": {"waste": +1}}
SCALES = {"style": {"lean": 0.0, "fat": 1.0}}
METRIC_CAUSES = {"cost": ("slow", "waste")}

def evaluate(knobs, seed=0):
    slow = 8.0 / knobs["size"]
    waste = 5.0 if knobs["style"] == "fat" else 0.5
    return {"cost": slow + waste}, {"slow": slow, "waste": waste}
'''


def test_a_space_over_a_hooks_own_knobs_is_walked_from_its_declarations(tmp_path: Path) -> None:
    """A SPACE file naming a hook: the points are the hook's knobs, evaluated by it; the
    explain-guided walk reads its causes and its knobs' declared effects, not the simulator's."""
    (tmp_path / "toy.py").write_text(TOY_HOOK)
    (tmp_path / "space.toml").write_text('[search]\nname = "toy"\nhook = "toy.py"\nobjective = "minimize cost"\n'
                                         '[axes]\nstyle = ["fat", "lean"]\nsize = [1, 2, 8]\n')
    out = tmp_path / "opt"
    report = optimize.run_optimize(tmp_path / "space.toml", out, methods=("explain", "grid"), seeds=(0, 1, 2), budget=6)
    assert report["best"] == pytest.approx(1.5) and report["points"] == 6  # lean, size 8
    guided = [t for by in report["trials"]["explain"].values() for t in by if t["finding"].get("move") == "guided"]
    assert guided and all(set(t["finding"]["knob"]) <= {"style", "size"} for t in guided)
    first = guided[0]["finding"]
    # the move lowers the larger cause of the point it leaves
    assert first["prediction"][first["cause"]] == "down"
    assert (out / "optimize.json").is_file()


@pytest.mark.parametrize("hook, space, where", [
    ("METRICS = ('cost',)\n", 'objective = "minimize cost"', "declares no EFFECTS"),
    (TOY_HOOK, 'objective = "minimize speed"', "search.objective"),
    (TOY_HOOK, 'objective = "minimize cost"\nconstraints = ["lag < 1"]', "unknown metric 'lag'"),
])
def test_a_bad_hook_space_names_what_is_wrong(tmp_path: Path, hook: str, space: str, where: str) -> None:
    (tmp_path / "toy.py").write_text(hook)
    (tmp_path / "space.toml").write_text(f'[search]\nhook = "toy.py"\n{space}\n[axes]\nsize = [1, 2]\n')
    with pytest.raises(InputError, match=where):
        optimize.run_optimize(tmp_path / "space.toml", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_the_gil_case_space_evaluates_its_points_with_the_study_model() -> None:
    from infralab.agent.hook_space import load_hook_space

    space, evaluate = load_hook_space(ROOT / "experiments" / "gil_kv_transfer" / "gil_space.toml")
    assert len(space.points) == 96 and space.objective_metric == "degradation" and space.objective_goal == "min"
    held, _ = evaluate({**space.points[0], "dispatch_combine": "held", "host.kv_descriptors": "python"})
    freed, causes = evaluate({**space.points[0], "dispatch_combine": "released", "host.kv_descriptors": "native"})
    assert freed["degradation"] <= held["degradation"] and set(causes) == {"gil_wait", "comm_share", "kv_slot"}
