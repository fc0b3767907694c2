"""`infralab kernels check`: every numerics comparison and partition check, as local findings.

Each kernel suite returns `Comparison`s (the agent turns them into its findings): one check with
its criterion (the stated tolerance), the measured numbers and the worst element's index, tagged with kernel, variant, shape, dtype, split and
TP degree. A kernel's verdict is PASS when all its findings pass. Shapes are small so that the whole
run finishes in a couple of minutes in Triton's CPU interpreter.

Importing this module imports triton (through the partition harness), so decide on the interpreter
first: TRITON_INTERPRET=1 when there is no GPU (`infralab.kernels.interpreter.use_interpreter_without_gpu`).
The KDA, attention and W8A8 modules are imported inside their suites.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

# compare.Comparison holds elementwise metrics; this module's Comparison is a check's finding.
from infralab.kernels.compare import Comparison as Elementwise
from infralab.kernels.compare import compare
from infralab.kernels.ops.kda_decode import CHECK_RING_LEN
from infralab.kernels.ops.matmul import CHECK_BLOCKS, MatmulPartition
from infralab.kernels.partition import (
    HeadSplitKernelSpec,
    PartitionedKernel,
    PartitionResult,
    PartitionTask,
    run_task,
    tasks_for,
)
from infralab.kernels.registry import CHECK_ORDER, OPS, partition_adapter

# Relative Frobenius error against float64 on N(0,1) data. Measured in Triton's interpreter (numpy's
# pairwise dot; tests/kernels/test_matmul.py): fp32 ~2e-7, tf32 ~3e-4, 3xtf32 ~2e-7 for K = 256..16384.
# Compiled on an H200 (docs/gpu.md), the IEEE fp32 kernel accumulates K sequentially and measured
# 1.07-1.15e-6 at K = 4096 (3xtf32 2.4e-7), so the FP32-level bound grows with K as the theory says.
TF32_MAX_REL_FRO = 1e-3
FP32_UNIT_ROUNDOFF = 2.0**-24
# TF32 that is no worse than this did not round its operands: the check would miss a silent FP32 path.
TF32_MIN_REL_FRO = 3e-5

DEFAULT_TP_DEGREES = (1, 2, 4, 8)


def fp32_level_rel_fro(k: int) -> float:
    """The largest relative Frobenius error (against float64, N(0,1) operands) accepted as FP32-level
    for a product of inner size `k`: sqrt(k) * u, the probabilistic rounding-error bound of a length-k
    FP32 dot product (Higham and Mary, SIAM J. Sci. Comput. 2019), never below 1e-6."""
    return max(1e-6, math.sqrt(k) * FP32_UNIT_ROUNDOFF)


def matmul_max_rel_fro(precision: str, k: int) -> float:
    """The bound of `kernels check` for a `precision` matmul of inner size `k` (TF32 rounds its operands)."""
    return TF32_MAX_REL_FRO if precision == "tf32" else fp32_level_rel_fro(k)


@dataclass(frozen=True)
class Comparison:
    """One comparison: what was required (`criterion`), what was measured, and where it is worst."""

    kernel: str
    check: str  # "numerics" or "partition"
    variant: str
    shape: str
    dtype: str
    passed: bool
    criterion: str
    measured: str
    split: str = "none"
    tp: int = 1
    role: str = ""
    output: str = ""
    worst_index: tuple[int, ...] = ()
    metrics: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def headline(self) -> str:
        """One line naming everything needed to reproduce the comparison."""
        where = f"{self.kernel}[{self.variant}] {self.check}"
        if self.role:
            where += f" {self.role}"
        if self.split != "none" or self.tp != 1:
            where += f" split={self.split} tp={self.tp}"
        out = f" [{self.output}]" if self.output else ""
        return (f"{where} shape={self.shape} dtype={self.dtype}{out}: {self.measured}; "
                f"required {self.criterion}; worst at {list(self.worst_index)}")


@dataclass(frozen=True)
class KernelVerdict:
    """A kernel's verdict: PASS when every finding passed; `finding` is the first failure (or a summary)."""

    kernel: str
    passed: bool
    checks: int
    failures: int
    finding: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CheckReport:
    findings: tuple[Comparison, ...]
    verdicts: tuple[KernelVerdict, ...]
    summaries: dict  # named tables for the report (e.g. the TF32 vs 3xTF32 K-split drift)

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "verdicts": [v.to_dict() for v in self.verdicts],
            "findings": [f.to_dict() for f in self.findings],
            "summaries": self.summaries,
        }


