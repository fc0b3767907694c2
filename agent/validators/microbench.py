"""`microbench`: the work and (on a GPU) the time of one kernel variant at one shape.

Knobs per arm: kernel, variant (the kernels and variants `kernel_names()` offers), shape
("B=64;H=32;K=128;V=128"), ring_len (a ring-buffer variant's ring length L, default 8).
Metrics, per step (a kernel call that runs several steps is divided by them):
- static work counts, everywhere (`infralab.kernels.work_counts`): bytes, bytes_loaded, flops,
  divisions, transcendentals, repeated_elementwise, programs; and state_bytes_per_seq (the
  recurrent memory one sequence keeps);
- time_s and achieved_gbps, only where a GPU is present (`triton.testing.do_bench`, one median per
  repetition). On a CPU there is no honest time for the Triton variants (the interpreter is a
  correctness tool), so times are reported as not measured.
Work counts are deterministic; times vary, so time criteria need repetitions >= 2.

What is kernel-specific (its shape's dimensions, its work and state formulas, its bench case) is
reached through `kernel_ops()` only: the kernels registry will supply it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic.dataclasses import dataclass

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import Arm, Hypothesis
from infralab.agent.validators.base import Declaration, KnobSpec, Measurement, sample_keys
from infralab.calibration_table import parse_shape
from infralab.config_io import STRICT
from infralab.errors import InputError

NAME = "microbench"
KIND = "kernel-performance"
DEFAULT_RING_LEN = 8
WORK_METRICS = ("bytes", "bytes_loaded", "flops", "divisions", "transcendentals", "repeated_elementwise", "programs")
METRICS = (*WORK_METRICS, "state_bytes_per_seq", "time_s", "achieved_gbps")


@dataclasses.dataclass(frozen=True)
class PerfOp:
    """What microbench needs of one kernel: its variants, the shape dimensions an arm must give, and,
    given (dims, variant, ring_len): `work`, its static work counts and the state bytes one sequence
    keeps, and `bench_case`, the case that times it on a GPU."""

    variants: tuple[str, ...]
    dims: tuple[str, ...]
    work: Callable[[Mapping[str, int], str, int], tuple[Any, int]]
    bench_case: Callable[[Mapping[str, int], str, int], Any]


def kernel_ops() -> Mapping[str, PerfOp] | None:
    """The kernels with static work counts; None without torch/triton.

    The one place that asks the kernels package what it offers (to become
    `infralab.kernels.registry.OPS`, which will supply the work counts too)."""
    try:
        from infralab.kernels.interpreter import use_interpreter_without_gpu

        use_interpreter_without_gpu()  # before triton loads the kernel modules
        from infralab.kernels.work_counts import WORK_COUNTS
    except ImportError:
        return None
    variants: dict[str, tuple[str, ...]] = {}
    for kernel, variant in WORK_COUNTS:
        variants[kernel] = (*variants.get(kernel, ()), variant)
    known = {"kda_decode": (("B", "H", "K", "V"), _kda_work, _kda_bench_case)}
    return {k: PerfOp(v, *known[k]) for k, v in variants.items() if k in known}


def kernel_names() -> Mapping[str, tuple[str, ...]] | None:
    """The kernels microbench can measure, each with its variants (None: cannot tell here)."""
    ops = kernel_ops()
    return None if ops is None else {name: op.variants for name, op in ops.items()}


def _kernels(knobs: Mapping[str, Any]) -> tuple[str, ...] | None:
    names = kernel_names()
    return None if names is None else tuple(names)


def _variants(knobs: Mapping[str, Any]) -> tuple[str, ...] | None:
    names = kernel_names()
    return None if names is None else names.get(str(knobs.get("kernel")), ())


@dataclass(frozen=True, config=STRICT)
class NoSetup:
    """Microbenchmarks need no shared context."""


DECLARATIONS = (Declaration(
    KIND, METRICS,
    knobs={"kernel": KnobSpec(str, choices=_kernels), "variant": KnobSpec(str, choices=_variants),
           "shape": KnobSpec(str, describe="a shape such as \"B=64;H=32;K=128;V=128\""), "ring_len": KnobSpec(int)},
    setup=NoSetup, required=("kernel", "variant", "shape"),
),)


# ---- KDA decode and ReplaySSM (until the kernels registry supplies these) ------------------------


def _kda_work(d: Mapping[str, int], variant: str, ring_len: int) -> tuple[Any, int]:
    from infralab.kernels.replay_ssm import replay_ssm_memory
    from infralab.kernels.work_counts import work_counts

    shape = {"batch": d["B"], "heads": d["H"], "head_k": d["K"], "head_v": d["V"]}
    if variant == "replay":
        counts = work_counts("kda_decode", variant, **shape, ring_len=ring_len)
        return counts, replay_ssm_memory(d["K"], d["V"], ring_len, d["H"]).total_bytes
    return work_counts("kda_decode", variant, **shape), d["H"] * d["K"] * d["V"] * 4


def _kda_bench_case(d: Mapping[str, int], variant: str, ring_len: int) -> Any:
    from infralab.kernels.bench_cases import BenchCase

    shape = tuple((k, d[k]) for k in ("B", "H", "K", "V"))
    if variant == "replay":
        return BenchCase("kda_decode", "replay", "fp32", (*shape, ("L", ring_len)), "fp32", "replay_ref")
    return BenchCase("kda_decode", variant, "fp32", shape, "fp32", "kda_ref")


# ---- generic -------------------------------------------------------------------------------------


def _op_and_dims(hyp: Hypothesis, arm: Arm) -> tuple[PerfOp, dict[str, int]]:
    kernel = str(arm.config["kernel"])
    op = (kernel_ops() or {}).get(kernel)
    if op is None:
        raise InputError(f"{hyp.source}: {arm.name}.kernel", f"no work counts for {kernel!r} here",
                         f"one of {', '.join(kernel_names() or ())}")
    dims = dict(parse_shape(str(arm.config["shape"]), f"{hyp.source}: {arm.name}.shape"))
    missing = [d for d in op.dims if d not in dims]
    if missing:
        raise InputError(f"{hyp.source}: {arm.name}.shape", f"lacks {', '.join(missing)}",
                         ";".join(f"{d}=.." for d in op.dims))
    return op, dims


def _ring_len(arm: Arm) -> int:
    return int(arm.config.get("ring_len", DEFAULT_RING_LEN))


def work_metrics(hyp: Hypothesis, arm: Arm) -> dict[str, Any]:
    """Per-step work counts and state memory of `arm` (no device needed)."""
    op, dims = _op_and_dims(hyp, arm)
    counts, state_bytes = op.work(dims, str(arm.config["variant"]), _ring_len(arm))
    steps = counts.steps
    return {
        "bytes": counts.bytes / steps,
        "bytes_loaded": counts.bytes_loaded / steps,
        "flops": counts.flops / steps,
        "divisions": counts.divisions / steps,
        "transcendentals": counts.transcendentals.total / steps,
        "repeated_elementwise": counts.repeated_elementwise / steps,
        "programs": counts.programs / steps,
        "state_bytes_per_seq": state_bytes,
    }


def gpu_times(hyp: Hypothesis, arm: Arm, repetitions: int) -> list[float]:
    """Median seconds per step of the Triton kernel, one per repetition (GPU only)."""
    from infralab.kernels.bench import gpu_timer
    from infralab.kernels.bench_cases import prepare

    timer = gpu_timer()
    op, dims = _op_and_dims(hyp, arm)
    fn = prepare(op.bench_case(dims, str(arm.config["variant"]), _ring_len(arm)), "cuda", 0)
    calls = getattr(fn, "calls_per_run", 1)
    return [timer(fn) / calls for _ in range(repetitions)]


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


class Microbench:
    name = NAME

    def declarations(self) -> tuple[Declaration, ...]:
        return DECLARATIONS

    def unavailable(self, hyp: Hypothesis) -> str | None:
        return None  # work counts need no device

    def measure(self, hyp: Hypothesis, workdir: Path | None) -> Measurement:
        keys = sample_keys(hyp)
        on_gpu = _on_gpu()
        samples: dict[str, list[dict[str, Any]]] = {}
        findings: list[Finding] = []
        rows = []
        work = {arm.name: work_metrics(hyp, arm) for arm in hyp.arms}
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

    def _finding(self, hyp: Hypothesis, arm: Arm, metrics: dict, work: dict, times: list[float]) -> Finding:
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
            what = f"{arm.change[0]}={arm.change[1]} vs {arm.parent}: " + ("; ".join(changes) or "no change in work")
        if times:
            what += f"; median {sorted(times)[len(times) // 2] * 1e6:.1f} us per step"
        numbers = dict(metrics)
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
