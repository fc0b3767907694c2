"""`infralab kernels bench` on the CPU: a tiny grid gives well-formed rows (positive times, the static
work counts, rates derived from them), the KDA work-count story is visible, flags are validated,
and the written table is the documented format (the simulator's reader accepts it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infralab.errors import InputError
from infralab.kernels.bench import all_cases, main, parse_grid, parse_kernels, run_bench, work_for
from infralab.kernels.bench_cases import KERNELS, SMALL, ShapeGrid
from infralab.kernels.kernel_op import shape_of
from infralab.cli import parse
from infralab.kernels.calibration import COLUMNS, read_table
from support.scripts import load_benchmark

TINY = ShapeGrid("tiny", {
    "matmul": (shape_of(M=32, N=48, K=16),),
    "w8a8_matmul": (shape_of(M=16, N=32, K=32),),
    # V = 64: two V tiles for v1/v2, one program for v3; the ReplaySSM row's ring length L = 4
    "kda_decode": (shape_of(B=2, H=2, K=16, V=64, L=4),),
    "paged_decode_attention": (shape_of(B=2, H=4, HKV=2, D=16, T=40),),
    "kv_quantize": (shape_of(T=8, HKV=2, D=16),),
})


def fast_timer(fn) -> float:
    """Median of three calls; the tests check structure, never speed."""
    from infralab.kernels.bench import cpu_timer

    return cpu_timer(budget_s=0.0, min_repeats=3, max_repeats=3)(fn)


@pytest.fixture(scope="module")
def tiny_rows():
    return run_bench(KERNELS, TINY, "cpu", timer=fast_timer, progress=False)


def test_tiny_grid_gives_one_well_formed_row_per_case(tiny_rows) -> None:
    cases = all_cases(KERNELS, TINY, on_gpu=False)
    assert [(r.kernel, r.variant, r.dtype, r.shape) for r in tiny_rows] == \
        [(c.kernel, c.variant, c.dtype, c.shape) for c in cases]
    assert {r.kernel for r in tiny_rows} == set(KERNELS)
    for row, case in zip(tiny_rows, cases):
        step = work_for(case).per_step()  # a ReplaySSM row is its cycle's work per decode step
        assert row.device == "cpu"
        assert row.median_s > 0
        assert (row.bytes, row.flops, row.divisions, row.transcendentals, row.repeated_elementwise) == \
            tuple(round(step[k]) for k in ("bytes", "flops", "divisions", "transcendentals", "repeated_elementwise"))
        assert row.bytes > 0
        assert row.achieved_gbps == pytest.approx(row.bytes / row.median_s / 1e9)
        assert row.achieved_tflops == pytest.approx(row.flops / row.median_s / 1e12)
        assert row.roofline_fraction == 0.0  # no peaks on the CPU


def test_cpu_rows_of_variants_sharing_a_reference_share_one_timing(tiny_rows) -> None:
    kda = {r.variant: r for r in tiny_rows if r.kernel == "kda_decode"}
    assert kda["v1"].median_s == kda["v2"].median_s == kda["v3"].median_s
    matmul = {r.variant: r for r in tiny_rows if r.kernel == "matmul"}
    assert set(matmul) == {"fp32", "tf32", "3xtf32"}  # no torch baselines on the CPU


def test_kda_work_counts_tell_the_tuning_story(tiny_rows) -> None:
    kda = {r.variant: r for r in tiny_rows if r.kernel == "kda_decode"}
    v1, v2, v3 = kda["v1"], kda["v2"], kda["v3"]
    assert v1.divisions > v2.divisions > 0  # v2: rsqrt + multiplies instead of per-element division
    assert v2.divisions >= v3.divisions
    assert v2.repeated_elementwise > 0 and v3.repeated_elementwise == 0  # v3: prologue once per head
    assert v2.transcendentals > v3.transcendentals
    assert v1.bytes == v2.bytes == v3.bytes  # same traffic floor; the variants differ in compute
    assert kda["replay"].shape[-1] == ("L", 4)


def test_matmul_repeated_work_is_zero_only_for_fp32(tiny_rows) -> None:
    matmul = {r.variant: r for r in tiny_rows if r.kernel == "matmul"}
    assert matmul["fp32"].repeated_elementwise == 0
    # 32x48 output in 128x128 tiles is one program: nothing is transformed twice
    assert matmul["tf32"].repeated_elementwise == matmul["3xtf32"].repeated_elementwise == 0
    big = {c.variant: work_for(c) for c in all_cases(["matmul"], SMALL, on_gpu=False)
           if c.dims()["M"] == 512}
    assert 0 < big["tf32"].repeated_elementwise < big["3xtf32"].repeated_elementwise
    assert big["fp32"].flops == big["3xtf32"].flops == 2 * 512**3


def test_paged_attention_bytes_shrink_with_the_kv_dtype(tiny_rows) -> None:
    paged = {r.dtype: r.bytes for r in tiny_rows if r.kernel == "paged_decode_attention"}
    assert paged["int8"] < paged["bf16"] < paged["fp32"]
    assert paged["fp8e4m3"] == paged["int8"]


@pytest.mark.parametrize("flag", ["matmul,attention", "", "Matmul"])
def test_unknown_kernel_flag_names_the_flag_and_the_accepted_values(flag: str) -> None:
    with pytest.raises(InputError) as err:
        parse_kernels(flag)
    text = str(err.value)
    assert text.startswith("--kernels") and all(name in text for name in KERNELS)


def test_bad_grid_flag_names_the_flag_and_the_accepted_values() -> None:
    with pytest.raises(InputError) as err:
        parse_grid("huge")
    assert str(err.value).startswith("--grid") and "small, full" in str(err.value)


def test_kernel_selection_keeps_table_order() -> None:
    assert parse_kernels("kv_quantize, matmul") == ("matmul", "kv_quantize")
    assert parse_kernels(None) == parse_kernels("all") == KERNELS


def test_standalone_entry_reports_bad_flags_as_one_line(capsys, tmp_path: Path) -> None:
    assert main(["--grid", "huge", "--out", str(tmp_path / "t.csv")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --grid")
    assert main(["--kernels", "matmul", "--out", str(tmp_path / "t.txt")]) == 2
    assert "--out" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_command_table_routes_bench_to_its_handler() -> None:
    args = parse(["kernels", "bench", "--grid", "full", "--kernels", "matmul", "--out", "x.csv"])
    assert args.handler == "infralab.kernels.cli:bench"
    assert (args.grid, args.kernels, args.out) == ("full", "matmul", "x.csv")


def test_command_writes_a_table_the_simulator_can_read(tmp_path: Path, capsys) -> None:
    out = tmp_path / "deep" / "cal.csv"
    assert main(["--kernels", "kv_quantize", "--grid", "small", "--out", str(out), "--no-progress"]) == 0
    assert f"wrote 3 rows to {out}" in capsys.readouterr().out
    text = out.read_text()
    assert text.startswith("# infralab calibration table")
    assert [line for line in text.splitlines() if not line.startswith("#")][0] == ",".join(COLUMNS)
    rows = read_table(out)
    assert [r.dtype for r in rows] == ["int8", "fp8e4m3", "bf16"]
    # The contract holds from the other side too: the simulator's own reader accepts the file.
    sim_calibration = pytest.importorskip("infralab.sim.calibration")
    table = sim_calibration.CalibrationTable.load(out)
    assert len(table.rows) == 3
    assert table.covers("kv_quantize", "int8", rows[0].device)  # "cpu" here, the GPU's name on a GPU


def _triton_device() -> str:
    """Where Triton kernels run here: the GPU when compiled, the CPU under the interpreter."""
    import os

    import torch

    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    if torch.cuda.is_available() and not interpreting:
        return "cuda"
    if not interpreting:
        pytest.skip("Triton can run neither compiled (no GPU) nor interpreted (TRITON_INTERPRET unset)")
    return "cpu"


def _first_tensor(result):
    return result[0] if isinstance(result, tuple) else result


@pytest.mark.parametrize("case", all_cases(KERNELS, TINY, on_gpu=True), ids=lambda c: c.label())
def test_gpu_callables_compute_what_the_cpu_references_compute(case) -> None:
    """The GPU path's wiring (in Triton's interpreter on a CPU): each Triton callable (and each torch
    baseline) runs with the bench's inputs, and matches the torch reference on the same data."""
    import torch

    from infralab.kernels.bench_cases import TORCH_BASELINE, prepare

    device = _triton_device()
    kernel_fn = prepare(case, device, seed=3, use_triton=True)
    result = kernel_fn()
    if case.variant in ("replay", TORCH_BASELINE):
        return  # the replay cycle returns nothing; baselines have no separate reference
    expected = _first_tensor(prepare(case, device, seed=3, use_triton=False)())
    got = _first_tensor(result)
    assert got.shape == expected.shape
    torch.testing.assert_close(got.float(), expected.float(), rtol=1e-4, atol=1e-4)


