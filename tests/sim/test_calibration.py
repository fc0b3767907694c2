"""Calibration tables: reading the CSV of docs/calibration.md, lookups, and the cost model using them."""

from __future__ import annotations

from pathlib import Path

import pytest

from infralab.errors import InputError
from infralab.sim.calibration import COLUMNS, CalibrationTable
from infralab.sim.config import CostConfig
from infralab.sim.cost import CostModel, StepWork
from infralab.sim.specs import load_accelerator, load_model

H100 = load_accelerator("H100")
DEVICE = H100.calibration_device
PEAKS = (H100.peak("bf16"), H100.hbm_bandwidth)
HEADER = ",".join(COLUMNS)


def row(kernel="matmul", variant="v1", shape="M=1024;N=1024;K=1024", dtype="bf16", device=DEVICE,
        median_s=1e-5, nbytes=6_291_456, flops=2_147_483_648) -> str:
    gbps, tflops = nbytes / median_s / 1e9, flops / median_s / 1e12
    return f"{kernel},{variant},{shape},{dtype},{device},{median_s},{nbytes},{flops},{gbps},{tflops},0.5,0,0,0"


def table(tmp_path: Path, *rows: str, name: str = "cal.csv") -> CalibrationTable:
    path = tmp_path / name
    path.write_text("# written by a test\n" + HEADER + "\n" + "\n".join(rows) + "\n")
    return CalibrationTable.load(path)


# ---- reading -----------------------------------------------------------------------------------


def test_reads_rows_and_skips_comments(tmp_path):
    t = table(tmp_path, row(), "# a comment between rows", "", row(shape="M=1;N=1024;K=1024", median_s=2e-6))
    assert len(t.rows) == 2
    assert t.rows[0].shape_dict == {"M": 1024, "N": 1024, "K": 1024}
    assert t.rows[1].median_s == 2e-6 and t.rows[0].flops == 2_147_483_648
    assert t.covers("matmul", "bf16", DEVICE) and not t.covers("matmul", "fp32", DEVICE)


def bad(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as info:
        CalibrationTable.load(path)
    text = str(info.value)
    assert "bad.csv" in text and "\n" not in text
    return text


def test_bad_header_names_the_line(tmp_path):
    text = bad(tmp_path, "# comment", "kernel,shape,variant")
    assert "bad.csv:2" in text and "median_s" in text


def test_bad_number_names_line_and_column(tmp_path):
    text = bad(tmp_path, HEADER, row(), row().replace(",1e-05,", ",fast,"))
    assert "bad.csv:3" in text and "median_s" in text and "fast" in text


def test_zero_time_is_rejected(tmp_path):
    text = bad(tmp_path, HEADER, row().replace(",1e-05,", ",0,"))
    assert "median_s" in text and "positive" in text


def test_bad_shape_names_the_column(tmp_path):
    text = bad(tmp_path, HEADER, row(shape="M=10;N;K=3"))
    assert "bad.csv:2" in text and "shape" in text and "M=4096" in text
    assert "shape" in bad(tmp_path, HEADER, row(shape="M=-4;N=1;K=1"))


def test_wrong_column_count(tmp_path):
    text = bad(tmp_path, HEADER, row() + ",extra")
    assert "bad.csv:2" in text and "15 columns" in text


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        CalibrationTable.load(tmp_path / "none.csv")


# ---- lookups -----------------------------------------------------------------------------------


def test_exact_match_returns_the_measurement(tmp_path):
    t = table(tmp_path, row(median_s=3.3e-5))
    assert t.lookup("matmul", "bf16", DEVICE, {"M": 1024, "N": 1024, "K": 1024}, peaks=PEAKS) == 3.3e-5
    assert t.lookup("matmul", "bf16", "NVIDIA A100-SXM4-80GB", {"M": 1024, "N": 1024, "K": 1024}) is None
    assert t.lookup("kda_decode", "fp32", DEVICE, {"B": 1, "H": 1, "K": 1, "V": 1}) is None


def test_nearest_compute_bound_row_scales_by_flops(tmp_path):
    # 2.1 GFLOP in 6.3 MB: at H100 peaks 2.2 us of compute vs 1.9 us of traffic -> compute-bound
    t = table(tmp_path, row(median_s=4e-6))
    got = t.lookup("matmul", "bf16", DEVICE, {"M": 2048, "N": 2048, "K": 2048}, peaks=PEAKS)
    assert got == pytest.approx(8 * 4e-6)  # 8x the flops at the same rate


def test_nearest_memory_bound_row_scales_by_bytes(tmp_path):
    # M=1: a GEMV, memory-bound; doubling N doubles the weight bytes (2 + 2N + ... elements)
    t = table(tmp_path, row(shape="M=1;N=4096;K=4096", nbytes=33_562_624, flops=33_554_432, median_s=1.5e-5))
    got = t.lookup("matmul", "bf16", DEVICE, {"M": 1, "N": 8192, "K": 4096}, peaks=PEAKS)
    ratio = (4096 + 8192 * 4096 + 8192) / (4096 + 4096 * 4096 + 4096)
    assert got == pytest.approx(1.5e-5 * ratio)


def test_nearest_picks_the_closest_shape_in_log_space(tmp_path):
    t = table(
        tmp_path,
        row(shape="M=64;N=4096;K=4096", median_s=1e-5),
        row(shape="M=4096;N=4096;K=4096", median_s=2e-4, nbytes=100_663_296, flops=137_438_953_472),
    )
    near_small = t.nearest("matmul", "bf16", DEVICE, {"M": 100, "N": 4096, "K": 4096})
    near_large = t.nearest("matmul", "bf16", DEVICE, {"M": 3000, "N": 4096, "K": 4096})
    assert near_small[0].shape_dict["M"] == 64 and near_large[0].shape_dict["M"] == 4096


def test_fastest_variant_wins(tmp_path):
    t = table(tmp_path, row(variant="torch_ref", median_s=9e-5), row(variant="v3", median_s=2e-5))
    assert t.lookup("matmul", "bf16", DEVICE, {"M": 1024, "N": 1024, "K": 1024}) == 2e-5
    assert t.lookup("matmul", "bf16", DEVICE, {"M": 2048, "N": 1024, "K": 1024}, peaks=PEAKS) == pytest.approx(4e-5)


def test_without_peaks_the_larger_ratio_is_used(tmp_path):
    t = table(tmp_path, row(median_s=4e-6))
    got = t.lookup("matmul", "bf16", DEVICE, {"M": 2048, "N": 2048, "K": 2048})
    assert got == pytest.approx(8 * 4e-6)  # flops grow 8x, bytes 4x


# ---- the cost model with a table ---------------------------------------------------------------

LLAMA8 = load_model("llama-3-8b")
# Llama-3-8B's GEMMs on one rank: (N, K) of qkv, attention output, gate+up, down; and the LM head.
LLAMA_GEMMS = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]


