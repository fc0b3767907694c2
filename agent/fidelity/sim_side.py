"""Everything the fidelity study takes from the simulator, in one place: the workload schema and
builder (the `[workload]` table the simulator reads), the latency definitions (`infralab.metrics.run_metrics`),
the step-profile lookup and the mirror's run (`hf_fifo` / `hf_prefill_first` timed by
`[cost] step_table`). When these move to the shared layer, only this module's imports change.

Units: seconds, tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from infralab.errors import InputError
from infralab.metrics.run_metrics import distribution, request_metrics
from infralab.real.load_generator import ReplayRequest
from infralab.real.model_shape import ModelShape
from infralab.real.step_trace import StepRecord
from infralab.sim.calibration import load_calibration
from infralab.sim.cluster import simulate
from infralab.sim.config import config_from_doc
from infralab.sim.engine.hf_scheduler import HFScheduler, MirroredSequence, schedule_in_steps
from infralab.sim.specs import load_model
from infralab.sim.step_table_cost import PREPARE_KERNEL, STEP_KERNEL, run_step_table_cost
from infralab.workload.build import build_workload
from infralab.workload.request import Request
from infralab.workload.schema import SyntheticWorkload, TraceWorkload, WorkloadSpec

__all__ = ["MirroredSequence", "SyntheticWorkload", "TraceWorkload", "WorkloadSpec", "build_requests",
           "host_per_step_s", "latency_samples", "latency_stats", "mirror_policy", "schedule_in_steps",
           "simulate_mirror", "speed_spells", "steps_vs_profile"]

MIRROR_SCHEDULERS = {"fifo": "hf_fifo", "prefill_first": "hf_prefill_first"}
"""The simulator's name of each engine scheduler (docs/fidelity.md)."""


class FinishedRequest(Protocol):
    """What the latency definitions read: the simulator's `RequestRecord` and the real engine's
    `RequestTiming` both have these fields (seconds, tokens)."""

    arrival_s: float
    first_token_s: float
    finish_s: float
    output_tokens: int
    token_times_s: Iterable[float]


