"""`microbench`: the work and (on a GPU) the time of one kernel variant at one shape.

Knobs per arm: kernel ("kda_decode"), variant (v1 | v2 | v3 | replay), shape ("B=64;H=32;K=128;V=128"),
ring_len (replay's ring length L, default 8).
Metrics, per decode step (a ReplaySSM ring cycle is divided by its L steps):
- static work counts, everywhere (`infralab.kernels.work_counts`): bytes, bytes_loaded, flops,
  divisions, transcendentals, repeated_elementwise, programs; and state_bytes_per_seq (the
  recurrent memory one sequence keeps: K*V*4 per head, or ReplaySSM's checkpoint + ring);
- time_s and achieved_gbps, only where a GPU is present (`triton.testing.do_bench`, one median per
  repetition). On a CPU there is no honest time for the Triton variants (the interpreter is a
  correctness tool, and v1/v2/v3 share one torch reference), so times are reported as not measured.
Work counts are deterministic; times vary, so time criteria need repetitions >= 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import Arm, Hypothesis
from infralab.agent.validators.base import Measurement, sample_keys
from infralab.calibration_table import parse_shape

NAME = "microbench"
DEFAULT_RING_LEN = 8
WORK_METRICS = ("bytes", "bytes_loaded", "flops", "divisions", "transcendentals", "repeated_elementwise", "programs")


def _dims(hyp: Hypothesis, arm: Arm) -> dict[str, int]:
    dims = dict(parse_shape(str(arm.config["shape"]), f"{hyp.source}: {arm.name}.shape"))
    missing = [d for d in ("B", "H", "K", "V") if d not in dims]
    if missing:
        from infralab.errors import InputError

        raise InputError(f"{hyp.source}: {arm.name}.shape", f"lacks {', '.join(missing)}", "B=..;H=..;K=..;V=..")
    return dims


def work_metrics(hyp: Hypothesis, arm: Arm) -> dict[str, Any]:
    """Per-step work counts and state memory of `arm` (no device needed)."""
    from infralab.kernels.replay_ssm import replay_ssm_memory
    from infralab.kernels.work_counts import work_counts

    d = _dims(hyp, arm)
    variant = str(arm.config["variant"])
    shape = {"batch": d["B"], "heads": d["H"], "head_k": d["K"], "head_v": d["V"]}
    if variant == "replay":
        shape["ring_len"] = int(arm.config.get("ring_len", DEFAULT_RING_LEN))
    counts = work_counts(str(arm.config["kernel"]), variant, **shape)
    steps = counts.steps
    metrics: dict[str, Any] = {
        "bytes": counts.bytes / steps,
        "bytes_loaded": counts.bytes_loaded / steps,
        "flops": counts.flops / steps,
        "divisions": counts.divisions / steps,
        "transcendentals": counts.transcendentals.total / steps,
        "repeated_elementwise": counts.repeated_elementwise / steps,
        "programs": counts.programs / steps,
    }
    if variant == "replay":
        metrics["state_bytes_per_seq"] = replay_ssm_memory(d["K"], d["V"], shape["ring_len"], d["H"]).total_bytes
    else:
        metrics["state_bytes_per_seq"] = d["H"] * d["K"] * d["V"] * 4
    return metrics


def gpu_times(hyp: Hypothesis, arm: Arm, repetitions: int) -> list[float]:
    """Median seconds per decode step of the Triton kernel, one per repetition (GPU only)."""
    from infralab.kernels.bench import gpu_timer
    from infralab.kernels.bench_cases import BenchCase, prepare

    d = _dims(hyp, arm)
    variant = str(arm.config["variant"])
    shape = (("B", d["B"]), ("H", d["H"]), ("K", d["K"]), ("V", d["V"]))
    reference = "kda_ref"
    if variant == "replay":
        shape += (("L", int(arm.config.get("ring_len", DEFAULT_RING_LEN))),)
        reference = "replay_ref"
    case = BenchCase("kda_decode", variant, "fp32", shape, "fp32", reference)
    timer = gpu_timer()
    fn = prepare(case, "cuda", 0)
    calls = getattr(fn, "calls_per_run", 1)
    return [timer(fn) / calls for _ in range(repetitions)]


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


class Microbench:
    name = NAME

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
