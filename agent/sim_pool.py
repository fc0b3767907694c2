"""Simulator runs for the agent: apply knobs to a simulation config, run a pool of configs, return
typed summaries and flat metrics. `infralab search` (agent/search.py) and the `cluster` validator
(agent/validators/sim.py) both go through here, so one config gives the same numbers in both.

Knobs. A knob is a dotted path into the simulation config (`engine.max_batched_tokens`,
`cluster.transfer.link`, `workload.rate_scale`, ...) or the named knob POOLS = "pools": "P:D",
the prefill and decode pool sizes of a disaggregated layout (one knob, because the question is
about the ratio). A string value that looks like a path (`infralab.sim.config.looks_like_path`)
resolves against the folder of the file that named it (the SPACE file, the hypothesis file).

The pool. `run_pool` runs `SimJob`s (a config as plain data, the folder its relative paths resolve
against) on one of two backends, chosen by an `Execution`: "local", processes on this machine (1
worker: in this process), or "ray", tasks on a Ray cluster (agent/ray_pool.py). Results come back
in job order, never in completion order, and hold no wall-clock time; each job is deterministic, so
the same jobs give the same results on either backend and any number of workers.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from infralab.config_io import validate
from infralab.errors import InputError
from infralab.locations import is_data_path
from infralab.metrics.records import RunRecord
from infralab.metrics.summary import Metric, RunSummary
from infralab.overrides import set_path
from infralab.sim.config import (
    SimConfig,
    applicable_fields,
    check_config,
    config_doc,
    layout_defaults_note,
    load_config,
    looks_like_path,
)
from infralab.sim.pool_hardware import cluster_accelerators, pool_sizes

if TYPE_CHECKING:  # the cluster validator imports this module
    from infralab.agent.hypothesis import Arm, Hypothesis
    from infralab.agent.validators.sim import ClusterSetup

POOLS = "pools"
KNOB_EXPECTED = "'pools' or a dotted path of the simulation config, e.g. engine.max_batched_tokens"
POOLS_EXPECTED = '"P:D" prefill:decode instance counts, for a disaggregated config'


# ---- knobs --------------------------------------------------------------------------------------


def resolve_value(value: Any, base_dir: Path) -> Any:
    """`value`, made absolute against `base_dir` when it looks like a relative path (an `@data/`
    path means the same from any file and stays as written)."""
    if not looks_like_path(value) or is_data_path(value):
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (base_dir / path).resolve())


def _set(data: dict[str, Any], dotted: str, value: Any) -> bool:
    """Set `dotted` in nested dicts; False when a part of the path does not exist."""
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            return False
        node = node[part]
    if parts[-1] not in node:
        return False
    node[parts[-1]] = value
    return True


def apply_knob(data: dict[str, Any], knob: str, value: Any, where: str, base_dir: Path) -> None:
    """Set `knob` to `value` in `data` (a simulation config as plain data), in place; `base_dir`
    is the folder of the file that named the knob, `where` names it in errors."""
    value = resolve_value(value, base_dir)
    if knob == POOLS:
        match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(value))
        if not match or data["cluster"]["layout"] != "disaggregated":
            raise InputError(where, f"bad value {value!r}", POOLS_EXPECTED)
        data["cluster"]["prefill_instances"], data["cluster"]["decode_instances"] = map(int, match.groups())
        return
    if not _set(data, knob, value):
        raise InputError(where, f"unknown knob {knob!r}", KNOB_EXPECTED)


def check_knobs_read(cfg: SimConfig, knobs: Iterable[str], where: Callable[[str], str]) -> None:
    """A knob that sets a field the point's layout (or transfer mode) does not read is an error,
    as it is in a config file (`infralab.sim.config.check_layout_fields`); `where(knob)` names it."""
    read = applicable_fields(cfg)
    for knob in knobs:
        if knob == POOLS:
            continue
        node: Any = read
        for part in knob.split("."):
            if not isinstance(node, dict) or part not in node:
                raise InputError(where(knob), f"not read by the {cfg.cluster.layout} layout of this point",
                                 'a field of the chosen layout and transfer mode (docs/sim.md, "Layouts")')
            node = node[part]


def layout_switch_note(config_path: Path, knobs: Iterable[tuple[str, Any]], cfg: SimConfig) -> str | None:
    """When `knobs` switch the layout of the config at `config_path`: the note naming the new
    layout's fields left to their defaults (`layout_defaults_note`), else None. Callers print
    each distinct note once."""
    knobs = tuple(knobs)
    if not any(knob == "cluster.layout" for knob, _ in knobs):
        return None
    doc = config_doc(config_path)
    for knob, value in knobs:
        # `pools` writes both pool sizes (apply_knob); only which fields are written matters here
        paths = ["cluster.prefill_instances", "cluster.decode_instances"] if knob == POOLS else [knob]
        for path in paths:
            set_path(doc, path.split("."), value, knob)
    return layout_defaults_note(doc, cfg)


def checked_config(data: Mapping[str, Any], source: str, base_dir: Path) -> SimConfig:
    """`data` validated as a whole simulation config (types, then referenced files)."""
    cfg = validate(SimConfig, dict(data), source)
    check_config(cfg, source, base_dir)
    return cfg


def arm_config(
    hyp: Hypothesis, setup: ClusterSetup, arm: Arm, where: Callable[[str], str]
) -> tuple[SimConfig, Path]:
    """The simulation config of a `cluster` hypothesis arm: the setup's config with its trace window
    and the arm's knobs applied, validated. Returns (config, the folder its paths resolve against);
    `where(knob)` names the hypothesis key in errors."""
    from infralab.sim.run import load_specs

    config_path = hyp.resolve(setup.config)
    cfg, base_dir = load_config(config_path)
    data = dataclasses.asdict(cfg)
    if setup.window_s is not None or setup.max_requests is not None:
        if data["workload"].get("kind") != "trace":
            raise InputError(f"{hyp.source}: setup.window_s", "the config's workload is not a trace",
                             "window_s/max_requests only with [workload] kind = \"trace\"")
        if setup.window_s is not None:
            data["workload"]["start_s"], data["workload"]["end_s"] = setup.window_s
        if setup.max_requests is not None:
            data["workload"]["max_requests"] = setup.max_requests
    for knob, value in arm.knobs:
        apply_knob(data, knob, value, where(knob), hyp.base_dir)
    try:
        cfg = checked_config(data, str(config_path), base_dir)
        load_specs(cfg, base_dir, str(config_path))  # a knob's unknown model or link name: now, not mid-run
    except InputError as exc:
        if not exc.where.startswith(f"{config_path}: "):
            raise  # located in another file the user wrote (a spec TOML): named there already
        field = exc.where.split(": ", 1)[-1]
        knob = culprit_knob(field, arm)
        # No knob of the baseline set the field (a cross-field check): name the arm, not a key
        # the user did not write; the config's field follows in the message.
        at = where(knob) if knob is not None else f"{hyp.source}: {arm.name}"
        raise InputError(at, exc.problem + f" ({exc.where})", exc.expected) from None
    check_knobs_read(cfg, (knob for knob, _ in arm.knobs), where)
    return cfg, base_dir


def culprit_knob(field: str, arm: Arm) -> str | None:
    """The arm's knob that set `field` (the field itself, a table holding it, or a field inside it,
    e.g. knob workload.output.value for field workload.output), else a variant's change (what it
    adds to its parent), else None."""
    for knob in arm.config:
        if knob == field or field.startswith(knob + ".") or knob.startswith(field + "."):
            return knob
    return arm.change[0] if arm.change else None


# ---- counts of a layout -------------------------------------------------------------------------


def instance_count(cfg: SimConfig) -> int:
    """Instances a config runs: all of them (colocated), or every pool's (disaggregated, epd)."""
    return sum(pool_sizes(cfg).values())


