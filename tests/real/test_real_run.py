"""`infralab real run` and `infralab real profile` on a tiny engine: the run folder is the one `sim
run` writes (same files, same columns, the same metrics code), `explain` reads it and says what the
engine did not observe, the profile is a step table the simulator runs the same config with, and
bad input stops with one line, exit status 2 and no folder. A handful of requests; no timing
assertions (orderings, counts and the identity of computed figures hold at any machine speed)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")

from infralab.cli import main
from infralab.metrics.records import RunRecord
from infralab.metrics.requests_csv import DERIVED_FIELDS, REQUEST_FIELDS
from infralab.metrics.run_metrics import summarize
from infralab.metrics.schema import SLOConfig
from infralab.metrics.summary import RunSummary
from infralab.calibration_table import read_provenance
from infralab.real.config import load_real_config, resolved_config_text
from infralab.real.contention import OTHER_SHARE_LIMIT, machine_cores
from support.toml_fixtures import TINY_REAL_ENGINE, tiny_llama_model


CONFIG = """\
model = "tiny-model.toml"

[run]
name = "tiny-real"
seed = 1

[hardware]
accelerator = "H100"

[workload]
kind = "synthetic"
num_requests = 6
arrival = {{ kind = "poisson", rate = 50.0 }}
prompt = {{ kind = "uniform", low = 8, high = {prompt_high} }}
output = {{ kind = "uniform", low = 1, high = 5 }}

""" + TINY_REAL_ENGINE


def write_config(folder: Path, prompt_high: int = 40, context: int = 2048, **replace: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny-model.toml").write_text(tiny_llama_model(context))
    text = CONFIG.format(prompt_high=prompt_high)
    for old, new in replace.items():
        text = text.replace(old, new)
    path = folder / "tiny.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("real_run")
    assert main(["real", "run", str(write_config(folder)), "--out", str(folder / "run")]) == 0
    return folder / "run"


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config folder holding profile/step_table.csv from `real profile` of that config."""
    folder = tmp_path_factory.mktemp("real_profile")
    assert main(["real", "profile", str(write_config(folder)), "--out", str(folder / "profile")]) == 0
    return folder


