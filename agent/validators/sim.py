"""`sim`: a simulator run per arm.

- `host-concurrency` hypotheses run the fine-grained host model (threads, the GIL, streams;
  `infralab.agent.gil_case.sweep` over the experiment's scenarios). Knob: dispatch_combine_gil
  (held | released). Metrics: degradation (mapping scenario -> 1 - prefill throughput with KV
  transfer / without), max_degradation, mean_degradation, kv_python_over_comm (mapping: fraction of
  dispatch/combine intervals covered by the transfer thread's Python), min_kv_python_over_comm,
  main_gil_wait_s (mapping). Findings: one per scenario, at the transfer thread and the
  dispatch/combine intervals.
- `cluster` hypotheses run the iteration-level cluster model on the setup's config with the arm's
  knobs (agent/cluster_knobs.py), arms x seeds in parallel over `setup.processes` local processes.
  Metrics: goodput (req/s under the config's SLOs), goodput_per_instance, request/output
  throughput, ttft_p50/p90/p99, tpot_p90, e2e_p90 (seconds), saturated, completed,
  max_instance_busy, max_link_busy. Findings: the busiest instance and link, and the request with
  the worst TTFT split into its phases.
The simulator is deterministic for a given seed: repetitions repeat the same numbers, seeds differ.
"""

from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import Arm, ClusterSetup, HostConcurrencySetup, Hypothesis, setup_of
from infralab.agent.validators.base import Measurement, sample_keys

NAME = "sim"


class Sim:
    name = NAME

    def unavailable(self, hyp: Hypothesis) -> str | None:
        return None

    def measure(self, hyp: Hypothesis, workdir: Path | None) -> Measurement:
        setup = setup_of(hyp)
        if isinstance(setup, HostConcurrencySetup):
            return measure_host(hyp, setup, workdir)
        if isinstance(setup, ClusterSetup):
            return measure_cluster(hyp, setup, workdir)
        raise ValueError(f"sim cannot measure a {hyp.kind!r} hypothesis")


# ---- host concurrency ------------------------------------------------------------------------


def host_experiment(hyp: Hypothesis, setup: HostConcurrencySetup):
    """The GIL experiment of the setup, cut to the setup's scenarios."""
    from infralab.agent.gil_case import load_experiment

    exp = load_experiment(hyp.resolve(setup.experiment))
    if setup.scenarios:
        exp = dataclasses.replace(exp, scenario=tuple(s for s in exp.scenario if s.name in setup.scenarios))
    probe = exp.probe
    if setup.probe_repeats is not None:
        probe = dataclasses.replace(probe, repeats=setup.probe_repeats)
    if setup.probe_granularities:
        probe = dataclasses.replace(probe, granularities=setup.probe_granularities)
    return dataclasses.replace(exp, probe=probe)


def host_metrics(rows: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    degradation = {r["scenario"]["name"]: r["modes"][mode]["degradation"] for r in rows}
    overlap = {r["scenario"]["name"]: r["modes"][mode]["attribution"]["overlaps"]["kv_python_over_comm"] for r in rows}
    return {
        "degradation": degradation,
        "max_degradation": max(degradation.values()),
        "mean_degradation": sum(degradation.values()) / len(degradation),
        "kv_python_over_comm": overlap,
        "min_kv_python_over_comm": min(overlap.values()),
        "main_gil_wait_s": {r["scenario"]["name"]: r["modes"][mode]["attribution"]["main_gil_wait_s"] for r in rows},
    }


def measure_host(hyp: Hypothesis, setup: HostConcurrencySetup, workdir: Path | None) -> Measurement:
    from infralab.agent import gil_case
    from infralab.agent.gil_case import degradation_figure, sweep, sweep_table

    # The figure's acceptance line: gil_case's own parser of "degradation <= X" (5 % otherwise).
    limit_of = getattr(gil_case, "limit_of", None) or getattr(gil_case, "_limit_of", lambda text: 0.05)

    exp = host_experiment(hyp, setup)
    timeline_dir = None
    if workdir is not None:
        timeline_dir = workdir / "timelines"
        timeline_dir.mkdir(parents=True, exist_ok=True)
    rows = sweep(exp, timeline_dir)
    files: list[str] = []
    table = sweep_table(rows, exp.experiment.acceptance)
    if workdir is not None:
        (workdir / "sim_table.md").write_text(table)
        degradation_figure(rows, limit_of(exp.experiment.acceptance), workdir / "figures" / "degradation.png")
        files += ["sim_table.md", "figures/degradation.png"]
        files += sorted(str(p.relative_to(workdir)) for p in timeline_dir.glob("*.json"))
    samples, findings = {}, []
    for arm in hyp.arms:
        mode = str(arm.config["dispatch_combine_gil"])
        metrics = host_metrics(rows, mode)
        samples[arm.name] = [dict(metrics) for _ in sample_keys(hyp)]
        for row in rows:
            findings.append(_host_finding(arm, mode, row, files))
    return Measurement(NAME, samples, tuple(findings), varies=False,
                       extras={"rows": rows, "table_md": table, "acceptance": exp.experiment.acceptance},
                       files=tuple(files), notes=(f"fine-grained host model, {len(rows)} scenarios",))


def _host_finding(arm: Arm, mode: str, row: dict[str, Any], files: list[str]) -> Finding:
    name = row["scenario"]["name"]
    result = row["modes"][mode]
    blame = result["attribution"]
    ov = blame["overlaps"]
    waits = ", ".join(f"{track} {seconds * 1e3:.2f} ms" for track, seconds in sorted(blame["gil_wait_s"].items()))
    what = (f"dispatch/combine {mode} the GIL: prefill throughput {-result['degradation']:+.1%} with KV transfer; "
            f"the transfer thread's Python overlaps {ov['kv_python_over_comm']:.0%} of dispatch/combine; "
            f"extra prefill time {blame['extra_s'] * 1e3:.2f} ms, main-thread GIL wait "
            f"{blame['main_gil_wait_s'] * 1e3:.2f} ms (GIL waits: {waits or 'none'})")
    timeline = [f for f in files if f.startswith(f"timelines/{name}-{mode}")]
    return Finding(
        validator=NAME, arm=arm.name,
        where=Where.of("thread", thread="thread/kv-transfer", intervals="dispatch/combine on thread/main",
                       scenario=name),
        what=what,
        evidence=Evidence(
            numbers={"degradation": result["degradation"], "throughput_without_tok_s": result["throughput_without_tok_s"],
                     "throughput_with_tok_s": result["throughput_with_tok_s"], **ov,
                     "main_gil_wait_s": blame["main_gil_wait_s"], "extra_s": blame["extra_s"],
                     "kv_slot_wait_s": blame["kv_slot_wait_s"], "link_critical_s": blame["link_critical_s"]},
            reference="the same scenario and GIL mode without the KV-transfer thread (identical prefill work)",
            files=tuple(timeline),
        ),
    )


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
