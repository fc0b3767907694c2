"""The GLM-class stack study (experiments/glm_stack, docs/glm_stack.md): its data validate, an arm's
overlay applies as written, bad input names file and field, the ratio arithmetic, the table and
figure writers on a tiny case, capacity per arm over config overlays, and a study decided by its
hook inside `infralab reproduce`. No test runs the study itself (the reproduce smoke test does,
at its quick sizes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infralab.agent.capacity import Overlay, overlay_capacities, overlay_config
from infralab.agent.studies import HookRun, load_hook, load_study
from infralab.errors import InputError
from infralab.locations import experiments_dir

STUDY = experiments_dir() / "glm_stack"
hook = load_hook(STUDY / "hook.py")


def stack_text() -> str:
    return (STUDY / "stack.toml").read_text()


def stack_copy(tmp_path: Path, text: str) -> Path:
    """stack.toml's text beside a copy of base.toml (and the link files the assumptions name)."""
    folder = tmp_path / "glm"
    (folder / "links").mkdir(parents=True)
    for name in ("base.toml", "links/hccs-half.toml", "links/hccs-double.toml"):
        (folder / name).write_bytes((STUDY / name).read_bytes())
    (folder / "stack.toml").write_text(text)
    return folder / "stack.toml"


# ---- the study's data ---------------------------------------------------------------------------


def test_the_study_validates_and_plans_every_arm_the_schema_accepts():
    stack = hook.load_stack()
    assert load_study(STUDY).hypotheses == () and load_study(STUDY).hook_path is not None
    plan = hook.plan_arms(stack, stack.sizes("quick"))
    names = [a.name for a, _ in plan.arms]
    assert names[0] == "baseline"
    # every arm without `needs` is measured, in the published order; one that needs EPD is either
    # measured or skipped with the schema's reason, never dropped silently
    assert [a.name for a in stack.spec.arm if not a.needs] == [n for n in names if n != "epd"]
    for arm in stack.spec.arm:
        if arm.name not in names:
            assert arm.needs and any(f"arm {arm.name!r}" in note for note in plan.skipped)
    assert (plan.multimodal is None) == any(note.startswith("multimodal") for note in plan.skipped)


def test_an_arm_overlay_is_cumulative_and_applies_as_written():
    stack = hook.load_stack()
    plan = hook.plan_arms(stack, stack.sizes("quick"))
    overlays = dict((a.name, o) for a, o in plan.arms)
    data = overlay_config(stack.base, overlays["mixed_kv"]).data
    # its own change ...
    assert list(data["cost"]["kv_layer_dtypes"]) == ["bf16", "int8", "int8", "int8", "int8", "int8", "bf16"]
    # ... on top of the earlier arms', with the base's other values kept
    assert data["hardware"]["linear_tp"] == data["hardware"]["lm_head_tp"] == data["hardware"]["tp"] == 4
    assert data["cost"]["replay_ssm_ring"] == 8 and data["cost"]["dtype"] == "int8"
    assert data["hardware"]["layer_split"] is None and data["hardware"]["accelerator"] == "ascend-910b"
    assert data["workload"]["num_requests"] == stack.sizes("quick").num_requests
    base = overlay_config(stack.base, overlays["baseline"]).data
    assert base["hardware"]["linear_tp"] == 1 and base["cost"]["dtype"] == "bf16"


def test_a_bad_arm_value_names_the_study_file_and_the_arm_key(tmp_path):
    path = stack_copy(tmp_path, stack_text().replace('"hardware.linear_tp" = 4', '"hardware.linear_tp" = 0'))
    stack = hook.load_stack(path)
    with pytest.raises(InputError, match=r"stack.toml: arm\[1\].set.hardware.linear_tp"):
        hook.plan_arms(stack, stack.sizes("quick"))


@pytest.mark.parametrize("old, new, field", [
    ('sensitivity = ["slo_tpot", "efficiency_memory"]', 'sensitivity = ["nope"]', "sizes.reproduce.sensitivity"),
    ("[sizes.quick]", "[sizes.smoke]", "sizes"),
    ('base = "base.toml"', 'base = "absent.toml"', "base"),
    ("threshold = 2.5", 'threshold = "2.5"', "threshold"),
    ('name = "w8a8"', 'name = "replay_ssm"', "arm"),
])
def test_bad_study_data_is_one_input_error_naming_file_and_field(tmp_path, old, new, field):
    assert old in stack_text()
    path = stack_copy(tmp_path, stack_text().replace(old, new, 1))
    with pytest.raises(InputError, match=rf"stack.toml: {field}"):
        hook.load_stack(path)


