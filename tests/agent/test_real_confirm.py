"""`infralab test --confirm` on a cluster hypothesis: the real rung replays each arm on the real
engine (a tiny model, a handful of requests, 2 repetitions, the noise rule) and the ladder reports
whether the measured effect has the simulator's direction and size; a model the machine cannot run
gives "cannot confirm here: ..." and no crash. No timing assertions: the criteria are counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")

from infralab.calibration_table import read_provenance
from infralab.cli import main
from support.toml_fixtures import TINY_REAL_ENGINE, tiny_llama_model

MODEL = tiny_llama_model()

HUGE_MODEL = """\
name = "huge-llama"
source = "infralab tests: Llama-3-405B's shape (about 1.6 TB of fp32 weights), built by nobody"
num_layers = 126
hidden_size = 16384
num_heads = 128
num_kv_heads = 8
head_dim = 128
vocab_size = 128256
context_length = 2048
intermediate_size = 53248
tie_word_embeddings = false
"""

CONFIG = """\
model = "tiny-model.toml"

[hardware]
accelerator = "H100"

[workload]
kind = "synthetic"
num_requests = 5
arrival = { kind = "poisson", rate = 50.0 }
prompt = { kind = "uniform", low = 8, high = 40 }
output = { kind = "uniform", low = 2, high = 5 }

""" + TINY_REAL_ENGINE

HYPOTHESIS = """\
[hypothesis]
name = "tiny_budget"
claim = "a smaller token budget completes every request as the baseline does"
kind = "cluster"
metrics = ["completed", "ttft_mean_s", "max_instance_busy"]
validators = ["sim", "real"]
acceptance = ["half.completed >= baseline.completed"]
seeds = [0]
repetitions = 2

[setup]
config = "tiny.toml"
processes = 1

[baseline]
"engine.max_batched_tokens" = 48

[[variant]]
name = "half"
change = {{ "engine.max_batched_tokens" = 24 }}
"""


def _study(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny-model.toml").write_text(MODEL)
    (folder / "tiny.toml").write_text(CONFIG)
    path = folder / "hypothesis.toml"
    path.write_text(HYPOTHESIS.format())
    return path


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("confirm")
    hypothesis = _study(folder)
    assert main(["real", "profile", str(folder / "tiny.toml"), "--out", str(folder / "profile")]) == 0
    out = folder / "result"
    main(["test", str(hypothesis), "--confirm", "--json", "--out", str(out)])
    return {"doc": json.loads((out / "result.json").read_text()), "out": out}


def test_the_real_rung_runs_every_arm_repeatedly_and_confirms(confirmed: dict) -> None:
    doc = confirmed["doc"]
    rungs = {r["validator"]: r for r in doc["rungs"]}
    assert rungs["sim"]["status"] == rungs["real"]["status"] == "ran"
    assert rungs["sim"]["verdict"] == rungs["real"]["verdict"] == "accepted"
    assert doc["decided_by"] == "real"
    assert rungs["real"]["varies"] is True
    assert set(rungs["real"]["arms"]) == {"baseline", "half"}


def test_each_real_replay_leaves_a_real_run_folder(confirmed: dict) -> None:
    out = confirmed["out"]
    runs = sorted(p.name for p in (out / "real" / "runs").iterdir())
    assert runs == ["baseline-seed0-rep0", "baseline-seed0-rep1", "half-seed0-rep0", "half-seed0-rep1"]
    summary = json.loads((out / "real" / "runs" / "half-seed0-rep0" / "summary.json").read_text())
    assert summary["run"]["rung"] == "real" and summary["run"]["engine_settings"]["max_batch_tokens"] == 24


def test_the_ladder_says_whether_the_real_effect_has_the_predicted_direction_and_size(confirmed: dict) -> None:
    found = [f for f in confirmed["doc"]["findings"]
             if f["where"]["kind"] == "ladder" and f["arm"] == "half" and "predicted" in f["what"]]
    assert len(found) == 1
    numbers = found[0]["evidence"]["numbers"]
    assert numbers["completed.sim_effect"] == numbers["completed.real_effect"] == 0
    assert "ttft_mean_s.same_direction" in numbers and "ttft_mean_s.size_ratio" in numbers


def test_a_model_the_machine_cannot_run_gives_cannot_confirm_here(tmp_path: Path, capsys) -> None:
    hypothesis = _study(tmp_path)
    assert main(["real", "profile", str(tmp_path / "tiny.toml"), "--out", str(tmp_path / "profile")]) == 0
    # The simulator times steps from the step table whatever the model's dimensions (the table's
    # provenance names the model, so the huge one takes the profiled model's name); the machine
    # cannot hold it.
    profiled_name = read_provenance(tmp_path / "profile" / "step_table.csv")["model"]
    (tmp_path / "tiny-model.toml").write_text(HUGE_MODEL.replace('name = "huge-llama"', f'name = "{profiled_name}"'))
    capsys.readouterr()
    main(["test", str(hypothesis), "--confirm", "--json"])
    doc = json.loads(capsys.readouterr().out)
    real = next(r for r in doc["rungs"] if r["validator"] == "real")
    assert real["status"] == "unavailable"
    assert real["reason"].startswith("cannot confirm here: arm baseline:") and "GB" in real["reason"]
    assert doc["decided_by"] == "sim"
