"""Step costs from a real engine's step profile (`sim/step_table_cost.py`) and the calibration
lookup's grid rule it uses (`CalibrationTable.lookup(..., grid=True)`, rule 1b): exact rows, the
multilinear interpolation inside the grid, missing corners, no extrapolation (an InputError naming
the table), and a whole `sim run` with the engine mirror timed from a table."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infralab.calibration_table import CalibrationRow, render_table
from infralab.cli import main
from infralab.errors import InputError
from infralab.sim.calibration import CalibrationTable, load_calibration
from infralab.sim.config import HostOverheadConfig, load_config
from infralab.sim.cost import StepWork
from infralab.sim.specs import load_model
from infralab.sim.step_table_cost import StepTableCost, step_shape

Q, KV, SEQS = (1, 4, 16, 64), (1, 16, 256, 1024), (1, 4, 16)


def forward_s(q: float, kv: float, seqs: float) -> float:
    """A made-up step time, multilinear in the three fields (so interpolation is exact on it)."""
    return 1e-3 + 2e-5 * q + 1e-9 * q * kv + 3e-4 * seqs


def prepare_s(q: float, kv: float, seqs: float) -> float:
    return 2e-4 + 1e-6 * q + 5e-6 * seqs


def _rows(keep=lambda q, kv, s: True) -> list[CalibrationRow]:
    rows = []
    for q, kv, s in itertools.product(Q, KV, SEQS):
        if not keep(q, kv, s):
            continue
        shape = (("q_tokens", q), ("kv_tokens", kv), ("seqs", s))
        for kernel, seconds in (("engine_step", forward_s(q, kv, s)), ("engine_prepare", prepare_s(q, kv, s))):
            rows.append(CalibrationRow(kernel=kernel, variant="sdpa", shape=shape, dtype="fp32", device="cpu",
                                       median_s=seconds, bytes=0, flops=0, achieved_gbps=0.0, achieved_tflops=0.0))
    return rows


def _table(path: Path, keep=lambda q, kv, s: True) -> Path:
    path.write_text(render_table(_rows(keep), ["made-up step profile for tests"]))
    return path


@given(q=st.integers(1, 64), kv=st.integers(1, 1024), seqs=st.integers(1, 16))
def test_inside_a_full_grid_a_multilinear_time_is_interpolated_exactly(q: int, kv: int, seqs: int) -> None:
    table = CalibrationTable(_rows())
    shape = {"q_tokens": q, "kv_tokens": kv, "seqs": seqs}
    assert table.lookup("engine_step", "fp32", "cpu", shape, grid=True) == pytest.approx(forward_s(q, kv, seqs))


def test_a_corner_the_producer_could_not_run_drops_out_and_the_others_are_renormalized() -> None:
    # No row with more sequences than query tokens (the engine cannot run them).
    table = CalibrationTable(_rows(keep=lambda q, kv, s: s <= q))
    shape = {"q_tokens": 2, "kv_tokens": 256, "seqs": 2}  # box q in [1, 4], seqs in [1, 4]; (1, 4) is missing
    weights = {(1, 1): 2 / 3 * 2 / 3, (4, 1): 1 / 3 * 2 / 3, (4, 4): 1 / 3 * 1 / 3}
    expected = sum(w * forward_s(q, 256, s) for (q, s), w in weights.items()) / sum(weights.values())
    assert table.lookup("engine_step", "fp32", "cpu", shape, grid=True) == pytest.approx(expected)


def test_without_grid_the_lookup_is_unchanged() -> None:
    # Rule 1b is asked for; other tables (kernel benches, Vidur) keep their rules and outputs.
    table = CalibrationTable(_rows())
    shape = {"q_tokens": 2, "kv_tokens": 100, "seqs": 2}
    assert table.lookup("engine_step", "fp32", "cpu", shape) != pytest.approx(forward_s(2, 100, 2))
    assert table.inside_grid("engine_step", "fp32", "cpu", {"q_tokens": 65, "kv_tokens": 100, "seqs": 2}) is None
    assert table.measured_range("engine_step", "fp32", "cpu") == {"q_tokens": (1, 64), "kv_tokens": (1, 1024),
                                                                   "seqs": (1, 16)}


def test_a_step_is_keyed_by_query_tokens_keys_and_sequences() -> None:
    work = StepWork.decode(3, 3 * 40) + StepWork.prefill_chunk(20, 10) + StepWork.prefill(5)
    assert step_shape(work) == {"q_tokens": 3 + 20 + 5, "kv_tokens": 120 + 30 + 5, "seqs": 5}


def test_a_step_costs_its_forward_plus_host_time(tmp_path: Path) -> None:
    table = load_calibration(_table(tmp_path / "profile.csv"))
    host = HostOverheadConfig(per_step_s=1e-4, per_request_s=1e-5)
    cost = StepTableCost(table, "fp32", kv_capacity_tokens=2048, host=host)
    work = StepWork.decode(4, 4 * 100)  # q 4, keys 400, 4 sequences
    step = cost.step(work)
    # The table's cells carry six significant digits.
    assert step.device_s == pytest.approx(forward_s(4, 400, 4), rel=1e-5)
    assert step.host_s == pytest.approx(prepare_s(4, 400, 4) + 1e-4 + 4e-5, rel=1e-5)
    assert step.total_s == pytest.approx(step.device_s + step.host_s)
    assert cost.decode_step_s(4, 400) == step.total_s
    assert cost.kv_capacity_tokens(0.9) == 2048


def test_a_step_outside_the_profile_is_an_input_error_naming_the_table(tmp_path: Path) -> None:
    path = _table(tmp_path / "profile.csv")
    cost = StepTableCost(load_calibration(path), "fp32", kv_capacity_tokens=2048)
    with pytest.raises(InputError) as info:
        cost.step(StepWork.prefill(100))
    assert str(path) in info.value.where and "q_tokens=100 (profiled 1-64)" in info.value.problem


def test_a_table_without_step_rows_of_the_dtype_is_an_input_error(tmp_path: Path) -> None:
    path = _table(tmp_path / "profile.csv")
    with pytest.raises(InputError, match="no engine_step rows of dtype bf16"):
        StepTableCost(load_calibration(path), "bf16", kv_capacity_tokens=2048)


CONFIG = """\
model = "small-llama-cpu"

