"""`sim`: a simulator run per arm.

- `hook` hypotheses run their study's own simulation through the hook the setup names, which
  declares their knobs, metrics and setup (`infralab.agent.validators.hook`).
- `cluster` hypotheses run the iteration-level cluster model on the setup's config with the arm's
  knobs, arms x seeds over `setup.processes` workers of the pool's backend (local processes, or a
  Ray cluster with `infralab test --backend ray`), through the agent's one simulation pool
  (agent/sim_pool.py, also `infralab search`'s). Metrics: CLUSTER_METRICS, flat metric names
  of the run summary (docs/sim.md): goodput (req/s under the config's SLOs), goodput_per_instance,
  request/output throughput, ttft_p50_s/p90_s/p99_s, tpot_p90_s, e2e_p90_s (seconds), saturated,
  completed, max_instance_busy, max_link_busy, instances. Findings: the busiest instance and link,
  and the request with the worst TTFT split into its phases.
  With a workdir (`infralab test --out DIR`), each arm and seed also leaves a run folder,
  DIR/sim/runs/<arm>-seed<seed>/ (summary.json, requests.csv, config.toml: the setup's config as
  written, and resolved_config.toml: the arm's config with every default; the arm's knobs are in
  summary.json's "run"), that `infralab explain` reads; no
  trace.json (the pool keeps no timeline), so explain's interval analysis has nothing to show there.
The simulator is deterministic for a given seed: repetitions repeat the same numbers, seeds differ.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from pydantic import StrictInt
from pydantic.dataclasses import dataclass

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import Arm, Hypothesis, Locator, setup_as
from infralab.agent.validators import hook
from infralab.agent.validators.base import Declaration, Measurement, sample_keys
from infralab.config_io import STRICT
from infralab.errors import InputError
from infralab.field_types import MAX_REQUESTS, MAX_SPAN_S, RealNumber, int_bounds, number_bounds
from infralab.metrics.records import RunRecord
from infralab.metrics.summary import Metric, ResourceStats, RunSummary, metric_names

if TYPE_CHECKING:
    from infralab.agent.sim_pool import Execution

NAME = "sim"
CLUSTER = "cluster"
# What a `cluster` arm measures: flat metric names of the run summary (infralab.metrics.summary).
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
# Mean latencies, measured only for hypotheses that name them (so that the arms' tables of the
# others stay as they were): the real engine's confirmation of a mean is judged on these.
MEAN_METRICS = metric_names("ttft_mean_s", "tpot_mean_s")


WindowSeconds: TypeAlias = Annotated[RealNumber, number_bounds(ge=0.0, le=MAX_SPAN_S)]


@dataclass(frozen=True, config=STRICT)
class ClusterSetup:
    config: str  # a simulation config (`infralab sim run` format), relative to the hypothesis file
    window_s: tuple[WindowSeconds, WindowSeconds] | None = None  # trace time window [start, end) in seconds
    max_requests: Annotated[StrictInt, int_bounds(gt=0, le=MAX_REQUESTS)] | None = None
    processes: Annotated[StrictInt, int_bounds(gt=0, le=256)] = 2  # arms x seeds run in parallel over this many workers (processes, Ray CPUs)


def check_cluster_setup(hyp: Hypothesis, setup: ClusterSetup, where: Locator) -> None:
    """The config loads, and every arm's knobs apply to it (each error at the arm's key and line)."""
    from infralab.agent.sim_pool import arm_config
    from infralab.sim.config import load_config

    if setup.window_s is not None and not setup.window_s[0] < setup.window_s[1]:
        start, end = setup.window_s
        raise where.error("setup.window_s", f"[{start}, {end}] ends before it starts", "[start, end] with start < end, seconds")
    try:
        load_config(hyp.resolve(setup.config))
    except InputError as exc:
        raise where.error("setup.config", f"{exc.where}: {exc.problem}", exc.expected) from None
    for i, arm in enumerate(hyp.arms):
        key = "baseline" if arm.change is None else f"variant[{i - 1}].change"
        def knob_where(knob: str, k: str = key) -> str:
            return where.at(f"{k}.{knob}" if k == "baseline" else k)

        arm_config(hyp, setup, arm, where=knob_where)


DECLARATIONS = (
    hook.declaration(NAME),
    # Cluster knobs are dotted paths into the config (any of them): the check applies each arm's.
    Declaration(CLUSTER, CLUSTER_METRICS + MEAN_METRICS, None, ClusterSetup, check=check_cluster_setup),
)


class Sim:
    name = NAME
    rung = 30

    def declarations(self) -> tuple[Declaration, ...]:
        return DECLARATIONS

    def unavailable(self, hyp: Hypothesis) -> str | None:
        return None

    def measure(self, hyp: Hypothesis, workdir: Path | None, execution: Execution) -> Measurement:
        if hyp.kind == hook.KIND:
            return hook.measure(hyp, workdir, NAME)
        return measure_cluster(hyp, setup_as(hyp, ClusterSetup), workdir, execution)


# ---- cluster ---------------------------------------------------------------------------------


def measure_cluster(hyp: Hypothesis, setup: ClusterSetup, workdir: Path | None, execution: Execution) -> Measurement:
    """Every arm x seed of a `cluster` hypothesis, `setup.processes` at a time on `execution`'s backend."""
    import sys

    from infralab.agent.sim_pool import SimJob, arm_config, layout_switch_note, run_pool
    from infralab.sim.config import resolved_config_text
    from infralab.sim.run import with_seed

    seeds = list(hyp.seeds)
    source = str(hyp.resolve(setup.config))
    keys: list[tuple[str, int]] = []
    jobs: list[SimJob] = []
    resolved: dict[tuple[str, int], str] = {}
    notes: dict[str | None, None] = {}  # layout notes, once each, in order
    for arm in hyp.arms:
        def knob_where(knob: str, a: str = arm.name) -> str:
            return f"{hyp.source}: {a}.{knob}"

        cfg, base_dir = arm_config(hyp, setup, arm, where=knob_where)
        notes.setdefault(layout_switch_note(Path(source), arm.knobs, cfg))
        for seed in seeds:
            keys.append((arm.name, seed))
            jobs.append(SimJob(config=dataclasses.asdict(cfg), base_dir=str(base_dir), source=source, seed=seed))
            resolved[(arm.name, seed)] = resolved_config_text(with_seed(cfg, seed), base_dir)
    for note in notes:
        if note is not None:
            print(note, file=sys.stderr)
    inspect = cluster_details if workdir is None else cluster_details_and_requests
    by_key = dict(zip(keys, run_pool(jobs, workers=setup.processes, inspect=inspect, execution=execution)))
    files: list[str] = []
    if workdir is not None:
        from infralab.results import dump_json

        for (arm_name, seed), result in sorted(by_key.items()):
            name = f"summaries/{arm_name}-seed{seed}.json"
            (workdir / "summaries").mkdir(exist_ok=True)
            facts = {"arm": arm_name, "seed": seed, "knobs": hyp.arm(arm_name).config}
            dump_json(result.summary.with_run(facts).to_json(), workdir / name)
            files.append(name)
        for (arm_name, seed), result in sorted(by_key.items()):
            facts = {"arm": arm_name, "seed": seed, "knobs": hyp.arm(arm_name).config}
            files.append(write_run_folder(workdir, arm_name, seed, result.summary.with_run(facts),
                                          result.details["requests_csv"], Path(source), resolved[(arm_name, seed)]))
    samples, findings, rows = {}, [], []
    for arm in hyp.arms:
        samples[arm.name] = [cluster_metrics(by_key[(arm.name, seed)].metrics, hyp.metrics)
                             for seed, _ in sample_keys(hyp)]
        first = by_key[(arm.name, seeds[0])]
        metrics = cluster_metrics(first.metrics, hyp.metrics)
        own = tuple(f for f in files if f == f"summaries/{arm.name}-seed{seeds[0]}.json")
        findings += [dataclasses.replace(f, evidence=dataclasses.replace(f.evidence, files=own))
                     for f in _cluster_findings(arm, metrics, first.details)]
        rows.append({"arm": arm.name, "change": arm.describe(), "seed": seeds[0], **metrics})
    note = f"iteration-level cluster model, {len(jobs)} runs over {execution.describe(setup.processes)}"
    return Measurement(NAME, samples, tuple(findings), varies=False, extras={"table": rows}, files=tuple(files),
                       notes=(note,))