def _metrics(c: Elementwise) -> dict:
    return {"max_abs": c.max_abs, "max_rel": c.max_rel, "max_ulp": c.max_ulp,
            "bitwise_equal": c.bitwise_equal, "rel_fro": c.rel_fro}


def _shape_text(**dims: int) -> str:
    return ";".join(f"{k}={v}" for k, v in dims.items())


# --------------------------------------------------------------------------------------------
# Partition findings (shared by every kernel)
# --------------------------------------------------------------------------------------------


def partition_findings(result: PartitionResult, kernel: PartitionedKernel, dtype: str,
                       max_rel_fro: float) -> list[Comparison]:
    """Findings for one partition task: bitwise equality where the split must be exact, otherwise
    accuracy against float64 within `max_rel_fro` (the unsplit kernel's own tolerance)."""
    task = result.task
    must_be_bitwise = kernel.expects_bitwise(task.split, task.dims)
    findings = []
    for name, vs_unsplit in result.split_vs_unsplit.items():
        vs_truth = result.split_vs_float64[name]
        if must_be_bitwise:
            passed = vs_unsplit.bitwise_equal
            criterion = "bitwise equal to the unsplit result"
        else:
            passed = vs_truth.rel_fro <= max_rel_fro
            criterion = f"rel. Frobenius error vs float64 <= {max_rel_fro:g} (bitwise equality not expected)"
        worst = vs_unsplit if not vs_unsplit.bitwise_equal else vs_truth
        measured = (f"bitwise={vs_unsplit.bitwise_equal} vs unsplit (max abs {vs_unsplit.max_abs:.3g}, "
                    f"max ulp {vs_unsplit.max_ulp}); rel_fro vs float64 {vs_truth.rel_fro:.3g} split, "
                    f"{result.unsplit_vs_float64[name].rel_fro:.3g} unsplit")
        findings.append(Comparison(
            kernel=task.kernel, check="partition", variant=task.variant, shape=task.shape_text(), dtype=dtype,
            passed=passed, criterion=criterion, measured=measured, split=task.split.describe(), tp=task.tp,
            role=task.role, output=name, worst_index=worst.worst_index,
            metrics={"vs_unsplit": _metrics(vs_unsplit), "vs_float64": _metrics(vs_truth),
                     "unsplit_vs_float64": _metrics(result.unsplit_vs_float64[name])},
        ))
    return findings


# --------------------------------------------------------------------------------------------
# Matmul
# --------------------------------------------------------------------------------------------

# (M, K, N): one shape that is a multiple of nothing, one with a long reduction.
MATMUL_NUMERICS_SHAPES = ((33, 300, 70), (16, 4096, 48))
MATMUL_CHECK_BLOCKS = CHECK_BLOCKS


