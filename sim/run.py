"""One simulation run from a config file: build specs, workload and cost model, simulate, and write
the results folder (`infralab sim run CONFIG.toml --out DIR`).

The results folder holds:
- summary.json: the metrics summary (`infralab.metrics.run_metrics.summarize`, `RunSummary.to_json`) plus
  what was run;
- requests.csv: one row per request, every `RequestRecord` field but the token times, plus the
  derived ttft_s, tpot_s, e2e_s (seconds; empty when not defined);
- trace.json: the Perfetto timeline (`infralab.metrics.timeline`); summary.json's "timeline" says
  what it holds (truncated or whole);
- config.toml: a byte copy of the input config, as written;
- resolved_config.toml: the config that ran, every default filled in and `--set` applied
  (`infralab.sim.config.resolved_config_text`).
It is written atomically (`infralab.results.atomic_output_dir`); the same config and seed give
byte-identical files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar

from infralab.errors import InputError
from infralab.metrics.records import RunRecord
from infralab.metrics.requests_csv import write_requests_csv
from infralab.metrics.run_metrics import print_summary, summarize
from infralab.metrics.summary import RunSummary
from infralab.metrics.timeline import DEFAULT_MAX_EVENTS, SUMMARY_FACTS, save_trace, truncation_warning
from infralab.results import atomic_output_dir, dump_json, pause_point
from infralab.sim.calibration import load_calibration
from infralab.sim.cluster import simulate
from infralab.sim.config import (
    SimConfig,
    config_doc,
    config_from_doc,
    layout_defaults_note,
    looks_like_path,
    resolve_path,
    resolved_config_text,
)
from infralab.sim.cost import CostModel
from infralab.sim.encode_metrics import encode_summary
from infralab.sim.pool_hardware import cluster_accelerators, pool_facts, prepare_pools, reports_pools
from infralab.sim.protocols import ServedRequest, StepCostModel
from infralab.sim.specs import AcceleratorSpec, LinkSpec, ModelSpec, load_accelerator, load_link, load_model
from infralab.sim.step_table_cost import run_step_table_cost
from infralab.workload import build_workload

RESOLVED_CONFIG = "resolved_config.toml"
# `sim run` keeps a timeline (trace.json) by default only for runs of at most this many requests;
# --timeline and --no-timeline decide otherwise. Above it the timeline shows only the run's start
# (the 150,000-event default holds about the first 8,000 requests of the Vidur-comparable workload,
# 19 events per request), and keeping it cost 33 % (200k requests) to 75 % (20k) more time
# (benchmarks/sim_speed.py; docs/sim.md, "Timeline"). Every shipped example is under it.
DEFAULT_TIMELINE_MAX_REQUESTS = 20_000


def timeline_by_default(requests: int) -> bool:
    """Whether a run of `requests` requests keeps a timeline when not told (the rule above)."""
    return requests <= DEFAULT_TIMELINE_MAX_REQUESTS


_Spec = TypeVar("_Spec")


def _load_spec(loader: Callable[[str, Path], _Spec], value: str, base_dir: Path, source: str, field: str) -> _Spec:
    """Load a catalog entry or spec file; a bad catalog name is reported against the config field."""
    try:
        return loader(value, base_dir)
    except InputError as exc:
        if looks_like_path(value):
            raise  # the error already names the spec file and its field
        raise InputError(f"{source}: {field}", f"{exc.problem} ({exc.where})", exc.expected) from None


def with_seed(cfg: SimConfig, seed: int | None) -> SimConfig:
    """`cfg` with `run.seed` replaced when `seed` is given."""
    if seed is None:
        return cfg
    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, seed=seed))


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedRun:
    """A run's inputs, read and built: everything `simulate` needs."""

    cfg: SimConfig
    requests: Sequence[Any]  # a RequestTable from build_workload
    cost: StepCostModel
    transfer_link: Any | None
    pools: Any | None = None  # infralab.sim.pool_hardware.ClusterPools, or None


