"""The long-context setting of the GLM-class stack (experiments/glm_stack/long_context.py): the
pre-registration validates, its rules reach the report, the arms stop where a rule is not
implemented, and a tiny run goes end to end (sizes far below the registered ones)."""

from __future__ import annotations

import json
import subprocess

import pytest

from infralab.agent.studies import load_hook
from infralab.errors import InputError
from infralab.locations import experiments_dir

STUDY = experiments_dir() / "glm_stack"
runner = load_hook(STUDY / "long_context.py")


def test_the_registration_validates_and_names_its_rules():
    reg = runner.load_registration()
    assert reg.sizes["full"].tolerance == 0.03 and len(reg.sizes["full"].seeds) >= 3
    assert {"slo", "capacity", "pools", "acceptance", "workload"} <= set(reg.preregistration)
    assert [a.name for a in reg.arm][:1] == ["baseline"] and reg.arm[0].set == {}
    run, skipped = runner.runnable_arms(reg)
    assert not skipped and [a.name for a in run][-2:] == ["pd", "encode_pool"]  # P/D and the encode pool: separate steps
    assert [a.pools for a in run][-2:] == ["pd", "epd"]


@pytest.mark.parametrize("prefill, decode, encode, rule, expected", [
    (50.8, 37.3, 0.1, "pd", {"cluster.prefill_instances": 4, "cluster.decode_instances": 3}),
    (1.0, 1.0, 0.0, "pd", {"cluster.prefill_instances": 1, "cluster.decode_instances": 1}),  # ties: the smaller
    (100.0, 1.0, 0.0, "pd", {"cluster.prefill_instances": 7, "cluster.decode_instances": 1}),  # at most 8 in all
    (3.0, 1.0, 2.0, "epd", {"cluster.prefill_instances": 3, "cluster.decode_instances": 1, "cluster.encode_instances": 2}),
    (3.0, 1.0, 0.001, "epd", {"cluster.prefill_instances": 3, "cluster.decode_instances": 1, "cluster.encode_instances": 1}),
])
def test_the_pool_rule_follows_the_work_ratio(prefill, decode, encode, rule, expected):
    work = {"prefill_s": prefill, "decode_s": decode, "encode_s": encode}
    assert runner.pool_sizes(work, rule) == expected


def test_the_registration_was_committed_before_any_result_of_the_setting():
    """The commit that added long_context.toml adds no result of it (the issue's git-log check)."""
    try:
        log = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--", "experiments/glm_stack/long_context.toml"],
                             cwd=STUDY.parents[1], capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    if not log:
        pytest.skip("the file is not committed yet")
    files = subprocess.run(["git", "show", "--name-only", "--format=", log[-1]], cwd=STUDY.parents[1],
                           capture_output=True, text=True, check=True).stdout.split()
    assert sorted(files) == ["experiments/glm_stack/base_long_context.toml", "experiments/glm_stack/long_context.toml"]


def test_the_chat_registration_keeps_the_long_context_rules():
    """chat.toml writes long_context.toml's rules out for the chat baseline: the same full sizes,
    quantile, acceptance threshold, arms and pool rules; only the base, the encode pool's part and
    the request-count field (a synthetic workload) differ."""
    long, chat = runner.load_registration(), runner.load_registration(STUDY / "chat.toml")
    assert chat.file == "chat.toml" and chat.base == "base.toml" and chat.requests_field == "workload.num_requests"
    assert (chat.sizes["full"], chat.quantile, chat.threshold) == (long.sizes["full"], long.quantile, long.threshold)
    assert [(a.name, a.pools) for a in chat.arm] == [(a.name, a.pools) for a in long.arm]
    differ = {a.name: {k: v for k, v in a.set.items() if b.set.get(k) != v} for a, b in zip(chat.arm, long.arm)}
    assert {k: v for k, v in differ.items() if v} == {
        "encode_pool": {"cluster.pool_hardware.encode.accelerator": "ascend-910b"}}
    first = runner.overlays(chat, list(chat.arm), chat.sizes["quick"])[0]
    assert first.changes["workload.multimodal.image_share"] == 0.2 and first.changes["workload.num_requests"] == 150


def test_overlays_are_cumulative_at_the_modes_request_count():
    reg = runner.load_registration()
    arms, _ = runner.runnable_arms(reg)
    overlays = runner.overlays(reg, arms, reg.sizes["quick"], {"pd": {"cluster.prefill_instances": 2}})
    assert overlays[0].changes == {"workload.max_requests": reg.sizes["quick"].max_requests}
    assert overlays[5].changes["hardware.layer_split"] == 4 and overlays[5].changes["cost.dtype"] == "int8"
    assert overlays[6].changes["cluster.prefill_instances"] == 2 and overlays[7].changes["cluster.prefill_instances"] == 2


def test_a_registration_whose_first_arm_changes_something_is_refused(tmp_path):
    text = (STUDY / "long_context.toml").read_text().replace('name = "baseline"\nlabel = "first run"\nadds = "the plain deployment: BF16, KDA layers and LM head replicated per rank, tp 4"\nset = {}',
                                                             'name = "baseline"\nlabel = "first run"\nadds = "x"\nset = { "cost.dtype" = "int8" }')
    (tmp_path / "r.toml").write_text(text)
    with pytest.raises(InputError, match=r"r.toml: arm\[0\]"):
        runner.load_registration(tmp_path / "r.toml")


