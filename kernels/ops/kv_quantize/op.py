"""The KV-quantisation op (`quantize_kv` in `kernel.py`: FP32 K/V to int8, fp8e4m3 or bf16
cache payloads): bench cases and work counts. It is torch code on every device (no Triton kernel),
and its numerics are checked through the paged attention op that reads the cache.

Torch is imported inside the functions (this module is imported by the registry)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from infralab.kernels.kernel_op import KernelOp, Shape, shape_of
from infralab.work_formulas import WorkCounts, kv_quantize_counts

if TYPE_CHECKING:  # torch-free at run time
    import torch

    from infralab.kernels.bench_cases import BenchCase

QUANT_DTYPES = ("int8", "fp8e4m3", "bf16")  # fp32 "quantisation" is a copy


def bench_cases(shapes: tuple[Shape, ...], on_gpu: bool) -> list[BenchCase]:
    """Every dtype per shape of `shapes`, as "torch" rows everywhere (no Triton kernel)."""
    from infralab.kernels.bench_cases import TORCH_BASELINE, BenchCase

    return [BenchCase("kv_quantize", TORCH_BASELINE, d, shape, "fp32", f"kv_quantize:{d}")
            for shape in shapes for d in QUANT_DTYPES]


def prepare(case: BenchCase, device: str, gen: torch.Generator, use_triton: bool) -> Callable[[], object]:
    from infralab.kernels.bench_cases import randn
    from infralab.kernels.ops.kv_quantize.kernel import quantize_kv

    d = case.dims()
    x = randn((d["T"], d["HKV"], d["D"]), device, gen)
    return lambda: quantize_kv(x, case.dtype)


def work_counts(variant: str, dtype: str, dims: Mapping[str, int]) -> WorkCounts:
    """One `quantize_kv` call to the cache dtype `dtype`."""
    from infralab.kernels.ops.kv_quantize.kernel import SCALED, STORAGE_DTYPE

    payload = STORAGE_DTYPE[dtype].itemsize
    return kv_quantize_counts(payload, SCALED[dtype], dims["T"], dims["HKV"], dims["D"])


OP = KernelOp(
    name="kv_quantize",
    table_order=50,
    shapes={
        "small": (shape_of(T=256, HKV=8, D=128),),
        "full": (shape_of(T=4096, HKV=8, D=128), shape_of(T=65536, HKV=8, D=128)),
    },
    variants=QUANT_DTYPES,
    splits=(),
    shape_dims=("T", "HKV", "D"),
    kernel="infralab.kernels.ops.kv_quantize.kernel:quantize_kv",
    reference="infralab.kernels.ops.kv_quantize.kernel:quantize_kv",
    bench_cases=bench_cases,
    prepare=prepare,
    work_counts=work_counts,
)
