"""`kernels check` for matmul: each precision against its torch emulation and float64, the
in-kernel TF32 rounding and 3xTF32 split bitwise, every TP split, and the K-split drift table."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from infralab.kernels.check import Comparison, elementwise_metrics, fp32_level_rel_fro, partition_findings, shape_text
from infralab.kernels.compare import compare
from infralab.kernels.interpreter import kernel_device
from infralab.kernels.ops.matmul.op import CHECK_BLOCKS, OP, MatmulPartition
from infralab.kernels.partition import PartitionResult, PartitionTask, run_task, tasks_for

# Relative Frobenius error against float64 on N(0,1) data. Measured in Triton's interpreter (numpy's
# pairwise dot; tests/kernels/test_matmul.py): fp32 ~2e-7, tf32 ~3e-4, 3xtf32 ~2e-7 for K = 256..16384.
# Compiled on an H200 (docs/gpu.md), the IEEE fp32 kernel accumulates K sequentially and measured
# 1.07-1.15e-6 at K = 4096 (3xtf32 2.4e-7), so the FP32-level bound grows with K as the theory says.
TF32_MAX_REL_FRO = 1e-3
# TF32 that is no worse than this did not round its operands: the check would miss a silent FP32 path.
TF32_MIN_REL_FRO = 3e-5


def matmul_max_rel_fro(precision: str, k: int) -> float:
    """The bound of `kernels check` for a `precision` matmul of inner size `k` (TF32 rounds its operands)."""
    return TF32_MAX_REL_FRO if precision == "tf32" else fp32_level_rel_fro(k)


# (M, K, N): one shape that is a multiple of nothing, one with a long reduction.
MATMUL_NUMERICS_SHAPES = ((33, 300, 70), (16, 4096, 48))


def matmul_numerics() -> list[Comparison]:
    """Each precision vs its torch emulation (summation-order bound), vs float64, and the in-kernel
    TF32 rounding / 3xTF32 split vs their torch twins (bitwise, via B = identity)."""
    from infralab.kernels.ops.matmul.kernel import (
        PRECISIONS,
        accumulation_bound,
        matmul,
        matmul_float64,
        matmul_reference,
    )

    findings = []
    gen = torch.Generator().manual_seed(1)
    device = kernel_device()
    for m, k, n in MATMUL_NUMERICS_SHAPES:
        a = torch.randn(m, k, generator=gen).to(device)
        b = torch.randn(k, n, generator=gen).to(device)
        truth = matmul_float64(a, b)
        shape = shape_text(M=m, N=n, K=k)
        for precision in PRECISIONS:
            c = matmul(a, b, precision, blocks=CHECK_BLOCKS)
            ref = matmul_reference(a, b, precision)
            excess = ((c.double() - ref.double()).abs() / accumulation_bound(a, b, precision)).cpu()
            worst = int(excess.argmax())
            vs_ref = compare(c, ref)
            findings.append(Comparison(
                kernel="matmul", check="numerics", variant=precision, shape=shape, dtype=precision,
                passed=bool(excess.max() <= 1.0), output="C vs torch emulation",
                criterion="|kernel - emulation| <= 2*gamma_n*(|A||B|) per element (summation order only)",
                measured=f"max error / bound {excess.max().item():.3g}, max abs {vs_ref.max_abs:.3g}, "
                         f"max ulp {vs_ref.max_ulp}, bitwise={vs_ref.bitwise_equal}",
                worst_index=(worst // n, worst % n), metrics=elementwise_metrics(vs_ref),
            ))
            vs_truth = compare(c, truth)
            low = TF32_MIN_REL_FRO if precision == "tf32" else 0.0
            high = matmul_max_rel_fro(precision, k)
            findings.append(Comparison(
                kernel="matmul", check="numerics", variant=precision, shape=shape, dtype=precision,
                passed=low <= vs_truth.rel_fro <= high, output="C vs float64",
                criterion=f"{low:g} <= rel. Frobenius error <= {high:g}",
                measured=f"rel_fro {vs_truth.rel_fro:.3g}, max rel {vs_truth.max_rel:.3g}",
                worst_index=vs_truth.worst_index, metrics=elementwise_metrics(vs_truth),
            ))
    findings += _rounding_findings(gen)
    return findings


def _rounding_findings(gen: torch.Generator) -> list[Comparison]:
    """With B = I every output is a single product x*1 (exact), so C shows the kernel's rounded operand."""
    from infralab.kernels.ops.matmul.kernel import matmul
    from infralab.kernels.ops.matmul.tf32 import round_to_tf32, split_3xtf32

    m, k = 20, 96
    a = (torch.randn(m, k, generator=gen) * torch.logspace(-20, 20, k)).to(kernel_device())  # many exponents
    eye = torch.eye(k, device=a.device)
    big, small = split_3xtf32(a)
    expected = {"tf32": round_to_tf32(a), "3xtf32": small + big}  # the kernel's order: (0 + small) + big
    findings = []
    for precision, want in expected.items():
        got = matmul(a, eye, precision, blocks=CHECK_BLOCKS)
        c = compare(got, want)
        findings.append(Comparison(
            kernel="matmul", check="numerics", variant=precision, shape=shape_text(M=m, N=k, K=k),
            dtype=precision, passed=c.bitwise_equal, output="in-kernel operand rounding (B = I)",
            criterion="bitwise equal to the torch bit-operation twin", measured=f"bitwise={c.bitwise_equal}, "
            f"max ulp {c.max_ulp}", worst_index=c.worst_index, metrics=elementwise_metrics(c),
        ))
    return findings