def simulate_config(
    cfg: SimConfig,
    base_dir: Path,
    source: str = "<config>",
    *,
    timeline: bool | None = True,
    max_timeline_events: int | None = None,
    on_read: Callable[[], None] | None = None,
) -> RunRecord:
    """Build the run's specs, workload and cost model from `cfg` and simulate it.

    `base_dir` is where relative paths in the config resolve; `source` names the config in errors.
    `timeline=False`: the record keeps no intervals or counter samples; None: as
    `timeline_by_default` says for the workload's request count (`RunRecord.keeps_timeline` tells
    which); `max_timeline_events`: only those a timeline of that many events shows
    (`RunRecord.with_timeline`). The summary is the same either way. `on_read` is called once the
    inputs are read, before simulating.
    """
    prepared = prepare_run(cfg, base_dir, source)
    if on_read is not None:
        on_read()
    if timeline is None:
        timeline = timeline_by_default(len(prepared.requests))
    with _config_fields_of(source):
        return simulate(
            prepared.cfg,
            prepared.requests,
            prepared.cost,
            prepared.transfer_link,
            timeline=timeline,
            max_timeline_events=max_timeline_events if timeline else None,
            pools=prepared.pools,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class RunSpecs:
    """The specs a run reads: its model, accelerator (None: timed by a step table) and links."""

    model: Any
    accel: Any | None
    tp_link: Any
    transfer_link: Any | None


def load_specs(cfg: SimConfig, base_dir: Path, source: str = "<config>") -> RunSpecs:
    """The run's specs, from catalog names or spec files: a bad name is an InputError naming the
    config field, a bad spec file one naming that file and its field."""
    model = _load_spec(load_model, cfg.model, base_dir, source, "model")
    accel = None if cfg.hardware.accelerator is None else _load_spec(  # None: timed by a step table
        load_accelerator, cfg.hardware.accelerator, base_dir, source, "hardware.accelerator")
    tp_link = _load_spec(load_link, cfg.hardware.tp_link, base_dir, source, "hardware.tp_link")
    transfer_link = None
    if cfg.cluster.layout != "colocated":
        transfer_link = _load_spec(
            load_link, cfg.cluster.transfer.link, base_dir, source, "cluster.transfer.link"
        )
    return RunSpecs(model, accel, tp_link, transfer_link)


def prepare_run(cfg: SimConfig, base_dir: Path, source: str = "<config>") -> PreparedRun:
    """Read the run's specs and workload and build its cost model (the "read" phase)."""
    # Inputs are read (specs, workload) before anything is built, so that every input error
    # surfaces before any work is done.
    specs = load_specs(cfg, base_dir, source)
    model, accel, tp_link, transfer_link = specs.model, specs.accel, specs.tp_link, specs.transfer_link
    with _config_fields_of(source):
        requests = build_workload(cfg.workload, base_dir, cfg.run.seed, model.context_length)
        cost = _cost_model(cfg, base_dir, model, accel, tp_link, requests)
        requests, pools = prepare_pools(
            cfg, base_dir, source, requests, model.context_length, _load_spec,
            lambda pool_cfg, pool_accel, pool_link: _cost_model(
                pool_cfg, base_dir, model, pool_accel, pool_link, requests),
            cost)
    return PreparedRun(cfg, requests, cost, transfer_link, pools)


def _cost_model(cfg: SimConfig, base_dir: Path, model: ModelSpec, accel: AcceleratorSpec | None, tp_link: LinkSpec,
                requests: Sequence[ServedRequest]) -> StepCostModel:
    """The run's step costs: a real engine's step table when `cost.step_table` names one (checked
    to cover every step the run can have), else the roofline with whatever calibration it names."""
    if cfg.cost.step_table is not None:
        table = load_calibration(resolve_path(cfg.cost.step_table, base_dir))
        assert table is not None
        return run_step_table_cost(table, cfg, requests, model.name, model)
    assert accel is not None  # only a run timed by cost.step_table has no accelerator (check_config)
    calibration = load_calibration(
        *(None if value is None else resolve_path(value, base_dir) for value in (cfg.cost.calibration, cfg.cost.vidur_profile))
    )
    return CostModel(model, accel, cfg.cost, tp=cfg.hardware.tp, tp_link=tp_link, calibration=calibration,
                     hardware=cfg.hardware)


@contextlib.contextmanager
def _config_fields_of(source: str) -> Iterator[None]:
    """Errors that name only a config field ("engine.block_size") get the config file in front;
    errors that name a file (a trace line, a spec file) are already located and pass unchanged."""
    try:
        yield
    except InputError as exc:
        if exc.where.startswith(source) or looks_like_path(exc.where):
            raise
        raise InputError(f"{source}: {exc.where}", exc.problem, exc.expected) from None


def run_config_file(
    config_path: str | Path,
    out_dir: str | Path,
    seed: int | None = None,
    max_trace_events: int = DEFAULT_MAX_EVENTS,
    stdout: TextIO | None = None,
    timeline: bool | None = True,
    overrides: Sequence[str] = (),
) -> RunSummary:
    """Run the config at `config_path`, print the summary table, write the results folder.

    Returns the summary (its `to_json()` is summary.json). `timeline=False` writes no trace.json
    (and the run keeps no intervals or counter samples, see `simulate_config`); None: a timeline
    for runs of at most DEFAULT_TIMELINE_MAX_REQUESTS requests, a line on stderr when a larger run
    keeps none (`sim run` without --timeline or --no-timeline). `overrides`:
    `dotted.key=value` assignments applied to the config before validation (`--set`). Bad input raises
    InputError before any folder is created; a failure mid-run leaves no folder behind.

    When the environment variable PHASES_ENV names a file, the wall-clock seconds of each phase
    (read, simulate, summarise, write) and the Unix time the simulation started are written there
    as JSON (`benchmarks/sim_speed.py` reads them).
    """
    phases = _PhaseClock()
    config_path = Path(config_path)
    base_dir = config_path.resolve().parent
    doc = config_doc(config_path, overrides)
    cfg = with_seed(config_from_doc(doc, str(config_path), base_dir), seed)
    note = layout_defaults_note(doc, cfg)
    if note is not None:  # printed once, before the run: the defaults a layout switch brings in
        print(note, file=sys.stderr)
    # Enter the output folder first: a folder that is not ours is refused before the (long) run.
    with atomic_output_dir(out_dir) as tmp:
        pause_point("simulating")
        run = simulate_config(
            cfg,
            base_dir,
            source=str(config_path),
            timeline=timeline,
            max_timeline_events=max_trace_events,
            on_read=lambda: phases.lap("read"),
        )
        phases.lap("simulate")
        if timeline is None and not run.keeps_timeline:
            print(f"no trace.json: {len(run.requests):,} requests, more than the {DEFAULT_TIMELINE_MAX_REQUESTS:,} a run "
                  "keeps a timeline for by default (--timeline keeps one)", file=sys.stderr)
        summary = run_summary(run, cfg, config_path)
        phases.lap("summarise")
        summary = write_results(
            tmp, config_path, run, summary, max_trace_events if run.keeps_timeline else None,
            resolved_config_text(cfg, base_dir)
        )
    phases.lap("write")
    out = stdout or sys.stdout
    if summary.kv_cache is not None:
        kv = summary.kv_cache
        print(f"KV cache per instance: {kv['kv_blocks']} blocks x {kv['block_size']} tokens = {kv['kv_tokens']} tokens",
              file=out)
        if "per_pool" in kv:
            print("KV cache per instance, by pool: " + ", ".join(f"{pool} {p['kv_tokens']} tokens"
                                                               for pool, p in kv["per_pool"].items()), file=out)
    print_summary(summary, file=out)
    warning = None if summary.timeline is None else truncation_warning(summary.timeline, run.end_s)
    if warning is not None:
        out.flush()  # the table first, then the warning, also when both go to one file
        print(warning, file=sys.stderr)
    phases.save()
    return summary


PHASES_ENV = "INFRALAB_SIM_PHASES_FILE"


class _PhaseClock:
    """Wall-clock seconds per phase of `run_config_file` (for the speed benchmark)."""

    def __init__(self) -> None:
        self.started_unix_s = time.time()
        self._last = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.simulate_started_unix_s = math.nan

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = now - self._last
        self._last = now
        if phase == "read":
            self.simulate_started_unix_s = time.time()

    def save(self) -> None:
        path = os.environ.get(PHASES_ENV)
        if path:
            facts = {"phases_s": self.seconds, "simulate_started_unix_s": self.simulate_started_unix_s}
            Path(path).write_text(json.dumps(facts, sort_keys=True) + "\n", encoding="utf-8")


def run_summary(run: RunRecord, cfg: SimConfig, config_path: Path) -> RunSummary:
    """The summary of a finished run as `sim run` writes it: metrics, what was run, and one
    instance's KV capacity when the cluster recorded it."""
    summary = summarize(run, cfg.slo, cfg.metrics.percentiles).with_run(run_facts(cfg, config_path))
    if run.encodes is not None:
        summary = summary.with_encode(encode_summary(run, summary.instances, cfg.metrics.percentiles))
    cluster = run.resources.get("cluster", {})
    blocks = cluster.get("kv_capacity_blocks_per_instance")
    # per pool only where pools' hardware differs (`cluster.pool_hardware`): other summaries stay as they were
    per_pool = cluster.get("kv_capacity_blocks_per_pool")
    return summary if blocks is None else summary.with_kv_cache(blocks, cfg.engine.block_size, per_pool)


def run_facts(cfg: SimConfig, config_path: Path) -> dict[str, Any]:
    """What was run, for summary.json and the trace's metadata."""
    return {
        "name": cfg.run.name,
        "seed": cfg.run.seed,
        "config": config_path.name,
        "model": cfg.model,
        "accelerator": cfg.hardware.accelerator,
        "tp": cfg.hardware.tp,
        "layout": cfg.cluster.layout,
        # Only with the multimodal / EPD / per-pool knobs, so that other summaries stay as they were.
        **({"accelerators": cluster_accelerators(cfg), "pools": pool_facts(cfg)} if reports_pools(cfg) else {}),
    }


def write_results(
    folder: Path,
    config_path: Path,
    run: RunRecord,
    summary: RunSummary,
    max_trace_events: int | None,
    resolved_config: str | None = None,
) -> RunSummary:
    """Write config.toml, resolved_config.toml (when given), requests.csv, unless
    `max_trace_events` is None trace.json, and summary.json into `folder`; returns the summary as
    written (with what the timeline holds)."""
    (folder / "config.toml").write_bytes(config_path.read_bytes())
    if resolved_config is not None:
        (folder / RESOLVED_CONFIG).write_text(resolved_config, encoding="utf-8")
    pause_point("writing")  # a testing hook: a kill here leaves a half-written temporary folder
    write_requests_csv(run, folder / "requests.csv")
    if max_trace_events is not None:
        meta = save_trace(run, folder / "trace.json", max_events=max_trace_events, metadata={"run": summary.run})
        summary = summary.with_timeline({key: meta[key] for key in SUMMARY_FACTS})
    dump_json(summary.to_json(), folder / "summary.json")
    return summary