# ---- the arithmetic -----------------------------------------------------------------------------


def test_ratio_and_verdict():
    assert hook.ratio(0.6, 0.2) == pytest.approx(3.0)
    assert hook.ratio(None, 0.2) is None and hook.ratio(0.6, None) is None and hook.ratio(0.6, 0.0) is None
    assert hook.verdict_of(2.5, 2.5) == "accepted" and hook.verdict_of(2.49, 2.5) == "rejected"
    assert hook.verdict_of(None, 2.5) == "inconclusive"
    assert hook.spread({"low": 2.0, "high": 3.5}, 3.0) == pytest.approx(1.0)
    assert hook.spread({"low": None, "high": None}, 3.0) == 0.0


# ---- the writers on a tiny case -------------------------------------------------------------------


def tiny_arms() -> list[dict]:
    def arm(name, per_acc, ratio, step, cause):
        return {"arm": name, "label": name, "adds": f"adds {name}", "per_accelerator": per_acc, "ratio": ratio,
                "step_gain": step, "binding": "seed 0: p90 TTFT 2.2 s > 2 s", "cause": cause,
                "capacity": {"capacity_rps": None if per_acc is None else per_acc * 4, "accelerators": 4}}

    first = {"kind": "phase", "key": "prefill", "run_s": 0.4, "delta_s": None, "metric": "mean TTFT", "against": None}
    later = {**first, "key": "queue", "delta_s": -0.2, "against": "runs/a"}
    return [arm("base", 0.2, 1.0, None, first), arm("fast", 0.6, 3.0, 3.0, later), arm("lost", None, None, None, None)]


def test_the_table_has_a_row_per_arm_with_ratio_step_and_cause():
    lines = hook.table_markdown(tiny_arms()).strip().splitlines()
    assert len(lines) == 2 + 3
    assert "| 0.8 | 4 | 0.2 | 1.00x | — |" in lines[2] and "phase `prefill`: 0.4 s of the mean TTFT" in lines[2]
    assert "| 3.00x | 3.00x |" in lines[3] and "phase `queue`: -0.2 s" in lines[3]
    assert "| — | 4 | — | — | — |" in lines[4]


def test_the_figures_are_written_and_the_tornado_orders_by_spread(tmp_path):
    paths = hook.evolution_figure(tiny_arms(), tmp_path / "evolution")
    rows = [{"name": "a", "label": "small", "source": "s", "low": 2.9, "high": 3.1, "low_label": "l", "high_label": "h"},
            {"name": "b", "label": "large", "source": "s", "low": 1.5, "high": None, "low_label": "l", "high_label": "h"}]
    paths += hook.tornado_figure(rows, 3.0, tmp_path / "tornado")
    assert sorted(p.name for p in paths) == ["evolution.pdf", "evolution.png", "tornado.pdf", "tornado.png"]
    assert all(p.stat().st_size > 0 for p in paths)
    table = hook.sensitivity_markdown(rows, 3.0)
    assert table.index("large") < table.index("small") and "| — |" in table


# ---- capacity per arm over config overlays (agent/capacity.py) -----------------------------------

TINY = """
model = "llama-3-8b"
[hardware]
accelerator = "H100"
[workload]
kind = "synthetic"
num_requests = 24
arrival = { kind = "poisson", rate = 4.0 }
prompt = { kind = "fixed", value = 256 }
output = { kind = "fixed", value = 8 }
"""


def test_capacity_per_overlay_counts_each_overlays_accelerators(tmp_path):
    base = tmp_path / "tiny.toml"
    base.write_text(TINY)
    overlays = [Overlay("one", {}, "t: one"), Overlay("two", {"cluster.instances": 2}, "t: two")]
    docs, rows = overlay_capacities(base, overlays, seeds=(0,), tolerance=0.3, jobs=1, show_progress=False)
    assert [d["label"] for d in docs] == ["one", "two"] and [d["accelerators"] for d in docs] == [1, 2]
    for d in docs:
        assert d["bracketed"] and d["capacity_rps_per_accelerator"] == d["capacity_rps"] / d["accelerators"]
    assert {r["config"] for r in rows} == {"one", "two"}
    with pytest.raises(InputError, match=r"t: two.cluster.instances"):
        overlay_config(base, Overlay("two", {"cluster.instances": 0}, "t: two"))
    with pytest.raises(InputError, match="unique label"):
        overlay_capacities(base, [overlays[0], overlays[0]], seeds=(0,), jobs=1, show_progress=False)


# ---- a study decided by its hook ----------------------------------------------------------------