def test_calibrated_gemms_override_the_roofline(tmp_path):
    tokens = 64
    rows = [row(shape=f"M={tokens};N={n};K={k}", median_s=1e-3) for n, k in LLAMA_GEMMS]
    rows.append(row(shape="M=1;N=128256;K=4096", median_s=2e-3))
    t = table(tmp_path, *rows)
    model = CostModel(LLAMA8, H100, CostConfig(), calibration=t)
    assert model.calibrated_ops == frozenset({"dense_gemm", "lm_head"})
    c = model.step(StepWork.prefill(tokens))
    assert c.by_op["dense_gemm"] == pytest.approx(32 * 4 * 1e-3)  # 32 layers x 4 GEMMs, as measured
    assert c.by_op["lm_head"] == pytest.approx(2e-3)
    plain = CostModel(LLAMA8, H100, CostConfig()).step(StepWork.prefill(tokens))
    assert plain.by_op["attention"] == c.by_op["attention"]  # not covered: the roofline stays


def test_calibration_cannot_beat_the_hardware_peak(tmp_path):
    rows = [row(shape=f"M=64;N={n};K={k}", median_s=1e-9) for n, k in LLAMA_GEMMS]
    model = CostModel(LLAMA8, H100, CostConfig(), calibration=table(tmp_path, *rows))
    floor = (LLAMA8.param_counts()["attention"] + LLAMA8.param_counts()["dense_mlp"]) * 2 / H100.hbm_bandwidth
    got = model.step(StepWork.prefill(64)).by_op["dense_gemm"]
    # weights (and the 64 tokens' activations, ~3 % more) must still be read at no more than peak bandwidth
    assert floor < got < floor * 1.05


def test_calibrated_decode_attention(tmp_path):
    kv_bytes, flops = 2 * 4 * 8 * 1000 * 128 * 2, 4 * 4 * 32 * 1000 * 128  # memory-bound on H100
    shape = "B=4;H=32;HKV=8;D=128;T=1000"
    t = table(tmp_path, row(kernel="paged_decode_attention", shape=shape, median_s=5e-4, nbytes=kv_bytes, flops=flops))
    model = CostModel(LLAMA8, H100, CostConfig(), calibration=t)
    assert model.calibrated_ops == frozenset({"attention"})
    c = model.step(StepWork.decode(4, 4000))
    assert c.by_op["attention"] == pytest.approx(32 * 5e-4)
    # twice the context: the nearest row, scaled by the bytes it reads (memory-bound)
    longer = model.step(StepWork.decode(4, 8000)).by_op["attention"]
    assert 1.9 * c.by_op["attention"] < longer < 2.0 * c.by_op["attention"]


