"""`sim`: a simulator run per arm.

- `host-concurrency` hypotheses run the fine-grained host model (threads, the GIL, streams) through
  the study's hook (`infralab.agent.validators.host`: knob, metrics and setup).
- `cluster` hypotheses run the iteration-level cluster model on the setup's config with the arm's
  knobs (agent/cluster_knobs.py: dotted paths into the config, and `pools`), arms x seeds in
  parallel over `setup.processes` local processes. Metrics: `CLUSTER_METRICS`: goodput (req/s
  under the config's SLOs), goodput_per_instance, request/output throughput, ttft_p50/p90/p99,
  tpot_p90, e2e_p90 (seconds), saturated, completed, max_instance_busy, max_link_busy. Findings:
  the busiest instance and link, and the request with the worst TTFT split into its phases.
The simulator is deterministic for a given seed: repetitions repeat the same numbers, seeds differ.
"""

from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field
from pydantic.dataclasses import dataclass

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import Arm, Hypothesis, setup_as
from infralab.agent.validators import host
from infralab.agent.validators.base import Declaration, Measurement, sample_keys
from infralab.config_io import STRICT
from infralab.errors import InputError

NAME = "sim"
CLUSTER = "cluster"
CLUSTER_METRICS: tuple[str, ...] = (
    "goodput", "goodput_per_instance", "request_throughput", "output_throughput", "ttft_p50", "ttft_p90",
    "ttft_p99", "tpot_p90", "e2e_p90", "saturated", "completed", "max_instance_busy", "max_link_busy",
)


@dataclass(frozen=True, config=STRICT)
class ClusterSetup:
    config: str  # a simulation config (`infralab sim run` format), relative to the hypothesis file
    window_s: tuple[float, float] | None = None  # trace time window [start, end) in seconds
    max_requests: Annotated[int, Field(gt=0)] | None = None
    processes: Annotated[int, Field(gt=0)] = 2  # arms x seeds run in parallel over this many local processes


def check_cluster_setup(hyp: Hypothesis, setup: ClusterSetup, where: Any) -> None:
    """The config loads, and every arm's knobs apply to it (each error at the arm's key and line)."""
    from infralab.agent.cluster_knobs import arm_config
    from infralab.sim.config import load_config

    try:
        load_config(hyp.resolve(setup.config))
    except InputError as exc:
        raise where.error("setup.config", f"{exc.where}: {exc.problem}", exc.expected) from None
    for i, arm in enumerate(hyp.arms):
        key = "baseline" if arm.change is None else f"variant[{i - 1}].change"
        arm_config(hyp, setup, arm, where=lambda knob, k=key: where.at(f"{k}.{knob}" if k == "baseline" else k))


DECLARATIONS = (
    host.declaration(host.SIM_METRICS),
    # Cluster knobs are dotted paths into the config (any of them): the check applies each arm's.
    Declaration(CLUSTER, CLUSTER_METRICS, None, ClusterSetup, check=check_cluster_setup),
)


class Sim:
    name = NAME

    def declarations(self) -> tuple[Declaration, ...]:
        return DECLARATIONS

    def unavailable(self, hyp: Hypothesis) -> str | None:
        return None

    def measure(self, hyp: Hypothesis, workdir: Path | None) -> Measurement:
        if hyp.kind == host.KIND:
            return host.measure(hyp, setup_as(hyp, host.HostConcurrencySetup), workdir, NAME)
        return measure_cluster(hyp, setup_as(hyp, ClusterSetup), workdir)


# ---- cluster ---------------------------------------------------------------------------------


def measure_cluster(hyp: Hypothesis, setup: ClusterSetup, workdir: Path | None) -> Measurement:
    seeds = list(hyp.seeds)
    jobs = [(hyp.source, dict(hyp.setup), arm.name, seed) for arm in hyp.arms for seed in seeds]
    if setup.processes > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=min(setup.processes, len(jobs))) as pool:
            results = list(pool.map(_cluster_job, jobs))
    else:
        results = [_cluster_job(job) for job in jobs]
    by_key = {(job[2], job[3]): result for job, result in zip(jobs, results)}
    files: list[str] = []
    if workdir is not None:
        from infralab.results import dump_json

        for (arm_name, seed), result in sorted(by_key.items()):
            name = f"summaries/{arm_name}-seed{seed}.json"
            (workdir / "summaries").mkdir(exist_ok=True)
            dump_json(result["summary"], workdir / name)
            files.append(name)
    samples, findings, rows = {}, [], []
    for arm in hyp.arms:
        samples[arm.name] = [dict(by_key[(arm.name, seed)]["metrics"]) for seed, _ in sample_keys(hyp)]
        first = by_key[(arm.name, seeds[0])]
        own = tuple(f for f in files if f == f"summaries/{arm.name}-seed{seeds[0]}.json")
        findings += [dataclasses.replace(f, evidence=dataclasses.replace(f.evidence, files=own))
                     for f in _cluster_findings(arm, first)]
        rows.append({"arm": arm.name, "change": arm.describe(), "seed": seeds[0], **first["metrics"]})
    return Measurement(NAME, samples, tuple(findings), varies=False, extras={"table": rows}, files=tuple(files),
                       notes=(f"iteration-level cluster model, {len(jobs)} runs over {setup.processes} processes",))


