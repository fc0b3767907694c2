"""`kernels check` for the W8A8 matmul: bitwise against its integer reference, and against the exact
dequantised product within three FP32 roundings."""

from __future__ import annotations

from collections.abc import Sequence

from infralab.kernels.check import Comparison, shape_text
from infralab.kernels.interpreter import kernel_device


def suite(tp_degrees: Sequence[int]) -> tuple[list[Comparison], dict]:
    """Kernel vs its integer reference (bitwise) and vs the exact dequantised product (3 FP32
    roundings), with the quantisation error against the FP32 matmul reported."""
    from infralab.kernels.ops.w8a8_matmul.kernel import w8a8_error_report

    rows = w8a8_error_report(device=kernel_device())
    findings = []
    for row in rows:
        passed = row["kernel_vs_ref_bitwise"] and row["max_rel_vs_exact"] <= row["rel_bound"]
        findings.append(Comparison(
            kernel="w8a8_matmul", check="numerics", variant=row["data"], shape=shape_text(M=row["m"], N=row["n"], K=row["k"]),
            dtype="int8", passed=passed, output="C vs integer reference and exact product",
            criterion=f"bitwise equal to w8a8_matmul_ref; max rel. error vs exact <= {row['rel_bound']:.3g}",
            measured=f"bitwise={row['kernel_vs_ref_bitwise']}, max rel {row['max_rel_vs_exact']:.3g}, "
                     f"rel_fro vs FP32 matmul {row['rel_fro_vs_fp32']:.3g}",
            metrics=dict(row),
        ))
    return findings, {"w8a8": rows}
