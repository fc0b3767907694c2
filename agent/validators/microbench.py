"""`microbench`: the work and (on a GPU) the time of one kernel variant at one shape.

Knobs per arm: kernel, variant (the kernels and variants `kernel_names()` offers), shape
("B=64;H=32;K=128;V=128"), ring_len (a ring-buffer variant's ring length L, default 8).
Metrics, per step (a kernel call that runs several steps is divided by them):
- static work counts, everywhere (`infralab.kernels.registry.work_metrics`): bytes, bytes_loaded, flops,
  divisions, transcendentals, repeated_elementwise, programs; and state_bytes_per_seq (the
  recurrent memory one sequence keeps);
- time_s and achieved_gbps, only where a GPU is present (`triton.testing.do_bench`, one median per
  repetition). On a CPU there is no honest time for the Triton variants (the interpreter is a
  correctness tool), so times are reported as not measured.
Work counts are deterministic; times vary, so time criteria need repetitions >= 2.

What is kernel-specific (its variants, its shape's dimensions, its work and state formulas, how to
call it) comes from the kernels registry (`infralab.kernels.registry`), never from this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic.dataclasses import dataclass

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import Arm, Hypothesis
from infralab.agent.validators.base import Declaration, KnobSpec, Measurement, sample_keys
from infralab.calibration_table import parse_shape
from infralab.config_io import STRICT

if TYPE_CHECKING:
    from infralab.agent.sim_pool import Execution  # measures on this machine whatever the pool's backend

NAME = "microbench"
KIND = "kernel-performance"
DEFAULT_RING_LEN = 8
WORK_METRICS = ("bytes", "bytes_loaded", "flops", "divisions", "transcendentals", "repeated_elementwise", "programs")
METRICS = (*WORK_METRICS, "state_bytes_per_seq", "time_s", "achieved_gbps")


def kernel_names() -> Mapping[str, tuple[str, ...]]:
    """The kernels microbench can measure (every registered op has static work counts), each with
    its variants: the kernels registry, read without importing torch."""
    from infralab.kernels.registry import OPS

    return {name: op.variants for name, op in OPS.items()}


def _kernels(knobs: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(kernel_names())


def _variants(knobs: Mapping[str, Any]) -> tuple[str, ...]:
    return kernel_names().get(str(knobs.get("kernel")), ())


@dataclass(frozen=True, config=STRICT)
class NoSetup:
    """Microbenchmarks need no shared context."""


DECLARATIONS = (Declaration(
    KIND, METRICS,
    knobs={"kernel": KnobSpec(str, choices=_kernels), "variant": KnobSpec(str, choices=_variants),
           "shape": KnobSpec(str, describe="a shape such as \"B=64;H=32;K=128;V=128\""), "ring_len": KnobSpec(int)},
    setup=NoSetup, required=("kernel", "variant", "shape"),
),)


def _dims(hyp: Hypothesis, arm: Arm) -> dict[str, int]:
    """The arm's shape, checked against the kernel's dimension letters (an InputError otherwise)."""
    from infralab.kernels.registry import check_dims

    where = f"{hyp.source}: {arm.name}.shape"
    dims = dict(parse_shape(str(arm.config["shape"]), where))
    check_dims(str(arm.config["kernel"]), dims, where)
    return dims


def _ring_len(arm: Arm) -> int:
    return int(arm.config.get("ring_len", DEFAULT_RING_LEN))


def work_metrics(hyp: Hypothesis, arm: Arm) -> dict[str, float]:
    """Per-step work counts and state memory of `arm` (no device needed), from the kernels registry."""
    from infralab.kernels.registry import work_metrics as registered_work

    return registered_work(str(arm.config["kernel"]), str(arm.config["variant"]), _dims(hyp, arm),
                           ring_len=_ring_len(arm))


def _timed_dims(hyp: Hypothesis, arm: Arm) -> dict[str, int]:
    """The dimensions a timed call allocates: the arm's shape, with the ring length where it has one."""
    dims = _dims(hyp, arm)
    if "ring_len" in arm.config or str(arm.config["variant"]) == "replay":
        dims.setdefault("L", _ring_len(arm))
    return dims


def check_gpu_memory(hyp: Hypothesis) -> None:
    """Every arm's tensors fit the GPU's free memory before any is timed: a shape beyond it is one
    InputError naming the arm's shape (it was torch's out-of-memory traceback)."""
    from infralab.agent.validators.shape_memory import check_fits_memory

    for arm in hyp.arms:
        check_fits_memory(str(arm.config["kernel"]), _timed_dims(hyp, arm), f"{hyp.source}: {arm.name}.shape",
                          device="cuda")  # gpu_times allocates there