def matmul_numerics() -> list[Comparison]:
    """Each precision vs its torch emulation (summation-order bound), vs float64, and the in-kernel
    TF32 rounding / 3xTF32 split vs their torch twins (bitwise, via B = identity)."""
    from infralab.kernels.matmul import PRECISIONS, accumulation_bound, matmul, matmul_float64, matmul_reference

    findings = []
    gen = torch.Generator().manual_seed(1)
    device = _device()
    for m, k, n in MATMUL_NUMERICS_SHAPES:
        a = torch.randn(m, k, generator=gen).to(device)
        b = torch.randn(k, n, generator=gen).to(device)
        truth = matmul_float64(a, b)
        shape = _shape_text(M=m, N=n, K=k)
        for precision in PRECISIONS:
            c = matmul(a, b, precision, blocks=MATMUL_CHECK_BLOCKS)
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
                worst_index=(worst // n, worst % n), metrics=_metrics(vs_ref),
            ))
            vs_truth = compare(c, truth)
            low = TF32_MIN_REL_FRO if precision == "tf32" else 0.0
            high = matmul_max_rel_fro(precision, k)
            findings.append(Comparison(
                kernel="matmul", check="numerics", variant=precision, shape=shape, dtype=precision,
                passed=low <= vs_truth.rel_fro <= high, output="C vs float64",
                criterion=f"{low:g} <= rel. Frobenius error <= {high:g}",
                measured=f"rel_fro {vs_truth.rel_fro:.3g}, max rel {vs_truth.max_rel:.3g}",
                worst_index=vs_truth.worst_index, metrics=_metrics(vs_truth),
            ))
    findings += _rounding_findings(gen)
    return findings


def _rounding_findings(gen: torch.Generator) -> list[Comparison]:
    """With B = I every output is a single product x*1 (exact), so C shows the kernel's rounded operand."""
    from infralab.kernels.matmul import matmul
    from infralab.kernels.tf32 import round_to_tf32, split_3xtf32

    m, k = 20, 96
    a = (torch.randn(m, k, generator=gen) * torch.logspace(-20, 20, k)).to(_device())  # many exponents
    eye = torch.eye(k, device=a.device)
    big, small = split_3xtf32(a)
    expected = {"tf32": round_to_tf32(a), "3xtf32": small + big}  # the kernel's order: (0 + small) + big
    findings = []
    for precision, want in expected.items():
        got = matmul(a, eye, precision, blocks=MATMUL_CHECK_BLOCKS)
        c = compare(got, want)
        findings.append(Comparison(
            kernel="matmul", check="numerics", variant=precision, shape=_shape_text(M=m, N=k, K=k),
            dtype=precision, passed=c.bitwise_equal, output="in-kernel operand rounding (B = I)",
            criterion="bitwise equal to the torch bit-operation twin", measured=f"bitwise={c.bitwise_equal}, "
            f"max ulp {c.max_ulp}", worst_index=c.worst_index, metrics=_metrics(c),
        ))
    return findings


def matmul_partition(tp_degrees: Sequence[int]) -> tuple[list[Comparison], dict]:
    """Every TP task of `tasks_for("matmul", tp)` (sequential K sums; tree sums too for tp >= 4),
    plus the K-split drift table of TF32 vs 3xTF32."""
    kernel = partition_adapter("matmul")
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


def matmul_suite(tp_degrees: Sequence[int]) -> tuple[list[Comparison], dict]:
    findings, summaries = matmul_partition(tp_degrees)
    return matmul_numerics() + findings, summaries


# --------------------------------------------------------------------------------------------
# Head-parallel kernels: KDA decode (+ ReplaySSM) and paged decode attention
# --------------------------------------------------------------------------------------------

# Kernel vs float64 reference, |a - e| <= atol + rtol*|e| elementwise: the tolerances stated in
# tests/kernels/test_kda_decode.py and test_replay_ssm.py (float32 state carried over many steps).
KDA_TOLERANCES = {"o": (1e-6, 1e-5), "state": (2e-6, 1e-5)}
KDA_SPEC = HeadSplitKernelSpec(
    kernel="kda_decode", role="linear_attn.kda_decode", variants=OPS["kda_decode"].variants,
    shape=(("S", 3), ("B", 1), ("H", 8), ("K", 32), ("V", 48)),  # V not a power of two
)
KDA_RING_LEN = CHECK_RING_LEN  # 3 steps: one flush, then a partly filled ring

