"""`kernel-check`: numerics of one kernel call under one partitioning, against the unsplit call and
float64 (the partitioning harness of `infralab.kernels.partition`).

Knobs per arm: kernel, variant (matmul: fp32 | tf32 | 3xtf32), shape ("M=40;N=256;K=2048"), split
(none | column | row | head | batch), tp (shards), reduction (row splits: sequential | tree). Each of
the hypothesis's seeds draws other inputs (one sample per seed).
Metrics (maxima over the kernel's outputs):
- rel_err: relative Frobenius error of the split result vs float64; rel_err_unsplit: same, unsplit;
- rel_err_vs_unsplit: split vs unsplit; max_ulp: largest FP32 ULP distance split vs unsplit;
- max_rel_err, max_abs_err: elementwise maxima vs float64; bitwise_equal: split == unsplit bit for bit.
The numerics are deterministic for given inputs: repetitions repeat a seed's numbers; several seeds
give the noise rule a spread over inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import StrictInt
from pydantic.dataclasses import dataclass

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import Arm, Hypothesis, setup_as
from infralab.agent.validators.base import Declaration, KnobSpec, Measurement, sample_keys
from infralab.agent.validators.shape_memory import check_fits_memory
from infralab.calibration_table import parse_shape
from infralab.config_io import STRICT
from infralab.errors import InputError
from infralab.field_types import int_bounds
from infralab.kernels.interpreter import use_interpreter_without_gpu

if TYPE_CHECKING:
    from infralab.agent.sim_pool import Execution  # measures on this machine whatever the pool's backend
    from infralab.kernels.partition import PartitionedKernel, PartitionResult, PartitionTask, Reduction, SplitKind

NAME = "kernel-check"
KIND = "kernel-numerics"
METRICS = ("rel_err", "rel_err_unsplit", "rel_err_vs_unsplit", "max_rel_err", "max_abs_err", "max_ulp", "bitwise_equal")


def kernel_names() -> Mapping[str, tuple[str, ...]]:
    """The kernels this validator can check (the registered ops with a partition adapter), each with
    its variants: the kernels registry, read without importing torch."""
    from infralab.kernels.registry import OPS

    return {name: op.variants for name, op in OPS.items() if op.partition_adapter is not None}


def _kernels(knobs: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(kernel_names())


def _variants(knobs: Mapping[str, Any]) -> tuple[str, ...]:
    return kernel_names().get(str(knobs.get("kernel")), ())


def _splits(knobs: Mapping[str, Any]) -> tuple[str, ...]:
    from infralab.kernels.registry import OPS

    found = OPS.get(str(knobs.get("kernel")))
    return found.splits if found is not None else ()


@dataclass(frozen=True, config=STRICT)
class KernelSetup:
    """`dims` replaces named dimensions in every arm's shape (e.g. a smaller K for quick runs;
    dimensions an arm's shape lacks are left alone)."""

    dims: dict[str, Annotated[StrictInt, int_bounds(gt=0, le=65536)]] = dataclasses.field(default_factory=dict)


DECLARATIONS = (Declaration(
    KIND, METRICS,
    knobs={"kernel": KnobSpec(str, choices=_kernels), "variant": KnobSpec(str, choices=_variants),
           "shape": KnobSpec(str, describe="a shape such as \"M=40;N=256;K=2048\""),
           "split": KnobSpec(str, choices=_splits), "tp": KnobSpec(int),
           "reduction": KnobSpec(str, ("sequential", "tree"))},
    setup=KernelSetup, required=("kernel", "variant", "shape"),
),)


def partitioned_kernel(kernel: str) -> PartitionedKernel | None:
    """The partitioning harness's adapter for `kernel`, as `kernels check` runs it (None when it has
    none). Picks where kernels run first: triton reads TRITON_INTERPRET when they are imported."""
    from infralab.kernels.registry import partition_adapter

    use_interpreter_without_gpu()
    adapter: PartitionedKernel | None = partition_adapter(kernel)
    return adapter


def task_of(hyp: Hypothesis, arm: Arm, seed: int) -> PartitionTask:
    """The partition task of `arm` with inputs drawn from `seed`."""
    from infralab.kernels.partition import PartitionTask, Split

    knobs = arm.config
    where = f"{hyp.source}: {arm.name}"
    kind = knobs.get("split", "none")
    tp = int(knobs.get("tp", 1))
    if kind == "none":
        split = Split("none", 1)
    elif kind == "row":
        # the declaration's knob check admits only Reduction and SplitKind values
        split = Split("row", tp, cast("Reduction", knobs.get("reduction", "sequential")))
    else:
        split = Split(cast("SplitKind", kind), tp)
    written = parse_shape(str(knobs["shape"]), f"{where}.shape")
    dims = setup_as(hyp, KernelSetup).dims
    shape = tuple((name, dims.get(name, size)) for name, size in written)
    # The sizes are the arm's shape and setup.dims together: name both when dims changed one.
    sized_by = f"{where}.shape" + (" with setup.dims" if shape != written else "")
    check_fits_memory(str(knobs["kernel"]), dict(shape), sized_by)
    return PartitionTask(str(knobs["kernel"]), str(knobs["variant"]), "hypothesis", shape, split, tp, seed)