def test_calibrated_kda_decode(tmp_path):
    kimi = load_model("kimi-linear-48b-a3b")
    h200 = load_accelerator("H200")
    t = table(tmp_path, row(kernel="kda_decode", shape="B=8;H=32;K=128;V=128", dtype="fp32",
                            device=h200.calibration_device, median_s=1e-3))
    model = CostModel(kimi, h200, CostConfig(), calibration=t)
    assert model.calibrated_ops == frozenset({"linear_attention"})
    assert model.step(StepWork.decode(8, 800)).by_op["linear_attention"] == pytest.approx(20 * 1e-3)


def test_table_for_another_device_calibrates_nothing(tmp_path):
    t = table(tmp_path, row(device="NVIDIA H200"))
    model = CostModel(LLAMA8, H100, CostConfig(), calibration=t)
    assert model.calibrated_ops == frozenset()
    work = StepWork.prefill(100)
    assert model.step(work) == CostModel(LLAMA8, H100, CostConfig()).step(work)


def test_calibrated_moe_experts(tmp_path):
    """One token touches its top-2 experts per layer: 2 x (gate+up GEMM + down GEMM) of M=1."""
    mixtral = load_model("mixtral-8x7b")
    t = table(tmp_path, row(shape="M=1;N=28672;K=4096", median_s=3e-4), row(shape="M=1;N=4096;K=14336", median_s=2e-4))
    model = CostModel(mixtral, H100, CostConfig(), calibration=t)
    assert model.calibrated_ops == frozenset({"dense_gemm", "lm_head", "moe_experts"})
    assert model.step(StepWork.decode(1, 10)).by_op["moe_experts"] == pytest.approx(32 * 2 * (3e-4 + 2e-4))


def test_scaling_uses_the_work_formulas_the_kernels_write_into_rows(tmp_path):
    """One module of work formulas (infralab/work_formulas.py): a matmul row written with the
    kernels' exact counts scales to another shape by the ratio of those same counts."""
    from infralab.work_formulas import torch_matmul_counts

    small, big = torch_matmul_counts("bf16", 1, 4096, 4096), torch_matmul_counts("bf16", 1, 8192, 4096)
    t = table(tmp_path, row(shape="M=1;N=4096;K=4096", nbytes=small.bytes, flops=small.flops, median_s=1.5e-5))
    got = t.lookup("matmul", "bf16", DEVICE, {"M": 1, "N": 8192, "K": 4096}, peaks=PEAKS)  # memory-bound
    assert got == pytest.approx(1.5e-5 * big.bytes / small.bytes)


# ---- memoised reading and lookups ----------------------------------------------------------------


def test_an_unchanged_file_is_parsed_once_and_a_changed_one_again(tmp_path):
    first = table(tmp_path, row(median_s=3.3e-5))
    assert CalibrationTable.load(tmp_path / "cal.csv") is first  # same size and modification time
    changed = table(tmp_path, row(median_s=4.4e-5))  # same size, new modification time
    assert changed is not first
    assert changed.lookup("matmul", "bf16", DEVICE, {"M": 1024, "N": 1024, "K": 1024}, peaks=PEAKS) == 4.4e-5


def test_remembered_lookups_give_the_first_answer_and_forget_past_the_bound(tmp_path, monkeypatch):
    from infralab.sim import calibration
    t = table(tmp_path, row(shape="M=1024;N=1024;K=1024", median_s=1e-5), row(shape="M=4096;N=1024;K=1024", median_s=3e-5))
    shapes = [{"M": m, "N": 1024, "K": 1024} for m in (1024, 2048, 3000, 4096)]
    fresh = [CalibrationTable(t.rows).lookup("matmul", "bf16", DEVICE, s, grid=True) for s in shapes]
    monkeypatch.setattr(calibration, "ANSWERS_KEPT", 2)
    for _ in range(2):
        assert [t.lookup("matmul", "bf16", DEVICE, s, grid=True) for s in shapes] == fresh
        assert len(t._answers) <= 2
    assert fresh[1] == pytest.approx(1e-5 + 2e-5 / 3) and fresh[0] == 1e-5  # linear between the measured M