def test_gpu_targets_script_runs_end_to_end_in_the_interpreter() -> None:
    """benchmarks/gpu_targets.py on tiny shapes (in Triton's interpreter on a CPU) with a fake timer:
    every target produces a row (no part errors out); the figures themselves mean nothing here."""
    device = _triton_device()
    targets = load_benchmark("gpu_targets")
    calls = iter(range(1, 1000))

    def fake_timer(fn) -> float:
        fn()
        return 1e-3 / next(calls)  # every later measurement "faster": v2 < v1, v3 < v2

    shapes = targets.TargetShapes(kda=(("B", 2), ("H", 2), ("K", 16), ("V", 64)), matmul_size=32,
                                  w8a8=(("M", 16), ("N", 32), ("K", 32)), copy_floats=1024)
    verdicts, numbers = targets.run_targets(targets.TargetRun(device, fake_timer, 4.8e12, shapes))
    table = targets.format_table(verdicts)
    assert "error:" not in table, table
    names = [v.target for v in verdicts]
    assert len(names) == 7 and any("fla" in n for n in names)
    by_target = {v.target.split(" B=")[0]: v.verdict for v in verdicts}
    assert by_target["KDA v2 vs v1"] == by_target["KDA v3 vs v2"] == "PASS"
    assert all(v.verdict in ("PASS", "FAIL", "SKIP") for v in verdicts)
    assert numbers["matmul_rel_fro"]["3xtf32"] < 1e-6  # the 3xTF32 split is real in the interpreter too