def _cluster_job(job: tuple[str, dict[str, Any], str, int]) -> dict[str, Any]:
    """One (arm, seed) run in a worker process; returns metrics and local details (JSON-able)."""
    from infralab.agent.cluster_knobs import arm_config
    from infralab.agent.hypothesis import load_hypothesis
    from infralab.config_io import validate
    from infralab.sim.metrics import summarize
    from infralab.sim.run import simulate_config, with_seed

    source, setup_table, arm_name, seed = job
    hyp = dataclasses.replace(load_hypothesis(source), setup=setup_table)
    setup = validate(ClusterSetup, setup_table, source, prefix="setup")
    arm = hyp.arm(arm_name)
    cfg, base_dir = arm_config(hyp, setup, arm, where=lambda knob: f"{source}: {arm_name}.{knob}")
    cfg = with_seed(cfg, seed)
    run = simulate_config(cfg, base_dir, source=str(hyp.resolve(setup.config)))
    summary = summarize(run, cfg.slo)
    summary["run"] = {"arm": arm_name, "seed": seed, "knobs": arm.config}
    return {"metrics": cluster_metrics(summary, cfg), "details": cluster_details(run, summary), "summary": summary}


def cluster_metrics(summary: dict[str, Any], cfg) -> dict[str, Any]:
    c = cfg.cluster
    instances = c.instances if c.layout == "colocated" else c.prefill_instances + c.decode_instances
    inst = summary["instances"].values()
    links = summary["links"].values()
    return {
        "goodput": summary["goodput"],
        "goodput_per_instance": summary["goodput"] / instances,
        "request_throughput": summary["request_throughput"],
        "output_throughput": summary["output_throughput"],
        "ttft_p50": summary["ttft_s"]["p50"],
        "ttft_p90": summary["ttft_s"]["p90"],
        "ttft_p99": summary["ttft_s"]["p99"],
        "tpot_p90": summary["tpot_s"]["p90"],
        "e2e_p90": summary["e2e_s"]["p90"],
        "saturated": bool(summary["saturation"]["saturated"]),
        "completed": summary["requests"]["completed"],
        "max_instance_busy": max((s["busy_fraction"] for s in inst), default=0.0),
        "max_link_busy": max((s["busy_fraction"] for s in links), default=0.0),
        "instances": instances,
    }


def _nan_none(x: float) -> float | None:
    return None if isinstance(x, float) and math.isnan(x) else x


def cluster_details(run, summary: dict[str, Any]) -> dict[str, Any]:
    """The busiest instance and link, and the worst-TTFT request with its phases (seconds)."""
    from infralab.sim.metrics import is_finished

    def busiest(table: dict[str, Any]) -> dict[str, Any] | None:
        if not table:
            return None
        track, stats = max(table.items(), key=lambda kv: kv[1]["busy_fraction"])
        return {"track": track, "busy_fraction": stats["busy_fraction"], "role": stats.get("role"),
                "bytes": stats.get("bytes")}

    done = [r for r in run.requests if is_finished(r)]
    worst = max(done, key=lambda r: r.first_token_s - r.arrival_s, default=None)
    request = None
    if worst is not None:
        queued = (worst.first_scheduled_s - worst.arrival_s) if not math.isnan(worst.first_scheduled_s) else 0.0
        request = {
            "id": worst.id, "prompt_tokens": worst.prompt_tokens, "cached_tokens": worst.cached_tokens,
            "instance": worst.prefill_instance, "ttft_s": worst.first_token_s - worst.arrival_s,
            "queueing_s": queued, "prefill_s": worst.first_token_s - worst.arrival_s - queued,
            "kv_transfer_s": _nan_none(worst.kv_transfer_end_s - worst.kv_transfer_start_s),
            "preemptions": worst.preemptions,
        }
    return {"busiest_instance": busiest(summary["instances"]), "busiest_link": busiest(summary["links"]),
            "worst_ttft_request": request}


def _cluster_findings(arm: Arm, result: dict[str, Any]) -> list[Finding]:
    m, d = result["metrics"], result["details"]
    out = []
    for key in ("busiest_instance", "busiest_link"):
        item = d[key]
        if item is None:
            continue
        out.append(Finding(
            validator=NAME, arm=arm.name,
            where=Where.of("resource", track=item["track"], role=item.get("role")),
            what=f"{item['track']} busy {item['busy_fraction']:.0%} of the run"
                 + (f", {item['bytes'] / 1e9:.1f} GB moved" if item.get("bytes") else "")
                 + f"; goodput {m['goodput']:.3g} req/s, p90 TTFT {m['ttft_p90']:.3g} s",
            evidence=Evidence(numbers={"busy_fraction": item["busy_fraction"], "goodput": m["goodput"],
                                       "ttft_p90": m["ttft_p90"], "saturated": m["saturated"]},
                              reference="the other instances/links of the same run"),
        ))
    r = d["worst_ttft_request"]
    if r is not None:
        phase = "queueing" if r["queueing_s"] >= r["prefill_s"] else "prefill"
        out.append(Finding(
            validator=NAME, arm=arm.name,
            where=Where.of("request", request_id=r["id"], phase=phase, instance=r["instance"]),
            what=(f"worst TTFT {r['ttft_s']:.3g} s: {r['queueing_s']:.3g} s queueing + {r['prefill_s']:.3g} s "
                  f"prefill of {r['prompt_tokens']} tokens ({r['cached_tokens']} from the prefix cache)"),
            evidence=Evidence(numbers=dict(r), reference=f"p90 TTFT of the run {m['ttft_p90']:.3g} s"),
        ))
    return out