# Paged attention: kernel vs its float64 reference on the same quantised cache (stated in
# tests/kernels/test_paged_attention.py), and the quantisation error vs FP32 attention per dtype.
ATTENTION_KERNEL_ATOL = 2e-6
ATTENTION_SPEC = HeadSplitKernelSpec(
    kernel="paged_decode_attention", role="attn.decode_attention", variants=OPS["paged_decode_attention"].variants,
    shape=(("B", 2), ("H", 16), ("HKV", 8), ("D", 40), ("T", 37)), head_dim_name="HKV",
)


def _within(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> tuple[float, tuple[int, ...]]:
    """max of |a - e| / (atol + rtol*|e|) (<= 1 passes) and where it is largest."""
    ratio = (actual.double() - expected.double()).abs() / (atol + rtol * expected.double().abs())
    flat = int(ratio.argmax())
    return float(ratio.max()), tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), ratio.shape))


def head_parallel_partition(spec: HeadSplitKernelSpec, kernel: PartitionedKernel, tp_degrees: Sequence[int],
                            dtype: Callable[[str], str], max_rel_fro: float) -> tuple[list[Comparison], dict]:
    """Head splits for every TP degree (and, when the shape has B >= 2, one batch split, as
    data-parallel attention does);
    also returns the unsplit results so that numerics checks can reuse them."""
    cache: dict = {}
    findings = []
    batch_split = dict(spec.shape)["B"] >= 2
    for tp in tp_degrees:
        dp = 2 if batch_split and tp == max(tp_degrees) else 1  # one batch split per run is enough
        for task in tasks_for(spec.kernel, tp, head_kernels={spec.kernel: spec}, dp=dp):
            findings += partition_findings(run_task(task, kernel, cache), kernel, dtype(task.variant), max_rel_fro)
    return findings, cache


def kda_suite(tp_degrees: Sequence[int]) -> tuple[list[Comparison], dict]:
    """Each variant over several steps vs the float64 reference; head and batch splits bitwise."""
    kernel = partition_adapter("kda_decode")
    findings, cache = head_parallel_partition(KDA_SPEC, kernel, tp_degrees, lambda v: "fp32", 1e-5)
    shape = ";".join(f"{k}={v}" for k, v in KDA_SPEC.shape)
    for variant in KDA_SPEC.variants:
        _, unsplit, truth = cache[("kda_decode", variant, KDA_SPEC.shape, 0)]
        for name, (atol, rtol) in KDA_TOLERANCES.items():
            ratio, worst = _within(unsplit[name], truth[name], atol, rtol)
            c = compare(unsplit[name], truth[name])
            findings.append(Comparison(
                kernel="kda_decode", check="numerics", variant=variant, shape=shape, dtype="fp32",
                passed=ratio <= 1.0, output=f"{name} vs float64 reference",
                criterion=f"|kernel - ref| <= {atol:g} + {rtol:g}*|ref| elementwise",
                measured=f"max error / tolerance {ratio:.3g}, max abs {c.max_abs:.3g}",
                worst_index=worst, metrics=_metrics(c),
            ))
    return findings, {}


# Attention output error vs FP32 attention (float64 over the unquantised K, V), per cache dtype.
# Measured on N(0,1) data: fp32 ~1e-7, bf16 ~2e-3, int8 ~8e-3, fp8e4m3 ~3e-2 (see the summary table).
ATTENTION_MAX_REL_FRO_VS_FP32 = {"fp32": 1e-6, "bf16": 1e-2, "int8": 2e-2, "fp8e4m3": 1e-1}


