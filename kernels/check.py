"""`infralab kernels check`: every numerics comparison and partition check, as local findings.

Each kernel suite returns `Comparison`s (the agent turns them into its findings): one check with
its criterion (the stated tolerance), the measured numbers and the worst element's index, tagged with kernel, variant, shape, dtype, split and
TP degree. A kernel's verdict is PASS when all its findings pass. Shapes are small so that the whole
run finishes in a couple of minutes in Triton's CPU interpreter.

Each op's suite lives in its folder (`kernels/ops/<op>/check.py`, registered as the op's
`check_suite`); this module holds what they share (the finding, the verdict, partition findings,
the head-parallel harness, the FP32-level bound) and the runner, which runs the registered suites
in table order.

Importing this module imports triton (through the partition harness), so decide on the interpreter
first: TRITON_INTERPRET=1 when there is no GPU (`infralab.kernels.interpreter.use_interpreter_without_gpu`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

# compare.Comparison holds elementwise metrics; this module's Comparison is a check's finding.
from infralab.kernels.compare import Comparison as Elementwise
from infralab.kernels.partition import (
    HeadSplitKernelSpec,
    PartitionedKernel,
    PartitionResult,
    run_task,
    tasks_for,
)
from infralab.kernels import registry

# Relative Frobenius error against float64 on N(0,1) data, FP32 level: see `fp32_level_rel_fro`.
FP32_UNIT_ROUNDOFF = 2.0**-24

DEFAULT_TP_DEGREES = (1, 2, 4, 8)


def fp32_level_rel_fro(k: int) -> float:
    """The largest relative Frobenius error (against float64, N(0,1) operands) accepted as FP32-level
    for a product of inner size `k`: sqrt(k) * u, the probabilistic rounding-error bound of a length-k
    FP32 dot product (Higham and Mary, SIAM J. Sci. Comput. 2019), never below 1e-6."""
    return max(1e-6, math.sqrt(k) * FP32_UNIT_ROUNDOFF)


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


def elementwise_metrics(c: Elementwise) -> dict:
    """The metrics a finding records from an elementwise comparison."""
    return {"max_abs": c.max_abs, "max_rel": c.max_rel, "max_ulp": c.max_ulp,
            "bitwise_equal": c.bitwise_equal, "rel_fro": c.rel_fro}


def shape_text(**dims: int) -> str:
    """`shape_text(M=4, N=8)` -> "M=4;N=8", as findings print shapes."""
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
            metrics={"vs_unsplit": elementwise_metrics(vs_unsplit), "vs_float64": elementwise_metrics(vs_truth),
                     "unsplit_vs_float64": elementwise_metrics(result.unsplit_vs_float64[name])},
        ))
    return findings


# --------------------------------------------------------------------------------------------
# Head-parallel kernels (shared by the ops that split heads)
# --------------------------------------------------------------------------------------------


def within(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> tuple[float, tuple[int, ...]]:
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


# --------------------------------------------------------------------------------------------
# Runner
# --------------------------------------------------------------------------------------------

Suite = Callable[[Sequence[int]], tuple[list[Comparison], dict]]


def suites() -> dict[str, Suite]:
    """Kernel name -> suite (each op registers its own), in table order."""
    return {name: op.check_suite for name, op in registry.OPS.items() if op.check_suite is not None}


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