def matmul_partition(tp_degrees: Sequence[int]) -> tuple[list[Comparison], dict]:
    """Every TP task of `tasks_for("matmul", tp)` (sequential K sums; tree sums too for tp >= 4),
    plus the K-split drift table of TF32 vs 3xTF32."""
    kernel = OP.partition_adapter()
    cache: dict = {}
    findings, drift = [], []
    for tp in tp_degrees:
        # fp32 first in each role, so the fp32 unsplit result is cached for the drift table
        tasks = tasks_for("matmul", tp)
        if tp >= 4:
            tasks += [t for t in tasks_for("matmul", tp, reduction="tree") if t.split.kind == "row"]
        for task in tasks:
            result = run_task(task, kernel, cache)
            findings += partition_findings(result, kernel, task.variant,
                                           matmul_max_rel_fro(task.variant, dict(task.shape)["K"]))
            if task.split.kind == "row" and task.variant in ("tf32", "3xtf32"):
                fp32_unsplit = cache[("matmul", "fp32", task.shape, task.seed)][1]["C"]
                drift.append(_drift_row(result, cache[_shard_key(task)], fp32_unsplit, kernel))
    return findings, {"matmul_k_split_drift": drift}


def _shard_key(task: PartitionTask) -> tuple:
    return (task.kernel, task.variant, task.shape, task.seed, task.split.kind, task.split.parts)


def _drift_row(result: PartitionResult, shard_outputs: list, fp32_unsplit: torch.Tensor,
               kernel: MatmulPartition) -> dict:
    """One row of the K-split drift table; `vs_fp32_unsplit` is what a deployment comparing its TP
    path against an unsplit IEEE FP32 run would see."""
    task = result.task
    combined = kernel.combine(shard_outputs, task.split)["C"]
    vs_fp32 = compare(combined, fp32_unsplit)
    return {
        "rel_fro_vs_fp32_unsplit": vs_fp32.rel_fro,
        "max_abs_vs_fp32_unsplit": vs_fp32.max_abs,
        "role": task.role, "shape": task.shape_text(), "precision": task.variant, "split": task.split.describe(),
        "tp": task.tp, "bitwise_equal": result.split_vs_unsplit["C"].bitwise_equal,
        "max_abs_vs_unsplit": result.split_vs_unsplit["C"].max_abs,
        "max_ulp_vs_unsplit": result.split_vs_unsplit["C"].max_ulp,
        "rel_fro_vs_unsplit": result.split_vs_unsplit["C"].rel_fro,
        "rel_fro_vs_float64_split": result.split_vs_float64["C"].rel_fro,
        "rel_fro_vs_float64_unsplit": result.unsplit_vs_float64["C"].rel_fro,
    }


def suite(tp_degrees: Sequence[int]) -> tuple[list[Comparison], dict]:
    findings, summaries = matmul_partition(tp_degrees)
    return matmul_numerics() + findings, summaries