def accelerator_count(cfg: SimConfig) -> int:
    """Accelerators a config uses: over its pools, instances x tp x pp (`cluster_accelerators`)."""
    return cluster_accelerators(cfg)


# ---- the pool -----------------------------------------------------------------------------------

BACKENDS = ("local", "ray")
RAY_ADDRESS_EXPECTED = "--backend ray with --ray-address HOST:PORT (the address `ray start --head` prints)"


@dataclasses.dataclass(frozen=True)
class Execution:
    """Where the pool runs its jobs (`infralab search` and `infralab test` flags --backend and
    --ray-address): `backend` "local" (processes on this machine) or "ray" (tasks on a Ray
    cluster); `ray_address` joins a running cluster, None starts a local one of the pool's
    workers for the run. The backend never changes results, only where and how fast they run."""

    backend: Literal["local", "ray"] = "local"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise InputError("--backend", f"unknown backend {self.backend!r}", f"one of {', '.join(BACKENDS)}")
        if self.ray_address is not None and self.backend != "ray":
            raise InputError("--ray-address", f"{self.ray_address!r} given with --backend {self.backend}",
                             RAY_ADDRESS_EXPECTED)

    def describe(self, workers: int) -> str:
        """Where the runs went, for notes: "N processes" (local), or the Ray cluster."""
        if self.backend == "local":
            return f"{workers} processes"
        return f"Ray at {self.ray_address}" if self.ray_address else f"a local Ray cluster of {workers} CPUs"


