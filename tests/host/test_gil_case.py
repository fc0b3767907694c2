"""The GIL study's sweep (experiments/gil_kv_transfer/case.py): experiment validation, the written results, determinism, and the probe vs
simulator comparison's mechanics (never its numbers)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from infralab.agent.studies import load_hook
from infralab.errors import InputError
from infralab.kernels.host_probe.affinity import skip_reason

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "experiments" / "gil_kv_transfer"  # the study: its code, experiments and hypotheses
SHIPPED = STUDY / "experiment.toml"
case, probe = load_hook(STUDY / "case.py"), load_hook(STUDY / "probe.py")
scenario_module = load_hook(STUDY / "scenario.py")
run_host_schedule = load_hook(STUDY / "host_schedule.py").run_host_schedule
cli_main = case.main
ProbeConfig, load_experiment, run_experiment = case.ProbeConfig, case.load_experiment, case.run_experiment
ProbeSegments, host_schedule, probe_vs_sim = probe.ProbeSegments, probe.host_schedule, probe.probe_vs_sim

TINY = """
[experiment]
name = "tiny"
timelines = ["a"]

[[scenario]]
name = "a"
prompt_tokens = 2048
layers = 3
steps = 3
page_tokens = 1
granularity = "after_prefill"

[[scenario]]
name = "b"
prompt_tokens = 2048
layers = 3
steps = 3
granularity = "per_layer"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return path


def test_the_shipped_experiment_validates() -> None:
    exp = load_experiment(SHIPPED)
    assert len(exp.scenario) >= 8
    assert set(exp.experiment.timelines) <= {s.name for s in exp.scenario}