class KernelCheck:
    name = NAME
    rung = 10

    def declarations(self) -> tuple[Declaration, ...]:
        return DECLARATIONS

    def unavailable(self, hyp: Hypothesis) -> str | None:
        # find_spec, not import: triton must first be imported after TRITON_INTERPRET is decided.
        import importlib.util

        missing = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
        return f"not installed: {', '.join(missing)}" if missing else None

    def measure(self, hyp: Hypothesis, workdir: Path | None, execution: Execution) -> Measurement:
        device = use_interpreter_without_gpu()
        from infralab.kernels.partition import run_task

        cache: dict[tuple[object, ...], object] = {}
        samples: dict[str, list[dict[str, Any]]] = {}
        findings: list[Finding] = []
        notes = [f"device: {device}"]
        rows = []
        # Every arm's tasks first: a shape beyond memory (task_of) is refused before any arm runs.
        tasks = {arm.name: {seed: task_of(hyp, arm, seed) for seed in hyp.seeds}
                 for arm in hyp.arms if partitioned_kernel(str(arm.config["kernel"])) is not None}
        for arm in hyp.arms:
            adapter = partitioned_kernel(str(arm.config["kernel"]))
            if adapter is None:
                samples[arm.name] = [{} for _ in sample_keys(hyp)]
                notes.append(f"{arm.name}: no partition adapter for kernel {arm.config['kernel']!r} in infralab.kernels")
                continue
            per_seed = {}
            for seed in hyp.seeds:  # each seed draws other inputs; the numerics are deterministic
                task = tasks[arm.name][seed]
                try:
                    result = run_task(task, adapter, cache)
                except InputError as exc:
                    raise InputError(f"{hyp.source}: {arm.name}", exc.problem + f" ({exc.where})", exc.expected) from None
                per_seed[seed] = metrics_of(result)
                findings += findings_of(arm, result)
                rows.append({"arm": arm.name, "kernel": task.kernel, "variant": task.variant,
                             "shape": task.shape_text(), "split": task.split.describe(), "tp": task.tp,
                             "seed": task.seed, **per_seed[seed]})
            samples[arm.name] = [dict(per_seed[seed]) for seed, _ in sample_keys(hyp)]
        return Measurement(NAME, samples, tuple(findings), varies=False, extras={"table": rows}, notes=tuple(notes))


def metrics_of(result: PartitionResult) -> dict[str, float | bool]:
    outs = list(result.split_vs_unsplit)
    return {
        "rel_err": max(result.split_vs_float64[o].rel_fro for o in outs),
        "rel_err_unsplit": max(result.unsplit_vs_float64[o].rel_fro for o in outs),
        "rel_err_vs_unsplit": max(result.split_vs_unsplit[o].rel_fro for o in outs),
        "max_rel_err": max(result.split_vs_float64[o].max_rel for o in outs),
        "max_abs_err": max(result.split_vs_float64[o].max_abs for o in outs),
        "max_ulp": max(result.split_vs_unsplit[o].max_ulp for o in outs),
        "bitwise_equal": all(result.split_vs_unsplit[o].bitwise_equal for o in outs),
    }


def findings_of(arm: Arm, result: PartitionResult) -> list[Finding]:
    """One finding per output: where the split result departs most from the unsplit one."""
    task = result.task
    out = []
    for name, vs_unsplit in result.split_vs_unsplit.items():
        vs_truth = result.split_vs_float64[name]
        unsplit_truth = result.unsplit_vs_float64[name]
        if vs_unsplit.bitwise_equal:
            what = (f"{task.split.describe()} split is bitwise equal to the unsplit call; "
                    f"rel. error vs float64 {vs_truth.rel_fro:.3g}")
            worst = vs_truth
        else:
            what = (f"{task.split.describe()} split differs from the unsplit call: max {vs_unsplit.max_ulp} ULP, "
                    f"max abs {vs_unsplit.max_abs:.3g} at {list(vs_unsplit.worst_index)}; rel. error vs float64 "
                    f"{vs_truth.rel_fro:.3g} (unsplit {unsplit_truth.rel_fro:.3g})")
            worst = vs_unsplit
        out.append(Finding(
            validator=NAME, arm=arm.name,
            where=Where.of("kernel", kernel=task.kernel, variant=task.variant, shape=task.shape_text(),
                           split=task.split.describe(), tp=task.tp, output=name, worst_index=worst.worst_index),
            what=what,
            evidence=Evidence(
                numbers={"rel_err": vs_truth.rel_fro, "rel_err_unsplit": unsplit_truth.rel_fro,
                         "rel_err_vs_unsplit": vs_unsplit.rel_fro, "max_ulp": vs_unsplit.max_ulp,
                         "max_abs_vs_unsplit": vs_unsplit.max_abs, "bitwise_equal": vs_unsplit.bitwise_equal,
                         "worst_actual": worst.worst_actual, "worst_expected": worst.worst_expected},
                reference="the unsplit kernel call and a float64 torch reference, same inputs (seeded)",
            ),
        ))
    return out


VALIDATOR = KernelCheck
