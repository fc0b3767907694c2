"""The simulator's figure for one public point, computed as the source measured it.

- collective: one collective of `message_bytes` per rank over `world` ranks on the accelerator's
  link, from the cost model's collective terms (`infralab.sim.cost.collectives`): NCCL's curves per
  world size, or the engine's own one-shot/two-shot all-reduce for `custom_all_reduce`.
- decode and prefill: a simulated run of `batch` requests of `input_tokens` + `output_tokens`
  arriving together (what `vllm bench latency` / `sglang.bench_one_batch` run), read as the source
  reads it: the mean time per output token after the first (tpot, itl, decode step), the batch's
  end-to-end time, the first-token time.
- serving: a simulated run of the benchmark's requests (fixed lengths, Poisson arrivals at the
  stated rate, or all at once when none is stated, a cap on requests in flight when one is
  stated), read as `vllm bench serve` prints it.

Every run is the simulator's ordinary run (`infralab.sim.api.run`): the same engine, scheduler and
cost model a user's config gets, with the engine limits the source states, else the ones its engine
derives (`trtllm_bench_limits` for a TensorRT-LLM throughput run), else the simulator's vLLM defaults.

Units: seconds, bytes, tokens per second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infralab.agent.public_points.engines import apply_profile, trtllm_bench_limits
from infralab.agent.public_points.spec import LINK_OF, Point
from infralab.sim import api
from infralab.sim.config import config_from_doc
from infralab.sim.cost import StepWork
from infralab.sim.cost.collectives import collective_s
from infralab.sim.run import prepare_run
from infralab.sim.specs import load_accelerator, load_link, load_model

ALL_AT_ONCE_RATE = 1e9  # requests/s: a benchmark that sends every request at t = 0 (`--request-rate inf`)
# Metric of a serving point -> the simulator's flat metric (RunSummary.flat_metrics).
SERVING_METRICS = {
    "output_tokens_per_s": "output_throughput",
    "total_tokens_per_s": "total_token_throughput",
    "requests_per_s": "request_throughput",
    "mean_ttft_s": "ttft_mean_s",
    "median_ttft_s": "ttft_p50_s",
    "mean_tpot_s": "tpot_mean_s",
    "median_tpot_s": "tpot_p50_s",
    "mean_itl_s": "itl_mean_s",
    "median_itl_s": "itl_p50_s",
    "mean_e2e_s": "e2e_mean_s",
}


@dataclass(frozen=True)
class Simulated:
    """The simulator's figure for a point, and what produced it (for the report)."""

    value: float
    detail: str


def simulate(point: Point, overrides: Sequence[str] = ()) -> Simulated:
    """The simulator's counterpart of `point.measured` (same unit). `overrides`: `--set`-style
    assignments applied to the point's config (a fit tries constants this way)."""
    if point.family == "collective":
        return _collective(point)
    result = api.run(config_of(point), overrides=overrides)
    if point.family == "serving":
        value = result.metrics[SERVING_METRICS[point.metric]]
        assert isinstance(value, float)
        return Simulated(value, f"{point.num_prompts} requests, busy {result.metrics['max_instance_busy']:.2f}")
    return _batch(point, result.requests)


def _collective(point: Point) -> Simulated:
    accel = load_accelerator(point.accelerator)
    link = load_link(point.link or LINK_OF.get(accel.name, "nvlink4"))
    assert point.collective is not None
    seconds = collective_s(link, point.collective, point.world, point.message_bytes)
    return Simulated(seconds, f"{point.collective} on {link.name}, {point.world} ranks")


