"""`infralab fidelity run`: the study file's validation (file and field), the JSON/table/figure
writer on hand-made results, and a minimal study end to end on the tiny engine (a handful of
requests, one case, two real runs; no timing assertions)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")

from infralab.agent.fidelity.compare import METRICS, STATS  # noqa: E402
from infralab.agent.fidelity.report import write_outputs  # noqa: E402
from infralab.agent.fidelity.runner import CaseResult, StudyResult  # noqa: E402
from infralab.agent.fidelity.spec import load_study  # noqa: E402
from infralab.cli import dispatch, main, parse  # noqa: E402
from infralab.errors import InputError  # noqa: E402

TINY_STUDY = """
[study]
title = "tiny"
model = "tiny-llama-test"
loads = [0.5]
repetitions = 2
warmup_requests = 2

[capacity]
requests = 4

[profile]
q_tokens = [1, 8, 48]
kv_tokens = [1, 64, 768]
seqs = [1, 6]
repeats = 1

[[setting]]
name = "tiny"
max_batch_tokens = 48
num_blocks = 24
page_size = 32
max_requests_per_batch = 6

[[shape]]
name = "chat"
[shape.workload]
kind = "synthetic"
num_requests = 5
arrival = { kind = "poisson", rate = 1.0 }
prompt = { kind = "uniform", low = 8, high = 40 }
output = { kind = "uniform", low = 2, high = 6 }
"""


def write_study(tmp_path: Path, text: str = TINY_STUDY, name: str = "study.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("old, new, field", [
    ("loads = [0.5]", "loads = [1.5]", "study.loads"),
    ("repetitions = 2", "repetitions = 1", "study.repetitions"),
    ('model = "tiny-llama-test"', 'model = "no-such-model"', "study.model"),
    ("max_batch_tokens = 48\n", "", "setting[0].max_batch_tokens"),
    ('kind = "synthetic"', 'kind = "bogus"', "shape[0].workload.kind"),
    ("num_requests = 5", "num_requests = 5\nmax_concurrency = 2", "shape[0].workload.max_concurrency"),
    ("repeats = 1", "repeats = 1\nextra = 3", "profile.extra"),
])
def test_a_bad_study_file_names_the_file_and_the_field(tmp_path, old, new, field):
    assert old in TINY_STUDY
    path = write_study(tmp_path, TINY_STUDY.replace(old, new))
    with pytest.raises(InputError) as caught:
        load_study(path)
    assert str(path) in caught.value.where and field in caught.value.where


def test_a_repeated_setting_name_is_refused(tmp_path):
    again = TINY_STUDY.split("[[shape]]")[0].split("[[setting]]")[1]
    path = write_study(tmp_path, TINY_STUDY.replace("[[shape]]", "[[setting]]" + again + "[[shape]]"))
    with pytest.raises(InputError, match=r"setting\[1\]\.name.*repeats 'tiny'"):
        load_study(path)


def test_quick_replaces_the_keys_it_names(tmp_path):
    path = write_study(tmp_path, TINY_STUDY + '\n[quick]\n"study.loads" = [0.3, 0.6]\n"profile.repeats" = 2\n')
    assert load_study(path).loads == (0.5,)
    quick = load_study(path, quick=True)
    assert quick.loads == (0.3, 0.6) and quick.grid.repeats == 2 and quick.quick


def test_the_shipped_studies_are_valid():
    root = Path(__file__).resolve().parents[2] / "experiments" / "fidelity"
    full = load_study(root / "full.toml")
    assert len(full.settings) == 2 and len(full.shapes) == 2 and len(full.loads) == 3 and full.repetitions >= 3
    assert {s.engine.max_batch_tokens for s in full.settings} == {64, 256}
    for name in ("full.toml", "quick.toml"):
        load_study(root / name, quick=True)
    cuda = load_study(root / "cuda_small.toml")
    assert {(s.engine.device, s.engine.dtype) for s in cuda.settings} == {("cuda", "bf16")}
    given = load_study(root / "given" / "study.toml")  # a config.json model and a CSV trace, a fixed case
    assert given.model.name == "given-llama-8x192" and [s.fixed for s in given.shapes] == [True] and given.loads == ()


def test_a_cuda_study_on_a_machine_without_cuda_stops_before_any_folder(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    path = write_study(tmp_path, TINY_STUDY.replace('title = "tiny"', 'title = "tiny"\ndevice = "cuda"'))
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["fidelity", "run", str(path), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "study.device" in err and "CUDA" in err, err
    assert not out.exists()


def _stats(scale: float) -> dict[str, dict[str, float]]:
    return {m: {s: scale * (i + 1) * (j + 1) * 1e-3 for j, s in enumerate(STATS)} for i, m in enumerate(METRICS)}


def _samples(scale: float) -> dict[str, np.ndarray]:
    return {m: np.array([1.0, 2.0, 4.0]) * scale * 1e-3 for m in METRICS}


def test_the_writer_puts_the_comparisons_in_json_table_and_figures(tmp_path):
    run = {"error": None, "speed_vs_profile": 0.1, "steps_vs_profile": {"forward": 0.05, "step": 0.06}}
    case = CaseResult("tiny", "chat", 0.6, 3.0, 2.0, 5, sim_stats=_stats(1.5), sim_samples=_samples(1.5),
                      runs=[{**run, "rep": 1, "stats": _stats(1.0)}, {**run, "rep": 2, "stats": _stats(1.01)}],
                      run_samples=[_samples(1.0), _samples(1.01)])
    failed = CaseResult("tiny", "chat", 0.85, 4.0, 3.0, 5, sim_stats=_stats(1.0), sim_samples=_samples(1.0),
                        runs=[{"rep": 1, "error": "soft reset"}])
    facts = {"title": "hand-made", "source": "x.toml", "quick": False, "model": "m", "scheduler": "fifo",
             "loads": [0.6, 0.85], "repetitions": 2, "seed": 0, "wall_s": 1.0,
             "machine": {"cpus": 2, "load_average_before": [1.0, 1.0, 1.0], "load_average_after": [2.0, 2.0, 2.0]},
             "settings": [{"name": "tiny", "engine": {"max_batch_tokens": 48, "cache_tokens": 768},
                           "profile": {"points": 10, "drift": 0.01},
                           "shapes": {"chat": {"capacity_rps": 5.0, "host_per_step_s": 0.001}}}]}
    doc, table, figures = write_outputs(StudyResult(facts, [case, failed]), tmp_path)
    on_disk = json.loads((tmp_path / "fidelity.json").read_text())
    assert on_disk == json.loads(json.dumps(doc)) and on_disk["schema"] == "infralab.fidelity/1"
    first, second = on_disk["cases"]
    ttft = first["comparison"]["ttft"]["mean"]
    assert ttft["real"] == [0.001, pytest.approx(0.00101)] and ttft["sim"] == pytest.approx(0.0015)
    assert ttft["error"] == pytest.approx(1.5 / 1.005 - 1) and ttft["verdict"] == "missed"  # spread 0.7 % < 5 %
    assert first["comparison"]["ttft"]["p50"]["verdict"] == "out of range"  # no p50 target: the range rule
    assert second["comparison"] is None
    assert sum(on_disk["counts"].values()) == len(METRICS) * len(STATS)
    assert on_disk["counts"]["missed"] == 2 * len(METRICS)  # mean and p90 of every metric
    assert {"case": "tiny-chat-load85", "metric": None, "stat": None, "verdict": "not compared",
            "why": "fewer than 2 real runs finished: soft reset"} in on_disk["failures"]
    assert (tmp_path / "table.md").read_text() == table
    assert "| tiny-chat-load60 | TTFT | 1.0 ± 0.0 [1.0, 1.0] | 1.5 | +49.3% MISSED |" in table
    assert "| tiny-chat-load85 | all | not compared" in table
    assert "| tiny-chat-load60 | 3.00 | 1.0 ± 0.0 | 1.5 | +49.3% MISSED |" in table  # the headline table
    assert "| tiny-chat-load85 | 4.00 | - | - | not compared |" in table
    assert [p.name for p in figures] == ["cdf-tiny-chat-load60.png", "parity.png"]
    assert all(p.stat().st_size > 0 for p in figures) and on_disk["figures"] == [f"figures/{p.name}" for p in figures]


def judge_contention(monkeypatch, limit: float) -> None:
    """Set every contention limit (real/contention.py) to `limit`: 2.0 never flags a replay (the
    machine running these tests may be busy; these tests check the study's flow), -1.0 flags every one."""
    import infralab.real.contention as contention

    for name in ("WINDOW_SHARE_LIMIT", "OTHER_SHARE_LIMIT", "SLOW_STEP_SHARE_LIMIT"):
        monkeypatch.setattr(contention, name, limit)


def test_a_minimal_study_runs_end_to_end(tmp_path, capsys, monkeypatch):
    judge_contention(monkeypatch, 2.0)
    path = write_study(tmp_path)
    out = tmp_path / "out"
    # A relative --out, as `infralab reproduce` gives by default: the mirror still finds its profile.
    monkeypatch.chdir(tmp_path)
    assert dispatch(parse(["fidelity", "run", str(path), "--out", "out", "--no-progress"])) == 0
    doc = json.loads((out / "fidelity.json").read_text())
    table = (out / "table.md").read_text()
    assert table in capsys.readouterr().out
    (setting,) = doc["settings"]
    assert (out / setting["profile"]["file"]).is_file() and setting["profile"]["points"] > 0
    chat = setting["shapes"]["chat"]
    assert chat["capacity_rps"] > 0 and chat["host_per_step_s"] >= 0
    (case,) = doc["cases"]
    assert case["name"] == "tiny-chat-load50" and case["rate_rps"] == pytest.approx(0.5 * chat["capacity_rps"])
    assert [run["rep"] for run in case["runs"]] == [1, 2] and all(run["error"] is None for run in case["runs"])
    for run in case["runs"]:
        replay = json.loads((out / run["file"]).read_text())
        assert len(replay["requests"]) == case["requests"] == 5
        assert replay["rate_scale"] == pytest.approx(case["rate_scale"])
        # The engine scheduled every step as the mirror does for the same arrivals in steps.
        assert run["schedule"]["differing"] == 0 and run["schedule"]["steps"] == len(replay["steps"])
    for metric in METRICS:
        for stat in STATS:
            c = case["comparison"][metric][stat]
            assert c["real"] == [run["stats"][metric][stat] for run in case["runs"]]
            assert c["sim"] == case["sim"][metric][stat] > 0
            assert c["real_min"] <= c["real_mean"] <= c["real_max"]
            assert c["error"] == pytest.approx(c["sim"] / c["real_mean"] - 1)
    assert sum(doc["counts"].values()) == len(METRICS) * len(STATS)
    # The mirror at the machine's speed by the reference steps (the runs' against the profile's),
    # kept beside the case's simulation; the sign balance counts every comparison.
    speed = 1 + np.mean([run["speed_vs_profile"] for run in case["runs"]])
    assert case["speed_factor"] == pytest.approx(speed) and case["sim_machine_speed"] is not None
    assert case["comparison_machine_speed"]["ttft"]["mean"]["sim"] == case["sim_machine_speed"]["ttft"]["mean"]
    assert sum(doc["sign_balance"].values()) == sum(doc["counts"].values()) == sum(doc["counts_machine_speed"].values())
    assert "Sign balance" in table and f"x{case['speed_factor']:.3f}" in table
    assert case["others_factor"] is None and case["comparison_others_speed"] is None  # one case: no other replays
    # The calibration replay again after each round: kept, and the mirror at its speed kept beside.
    rounds = chat["calibration_rounds"]
    assert len(rounds) == doc["repetitions"] and all((out / r["file"]).exists() for r in rounds)
    ratios = [r["steps_vs_profile"]["step"] for r in rounds]
    assert case["calibration_factor"] == pytest.approx(1 + np.mean(ratios))
    assert case["comparison_calibration_speed"]["ttft"]["mean"]["sim"] == case["sim_calibration_speed"]["ttft"]["mean"]
    assert sum(doc["counts_calibration_speed"].values()) == sum(doc["counts"].values())
    assert "calibration replays between the rounds" in table
    # The step times the mirror charged, chosen on the calibration replays, both scored on the runs.
    choice = chat["step_times"]
    kept = [json.loads((out / f).read_text()) for f in chat["calibration_files"]]  # the calibration replays, kept
    assert [Path(f).name for f in chat["calibration_files"]] == ["calibration-tiny-chat-closed-loop.json",
                                                                  "calibration-tiny-chat-replay.json"]
    assert sum(len(k["steps"]) for k in kept) == choice["calibration_steps"]
    assert choice["chosen"] in ("profile", "scaled", "scaled_by_batch", "fitted") and choice["calibration_steps"] > 0
    candidates = {k for k in ("profile", "scaled", "scaled_by_batch", "fitted") if k == "profile" or choice[k]}
    assert all(set(run["step_models"]) == candidates for run in case["runs"])
    assert doc["settings"][0]["shapes"]["chat"]["mirror_config"]["cost"]["step_table"].endswith(
        "tiny.csv" if choice["chosen"] == "profile" else f"tiny-chat-{choice['chosen']}.csv")
    assert f"Step times, tiny/chat: the mirror charged the **{choice['chosen']}**" in table
    assert "| tiny-chat-load50 | TTFT |" in table
    assert sorted(doc["figures"]) == ["figures/cdf-tiny-chat-load50.png", "figures/parity.png"]
    assert all((out / f).stat().st_size > 0 for f in doc["figures"])


def test_a_contended_replay_is_repeated_once_and_left_out_if_contended_again(tmp_path, monkeypatch):
    judge_contention(monkeypatch, -1.0)
    assert main(["fidelity", "run", str(write_study(tmp_path)), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    doc = json.loads((tmp_path / "out" / "fidelity.json").read_text())
    (case,) = doc["cases"]
    assert case["comparison"] is None and sum(doc["counts"].values()) == 0
    for run in case["runs"]:
        assert run["contended_attempt"]["flagged"] and run["contention"]["flagged"]
        assert run["error"].startswith("contention (twice): ")
    assert doc["failures"][0]["why"].startswith("fewer than 2 real runs finished: contention (twice)")
    table = (tmp_path / "out" / "table.md").read_text()
    assert "2 of 2 replays contended and repeated once, 2 contended again and left out" in table


GIVEN_STUDY = TINY_STUDY.split("[[shape]]")[0].replace('model = "tiny-llama-test"', 'model = "model/config.json"').replace(
    "loads = [0.5]\n", "") + """
[[shape]]
name = "mine"
fixed = true
[shape.workload]
kind = "trace"
path = "mine.csv"
format = "csv"
max_requests = 6
"""

MINE_CSV = "request_id,arrival_s,prompt_tokens,output_tokens\n" + "".join(
    f"{rid},{10 + 0.05 * i:.2f},{9 + (7 * i) % 30},{2 + i % 4}\n"
    for i, rid in enumerate((101, 7, 55, 3, 40, 12, 900, 901, 902, 903)))
"""Ten requests with their own ids, arriving from 10 s (any origin) every 50 ms: the first six are
evaluated, the next four are the capacity burst."""


def test_a_fixed_case_replays_a_csv_trace_on_a_config_json_model_in_one_command(tmp_path, monkeypatch, capsys):
    """A model shape and a workload the project never saw, given as files: one case at the trace's
    own arrivals (nothing rescaled), the trace's ids kept in the replays."""
    judge_contention(monkeypatch, 2.0)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({
        "model_type": "llama", "_name_or_path": "someone/tiny-wide-llama", "num_hidden_layers": 3, "hidden_size": 96,
        "num_attention_heads": 6, "num_key_value_heads": 3, "vocab_size": 500, "intermediate_size": 200,
        "max_position_embeddings": 1024}))
    (tmp_path / "mine.csv").write_text(MINE_CSV)
    path = write_study(tmp_path, GIVEN_STUDY)
    assert main(["fidelity", "run", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    doc = json.loads((tmp_path / "out" / "fidelity.json").read_text())
    assert doc["model"] == "tiny-wide-llama" and doc["loads"] == []
    (case,) = doc["cases"]
    capacity = doc["settings"][0]["shapes"]["mine"]["capacity_rps"]
    assert case["name"] == "tiny-mine-given" and case["fixed"] and case["rate_scale"] == 1.0
    assert case["rate_rps"] == pytest.approx(5 / 0.25) and case["load"] == pytest.approx(case["rate_rps"] / capacity)
    for run in case["runs"]:
        replay = json.loads((tmp_path / "out" / run["file"]).read_text())
        assert sorted(r["id"] for r in replay["requests"]) == [3, 7, 12, 40, 55, 101]
        assert {r["id"]: r["arrival_s"] for r in replay["requests"]}[55] == pytest.approx(0.10)
    assert case["comparison"] is not None
    (tmp_path / "mine.csv").write_text("\n".join(MINE_CSV.splitlines()[:7]) + "\n")  # nothing left for the burst
    capsys.readouterr()
    assert main(["fidelity", "run", str(path), "--out", str(tmp_path / "out2"), "--no-progress"]) == 2
    assert "shape 'mine'.workload.max_requests: the trace holds 0 request(s) after the 6 evaluated" in capsys.readouterr().err
    assert not (tmp_path / "out2").exists()


def test_a_study_of_load_levels_needs_loads(tmp_path):
    with pytest.raises(InputError, match="study.loads") as err:
        load_study(write_study(tmp_path, TINY_STUDY.replace("loads = [0.5]\n", "")))
    assert "for the shapes that are not fixed" in str(err.value)


def test_a_burst_the_cache_cannot_hold_stops_before_any_folder(tmp_path):
    text = TINY_STUDY.replace("num_blocks = 24", "num_blocks = 2").replace(
        'prompt = { kind = "uniform", low = 8, high = 40 }', 'prompt = { kind = "fixed", value = 40 }')
    path = write_study(tmp_path, text)  # each request needs both blocks: no two fit together
    out = tmp_path / "out"
    with pytest.raises(InputError, match="study.toml: capacity.*holds fewer than 2"):
        dispatch(parse(["fidelity", "run", str(path), "--out", str(out), "--no-progress"]))
    assert not out.exists() and list(tmp_path.iterdir()) == [path]


def test_a_grid_that_does_not_cover_the_cases_stops_before_profiling(tmp_path):
    path = write_study(tmp_path, TINY_STUDY.replace("seqs = [1, 6]", "seqs = [1, 2]"))
    out = tmp_path / "out"
    with pytest.raises(InputError, match=r"profile\.seqs.*span 1-2.*up to 5"):
        dispatch(parse(["fidelity", "run", str(path), "--out", str(out), "--no-progress"]))
    assert not out.exists()


def test_a_study_folder_names_a_fidelity_study_or_hypotheses_not_both(tmp_path):
    from infralab.agent.studies import load_study as load_study_folder

    write_study(tmp_path, TINY_STUDY, "tiny.toml")
    (tmp_path / "h.toml").write_text("")
    (tmp_path / "study.toml").write_text('[study]\ntitle = "t"\nfidelity = "tiny.toml"\n')
    assert load_study_folder(tmp_path).fidelity == (tmp_path / "tiny.toml").resolve()
    (tmp_path / "study.toml").write_text('[study]\ntitle = "t"\nfidelity = "tiny.toml"\nhypotheses = ["h.toml"]\n')
    with pytest.raises(InputError, match="study.hypotheses.*together with study.fidelity"):
        load_study_folder(tmp_path)
    (tmp_path / "study.toml").write_text('[study]\ntitle = "t"\n')
    with pytest.raises(InputError, match="study.hypotheses.*missing"):
        load_study_folder(tmp_path)
    (tmp_path / "study.toml").write_text('[study]\ntitle = "t"\nfidelity = "absent.toml"\n')
    with pytest.raises(InputError, match="study.fidelity.*'absent.toml' is not a file"):
        load_study_folder(tmp_path)


def test_reproduce_verdict_of_a_fidelity_study():
    from infralab.agent.fidelity.in_reproduce import verdict

    counts = {"met": 0, "missed": 0, "in range": 0, "out of range": 0}
    assert verdict(counts) == "unmeasured"
    assert verdict({**counts, "met": 3, "in range": 1}) == "accepted"
    assert verdict({**counts, "met": 3, "missed": 1}) == "partial"
    assert verdict({**counts, "out of range": 2}) == "rejected"


def test_each_case_is_also_simulated_at_the_speed_the_other_cases_replays_ran(monkeypatch):
    """The mirror again with cost.step_table_speed = 1 + the mean step ratio of the OTHER cases'
    finished runs (not the case's own replays); a case alone gets none."""
    from infralab.agent.fidelity import runner

    seen = []
    monkeypatch.setattr(runner, "simulate_mirror", lambda doc, requests, scale, folder: seen.append(
        (doc["cost"]["step_table_speed"], scale)) or [])
    monkeypatch.setattr(runner, "latency_stats", lambda records: {"ttft": {"mean": 1.0}})

    def case(load, ratios, error=None):
        c = runner.CaseResult("s", "chat", load, 1.0, load, 4, {}, {})
        c.runs = [{"error": error, "steps_vs_profile": {"step": r}} for r in ratios]
        return c

    a, b, c = case(0.3, [0.10, 0.20]), case(0.6, [0.30, float("nan")]), case(0.9, [5.0], error="contention")
    runner._follow_the_other_cases([a, b, c], {"cost": {"step_table_speed": 1.0}}, [], Path("."))
    assert a.others_factor == pytest.approx(1.30)  # b's one finished, observed run; c's failed run left out
    assert b.others_factor == pytest.approx(1.15) and c.others_factor == pytest.approx((1.1 + 1.2 + 1.3) / 3)
    assert a.sim_others_speed == {"ttft": {"mean": 1.0}} and [scale for _, scale in seen] == [0.3, 0.6, 0.9]
    alone = case(0.5, [0.1])
    runner._follow_the_other_cases([alone], {"cost": {}}, [], Path("."))
    assert alone.others_factor is None and alone.sim_others_speed is None