HOOK = '''
from pathlib import Path
from infralab.agent.studies import HookRun

def run(out: Path, quick: bool) -> HookRun:
    (out / "figures" / "f.png").write_bytes(b"png")
    return HookRun("accepted", "the claim", "infralab reproduce --study decided", ("figures/f.png",),
                   "quick" if quick else "full")
'''


def test_reproduce_runs_a_study_decided_by_its_hook(tmp_path, monkeypatch):
    from infralab.agent.reproduce import reproduce
    from infralab.locations import EXPERIMENTS_ENV

    folder = tmp_path / "experiments" / "decided"
    folder.mkdir(parents=True)
    (folder / "study.toml").write_text('[study]\ntitle = "Decided by its hook"\n')
    (folder / "hook.py").write_text(HOOK)
    monkeypatch.setenv(EXPERIMENTS_ENV, str(tmp_path / "experiments"))
    out = tmp_path / "out"
    report = reproduce(out, quick=True, progress=lambda text: None)
    (study,) = report["studies"]
    assert study["verdict"] == "accepted" and study["figures"] == ["figures/f.png"]
    assert study["tests"][0]["hypothesis"] == "the claim" and study["tests"][0]["decided_by"] == "sim"
    md = (out / "report.md").read_text()
    assert "Claim: the claim → **accepted**" in md and "](figures/f.png)" in md and "\nquick\n" in md
    assert json.loads((out / "report.json").read_text())["studies"][0]["name"] == "decided"
    assert isinstance(HookRun("a", "b", "c", (), "d"), HookRun)


# ---- the EPD arm: a faithful, fair arm ----------------------------------------------------------


def test_the_epd_arm_carries_every_technique_to_both_lm_pools_and_counts_every_accelerator():
    """Each EPD candidate's prefill and decode pools (their own [cluster.pool_hardware] tp) get the
    earlier arms' [hardware] and [cost] techniques unchanged, the encoder runs on its tp-1 NPU,
    and the accelerators are counted over the three pools."""
    from infralab.config_io import validate
    from infralab.sim.config import SimConfig
    from infralab.sim.run import prepare_run

    stack = hook.load_stack()
    plan = hook.plan_arms(stack, stack.sizes("quick"))
    if "epd" not in plan.candidates:
        pytest.skip("the config schema has no EPD layout here")
    layer_split = overlay_config(stack.base, dict((a.name, o) for a, o in plan.arms)["layer_split"])
    previous = prepare_run(validate(SimConfig, layer_split.data, layer_split.source), layer_split.base_dir).cost
    splits = []
    for overlay in plan.candidates["epd"]:
        c = overlay_config(stack.base, overlay)
        prepared = prepare_run(validate(SimConfig, c.data, c.source), c.base_dir, c.source)
        for pool in ("prefill", "decode"):
            cost = prepared.pools.costs[pool]
            assert (cost.tp, cost.linear_tp, cost.lm_head_tp, cost.layer_split) == (4, 4, 4, 4), pool
            assert cost.cfg == previous.cfg  # dtype int8, kv_layer_dtypes, replay_ssm_ring, efficiencies
            assert cost.accel == previous.accel
        assert prepared.pools.encoder.cost.tp == 1
        cluster = c.data["cluster"]
        p, d = cluster["prefill_instances"], cluster["decode_instances"]
        assert c.accelerators == 1 * 1 + p * 4 + d * 4
        splits.append(f"{p}:{d}")
    # the stated rule's candidates: the distinct P:D ratios of the project's P/D search grid
    assert splits == ["1:1", "2:1", "3:1", "1:2", "3:2"]


def test_an_arm_with_candidates_is_the_one_with_the_highest_capacity_per_accelerator():
    docs = [{"capacity_rps_per_accelerator": v} for v in (0.2, None, 0.3, 0.3)]
    assert hook.best_candidate(docs) == 2  # the highest; ties: the first listed; unbracketed: none
    assert hook.best_candidate([{"capacity_rps_per_accelerator": None}]) == 0


def test_candidates_only_on_the_last_arm_and_with_their_rule(tmp_path):
    text = stack_text().replace('name = "w8a8"', 'name = "w8a8"\nchoose_rule = "x"\nchoose = [{ "slo.ttft_s" = 1.0 }]')
    stack_path = stack_copy(tmp_path, text)
    with pytest.raises(InputError, match=r"stack.toml: arm\[3\].choose"):
        hook.load_stack(stack_path)
    stack_path.write_text(re.sub(r'choose_rule = """.*?"""\n', "", stack_text(), flags=re.S))
    with pytest.raises(InputError, match=r"stack.toml: arm\[6\].choose_rule"):
        hook.load_stack(stack_path)