@pytest.fixture()
def hogs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """One busy-looping process per core, already spinning when the test starts."""
    import psutil

    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(machine_cores())]
    try:
        deadline = time.monotonic() + 30
        while any(psutil.Process(p.pid).cpu_times().user < 0.2 for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


# ---- the run folder ---------------------------------------------------------------------------


def test_a_real_run_writes_the_files_of_a_sim_run_and_its_own(real_run: Path) -> None:
    names = {p.name for p in real_run.iterdir()}
    assert {"summary.json", "requests.csv", "trace.json", "config.toml", "resolved_config.toml", "replay.json"} <= names
    assert (real_run / "config.toml").read_bytes() == (real_run.parent / "tiny.toml").read_bytes()


def test_requests_csv_has_the_sim_columns_and_every_request(real_run: Path) -> None:
    with (real_run / "requests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == REQUEST_FIELDS + DERIVED_FIELDS
    assert [int(r["id"]) for r in rows] == list(range(6))
    for row in rows:
        arrival, first, finish = (float(row[k]) for k in ("arrival_s", "first_token_s", "finish_s"))
        assert arrival <= float(row["first_scheduled_s"]) <= first <= finish
        assert float(row["ttft_s"]) == pytest.approx(first - arrival)
        assert row["prefill_instance"] == row["decode_instance"] == "instance-0"


def test_the_summary_is_the_shared_summary_of_the_replayed_records(real_run: Path) -> None:
    """summary.json is summarize() of the token times the engine stamped (replay.json), nothing else."""
    from infralab.real.load_generator import RequestTiming
    from infralab.real.run_record import request_record

    replay = json.loads((real_run / "replay.json").read_text())
    records = [request_record(RequestTiming(**{**r, "token_times_s": tuple(r["token_times_s"])}))
               for r in replay["requests"]]
    expected = summarize(RunRecord(requests=records), SLOConfig())
    summary = RunSummary.from_json(json.loads((real_run / "summary.json").read_text()))
    assert summary.requests.completed == summary.requests.total == 6
    assert summary.latency == expected.latency
    assert summary.goodput == expected.goodput


def test_the_summary_says_what_ran_what_was_not_observed_and_not_read(real_run: Path) -> None:
    run = json.loads((real_run / "summary.json").read_text())["run"]
    assert run["rung"] == "real" and run["model"] == "tiny-model.toml" and run["seed"] == 1
    assert run["engine_settings"]["scheduler"] == "FIFOScheduler"
    assert run["engine_settings"]["max_batch_tokens"] == 48 and run["engine_settings"]["num_blocks"] == 24
    assert run["fingerprint_before"]["steps"] and run["fingerprint_after"]["steps"]
    assert any("counters" in item for item in run["not_observed"])
    assert set(run["not_read"]) == {"hardware", "cost"}


def test_trace_json_holds_one_batch_interval_per_observed_step(real_run: Path) -> None:
    from infralab.agent.run_dir import load_trace

    intervals, counters, meta = load_trace(real_run / "trace.json")
    assert meta["generator"] == "infralab.real.run" and "replay" in meta["time_unit"]
    run = json.loads((real_run / "summary.json").read_text())["run"]
    batches = [iv for iv in intervals if iv.track == "instance/instance-0" and iv.name == "batch"]
    assert len(batches) == run["steps_observed"] > 0
    phases = [iv.name for iv in intervals if iv.track == "engine/instance-0"]
    assert phases == ["prepare", "forward", "update"] * len(batches)
    assert counters == ()
    assert sum(dict(iv.args)["output_tokens"] for iv in batches) == sum(
        r["output_tokens"] for r in json.loads((real_run / "replay.json").read_text())["requests"])


def test_the_resolved_config_reads_back_as_the_config_that_ran(real_run: Path, tmp_path: Path) -> None:
    original = load_real_config(real_run.parent / "tiny.toml")
    text = (real_run / "resolved_config.toml").read_text()
    assert "hardware" not in tomllib.loads(text)
    again = tmp_path / "resolved.toml"
    again.write_text(text)
    resolved = load_real_config(again)
    assert resolved.cfg.engine == original.cfg.engine and resolved.cfg.workload == original.cfg.workload
    assert resolved_config_text(resolved) == text


# ---- explain ----------------------------------------------------------------------------------


def test_explain_reads_a_real_run_and_names_what_it_lacks(real_run: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["explain", str(real_run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["run"]["requests"] == 6
    missing = doc["run"]["missing"]
    assert any(line.startswith("not observed by this engine: counters") for line in missing)
    assert any(c["kind"] == "phase" for c in doc["causes"])


def test_explain_compares_a_real_run_with_a_simulation_of_its_config(profiled: Path, capsys) -> None:
    config = profiled / "tiny.toml"
    assert main(["sim", "run", str(config), "--out", str(profiled / "sim")]) == 0
    assert main(["real", "run", str(config), "--out", str(profiled / "real")]) == 0
    capsys.readouterr()
    assert main(["explain", str(profiled / "real"), "--against", str(profiled / "sim"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["baseline"]["requests"] == doc["run"]["requests"] == 6
    assert doc["metric"]["baseline"] is not None and doc["metric"]["run"] is not None
    # The machine's speed against the profile the simulation's step times came from: the reference
    # steps around this replay against those around the profile (both recorded, so it is exact).
    run = json.loads((profiled / "real" / "summary.json").read_text())["run"]
    replay = json.loads((profiled / "real" / "replay.json").read_text())
    table = read_provenance(profiled / "profile" / "step_table.csv")["fingerprint"]
    now = sum((b["forward_s"] + a["forward_s"]) / 2 for b, a in zip(replay["fingerprint_before"]["steps"],
                                                                      replay["fingerprint_after"]["steps"]))
    assert run["speed_vs_step_table"] == pytest.approx(now / sum(table["forward_s"]) - 1)


# ---- the profile ------------------------------------------------------------------------------


def test_the_profile_spans_every_step_of_the_configs_run(profiled: Path) -> None:
    facts = json.loads((profiled / "profile" / "profile.json").read_text())
    points = facts["points"]
    assert max(q for q, _, _ in points) == 48  # the token budget
    assert min(q for q, _, _ in points) == min(kv for _, kv, _ in points) == min(s for _, _, s in points) == 1
    assert max(s for _, _, s in points) == 6  # min(request cap, budget, requests)
    with (profiled / "profile" / "step_table.csv").open() as handle:
        rows = list(csv.DictReader(line for line in handle if not line.startswith("#")))
    assert {r["kernel"] for r in rows} == {"engine_step", "engine_prepare"}
    assert len(rows) == 2 * len(points)


def test_grid_axes_are_powers_of_two_up_to_their_bound() -> None:
    from infralab.real.profile_run import powers_up_to

    assert powers_up_to(1) == (1,)
    assert powers_up_to(48) == (1, 2, 4, 8, 16, 32, 48)
    assert powers_up_to(64) == (1, 2, 4, 8, 16, 32, 64)


# ---- bad input --------------------------------------------------------------------------------


def _refused(argv: list[str], out: Path, capsys: pytest.CaptureFixture, *words: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for word in words:
        assert word in err, err
    assert not out.exists()


def test_a_model_too_large_for_this_machine_is_refused_before_it_is_built(tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path)
    # Llama-3-70B's widths with 800 layers, fp32: about 2.8 TB of weights (more than any machine here), built by nobody.
    (tmp_path / "tiny-model.toml").write_text(tiny_llama_model(8192).replace("num_layers = 2", "num_layers = 800")
                                              .replace("hidden_size = 64", "hidden_size = 8192")
                                              .replace("num_heads = 4", "num_heads = 64")
                                              .replace("num_kv_heads = 2", "num_kv_heads = 8")
                                              .replace("head_dim = 16", "head_dim = 128")  # 8192 / 64, as the engine builds it
                                              .replace("vocab_size = 1000", "vocab_size = 128256")
                                              .replace("intermediate_size = 128", "intermediate_size = 28672"))
    for command in ("run", "profile"):
        out = tmp_path / command
        _refused(["real", command, str(config), "--out", str(out)], out, capsys, "tiny.toml: model", "GB", "available")


def test_a_request_over_the_model_context_is_refused(tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path, prompt_high=400, context=64)
    out = tmp_path / "run"
    _refused(["real", "run", str(config), "--out", str(out)], out, capsys, "workload", "context")


def test_a_request_over_the_engine_cache_is_refused(tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path, prompt_high=400, **{"num_blocks = 24": "num_blocks = 4"})
    out = tmp_path / "run"
    _refused(["real", "run", str(config), "--out", str(out)], out, capsys, "tiny.toml: workload: request",
             "KV cache 128 tokens")


@pytest.mark.parametrize("old, new, rung, field", [
    ("threads = 1", "threads = 2", "real", "threads"),  # [real] has no threads line: added below
    ("num_blocks = 24", "num_blocks = 23", "sim", "cache_tokens"),
    ("num_blocks = 24", "num_blocks = 23", "real", "cache_tokens"),
    ('dtype = "fp32"', 'dtype = "bf16"', "real", "dtype"),
])
def test_a_step_table_profiled_for_another_engine_is_refused_by_its_provenance(
        profiled: Path, tmp_path: Path, capsys, old: str, new: str, rung: str, field: str) -> None:
    """The table's provenance line (model, dtype, device, threads, KV cache) against the run's: one
    line naming the table and the field, before anything is built or written."""
    text = (profiled / "tiny.toml").read_text().replace("[real]\n", "[real]\nthreads = 1\n")
    if field == "dtype":  # the real side's dtype lives under [real]
        text = text.replace("[real]\n", '[real]\ndtype = "fp32"\n')
    config = profiled / f"other-{rung}-{field}.toml"
    config.write_text(text.replace(old, new))
    out = tmp_path / "out"
    assert main([rung, "run", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"step_table.csv: provenance.{field}: " in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_profile_that_does_not_cover_the_run_stops_the_simulation(profiled: Path, tmp_path: Path, capsys) -> None:
    # The profile spans a 48-token budget; the same config with a 96-token budget has larger steps.
    config = write_config(tmp_path, **{"max_batched_tokens = 48": "max_batched_tokens = 96",
                                       'step_table = "profile/step_table.csv"':
                                       f'step_table = "{profiled / "profile" / "step_table.csv"}"'})
    out = tmp_path / "sim"
    _refused(["sim", "run", str(config), "--out", str(out)], out, capsys, "step_table.csv", "q_tokens 1-96 (profiled 1-48)")


@pytest.mark.parametrize(("old", "new", "field"), [
    ('scheduler = "hf_fifo"', 'scheduler = "fast"', "engine.scheduler"),
    ("prefix_cache = false", "", "engine.prefix_cache"),
    ("num_blocks = 24\n", "", "engine.num_blocks"),
    ('num_requests = 6', 'num_requests = 6\nmax_concurrency = 2', "workload.max_concurrency"),
    ("[real]", "[workload.multimodal]\nimage_share = 0.5\n\n[real]", "workload.multimodal"),
    ("[real]", "[cluster]\ninstances = 2\n\n[real]", "cluster.instances"),
    ("warmup_requests = 1", "warmup_requests = 1\nthreds = 2", "real.threds"),
    ("warmup_requests = 1", 'warmup_requests = 1\ndevice = "tpu"', "real.device"),
])
def test_config_fields_the_real_engine_cannot_honour_are_refused(tmp_path: Path, capsys, old: str, new: str,
                                                                 field: str) -> None:
    config = write_config(tmp_path, **{old: new})
    out = tmp_path / "run"
    _refused(["real", "run", str(config), "--out", str(out)], out, capsys, field)


def test_the_memory_estimate_counts_weights_cache_and_step_buffers() -> None:
    from infralab.errors import InputError
    from infralab.real.engine import EngineSettings
    from infralab.real.machine import check_fits_machine, memory_need
    from infralab.real.model_shape import TINY

    settings = EngineSettings(num_blocks=24, page_size=32, max_batch_tokens=48, max_requests_per_batch=6)
    need = memory_need(TINY, settings)
    assert need.weights == TINY.parameters() * 4
    assert need.kv_cache == 24 * 32 * TINY.num_layers * 2 * TINY.num_kv_heads * TINY.head_dim * 4
    assert need.step_buffers > 48 * (24 * 32) * 4  # at least the attention mask
    assert check_fits_machine(TINY, settings, "here", available=need.total) == need
    with pytest.raises(InputError, match="here"):
        check_fits_machine(TINY, settings, "here", available=need.total - 1)


def test_cuda_on_a_machine_without_one_is_refused_by_field(tmp_path: Path, capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    config = write_config(tmp_path, **{"warmup_requests = 1": 'warmup_requests = 1\ndevice = "cuda"'})
    out = tmp_path / "run"
    _refused(["real", "run", str(config), "--out", str(out)], out, capsys, "tiny.toml: real.device", "CUDA")


# ---- contention -------------------------------------------------------------------------------


def test_a_real_run_beside_cpu_hogs_says_so_in_its_summary(hogs: list[subprocess.Popen[bytes]], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A busy loop on every core: the run is flagged (printed, summary.json, replay.json) and the hogs
    are named. The hogs hold every core whatever the machine's speed, so this holds anywhere."""
    config = write_config(tmp_path, **{"num_requests = 6": "num_requests = 30", "fingerprint_repeats = 1": "fingerprint_repeats = 5"})
    assert main(["real", "run", str(config), "--out", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr().out
    assert "contention: YES" in printed
    assert "n/a (no [slo] table in the config)" in printed  # the config sets no targets
    seen = json.loads((tmp_path / "run" / "summary.json").read_text())["run"]["contention"]
    assert seen["flagged"] and seen["other_share"] >= OTHER_SHARE_LIMIT and seen["cores"] == machine_cores()
    assert {p.pid for p in hogs} & {p["pid"] for p in seen["processes"]}
    assert json.loads((tmp_path / "run" / "replay.json").read_text())["contention"]["flagged"]


def test_real_profile_shows_its_progress_on_stderr(tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path)
    assert main(["real", "profile", str(config), "--out", str(tmp_path / "p")]) == 0
    err = capsys.readouterr().err
    assert "real profile (" in err and "100% (" in err  # a line per 10 % off a terminal, the last at 100 %
    assert main(["real", "profile", str(config), "--out", str(tmp_path / "q"), "--no-progress"]) == 0
    assert "real profile (" not in capsys.readouterr().err


def test_one_profile_spans_a_set_of_configs_of_the_same_engine(tmp_path: Path, capsys) -> None:
    """--also: the grid spans the other configs' runs too (longer prompts: more keys); a config of
    another engine is refused by name before anything is built."""
    small, large = write_config(tmp_path / "small"), write_config(tmp_path / "large", prompt_high=200)
    assert main(["real", "profile", str(small), "--out", str(tmp_path / "one"), "--no-progress"]) == 0
    assert main(["real", "profile", str(small), "--also", str(large), "--out", str(tmp_path / "both"),
                 "--no-progress"]) == 0
    one, both = (json.loads((tmp_path / d / "profile.json").read_text()) for d in ("one", "both"))
    assert max(both["grid"]["kv_tokens"]) > max(one["grid"]["kv_tokens"])
    assert both["also_spans"] == [str(large)]
    other = write_config(tmp_path / "other", **{"num_blocks = 24": "num_blocks = 30"})
    capsys.readouterr()
    assert main(["real", "profile", str(small), "--also", str(other), "--out", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err
    assert f"{other}: engine settings (num_blocks): 30, not 24" in err and not (tmp_path / "no").exists()