def require_backend(execution: Execution) -> None:
    """Fail early, with one InputError, when the chosen backend cannot run here (ray not installed)."""
    if execution.backend == "ray":
        from infralab.agent.ray_pool import import_ray

        import_ray()


# What a caller wants from a run besides its summary (e.g. the worst request), computed in the
# worker from the run's records: a module-level function, so that it can be sent to a process.
# The record keeps no timeline (no intervals or counter samples: a sweep writes no trace.json);
# its requests, resources and `tally()` are whole.
Inspect = Callable[[RunRecord, RunSummary], Any]


@dataclasses.dataclass(frozen=True)
class SimJob:
    """One simulation: a config as plain data (`dataclasses.asdict` of a SimConfig, knobs applied),
    the folder its relative paths resolve against, the config file named in errors, and a seed
    that replaces run.seed (None: keep it)."""

    config: Mapping[str, Any]
    base_dir: str
    source: str
    seed: int | None = None


@dataclasses.dataclass(frozen=True)
class SimResult:
    """A run's typed summary, its flat metrics (`RunSummary.flat_metrics` with the config's
    instance and accelerator counts), and what the job's `Inspect` returned (None without one)."""

    summary: RunSummary
    metrics: Mapping[str, Metric]
    details: Any = None


def run_one(job: SimJob, inspect: Inspect | None = None) -> SimResult:
    """Simulate one job (in this process) and summarise it. No timeline is kept (the summary is
    the same without one, and the run holds a few bytes per step instead of an object)."""
    from infralab.sim.run import run_summary, simulate_config, with_seed

    cfg = with_seed(validate(SimConfig, dict(job.config), job.source), job.seed)
    record = simulate_config(cfg, Path(job.base_dir), source=job.source, timeline=False)
    summary = run_summary(record, cfg, Path(job.source))
    metrics = config_metrics(summary, cfg)
    return SimResult(summary, metrics, inspect(record, summary) if inspect is not None else None)


def config_metrics(summary: RunSummary, cfg: SimConfig) -> Mapping[str, Metric]:
    """A run's flat metrics with the instance and accelerator counts of the config it ran (a
    simulation's, or a real run's of the same file)."""
    return summary.flat_metrics(instances=instance_count(cfg), accelerators=accelerator_count(cfg))


def run_pool(
    jobs: Sequence[SimJob],
    workers: int = 1,
    inspect: Inspect | None = None,
    on_done: Callable[[], None] | None = None,
    execution: Execution = Execution(),
) -> list[SimResult]:
    """Every job's result, in job order, on `execution`'s backend: up to `workers` local processes
    (1: in this process), or Ray tasks (a local cluster of `workers` CPUs, or the cluster at
    `execution.ray_address`). `on_done` is called in this process after each job (e.g. a progress
    bar). The first failure stops the pool without waiting for the jobs not started yet, and is
    raised."""
    if execution.backend == "ray":
        from infralab.agent.ray_pool import run_on_ray

        return run_on_ray(jobs, workers, inspect, on_done, execution.ray_address)
    return _run_local(jobs, workers, inspect, on_done)


def _run_local(
    jobs: Sequence[SimJob], workers: int, inspect: Inspect | None, on_done: Callable[[], None] | None
) -> list[SimResult]:
    work = functools.partial(run_one, inspect=inspect)
    results: list[SimResult | None] = [None] * len(jobs)
    if workers <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            results[i] = work(job)
            if on_done is not None:
                on_done()
    else:
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
            futures = {pool.submit(work, job): i for i, job in enumerate(jobs)}
            try:
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    if on_done is not None:
                        on_done()
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    return [r for r in results if r is not None]