@pytest.mark.parametrize(
    "text, where",
    [
        (TINY.replace("layers = 3\nsteps = 3\npage_tokens = 1", "layers = 3\nsteps = 3\npage_tokens = 0"), "scenario[0].page_tokens"),
        (TINY + "\n[host]\nswitch_intervl_s = 0.01\n", "host.switch_intervl_s"),
        (TINY.replace('timelines = ["a"]', 'timelines = ["zz"]'), "experiment.timelines"),
        (TINY.replace('name = "b"', 'name = "a"'), "scenario"),
    ],
)
def test_bad_experiments_name_file_and_field(tmp_path: Path, text: str, where: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_experiment(path)
    assert str(path) in str(err.value) and where in str(err.value)


def test_run_writes_table_figure_timelines_atomically_and_deterministically(tmp_path: Path) -> None:
    path = _write(tmp_path, TINY)
    out = tmp_path / "out"
    results = run_experiment(path, out)
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == [
        ".infralab-result", "figures/degradation.png", "results.json", "table.md",
        "timelines/a-held-no-transfer.json", "timelines/a-held.json",
        "timelines/a-released-no-transfer.json", "timelines/a-released.json",
    ]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []  # no temp folder left
    for row in results["scenarios"]:
        for mode in ("held", "released"):
            m = row["modes"][mode]
            assert m["degradation"] == pytest.approx(1 - m["throughput_with_tok_s"] / m["throughput_without_tok_s"])
            assert m["accepted"] == (m["degradation"] <= 0.05)
    trace = json.loads((out / "timelines" / "a-held.json").read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert {"thread/main", "thread/kv-transfer", "stream/gpu0-compute", "stream/gpu0-comm", "link/nic0"} <= tracks
    first = (out / "results.json").read_bytes()
    assert cli_main([str(path), "--out", str(out)]) == 0
    assert (out / "results.json").read_bytes() == first


def test_the_sim_mirror_of_the_probe_schedule_is_its_sum_without_transfer() -> None:
    class M:  # HostMeasurements stand-in
        python_unit_s, switch_interval_s, handoff_s = 1e-7, 0.005, 2e-5
        handoff_samples_s, wake_delay_samples_s = (1e-5, 3e-5), (0.0, 2e-3)
        wake_delays_by_held_s = ((2.5e-4, (0.0,)), (2e-3, (0.0, 2e-3)))
        waker_delay_samples_s = (2e-3,)
        placement = type("Rule", (), {"stay_with_waker": 0.5, "to_idle_previous": None,
                                      "pull_delay_samples_s": (1e-3,), "new_on_parent": 1.0,
                                      "stay_on_busy_previous": None})()  # a PlacementRule stand-in
        copy_cold_bytes_per_s = 4096 * 1024 / 3e-4  # a 4 MiB chunk copies in 0.3 ms (cold caches)
        chunk_costs = ()  # not timed alone: the descriptors at the unit cost plus the gap, the cold copy
        chunk_cost = probe.threads.HostMeasurements.chunk_cost

    cfg = ProbeConfig(steps=2, layers=3, blocks_per_chunk=100)
    seg = ProbeSegments(launch_s=1e-4, dispatch_s=1e-3, combine_s=2e-4, gap_s=1e-5)
    for holds in (True, False):
        for cores in (1, 2):
            sched = host_schedule(cfg, M(), seg, "per_layer", holds, cores)
            assert sched.copy_s == pytest.approx(3e-4) and sched.cores == cores
            assert sched.chunk_python_s == pytest.approx(1e-5 + 100 * 1e-7)
            # The micro-probe's shares passed through as measured; a state it never saw keeps the
            # default (the kernel's rule read literally: 1 for wake-ups by a waker, 0 for the rest).
            assert (sched.placement.stay_with_waker, sched.placement.to_idle_previous) == (0.5, 1.0)
            assert (sched.placement.new_on_parent, sched.placement.stay_on_busy_previous) == (1.0, 0.0)
            assert sched.placement.pull_delay_samples_s == (1e-3,)
            alone = run_host_schedule(sched, with_transfer=False)
            assert alone.prefill_s == pytest.approx(6 * (2 * 1.1e-4 + 1e-3 + 2e-4))
            both = run_host_schedule(sched, with_transfer=True)
            assert both.prefill_s >= alone.prefill_s - 1e-12
            if cores == 1:  # one core: every chunk is built on main's core
                assert both.chunks_on_mains_core == 1.0
            assert run_host_schedule(sched, with_transfer=True).record == both.record  # same seed, same run
            copies = [iv for iv in both.record.intervals
                      if iv.track == "thread/kv-transfer" and iv.name == "native-release-gil" and dict(iv.args)["op"] == "copy"]
            assert len(copies) == 6


def test_probe_vs_sim_compares_every_variant() -> None:
    cfg = ProbeConfig(steps=1, layers=3, launch_units=50, dispatch_us=200, combine_us=50,
                      blocks_per_chunk=100, chunk_kib=64, repeats=1)
    result = probe_vs_sim(cfg)
    here = [c for c in cfg.cores if skip_reason(c) is None]
    variants = {(v["cores"], v["granularity"], v["mode"]) for v in result["variants"]}
    assert variants == {(c, g, m) for c in here for g in ("per_layer", "after_prefill") for m in ("held", "released")}
    assert [s["cores"] for s in result["skipped"]] == [c for c in cfg.cores if c not in here]
    for v in result["variants"]:
        for side in ("probe", "sim"):
            assert math.isfinite(v[side]["degradation"])
            assert 0.0 <= v[side]["kv_python_over_comm"] <= 1.0
        assert v["abs_err"]["degradation"] == pytest.approx(v["sim"]["degradation"] - v["probe"]["degradation"])
        spread, noise = v["probe"]["spread"], v["probe"]["noise"]
        assert noise["pairs"] == len(v["probe_pairs"]) == cfg.repeats
        used = noise["quiet_pairs"] if noise["quiet"] else cfg.repeats  # the probe's median is over these
        assert len(spread["per_repeat"]) == len(v["probe_runs_s"]["with"]) == used
        assert spread["min"] <= spread["p25"] <= spread["p75"] <= spread["max"]
    json.dumps(result, allow_nan=False)  # writable as results


def test_the_cli_reports_a_missing_experiment_as_one_error(tmp_path: Path, capsys) -> None:
    assert cli_main([str(tmp_path / "nope.toml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nope.toml" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


PUBLISHED = STUDY / "published.toml"


def test_the_published_scenario_is_built_from_its_cited_numbers() -> None:
    build = scenario_module.build

    exp = load_experiment(PUBLISHED)
    first = exp.scenario[0]
    assert (first.prompt_tokens, first.ep, first.page_tokens) == (4096, 16, 1)  # DeepEP's batch; SGLang's page
    built = build(exp.setup, exp.host, first)
    assert built.nic.bandwidth == 43e9 and built.ep_link.bandwidth == 153e9  # DeepEP's measured bandwidths
    full = [b for b, d in zip(built.chunk_bytes, built.chunk_descriptors) if d > 2]
    assert full and all(b == 4096 * (512 + 64) * 2 for b in full)  # MLA latent + rope, BF16, per token
    assert all(d == 4096 for d in built.chunk_descriptors if d > 2)  # one tuple per 1-token page
    assert exp.experiment.sensitivity_field == "descriptor_s"
    assert exp.host.descriptor_s in exp.experiment.sensitivity_values


def test_native_descriptors_take_the_per_page_work_out_of_the_gil() -> None:
    import dataclasses

    build, run = scenario_module.build, scenario_module.run

    exp = load_experiment(SHIPPED)
    scenario = next(s for s in exp.scenario if s.name == "T8k-ep8-layer-page1")
    scenario = dataclasses.replace(scenario, steps=2, layers=8)
    runs = {}
    for where in ("python", "native"):
        built = build(exp.setup, dataclasses.replace(exp.host, kv_descriptors=where), scenario)
        runs[where] = run(built, scenario, holds_gil=False, with_transfer=True)
    mover = [iv for iv in runs["native"].record.intervals
             if iv.track == "thread/kv-transfer" and dict(iv.args)["op"] == "descriptors"]
    assert {iv.name for iv in mover} == {"python", "native-release-gil"}
    python_s = sum(iv.end_s - iv.start_s for iv in mover if iv.name == "python")
    assert python_s == pytest.approx(16 * exp.host.chunk_python_s)  # only the fixed part is left in Python
    assert runs["native"].gil_wait_s["main"] < runs["python"].gil_wait_s["main"]


def test_explain_names_the_gil_held_by_the_descriptor_loop() -> None:
    import dataclasses

    why = load_hook(STUDY / "why.py")
    exp = load_experiment(SHIPPED)
    scenario = dataclasses.replace(next(s for s in exp.scenario if s.name == "T8k-ep8-layer-page1"), steps=2, layers=8)
    found = why.explain_worst(exp, scenario, holds=False, label="released-python", timeline_dir=None)
    assert found["cause"]["kind"] == "gil_wait" and found["cause"]["key"] == "thread/main"
    assert (found["blocked_by"]["thread"], found["blocked_by"]["op"]) == ("thread/kv-transfer", "descriptors")
    assert "thread/kv-transfer in python 'descriptors'" in why.explanation_text(found)


def test_a_sensitivity_field_must_be_a_host_cost(tmp_path: Path) -> None:
    bad = PUBLISHED.read_text().replace('sensitivity_field = "descriptor_s"', 'sensitivity_field = "cores"')
    path = tmp_path / "p.toml"
    path.write_text(bad)
    with pytest.raises(InputError, match="sensitivity_field"):
        load_experiment(path)


def test_hypothesis_b_finds_the_counter_example_and_the_next_fix(tmp_path: Path) -> None:
    from infralab.agent.hypothesis import load_hypothesis
    from infralab.agent.validators.ladder import run_test

    hyp = load_hypothesis(STUDY / "enough_hypothesis.toml", quick=True)
    result = run_test(hyp, workdir=tmp_path / "work")
    m = result.rung("sim").measurement
    assert result.verdict == "rejected" and result.decided_by == "sim"
    assert m.samples["baseline"][0]["max_degradation"] > 0.05 >= m.samples["native_descriptors"][0]["max_degradation"]
    (why,) = m.extras["why"]
    assert why["arm"] == "baseline" and why["blocked_by"]["op"] == "descriptors"
    assert all((tmp_path / "work" / "sim" / "timelines" / name).exists() for name in why["timelines"])


def test_the_sim_mirror_of_native_descriptors_moves_the_loop_out_of_python() -> None:
    class M:  # HostMeasurements stand-in
        python_unit_s, switch_interval_s, handoff_s = 1e-7, 0.005, 2e-5
        handoff_samples_s, wake_delay_samples_s = (1e-5,), ()
        wake_delays_by_held_s = waker_delay_samples_s = ()
        placement = None
        copy_cold_bytes_per_s = 4096 * 1024 / 3e-4
        chunk_costs = ()
        chunk_cost = probe.threads.HostMeasurements.chunk_cost

    cfg = ProbeConfig(steps=1, layers=3, blocks_per_chunk=100)
    seg = ProbeSegments(launch_s=1e-4, dispatch_s=1e-3, combine_s=2e-4, gap_s=1e-5)
    sched = host_schedule(cfg, M(), seg, "per_layer", False, 2, "native")
    assert sched.chunk_python_s == pytest.approx(1e-5) and sched.native_descriptors_s == pytest.approx(1e-5)
    run = run_host_schedule(sched, with_transfer=True)
    names = {iv.name for iv in run.record.intervals
             if iv.track == "thread/kv-transfer" and dict(iv.args)["op"] == "descriptors"}
    assert names == {"python", "native-release-gil"}


def _pair(share: float | None):
    return probe.ProbePair([], 1.0, [], 1.25, share, {})


def test_the_probes_median_is_over_quiet_pairs_when_there_are_enough() -> None:
    limit = probe.QUIET_FOREIGN_SHARE
    quiet, noisy, unknown = _pair(0.0), _pair(limit + 0.01), _pair(None)
    assert quiet.quiet and not noisy.quiet and not unknown.quiet  # unmeasurable is not quiet
    mixed = [quiet] * probe.MIN_QUIET + [noisy] * 2
    assert probe._used_pairs(mixed) == ([quiet] * probe.MIN_QUIET, True)
    few = [quiet] * (probe.MIN_QUIET - 1) + [noisy] * 2
    assert probe._used_pairs(few) == (few, False)  # all of them, marked noisy
    under_a_third = [quiet] * probe.MIN_QUIET + [noisy] * (3 * probe.MIN_QUIET)
    assert probe._used_pairs(under_a_third)[1] is False


def _side(median: float, p25: float, p75: float, quiet: bool = True, share: float = 0.0) -> dict:
    return {"degradation": median, "noise": {"quiet": quiet, "foreign_share_median": share},
            "spread": {"min": p25 - 0.01, "p25": p25, "p75": p75, "max": p75 + 0.01}}


def test_a_row_is_judged_on_the_probes_footing() -> None:
    verdict = probe.row_verdict
    # Held: relative error within 20 % of the probe's median, where its spread is narrower than that.
    assert verdict("held", _side(0.20, 0.19, 0.21), {"degradation": 0.23})["verdict"] == "agrees"
    assert verdict("held", _side(0.20, 0.19, 0.21), {"degradation": 0.10})["verdict"] == "differs"
    # Released: absolute points (within 3), never a relative error on a few %.
    assert verdict("released", _side(0.04, 0.035, 0.045), {"degradation": 0.065})["agree"] is True
    assert verdict("released", _side(0.04, 0.035, 0.045), {"degradation": 0.075})["agree"] is False
    # The probe's own spread wider than the tolerance (half IQR 5 points > 3): no verdict, only the range.
    wide = verdict("released", _side(0.04, 0.0, 0.10), {"degradation": 0.05})
    assert wide["agree"] is None and wide["verdict"].startswith("in range")
    # Noisy pairs: no verdict either.
    assert verdict("held", _side(0.20, 0.19, 0.21, quiet=False), {"degradation": 0.20})["agree"] is None


def test_the_agreement_line_counts_verdicts_and_says_which_rows_were_noisy() -> None:
    hook = load_hook(STUDY / "hook.py")

    def row(cores, agree, quiet=True, share=0.0):
        return {"cores": cores, "verdict": {"agree": agree}, "probe": {"noise": {"quiet": quiet, "foreign_share_median": share}}}

    rows = [row(1, True), row(1, False), row(2, None, False, 0.8), row(2, True, True, 0.02)]
    line = hook.probe_agreement({"variants": rows})
    assert "on 2 of 4 schedules (1 core: 1 of 2, 2 cores: 1 of 2); 1 differ, 1 have no verdict" in line
    own = hook.probe_agreement({"variants": [*rows, {**row(2, True), "own_cores": True}]})
    assert "2 cores: 1 of 2, 2 cores, one per thread: 1 of 1)" in own
    assert "1 of 4 schedules had too few quiet repeats" in line and "80% of the cores" in line
    assert "too few quiet" not in hook.probe_agreement({"variants": rows[:2]})


def test_the_claim_is_judged_on_the_probe_schedules_that_replicate_the_thread_structure() -> None:
    hook = load_hook(STUDY / "hook.py")

    def variant(cores, without, with_, own=False):
        return {"cores": cores, "own_cores": own, "granularity": "per_layer",
                "probe_runs_s": {"without": [without], "with": [with_]}, "probe": {"kv_python_over_comm": 0.0}}

    runs = [variant(1, 1.0, 2.0), variant(2, 1.0, 1.6), variant(2, 1.0, 1.25, own=True)]
    (sample,) = hook.probe_samples(runs)
    assert sample["degradation"] == {"1c-per_layer": 0.5, "2c-per_layer": pytest.approx(0.375),
                                     "2c-own-per_layer": pytest.approx(0.2)}
    # Only a core pinned per thread is the published layout: two shared cores stack the threads.
    assert sample["max_degradation"] == pytest.approx(0.2)
    (alone,) = hook.probe_samples(runs[:2])
    assert alone["max_degradation"] == 0.5  # no schedule replicates it: all are judged


def test_the_probe_adds_a_core_per_thread_layout_at_its_largest_core_count() -> None:
    assert probe.layouts(ProbeConfig(cores=(1, 2))) == [(1, False), (2, False)]
    assert probe.layouts(ProbeConfig(cores=(1, 2), own_cores=True)) == [(1, False), (2, False), (2, True)]
    assert probe.layouts(ProbeConfig(cores=(1,), own_cores=True)) == [(1, False)]  # one core: no layout to pin
    assert probe.variant_name(2, "per_layer", "held", "python", own=True) == "2c-own-per_layer-held"
    assert probe.layout_text(2, True) == "2, a core each" and probe.layout_text(2) == "2"
    # Both shipped experiments judge the claim on that layout.
    for name in ("published.toml", "experiment.toml"):
        assert case.load_experiment(STUDY / name).probe.own_cores


def test_the_transfer_threads_chunk_costs_are_those_timed_alone_in_its_schedules_pattern() -> None:
    ChunkCost = probe.threads.ChunkCost

    class M:  # HostMeasurements stand-in: only what the rules read
        python_unit_s = 1e-7
        copy_cold_bytes_per_s = 4096 * 1024 / 3e-4
        chunk_costs = (ChunkCost("per_layer", 3e-4, 1.5e-4, 10), ChunkCost("after_prefill", 2.4e-4, 1e-4, 24))
        chunk_cost = probe.threads.HostMeasurements.chunk_cost

    m = M()
    cfg = ProbeConfig(blocks_per_chunk=100, chunk_kib=4096)
    seg = ProbeSegments(launch_s=1e-4, dispatch_s=1e-3, combine_s=2e-4, gap_s=1e-5)
    # Each schedule gets the hold and copy of its own pattern (a chunk after a layer's pause, or a
    # step's chunks back to back), not one figure for both.
    assert probe._chunk_python_s(cfg, m, seg, "python", "per_layer") == 3e-4
    assert probe._chunk_python_s(cfg, m, seg, "python", "after_prefill") == 2.4e-4
    assert probe._copy_s(cfg, m, "per_layer") == 1.5e-4 and probe._copy_s(cfg, m, "after_prefill") == 1e-4
    assert probe._chunk_python_s(cfg, m, seg, "native", "per_layer") == 1e-5  # the descriptors release the GIL
    m.chunk_costs = ()  # not timed alone: the unit-cost rule and the cold copy
    assert probe._chunk_python_s(cfg, m, seg, "python", "per_layer") == pytest.approx(1e-5 + 100 * 1e-7)
    assert probe._copy_s(cfg, m, "after_prefill") == pytest.approx(3e-4)
    assert "not timed alone" in probe._chunk_costs_text({"chunk_costs": []})
    assert "after_prefill 240 µs / 100 µs (24 chunks)" in probe._chunk_costs_text(
        {"chunk_costs": [dataclasses.asdict(c) for c in M.chunk_costs]})