def build_requests(spec: Any, base_dir: Path, seed: int, context_length: int) -> list[ReplayRequest]:
    """The requests of a `[workload]` table (ids 0..n-1 in arrival order, first arrival at 0 s)."""
    table = build_workload(spec, base_dir, seed, context_length)
    return [ReplayRequest(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in table]


def latency_samples(requests: Sequence[FinishedRequest]) -> dict[str, np.ndarray]:
    """Per request TTFT, TPOT (requests of 2+ tokens) and E2E, and every inter-token gap pooled
    (ITL), as `infralab.metrics.run_metrics` defines them (seconds)."""
    per_request = [request_metrics(r) for r in requests]  # type: ignore[arg-type]
    gaps = [np.diff(np.fromiter(r.token_times_s, dtype=float)) for r in requests]
    return {"ttft": np.array([m.ttft_s for m in per_request]),
            "tpot": np.array([m.tpot_s for m in per_request if m.tpot_s is not None]),
            "itl": np.concatenate(gaps) if gaps else np.empty(0),
            "e2e": np.array([m.e2e_s for m in per_request])}


def latency_stats(requests: Sequence[FinishedRequest]) -> dict[str, dict[str, float]]:
    """metric -> {"mean", "p50", "p90"} (seconds; numpy's linear percentiles, as `infralab.metrics.run_metrics`)."""
    out = {}
    for metric, values in latency_samples(requests).items():
        dist = distribution(values, (50.0, 90.0))
        out[metric] = {"mean": dist.mean, "p50": dist.percentiles["p50"], "p90": dist.percentiles["p90"]}
    return out


def host_per_step_s(profile_csv: Path, steps: Sequence[StepRecord], dtype: str, device: str = "cpu") -> float:
    """Host seconds per step outside the forward and the profile's batch building (the scheduler,
    the update, Python), from observed steps: the mean of (step - forward - the table's prepare
    time at the step's shape), floored at 0. Steps whose shape was not observed are left out."""
    table = load_calibration(profile_csv)
    assert table is not None
    extra = [step.host_s - table.lookup(PREPARE_KERNEL, dtype, device, _shape(step), grid=True)
             for step in steps if not step.batch.missing]
    return max(0.0, sum(extra) / len(extra)) if extra else 0.0


def table_predictor(profile_csv: Path, dtype: str, device: str, host_per_step: float) -> Callable[[int, int, int], tuple[float, float]]:
    """What the mirror charges a step of (q query tokens, k keys, s sequences) from a step table:
    (the `engine_step` time, the `engine_prepare` time + `host_per_step`), seconds."""
    table = load_calibration(profile_csv)
    assert table is not None

    def predict(q: int, k: int, s: int) -> tuple[float, float]:
        shape = {"q_tokens": q, "kv_tokens": k, "seqs": s}
        return (table.lookup(STEP_KERNEL, dtype, device, shape, grid=True),
                table.lookup(PREPARE_KERNEL, dtype, device, shape, grid=True) + host_per_step)

    return predict


def steps_vs_profile(profile_csv: Path, steps: Sequence[StepRecord], dtype: str, host_per_step: float,
                     device: str = "cpu") -> dict[str, float | None]:
    """How a real run's own steps compare with what the mirror charges for steps of their shapes:
    {"forward": sum of real forwards / sum of the profile's `engine_step` times - 1, "step": sum of
    real step durations / sum of (profiled forward + prepare + `host_per_step`) - 1} (0.1 = the
    real steps took 10 % longer), and "step" split into the steps that computed prompt tokens
    ("prefill_step", what a TTFT waits on) and the decode-only ones ("decode_step"): an aggregate
    match can hide one kind charged too much and the other too little; None for a kind the run had
    no step of. Says whether an error comes from step speed or from scheduling."""
    charge = table_predictor(profile_csv, dtype, device, 0.0)
    observed = [step for step in steps if not step.batch.missing]
    nan = math.nan

    def ratio(kept: list[StepRecord]) -> float | None:
        return _against_charge(kept, charge, host_per_step)

    if not observed:
        return {"forward": nan, "step": nan, "prefill_step": None, "decode_step": None}
    forward = sum(_charged(charge, s)[0] for s in observed)
    return {"forward": sum(s.forward_s for s in observed) / forward - 1.0, "step": ratio(observed),
            "prefill_step": ratio([s for s in observed if s.batch.prefill_seqs]),
            "decode_step": ratio([s for s in observed if not s.batch.prefill_seqs])}


SLOW_PROBE_RATIO = 1.4  # a step ran in a slow spell when its speed probe took this many times the run's fast one


def speed_spells(profile_csv: Path, steps: Sequence[StepRecord], dtype: str, host_per_step: float,
                 device: str = "cpu") -> dict[str, float | int | None]:
    """Which of a run's steps ran in a slow spell of the machine, and how much slower they ran
    (`StepRecord.probe_s`, real/step_trace.py): a step is slow when its probe took more than
    SLOW_PROBE_RATIO x the run's 10th-percentile probe (its fast spells). {"probed": steps with a
    probe, "slow_share": the share of them that were slow, "prefill_slow_vs_fast" /
    "decode_slow_vs_fast": (real / charged time) over the slow steps with prompt tokens (decode-only)
    divided by the same over the fast ones (1.3 = a step in a slow spell took 30 % longer); None
    where a class has no step, "prefill_time_share": the share of the probed steps' time in steps
    with prompt tokens}. `runner._follow_the_spells` corrects the verdict's mirror by it."""
    probed = [(step, step.probe_s) for step in steps if step.probe_s is not None and not step.batch.missing]
    if not probed:
        return {"probed": 0, "slow_share": None, "prefill_slow_vs_fast": None, "decode_slow_vs_fast": None,
                "prefill_time_share": None}
    probes = sorted(probe for _, probe in probed)
    threshold = SLOW_PROBE_RATIO * probes[len(probes) // 10]
    slow = [step for step, probe in probed if probe > threshold]
    fast = [step for step, probe in probed if probe <= threshold]
    charge = table_predictor(profile_csv, dtype, device, 0.0)

    def slow_vs_fast(prompt: bool) -> float | None:
        pick = [s for s in slow if bool(s.batch.prefill_seqs) == prompt]
        base = [s for s in fast if bool(s.batch.prefill_seqs) == prompt]
        a, b = _against_charge(pick, charge, host_per_step), _against_charge(base, charge, host_per_step)
        return None if a is None or b is None else (1.0 + a) / (1.0 + b)

    total = sum(step.duration_s for step, _ in probed)
    prompt_time = sum(step.duration_s for step, _ in probed if step.batch.prefill_seqs)
    return {"probed": len(probed), "slow_share": len(slow) / len(probed),
            "prefill_slow_vs_fast": slow_vs_fast(True), "decode_slow_vs_fast": slow_vs_fast(False),
            "prefill_time_share": prompt_time / total if total > 0 else None}


def _charged(charge: Callable[[int, int, int], tuple[float, float]], step: StepRecord) -> tuple[float, float]:
    """(forward, prepare) seconds the table charges for `step`'s shape (its batch fully observed)."""
    batch = step.batch
    assert batch.q_tokens is not None and batch.kv_tokens is not None and batch.seqs is not None
    return charge(batch.q_tokens, batch.kv_tokens, batch.seqs)


def _against_charge(kept: Sequence[StepRecord], charge: Callable[[int, int, int], tuple[float, float]],
                    host_per_step: float) -> float | None:
    """Real step time over charged (forward + prepare + host per step) - 1 for `kept`; None if empty."""
    if not kept:
        return None
    cost = sum(forward + prepare + host_per_step for forward, prepare in (_charged(charge, s) for s in kept))
    return sum(s.duration_s for s in kept) / cost - 1.0


def _shape(step: StepRecord) -> dict[str, int]:
    batch = step.batch
    return {"q_tokens": batch.q_tokens, "kv_tokens": batch.kv_tokens, "seqs": batch.seqs}


def mirror_policy(resolved: dict[str, Any]) -> HFScheduler:
    """A fresh mirror scheduler of an engine whose settings resolved to `resolved` (`RealEngine.resolved()`)."""
    return HFScheduler(max_num_seqs=resolved["max_requests_per_batch"], max_batched_tokens=resolved["max_batch_tokens"],
                       block_size=resolved["page_size"], capacity_blocks=resolved["num_blocks"],
                       prefill_first=resolved["scheduler"] == "PrefillFirstScheduler",
                       safety_margin=resolved["safety_margin"])


def mirror_config_doc(model: str, resolved: dict[str, Any], scheduler: str, profile_csv: Path,
                      host_per_step: float) -> dict[str, Any]:
    """The simulator config of the mirror of an engine whose settings resolved to `resolved`
    (`RealEngine.resolved()`), timed from `profile_csv` plus `host_per_step` s per step."""
    return {
        "model": model,
        # The requests are passed in (the replayed ones): this table is never built.
        "workload": {"kind": "synthetic", "num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0},
                     "prompt": {"kind": "fixed", "value": 1}, "output": {"kind": "fixed", "value": 1}},
        "cost": {"dtype": resolved["dtype"], "step_table": str(profile_csv), "host": {"per_step_s": host_per_step}},
        "engine": {"scheduler": MIRROR_SCHEDULERS[scheduler], "max_batched_tokens": resolved["max_batch_tokens"],
                   "max_num_seqs": resolved["max_requests_per_batch"], "block_size": resolved["page_size"],
                   "num_blocks": resolved["num_blocks"], "safety_margin": resolved["safety_margin"],
                   "prefix_cache": False},
    }


def simulate_mirror(doc: dict[str, Any], requests: Sequence[ReplayRequest], rate_scale: float,
                    base_dir: Path) -> list[Any]:
    """The mirror's finished request records for `requests` arriving at `arrival_s / rate_scale`."""
    cfg = config_from_doc(doc, "fidelity mirror config", base_dir)
    table = load_calibration(Path(doc["cost"]["step_table"]))
    assert table is not None
    served = [Request(r.id, r.arrival_s / rate_scale, r.prompt_tokens, r.output_tokens) for r in requests]
    model = Path(doc["model"]).stem if doc["model"].endswith(".toml") else doc["model"]  # `model_for_sim`'s name
    # No timeline: only the requests' records are read (the run's tally is the same without one).
    record = simulate(cfg, served, run_step_table_cost(table, cfg, served, model), timeline=False)
    return sorted(record.requests, key=lambda r: r.id)


def model_for_sim(shape: ModelShape, folder: Path) -> str:
    """The simulator's name of `shape`: its catalog name, or a model TOML written into `folder` for
    a shape the catalog lacks (the test model). A step table does not use the model's figures."""
    try:
        load_model(shape.name)
        return shape.name
    except InputError:
        path = folder / f"{shape.name}.toml"
        fields = {"name": shape.name, "source": "infralab.real.model_shape (test shape)",
                  "num_layers": shape.num_layers, "hidden_size": shape.hidden_size, "num_heads": shape.num_heads,
                  "num_kv_heads": shape.num_kv_heads, "head_dim": shape.head_dim, "vocab_size": shape.vocab_size,
                  "context_length": shape.context_length, "intermediate_size": shape.intermediate_size,
                  "tie_word_embeddings": shape.tie_word_embeddings}
        path.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in fields.items()))
        return str(path)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)