[run]
name = "mirror"
seed = 3

[hardware]
accelerator = "H100"

[workload]
kind = "synthetic"
num_requests = 12

[workload.arrival]
kind = "poisson"
rate = 20.0

[workload.prompt]
kind = "uniform"
low = 8
high = {prompt_high}

[workload.output]
kind = "uniform"
low = 1
high = 12

[cost]
dtype = "fp32"
step_table = "profile.csv"

[engine]
scheduler = "hf_fifo"
max_batched_tokens = 64
max_num_seqs = 16
block_size = 32
num_blocks = 32
prefix_cache = false
"""


def _config(tmp_path: Path, prompt_high: int = 120, **replace: str) -> Path:
    _table(tmp_path / "profile.csv")
    text = CONFIG.format(prompt_high=prompt_high)
    for old, new in replace.items():
        text = text.replace(old, new)
    path = tmp_path / "mirror.toml"
    path.write_text(text)
    return path


def test_a_run_with_the_engine_mirror_and_a_step_table(tmp_path: Path) -> None:
    out = tmp_path / "res"
    assert main(["sim", "run", str(_config(tmp_path)), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == {"total": 12, "completed": 12}
    again = tmp_path / "again"
    assert main(["sim", "run", str(_config(tmp_path)), "--out", str(again)]) == 0
    assert (out / "requests.csv").read_bytes() == (again / "requests.csv").read_bytes()


def test_a_profile_that_does_not_cover_the_run_stops_it_with_no_folder(tmp_path: Path, capsys) -> None:
    # A 64-token budget keeps every step inside the grid (q_tokens up to 64); a 128-token budget does not.
    cfg = _config(tmp_path, **{"max_batched_tokens = 64": "max_batched_tokens = 128"})
    out = tmp_path / "res"
    assert main(["sim", "run", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "profile.csv" in err and "q_tokens 1-128 (profiled 1-64)" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(("old", "new", "field"), [
    ("num_blocks = 32\n", "", "engine.num_blocks"),
    ("prefix_cache = false", "prefix_cache = true", "engine.prefix_cache"),
    ('scheduler = "hf_fifo"', 'scheduler = "fast"\nsafety_margin = 0.1', "engine.safety_margin"),
])
def test_mirror_fields_are_checked_with_the_config(tmp_path: Path, old: str, new: str, field: str) -> None:
    with pytest.raises(InputError) as info:
        load_config(_config(tmp_path, **{old: new}))
    assert field in info.value.where


def test_the_machines_speed_scales_every_table_time_but_not_the_host_terms() -> None:
    """`cost.step_table_speed`: the profiled forward and batch building x the speed; the host terms
    the profile does not measure stay as set."""
    table = CalibrationTable(_rows())
    host = HostOverheadConfig(per_step_s=1e-3)
    work = StepWork.decode(4, 4 * 100)
    plain = StepTableCost(table, "fp32", 4096, host).step(work)
    slower = StepTableCost(table, "fp32", 4096, host, speed=1.25).step(work)
    assert slower.device_s == pytest.approx(1.25 * plain.device_s)
    assert slower.host_s - 1e-3 == pytest.approx(1.25 * (plain.host_s - 1e-3))


def test_a_slower_machine_gives_longer_latencies_and_the_speed_needs_a_table(tmp_path: Path) -> None:
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    assert main(["sim", "run", str(_config(tmp_path)), "--out", str(fast)]) == 0
    assert main(["sim", "run", str(_config(tmp_path)), "--out", str(slow), "--set", "cost.step_table_speed=1.5"]) == 0
    e2e = [json.loads((d / "summary.json").read_text())["e2e_s"]["mean"] for d in (fast, slow)]
    assert e2e[1] > e2e[0]
    with pytest.raises(InputError) as info:
        load_config(_config(tmp_path, **{'step_table = "profile.csv"': "step_table_speed = 1.2",
                                         "num_blocks = 32\n": ""}))
    assert info.value.where.endswith("cost.step_table_speed")


def test_a_run_timed_by_a_step_table_needs_no_accelerator(tmp_path: Path) -> None:
    """A CPU engine's mirror reads no accelerator: [hardware] may be left out; without a step table
    it is still required, by name."""
    text = _config(tmp_path).read_text()
    start = text.index("[hardware]")
    no_hardware = text[:start] + text[text.index("[", start + 1):]
    path = tmp_path / "cpu.toml"
    path.write_text(no_hardware)
    out = tmp_path / "res"
    assert main(["sim", "run", str(path), "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["requests"]["completed"] == 12
    path.write_text(no_hardware.replace('step_table = "profile.csv"\n', "").replace("num_blocks = 32\n", ""))
    with pytest.raises(InputError) as info:
        load_config(path)
    assert info.value.where.endswith("hardware.accelerator") and "step_table" in str(info.value)


def test_the_shipped_h200_step_table_simulates_its_config(tmp_path, capsys):
    """experiments/real/llama3_8b_cuda.toml with the profile measured on an H200 (docs/gpu.md): the
    table covers every step the config allows, its provenance matches the config's [real] settings,
    and the run's decode steps cost what the table measured (25-32 ms at one sequence)."""
    config = Path(__file__).resolve().parents[2] / "experiments" / "real" / "llama3_8b_cuda.toml"
    assert main(["sim", "run", str(config), "--out", str(tmp_path / "run")]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    tpot = summary["tpot_s"]["mean"]
    assert 0.025 < tpot < 0.1, tpot
    table = load_calibration(config.parent / "llama3_8b_cuda_steps.csv")
    assert table is not None and len(table.rows) == 68


def test_a_step_table_run_with_the_vllm_scheduler_and_a_prefix_cache(tmp_path: Path) -> None:
    """The prefix cache sizes a cache entry's state snapshot from the model's KV and state bytes:
    a step table answers them from the model's shape (it was an AttributeError)."""
    path = _config(tmp_path, **{'scheduler = "hf_fifo"': 'scheduler = "fast"', "prefix_cache = false": "prefix_cache = true"})
    out = tmp_path / "res"
    assert main(["sim", "run", str(path), "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["requests"] == {"total": 12, "completed": 12}
    model = load_model("small-llama-cpu")
    cost = StepTableCost(load_calibration(tmp_path / "profile.csv"), "fp32", 1024, model=model, kv_dtype="fp32")
    assert cost.kv_bytes_per_token() == model.kv_bytes_per_token("fp32") and cost.linear_state_bytes_per_seq() == 0
    with pytest.raises(InputError, match="given no model"):
        StepTableCost(load_calibration(tmp_path / "profile.csv"), "fp32", 1024).kv_bytes_per_token()