def cluster_metrics(flat: Mapping[str, Metric], wanted: tuple[str, ...] = ()) -> dict[str, Metric]:
    """CLUSTER_METRICS of a run, from its flat metrics (`RunSummary.flat_metrics` with the
    config's instance count), and those of MEAN_METRICS that `wanted` (a hypothesis's metrics) names."""
    return {name: flat[name] for name in CLUSTER_METRICS + tuple(m for m in MEAN_METRICS if m in wanted)}


def _nan_none(x: float) -> float | None:
    return None if isinstance(x, float) and math.isnan(x) else x


def cluster_details(run: RunRecord, summary: RunSummary) -> dict[str, Any]:
    """The busiest instance and link, and the worst-TTFT request with its phases (seconds).
    Runs in the pool's worker (`run`: the RunRecord, `summary`: its RunSummary)."""
    from infralab.metrics.run_metrics import is_finished, queue_phase_s

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


def cluster_details_and_requests(run: RunRecord, summary: RunSummary) -> dict[str, Any]:
    """`cluster_details` plus the run's requests.csv as text (as `infralab sim run` writes it), so
    that the parent writes the run folder whatever machine the job ran on."""
    import tempfile

    from infralab.metrics.requests_csv import write_requests_csv

    with tempfile.TemporaryDirectory(prefix="infralab-requests-") as folder:
        path = Path(folder) / "requests.csv"
        write_requests_csv(run, path)
        text = path.read_text(encoding="utf-8")
    return {**cluster_details(run, summary), "requests_csv": text}


RUN_FOLDERS = "runs"


def write_run_folder(workdir: Path, arm: str, seed: int, summary: RunSummary, requests_csv: str,
                     config_path: Path, resolved_config: str) -> str:
    """WORKDIR/runs/<arm>-seed<seed>/ with summary.json, requests.csv, config.toml (a byte copy
    of the setup's config) and resolved_config.toml (the arm's config at that seed, every default
    filled in, as `infralab sim run` writes it); returns its path relative to `workdir`."""
    from infralab.results import dump_json
    from infralab.sim.run import RESOLVED_CONFIG

    name = f"{RUN_FOLDERS}/{arm}-seed{seed}"
    folder = workdir / name
    folder.mkdir(parents=True)
    dump_json(summary.to_json(), folder / "summary.json")
    (folder / "requests.csv").write_text(requests_csv, encoding="utf-8")
    (folder / "config.toml").write_bytes(config_path.read_bytes())
    (folder / RESOLVED_CONFIG).write_text(resolved_config, encoding="utf-8")
    return name


def _cluster_findings(arm: Arm, m: Mapping[str, Metric], d: dict[str, Any]) -> list[Finding]:
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


VALIDATOR = Sim
