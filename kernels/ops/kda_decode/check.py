"""`kernels check` for KDA decode and ReplaySSM: each variant over several steps against the float64
reference, head and batch splits bitwise."""

from __future__ import annotations

from collections.abc import Sequence

from infralab.kernels.check import Comparison, elementwise_metrics, head_parallel_partition, within
from infralab.kernels.compare import compare
from infralab.kernels.ops.kda_decode.op import OP
from infralab.kernels.partition import HeadSplitKernelSpec

# Kernel vs float64 reference, |a - e| <= atol + rtol*|e| elementwise: the tolerances stated in
# tests/kernels/test_kda_decode.py and test_replay_ssm.py (float32 state carried over many steps).
KDA_TOLERANCES = {"o": (1e-6, 1e-5), "state": (2e-6, 1e-5)}
KDA_SPEC = HeadSplitKernelSpec(
    kernel="kda_decode", role="linear_attn.kda_decode", variants=OP.variants,
    shape=(("S", 3), ("B", 1), ("H", 8), ("K", 32), ("V", 48)),  # V not a power of two
)


def suite(tp_degrees: Sequence[int]) -> tuple[list[Comparison], dict]:
    """Each variant over several steps vs the float64 reference; head and batch splits bitwise."""
    kernel = OP.partition_adapter()
    findings, cache = head_parallel_partition(KDA_SPEC, kernel, tp_degrees, lambda v: "fp32", 1e-5)
    shape = ";".join(f"{k}={v}" for k, v in KDA_SPEC.shape)
    for variant in KDA_SPEC.variants:
        _, unsplit, truth = cache[("kda_decode", variant, KDA_SPEC.shape, 0)]
        for name, (atol, rtol) in KDA_TOLERANCES.items():
            ratio, worst = within(unsplit[name], truth[name], atol, rtol)
            c = compare(unsplit[name], truth[name])
            findings.append(Comparison(
                kernel="kda_decode", check="numerics", variant=variant, shape=shape, dtype="fp32",
                passed=ratio <= 1.0, output=f"{name} vs float64 reference",
                criterion=f"|kernel - ref| <= {atol:g} + {rtol:g}*|ref| elementwise",
                measured=f"max error / tolerance {ratio:.3g}, max abs {c.max_abs:.3g}",
                worst_index=worst, metrics=elementwise_metrics(c),
            ))
    return findings, {}
