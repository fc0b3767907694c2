"""The W8A8 matmul op (int8 x int8 -> FP32 with per-token and per-channel scales; `kernel.py`):
bench cases and work counts. No partition adapter (it is checked against its integer reference).

Torch and triton are imported inside the functions (this module is imported by the registry)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from infralab.kernels.kernel_op import KernelOp, Shape, shape_of, lazy
from infralab.work_formulas import WorkCounts, w8a8_counts

if TYPE_CHECKING:  # torch-free at run time
    import torch

    from infralab.kernels.bench_cases import BenchCase


def bench_cases(shapes: tuple[Shape, ...], on_gpu: bool) -> list[BenchCase]:
    """The kernel per shape of `shapes`; on a GPU also torch's BF16 matmul, the baseline
    the W8A8 target is measured against (a `matmul` row)."""
    from infralab.kernels.bench_cases import TORCH_BASELINE, BenchCase

    out = []
    for shape in shapes:
        out.append(BenchCase("w8a8_matmul", "triton", "int8", shape, "int8", "w8a8_ref"))
        if on_gpu:
            out.append(BenchCase("matmul", TORCH_BASELINE, "bf16", shape, "bf16", ""))
    return out


def prepare(case: BenchCase, device: str, gen: torch.Generator, use_triton: bool) -> Callable[[], object]:
    import torch

    from infralab.kernels.bench_cases import randn
    from infralab.kernels.ops.w8a8_matmul.kernel import quantize_rows_ref, w8a8_matmul, w8a8_matmul_ref

    d = case.dims()
    x = randn((d["M"], d["K"]), device, gen)
    w = randn((d["K"], d["N"]), device, gen) / d["K"] ** 0.5
    # torch's quantiser: the same rule as the Triton one, and it runs on any device
    x_q, x_s = quantize_rows_ref(x)
    w_qt, w_s = quantize_rows_ref(w.t())
    w_q = w_qt.t()
    if not use_triton:
        return lambda: w8a8_matmul_ref(x_q, x_s, w_q, w_s)
    out = torch.empty((d["M"], d["N"]), device=device, dtype=torch.float32)
    return lambda: w8a8_matmul(x_q, x_s, w_q, w_s, out=out)


def work_counts(variant: str, dtype: str, dims: Mapping[str, int]) -> WorkCounts:
    return w8a8_counts(dims["M"], dims["N"], dims["K"])


OP = KernelOp(
    name="w8a8_matmul",
    table_order=20,
    shapes={
        "small": (shape_of(M=64, N=256, K=256), shape_of(M=128, N=256, K=256)),
        "full": (
            shape_of(M=4096, N=8192, K=8192),
            shape_of(M=1024, N=8192, K=8192),
            shape_of(M=64, N=8192, K=8192),
        ),
    },
    variants=("triton",),
    splits=(),
    shape_dims=("M", "N", "K"),
    kernel="infralab.kernels.ops.w8a8_matmul.kernel:w8a8_matmul",
    reference="infralab.kernels.ops.w8a8_matmul.kernel:w8a8_matmul_ref",
    bench_cases=bench_cases,
    prepare=prepare,
    work_counts=work_counts,
    check_suite=lazy("infralab.kernels.ops.w8a8_matmul.check:suite"),
)