def test_a_tiny_run_reports_rules_deviations_ratios_and_bounds(tmp_path):
    text = (STUDY / "long_context.toml").read_text()
    text = text.replace('base = "base_long_context.toml"', f'base = "{STUDY / "base_long_context.toml"}"')
    text = text.replace("max_requests = 300\nseeds = [0]\ntolerance = 0.25", "max_requests = 40\nseeds = [0, 1]\ntolerance = 0.5")
    text = text.split("# ---- the arms")[0] + "\n".join([
        '[[arm]]\nname = "baseline"\nlabel = "first run"\nadds = "plain"\nset = {}',
        '[[arm]]\nname = "w8a8"\nlabel = "+W8A8"\nadds = "int8"\nset = { "cost.dtype" = "int8" }',
        '[[arm]]\nname = "pd"\nlabel = "+P/D"\nadds = "pools"\npools = "pd"\n'
        'set = { "cluster.layout" = "disaggregated", "cluster.transfer.link" = "rdma-400g" }',
        '[[deviation]]\ndate = "2026-12-03"\nwhat = "a test"\nwhy = "to see it printed"\nprompted_by = "none"'])
    path = tmp_path / "r.toml"
    path.write_text(text)
    doc = runner.run("quick", tmp_path / "out", path)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## The registration" in report and "p90 TPOT <= 50 ms" in report
    assert "2026-12-03: a test" in report
    assert "the published ~3x" in report and ("does not contain" in report or "contains" in report)
    assert [a["name"] for a in doc["arms"]] == ["baseline", "w8a8", "pd"] and doc["arms"][0]["ratio_by_seed"] == [1.0, 1.0]
    sizes = doc["pools"]["pd"]
    assert sizes["cluster.prefill_instances"] + sizes["cluster.decode_instances"] <= 8
    assert doc["work_seconds"]["pd"]["prefill_s"] > 0 and doc["work_seconds"]["pd"]["decode_s"] > 0
    assert "## Pool sizes by the registered rule" in report and "## Why each step moved" in report
    causes = [a["cause"] for a in doc["arms"]]
    assert causes[1] is not None and causes[1]["against"] == "runs/baseline-at-baseline-seed0"
    assert (tmp_path / "out" / "runs" / "w8a8-at-baseline-seed0").is_dir()
    assert {"kv_tokens", "hit_rate", "prefilled_tokens"} <= set(doc["mechanisms"][0])
    assert json.loads((tmp_path / "out" / "long_context.json").read_text())["verdict"] == doc["verdict"]
    assert (tmp_path / "out" / "evolution.png").stat().st_size > 0
    # the Ascend path's error: evaluation points only, the scorer's full report beside it
    assert "## The Ascend path against public Ascend measurements (evaluation points only)" in report
    ascend = json.loads((tmp_path / "out" / "ascend" / "public_points.json").read_text())
    evaluation = [p["id"] for p in ascend["points"] if p["scored"]]
    assert evaluation and all(i in report for i in evaluation)
    assert not any(p["id"] in report for p in ascend["points"] if p["role"] == "calibration")


def test_an_assumption_moves_the_final_ratio_on_both_arms(tmp_path):
    text = (STUDY / "long_context.toml").read_text()
    text = text.replace('base = "base_long_context.toml"', f'base = "{STUDY / "base_long_context.toml"}"')
    text = text.replace("max_requests = 300\nseeds = [0]\ntolerance = 0.25", "max_requests = 40\nseeds = [0]\ntolerance = 0.5")
    text = text.split("# ---- the arms")[0] + "\n".join([
        '[[arm]]\nname = "baseline"\nlabel = "first run"\nadds = "plain"\nset = {}',
        '[[arm]]\nname = "w8a8"\nlabel = "+W8A8"\nadds = "int8"\nset = { "cost.dtype" = "int8" }',
        '[[assumption]]\nname = "slo_tpot"\nlow = { "slo.tpot_s" = 0.025 }\nhigh = { "slo.tpot_s" = 0.1 }\nsource = "test"'])
    path = tmp_path / "r.toml"
    path.write_text(text)
    reg = runner.load_registration(path)
    arms, _ = runner.runnable_arms(reg)
    (row,) = runner.sensitivity(reg, (path.parent / reg.base).resolve(), arms, reg.sizes["quick"], {})
    assert row["assumption"] == "slo_tpot" and row["low"]["changes"] == {"slo.tpot_s": 0.025}
    assert row["low"]["ratio"] is not None and row["high"]["ratio"] is not None and row["high"]["ratio"] > 0


def test_the_report_says_plainly_whether_the_final_ratio_contains_the_published_figure():
    assert runner.against_published([1.17, 1.2, 1.1], 3.0).endswith("does not contain the published ~3x: its mean is -61% from it.")
    assert "1.10..1.20x" in runner.against_published([1.17, 1.2, 1.1], 3.0)
    assert runner.against_published([2.9, 3.1], 3.0).endswith("contains the published ~3x.")
    assert "nothing is said" in runner.against_published([None, None], 3.0)