def gpu_times(hyp: Hypothesis, arm: Arm, repetitions: int) -> list[float]:
    """Median seconds per step of the Triton kernel at the arm's shape, one per repetition (GPU only)."""
    from infralab.kernels.bench import gpu_timer
    from infralab.kernels.bench_cases import BenchCase, prepare

    dims = _timed_dims(hyp, arm)
    case = BenchCase(str(arm.config["kernel"]), str(arm.config["variant"]), "fp32", tuple(dims.items()), "fp32",
                     f"hypothesis {hyp.name}")
    timer = gpu_timer()
    fn = prepare(case, "cuda", 0)
    calls = getattr(fn, "calls_per_run", 1)
    return [timer(fn) / calls for _ in range(repetitions)]


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


class Microbench:
    name = NAME
    rung = 20

    def declarations(self) -> tuple[Declaration, ...]:
        return DECLARATIONS

    def unavailable(self, hyp: Hypothesis) -> str | None:
        return None  # work counts need no device

    def measure(self, hyp: Hypothesis, workdir: Path | None, execution: Execution) -> Measurement:
        keys = sample_keys(hyp)
        on_gpu = _on_gpu()
        samples: dict[str, list[dict[str, Any]]] = {}
        findings: list[Finding] = []
        rows = []
        work = {arm.name: work_metrics(hyp, arm) for arm in hyp.arms}
        if on_gpu:
            check_gpu_memory(hyp)
        for arm in hyp.arms:
            metrics = work[arm.name]
            times = gpu_times(hyp, arm, len(keys)) if on_gpu else []
            samples[arm.name] = []
            for i in range(len(keys)):
                sample = dict(metrics)
                if times:
                    sample["time_s"] = times[i]
                    sample["achieved_gbps"] = metrics["bytes"] / times[i] / 1e9
                samples[arm.name].append(sample)
            findings.append(self._finding(hyp, arm, metrics, work, times))
            rows.append({"arm": arm.name, "variant": arm.config["variant"], "shape": arm.config["shape"],
                         "change": arm.describe(), **metrics,
                         "time_s": (sorted(times)[len(times) // 2] if times else None)})
        notes = ("device: GPU, times from triton.testing.do_bench",) if on_gpu else (
            "no GPU: times not measured (the Triton interpreter is not a timer); work counts only",)
        return Measurement(NAME, samples, tuple(findings), varies=on_gpu, extras={"table": rows}, notes=notes)

    def _finding(
        self, hyp: Hypothesis, arm: Arm, metrics: dict[str, float], work: dict[str, dict[str, float]], times: list[float]
    ) -> Finding:
        parent = work.get(arm.parent) if arm.parent else None
        if parent is None:
            what = (f"{metrics['divisions']:.0f} divisions, {metrics['repeated_elementwise']:.0f} repeated "
                    f"elementwise ops, {metrics['bytes'] / 1e6:.2f} MB per step")
        else:
            changes = []
            for key in ("divisions", "repeated_elementwise", "transcendentals", "flops", "bytes", "bytes_loaded"):
                before, after = parent[key], metrics[key]
                if before != after:
                    pct = f" ({(after - before) / before:+.0%})" if before else ""
                    changes.append(f"{key} {before:.4g} -> {after:.4g}{pct}")
            assert arm.change is not None  # an arm with a parent is a variant, which names its change
            what = f"{arm.change[0]}={arm.change[1]} vs {arm.parent}: " + ("; ".join(changes) or "no change in work")
        if times:
            what += f"; median {sorted(times)[len(times) // 2] * 1e6:.1f} us per step"
        numbers: dict[str, float | tuple[float, ...]] = dict(metrics)
        if times:
            numbers["time_s_samples"] = tuple(times)
        return Finding(
            validator=NAME, arm=arm.name,
            where=Where.of("kernel", kernel=arm.config["kernel"], variant=arm.config["variant"],
                           shape=arm.config["shape"], device="gpu" if times else "none (work counts)"),
            what=what,
            evidence=Evidence(numbers=numbers,
                              reference=f"the parent arm {arm.parent!r}" if arm.parent else "static counts of the kernel source"),
        )


VALIDATOR = Microbench
