"""`kernels check` for paged decode attention: the kernel against its float64 reference per cache
dtype, the quantisation error against FP32 attention, head and batch splits."""

from __future__ import annotations

from collections.abc import Sequence

from infralab.kernels.check import Comparison, elementwise_metrics, head_parallel_partition
from infralab.kernels.compare import compare
from infralab.kernels.interpreter import kernel_device
from infralab.kernels.ops.paged_decode_attention.op import OP
from infralab.kernels.partition import HeadSplitKernelSpec

# Paged attention: kernel vs its float64 reference on the same quantised cache (stated in
# tests/kernels/test_paged_attention.py), and the quantisation error vs FP32 attention per dtype.
ATTENTION_KERNEL_ATOL = 2e-6
ATTENTION_SPEC = HeadSplitKernelSpec(
    kernel="paged_decode_attention", role="attn.decode_attention", variants=OP.variants,
    shape=(("B", 2), ("H", 16), ("HKV", 8), ("D", 40), ("T", 37)), head_dim_name="HKV",
)


# Attention output error vs FP32 attention (float64 over the unquantised K, V), per cache dtype.
# Measured on N(0,1) data: fp32 ~1e-7, bf16 ~2e-3, int8 ~8e-3, fp8e4m3 ~3e-2 (see the summary table).
ATTENTION_MAX_REL_FRO_VS_FP32 = {"fp32": 1e-6, "bf16": 1e-2, "int8": 2e-2, "fp8e4m3": 1e-1}


def suite(tp_degrees: Sequence[int]) -> tuple[list[Comparison], dict]:
    """Kernel vs reference per cache dtype, quantisation error vs FP32 attention, head/batch splits."""
    from infralab.kernels.ops.paged_decode_attention.kernel import kv_quant_report

    kernel = OP.partition_adapter()
    findings, cache = head_parallel_partition(ATTENTION_SPEC, kernel, tp_degrees, lambda v: v, 1e-6)
    shape = ";".join(f"{k}={v}" for k, v in ATTENTION_SPEC.shape)
    for variant in ATTENTION_SPEC.variants:
        _, unsplit, truth = cache[("paged_decode_attention", variant, ATTENTION_SPEC.shape, 0)]
        c = compare(unsplit["o"], truth["o"])
        findings.append(Comparison(
            kernel="paged_decode_attention", check="numerics", variant=variant, shape=shape, dtype=variant,
            passed=c.max_abs <= ATTENTION_KERNEL_ATOL, output="o vs float64 reference (same quantised cache)",
            criterion=f"max abs error <= {ATTENTION_KERNEL_ATOL:g}", measured=f"max abs {c.max_abs:.3g}",
            worst_index=c.worst_index, metrics=elementwise_metrics(c),
        ))
    rows = kv_quant_report(batch=2, heads=8, kv_heads=2, head_dim=64, context_lens=(53, 9), device=kernel_device())
    for row in rows:
        bound = ATTENTION_MAX_REL_FRO_VS_FP32[row["kv_dtype"]]
        findings.append(Comparison(
            kernel="paged_decode_attention", check="numerics", variant=row["kv_dtype"], shape=row["shape"],
            dtype=row["kv_dtype"], passed=row["rel_fro"] <= bound and row["kernel_vs_ref_max_abs"] <= ATTENTION_KERNEL_ATOL,
            output="o vs FP32 attention (quantisation error)",
            criterion=f"rel. Frobenius error <= {bound:g}; kernel vs ref <= {ATTENTION_KERNEL_ATOL:g}",
            measured=f"rel_fro {row['rel_fro']:.3g}, {row['bytes_per_token']} bytes/token "
                     f"({row['bytes_vs_fp32']:.2f} of fp32)",
            metrics=dict(row),
        ))
    return findings, {"kv_cache_dtypes": rows}
