"""The matmul op (FP32, TF32, 3xTF32; `kernel.py`): partition adapter, bench cases, work counts.

Torch and triton are imported inside the functions (this module is imported by the registry)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from infralab.errors import InputError
from infralab.kernels.kernel_op import KernelOp, Shape, shape_of, lazy
from infralab.work_formulas import WorkCounts, matmul_counts, torch_matmul_counts

if TYPE_CHECKING:  # torch-free at run time
    import torch

    from infralab.kernels.bench_cases import BenchCase
    from infralab.kernels.partition import Split

PRECISIONS = ("fp32", "tf32", "3xtf32")  # the kernel's variants (`matmul.PRECISIONS`, checked by a test)
CHECK_BLOCKS = (16, 128, 128)
"""Block sizes (BLOCK_M, BLOCK_N, BLOCK_K) of `kernels check` and its partition adapter."""


class MatmulPartition:
    """Matmul under column (N), row (K) and batch (M) splits. Inputs: A [M,K], B [K,N]; output C."""

    name = "matmul"

    def __init__(self, blocks: tuple[int, int, int] = CHECK_BLOCKS) -> None:
        self.blocks = blocks

    def make_inputs(self, dims: Mapping[str, int], variant: str, seed: int) -> dict[str, Any]:
        import torch

        from infralab.kernels.interpreter import kernel_device

        # the same A and B for every precision, so precisions can be compared with each other
        gen = torch.Generator().manual_seed(seed)
        a = torch.randn(dims["M"], dims["K"], generator=gen)
        b = torch.randn(dims["K"], dims["N"], generator=gen)
        return {"A": a.to(kernel_device()), "B": b.to(kernel_device())}

    def run(self, inputs: dict, variant: str) -> dict:
        from infralab.kernels.ops.matmul.kernel import matmul

        return {"C": matmul(inputs["A"], inputs["B"], variant, blocks=self.blocks)}

    def float64(self, inputs: dict, variant: str) -> dict:
        from infralab.kernels.ops.matmul.kernel import matmul_float64

        return {"C": matmul_float64(inputs["A"], inputs["B"])}

    def shards(self, inputs: dict, split: Split) -> list[dict]:
        from infralab.kernels.partition import chunks

        a, b = inputs["A"], inputs["B"]
        if split.kind == "none":
            return [inputs]
        if split.kind == "column":
            return [{"A": a, "B": part} for part in chunks(b, 1, split.parts)]
        if split.kind == "row":
            return [{"A": pa, "B": pb} for pa, pb in zip(chunks(a, 1, split.parts), chunks(b, 0, split.parts))]
        if split.kind == "batch":
            return [{"A": part, "B": b} for part in chunks(a, 0, split.parts)]
        raise InputError("split.kind", f"{split.kind!r} does not apply to matmul", "none, column, row or batch")

    def combine(self, outputs: list[dict], split: Split) -> dict:
        import torch

        from infralab.kernels.partition import sum_partials

        parts = [o["C"] for o in outputs]
        if split.kind == "row":
            return {"C": sum_partials(parts, split.reduction)}
        return {"C": torch.cat(parts, dim=0 if split.kind == "batch" else 1)}

    def expects_bitwise(self, split: Split, dims: Mapping[str, int]) -> bool:
        """Column (batch) splits are bitwise only when every shard is a whole number of BLOCK_N
        (BLOCK_M) tiles: an element's summation order may depend on its position inside the tile
        (numpy's sgemm in the interpreter does; so may a GPU's MMA layout). Row splits never are."""
        from infralab.kernels.partition import split_sizes

        block_m, block_n, _ = self.blocks
        if split.kind == "none":
            return True
        if split.kind == "column":
            return all(size % block_n == 0 for size in split_sizes(dims["N"], split.parts))
        if split.kind == "batch":
            return all(size % block_m == 0 for size in split_sizes(dims["M"], split.parts))
        return False


def bench_cases(shapes: tuple[Shape, ...], on_gpu: bool) -> list[BenchCase]:
    """Each precision per shape of `shapes`; on a GPU also torch's FP32 and BF16 matmul."""
    from infralab.kernels.bench_cases import TORCH_BASELINE, BenchCase

    out = []
    for shape in shapes:
        out += [BenchCase("matmul", p, p, shape, p, f"matmul_ref:{p}") for p in PRECISIONS]
        if on_gpu:
            out += [BenchCase("matmul", TORCH_BASELINE, d, shape, d, "") for d in ("fp32", "bf16")]
    return out


def prepare(case: BenchCase, device: str, gen: torch.Generator, use_triton: bool) -> Callable[[], object]:
    import torch

    from infralab.kernels.bench_cases import TORCH_BASELINE, randn

    d = case.dims()
    a = randn((d["M"], d["K"]), device, gen)
    b = randn((d["K"], d["N"]), device, gen)
    if case.variant == TORCH_BASELINE:
        if case.dtype == "bf16":
            a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
            return lambda: torch.matmul(a, b)
        return lambda: _torch_fp32_matmul(a, b)
    from infralab.kernels.ops.matmul.kernel import matmul, matmul_reference

    if not use_triton:
        return lambda: matmul_reference(a, b, case.variant)
    out = torch.empty((d["M"], d["N"]), device=device, dtype=torch.float32)
    return lambda: matmul(a, b, case.variant, out=out)


def _torch_fp32_matmul(a, b):
    """torch.matmul with TF32 switched off, so the baseline is IEEE FP32 (cuBLAS SGEMM)."""
    import torch

    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return torch.matmul(a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow


def work_counts(variant: str, dtype: str, dims: Mapping[str, int]) -> WorkCounts:
    """One call at the launcher's default tiles; the "torch" baseline in `dtype`."""
    from infralab.kernels.bench_cases import TORCH_BASELINE

    m, n, k = dims["M"], dims["N"], dims["K"]
    if variant == TORCH_BASELINE:
        return torch_matmul_counts(dtype, m, n, k)
    from infralab.kernels.ops.matmul.kernel import DEFAULT_BLOCKS

    return matmul_counts(variant, m, n, k, DEFAULT_BLOCKS[0], DEFAULT_BLOCKS[1])


def partition_adapter() -> MatmulPartition:
    return MatmulPartition(CHECK_BLOCKS)


OP = KernelOp(
    name="matmul",
    table_order=10,
    shapes={
        "small": (shape_of(M=256, N=256, K=256), shape_of(M=512, N=512, K=512)),
        "full": (
            shape_of(M=1024, N=1024, K=1024),
            shape_of(M=2048, N=2048, K=2048),
            shape_of(M=4096, N=4096, K=4096),
            shape_of(M=64, N=8192, K=8192),
        ),
    },
    variants=PRECISIONS,
    splits=("none", "column", "row", "batch"),
    shape_dims=("M", "N", "K"),
    kernel="infralab.kernels.ops.matmul.kernel:matmul",
    reference="infralab.kernels.ops.matmul.kernel:matmul_reference",
    bench_cases=bench_cases,
    prepare=prepare,
    work_counts=work_counts,
    partition_adapter=partition_adapter,
    check_suite=lazy("infralab.kernels.ops.matmul.check:suite"),
)