def _batch(point: Point, requests: dict[str, np.ndarray]) -> Simulated:
    """A fixed batch read as a latency benchmark reads it."""
    ttft, tpot, e2e = requests["ttft_s"], requests["tpot_s"], requests["e2e_s"]
    metric = point.metric
    if metric == "decode_step_s":
        # One decode step, as a step-level measurement means it: the median request's TPOT. The first
        # arrival of a batch starts a step alone and then decodes through the others' prefill, which
        # the mean would charge to every step (seen on the H200 model-step points; rule set after).
        return Simulated(float(np.median(tpot)), f"median TPOT of {point.batch}")
    if metric in ("tpot_s", "itl_s"):
        return Simulated(float(np.mean(tpot)), f"mean TPOT of {point.batch}")
    if metric == "e2e_latency_s":
        return Simulated(float(np.max(e2e)), f"batch of {point.batch}: last request's E2E")
    if metric == "output_tokens_per_s":
        return Simulated(point.batch * point.output_tokens / float(np.max(e2e)), "batch tokens / E2E")
    if metric in ("ttft_s", "prefill_s"):
        return Simulated(float(np.mean(ttft)), f"mean TTFT of {point.batch}")
    assert metric == "prefill_tokens_per_s"
    return Simulated(point.batch * point.input_tokens / float(np.max(ttft)), "batch prompt tokens / last TTFT")


def config_of(point: Point) -> dict[str, Any]:
    """The simulation config (a `sim run` document) that reproduces a decode, prefill or serving point."""
    accel = load_accelerator(point.accelerator)
    hardware: dict[str, Any] = {"accelerator": point.accelerator, "tp": point.tp,
                                "tp_link": point.link or LINK_OF.get(accel.name, "nvlink4")}
    if point.pp > 1:
        hardware["pp"] = point.pp
    if point.attention_dp:
        hardware.update(attention_dp=True, moe_ep=point.tp)
    cost: dict[str, Any] = {"dtype": point.dtype,
                            "kv_dtype": point.kv_dtype or ("bf16" if point.dtype in ("int8", "fp8e4m3") else point.dtype)}
    if point.allreduce is not None:
        cost["allreduce"] = point.allreduce
    if point.family == "serving":
        requests, rate = point.num_prompts, point.request_rate
        output = point.output_tokens
    else:
        requests, rate = point.batch, None
        output = max(point.output_tokens, 1)
    engine: dict[str, Any] = {"prefix_cache": False}  # benchmark prompts are random tokens
    seqs = point.max_num_seqs if point.max_num_seqs is not None else (point.batch if point.family != "serving" else None)
    tokens = point.max_batched_tokens
    if point.family == "serving" and point.engine_profile == "trtllm" and seqs is None and tokens is None:
        seqs, tokens = trtllm_bench_limits(load_model(point.model), accel, cost["dtype"], cost["kv_dtype"], point.tp,
                                           point.pp, point.input_tokens, point.output_tokens)
    if seqs is not None:
        engine["max_num_seqs"] = max(seqs, point.batch)
    if tokens is not None:
        engine["max_batched_tokens"] = tokens
    workload: dict[str, Any] = {
        "kind": "synthetic",
        "num_requests": requests,
        "arrival": {"kind": "poisson", "rate": rate if rate is not None else ALL_AT_ONCE_RATE},
        "prompt": {"kind": "fixed", "value": point.input_tokens},
        "output": {"kind": "fixed", "value": output},
    }
    if point.max_concurrency is not None:
        workload["max_concurrency"] = point.max_concurrency
    doc = {"model": point.model, "run": {"name": point.id, "seed": 0}, "hardware": hardware, "cost": cost,
           "engine": engine, "workload": workload}
    return apply_profile(point.engine_profile, doc)


def step_terms(point: Point) -> dict[str, float]:
    """Seconds per operator (`StepCost.by_op`) of the step that dominates a decode or prefill point:
    a decode step of the whole batch at its mean context, or the batch's prefill. Empty for other
    families. What the report names as the term behind an error."""
    if point.family not in ("decode", "prefill"):
        return {}
    cfg = config_from_doc(config_of(point), point.id, Path.cwd())
    cost = prepare_run(cfg, Path.cwd(), point.id).cost
    if point.family == "decode":
        context = point.input_tokens + point.output_tokens // 2
        work = StepWork.decode(point.batch, point.batch * context)
    else:
        work = sum((StepWork.prefill(point.input_tokens) for _ in range(point.batch - 1)),
                   StepWork.prefill(point.input_tokens))
    by_op = getattr(cost.step(work), "by_op", {})
    return {name: float(seconds) for name, seconds in by_op.items()}