def attention_suite(tp_degrees: Sequence[int]) -> tuple[list[Comparison], dict]:
    """Kernel vs reference per cache dtype, quantisation error vs FP32 attention, head/batch splits."""
    from infralab.kernels.paged_attention import kv_quant_report

    kernel = partition_adapter("paged_decode_attention")
    findings, cache = head_parallel_partition(ATTENTION_SPEC, kernel, tp_degrees, lambda v: v, 1e-6)
    shape = ";".join(f"{k}={v}" for k, v in ATTENTION_SPEC.shape)
    for variant in ATTENTION_SPEC.variants:
        _, unsplit, truth = cache[("paged_decode_attention", variant, ATTENTION_SPEC.shape, 0)]
        c = compare(unsplit["o"], truth["o"])
        findings.append(Comparison(
            kernel="paged_decode_attention", check="numerics", variant=variant, shape=shape, dtype=variant,
            passed=c.max_abs <= ATTENTION_KERNEL_ATOL, output="o vs float64 reference (same quantised cache)",
            criterion=f"max abs error <= {ATTENTION_KERNEL_ATOL:g}", measured=f"max abs {c.max_abs:.3g}",
            worst_index=c.worst_index, metrics=_metrics(c),
        ))
    rows = kv_quant_report(batch=2, heads=8, kv_heads=2, head_dim=64, context_lens=(53, 9), device=_device())
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


# --------------------------------------------------------------------------------------------
# W8A8
# --------------------------------------------------------------------------------------------


def w8a8_suite(tp_degrees: Sequence[int]) -> tuple[list[Comparison], dict]:
    """Kernel vs its integer reference (bitwise) and vs the exact dequantised product (3 FP32
    roundings), with the quantisation error against the FP32 matmul reported."""
    from infralab.kernels.w8a8 import w8a8_error_report

    rows = w8a8_error_report(device=_device())
    findings = []
    for row in rows:
        passed = row["kernel_vs_ref_bitwise"] and row["max_rel_vs_exact"] <= row["rel_bound"]
        findings.append(Comparison(
            kernel="w8a8_matmul", check="numerics", variant=row["data"], shape=_shape_text(M=row["m"], N=row["n"], K=row["k"]),
            dtype="int8", passed=passed, output="C vs integer reference and exact product",
            criterion=f"bitwise equal to w8a8_matmul_ref; max rel. error vs exact <= {row['rel_bound']:.3g}",
            measured=f"bitwise={row['kernel_vs_ref_bitwise']}, max rel {row['max_rel_vs_exact']:.3g}, "
                     f"rel_fro vs FP32 matmul {row['rel_fro_vs_fp32']:.3g}",
            metrics=dict(row),
        ))
    return findings, {"w8a8": rows}


def _device() -> str:
    from infralab.kernels.interpreter import kernel_device

    return kernel_device()


# --------------------------------------------------------------------------------------------
# Runner
# --------------------------------------------------------------------------------------------

Suite = Callable[[Sequence[int]], tuple[list[Comparison], dict]]


def suites() -> dict[str, Suite]:
    """Kernel name -> suite (each op registers its own), in report order."""
    return {name: OPS[name].check_suite for name in CHECK_ORDER}


def verdict_for(kernel: str, findings: Sequence[Comparison]) -> KernelVerdict:
    failures = [f for f in findings if not f.passed]
    if failures:
        text = failures[0].headline()
    else:
        text = f"{len(findings)} comparisons within their criteria"
    return KernelVerdict(kernel, not failures and bool(findings), len(findings), len(failures), text)


def run_checks(tp_degrees: Sequence[int] = DEFAULT_TP_DEGREES, kernels: Sequence[str] | None = None) -> CheckReport:
    """Run the suites of `kernels` (all by default) under `tp_degrees`; returns findings and verdicts."""
    available = suites()
    findings: list[Comparison] = []
    verdicts: list[KernelVerdict] = []
    summaries: dict = {}
    for name in kernels or list(available):
        kernel_findings, kernel_summaries = available[name](tp_degrees)
        findings += kernel_findings
        summaries.update(kernel_summaries)
        verdicts.append(verdict_for(name, kernel_findings))
    return CheckReport(tuple(findings), tuple(verdicts), summaries)
