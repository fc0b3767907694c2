"""`sim`: a simulator run per arm.

- `host-concurrency` hypotheses run the fine-grained host model (threads, the GIL, streams;
  `infralab.agent.gil_case.sweep` over the experiment's scenarios). Knob: dispatch_combine_gil
  (held | released). Metrics: degradation (mapping scenario -> 1 - prefill throughput with KV
  transfer / without), max_degradation, mean_degradation, kv_python_over_comm (mapping: fraction of
  dispatch/combine intervals covered by the transfer thread's Python), min_kv_python_over_comm,
  main_gil_wait_s (mapping). Findings: one per scenario, at the transfer thread and the
  dispatch/combine intervals.
- `cluster` hypotheses run the iteration-level cluster model on the setup's config with the arm's
  knobs, arms x seeds over `setup.processes` local processes, through the agent's one simulation
  pool (agent/sim_pool.py, also `infralab search`'s). Metrics: CLUSTER_METRICS, flat metric names
  of the run summary (docs/sim.md): goodput (req/s under the config's SLOs), goodput_per_instance,
  request/output throughput, ttft_p50_s/p90_s/p99_s, tpot_p90_s, e2e_p90_s (seconds), saturated,
  completed, max_instance_busy, max_link_busy, instances. Findings: the busiest instance and link,
  and the request with the worst TTFT split into its phases.
The simulator is deterministic for a given seed: repetitions repeat the same numbers, seeds differ.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import Arm, ClusterSetup, HostConcurrencySetup, Hypothesis, setup_of
from infralab.agent.validators.base import Measurement, sample_keys
from infralab.sim.records import RunRecord
from infralab.sim.summary import Metric, ResourceStats, RunSummary, metric_names

NAME = "sim"

# What a `cluster` arm measures: flat metric names of the run summary (infralab.sim.summary).
CLUSTER_METRICS = metric_names(
    "goodput",
    "goodput_per_instance",
    "request_throughput",
    "output_throughput",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_p90_s",
    "e2e_p90_s",
    "saturated",
    "completed",
    "max_instance_busy",
    "max_link_busy",
    "instances",
)


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
    from infralab.agent.sim_pool import SimJob, arm_config, run_pool

    seeds = list(hyp.seeds)
    source = str(hyp.resolve(setup.config))
    keys, jobs = [], []
    for arm in hyp.arms:
        cfg, base_dir = arm_config(hyp, setup, arm, where=lambda knob, a=arm.name: f"{hyp.source}: {a}.{knob}")
        for seed in seeds:
            keys.append((arm.name, seed))
            jobs.append(SimJob(config=dataclasses.asdict(cfg), base_dir=str(base_dir), source=source, seed=seed))
    by_key = dict(zip(keys, run_pool(jobs, processes=setup.processes, inspect=cluster_details)))
    files: list[str] = []
    if workdir is not None:
        from infralab.results import dump_json

        for (arm_name, seed), result in sorted(by_key.items()):
            name = f"summaries/{arm_name}-seed{seed}.json"
            (workdir / "summaries").mkdir(exist_ok=True)
            facts = {"arm": arm_name, "seed": seed, "knobs": hyp.arm(arm_name).config}
            dump_json(result.summary.with_run(facts).to_json(), workdir / name)
            files.append(name)
    samples, findings, rows = {}, [], []
    for arm in hyp.arms:
        samples[arm.name] = [cluster_metrics(by_key[(arm.name, seed)].metrics) for seed, _ in sample_keys(hyp)]
        first = by_key[(arm.name, seeds[0])]
        metrics = cluster_metrics(first.metrics)
        own = tuple(f for f in files if f == f"summaries/{arm.name}-seed{seeds[0]}.json")
        findings += [dataclasses.replace(f, evidence=dataclasses.replace(f.evidence, files=own))
                     for f in _cluster_findings(arm, metrics, first.details)]
        rows.append({"arm": arm.name, "change": arm.describe(), "seed": seeds[0], **metrics})
    return Measurement(NAME, samples, tuple(findings), varies=False, extras={"table": rows}, files=tuple(files),
                       notes=(f"iteration-level cluster model, {len(jobs)} runs over {setup.processes} processes",))


def cluster_metrics(flat: Mapping[str, Metric]) -> dict[str, Metric]:
    """CLUSTER_METRICS of a run, from its flat metrics (`RunSummary.flat_metrics` with the
    config's instance count)."""
    return {name: flat[name] for name in CLUSTER_METRICS}


def _nan_none(x: float) -> float | None:
    return None if isinstance(x, float) and math.isnan(x) else x


def cluster_details(run: RunRecord, summary: RunSummary) -> dict[str, Any]:
    """The busiest instance and link, and the worst-TTFT request with its phases (seconds).
    Runs in the pool's worker (`run`: the RunRecord, `summary`: its RunSummary)."""
    from infralab.sim.metrics import is_finished, queue_phase_s

    def busiest(table: Mapping[str, ResourceStats]) -> dict[str, Any] | None:
        if not table:
            return None
        track, stats = max(table.items(), key=lambda kv: kv[1].busy_fraction)
        return {"track": track, "busy_fraction": stats.busy_fraction, "role": stats.role, "bytes": stats.bytes}

    done = [r for r in run.requests if is_finished(r)]
    worst = max(done, key=lambda r: r.first_token_s - r.arrival_s, default=None)
    request = None
    if worst is not None:
        queued = queue_phase_s(worst)
        request = {
            "id": worst.id, "prompt_tokens": worst.prompt_tokens, "cached_tokens": worst.cached_tokens,
            "instance": worst.prefill_instance, "ttft_s": worst.first_token_s - worst.arrival_s,
            "queueing_s": queued, "prefill_s": worst.first_token_s - worst.arrival_s - queued,
            "kv_transfer_s": _nan_none(worst.kv_transfer_end_s - worst.kv_transfer_start_s),
            "preemptions": worst.preemptions,
        }
    return {"busiest_instance": busiest(summary.instances), "busiest_link": busiest(summary.links),
            "worst_ttft_request": request}


def _cluster_findings(arm: Arm, m: dict[str, Any], d: dict[str, Any]) -> list[Finding]:
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
                 + f"; goodput {m['goodput']:.3g} req/s, p90 TTFT {m['ttft_p90_s']:.3g} s",
            evidence=Evidence(numbers={"busy_fraction": item["busy_fraction"], "goodput": m["goodput"],
                                       "ttft_p90_s": m["ttft_p90_s"], "saturated": m["saturated"]},
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
            evidence=Evidence(numbers=dict(r), reference=f"p90 TTFT of the run {m['ttft_p90_s']:.3g} s"),
        ))
    return out
