"""Simulator runs for the agent: apply knobs to a simulation config, run a pool of configs, return
typed summaries and flat metrics. `infralab search` (agent/search.py) and the `cluster` validator
(agent/validators/sim.py) both go through here, so one config gives the same numbers in both.

Knobs. A knob is a dotted path into the simulation config (`engine.max_batched_tokens`,
`cluster.transfer.link`, `workload.rate_scale`, ...) or the named knob POOLS = "pools": "P:D",
the prefill and decode pool sizes of a disaggregated layout (one knob, because the question is
about the ratio). A string value that looks like a path (`infralab.sim.config.looks_like_path`)
resolves against the folder of the file that named it (the SPACE file, the hypothesis file).

The pool. `run_pool` runs `SimJob`s (a config as plain data, the folder its relative paths resolve
against) over local processes (1: in this process). Results come back in job order, never in
completion order, and hold no wall-clock time, so the same jobs give the same results.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infralab.config_io import validate
from infralab.errors import InputError
from infralab.sim.config import SimConfig, check_config, load_config, looks_like_path
from infralab.sim.records import RunRecord
from infralab.sim.summary import Metric, RunSummary

if TYPE_CHECKING:  # the cluster validator imports this module
    from infralab.agent.hypothesis import Arm, Hypothesis
    from infralab.agent.validators.sim import ClusterSetup

POOLS = "pools"
KNOB_EXPECTED = "'pools' or a dotted path of the simulation config, e.g. engine.max_batched_tokens"
POOLS_EXPECTED = '"P:D" prefill:decode instance counts, for a disaggregated config'


# ---- knobs --------------------------------------------------------------------------------------


def resolve_value(value: Any, base_dir: Path) -> Any:
    """`value`, made absolute against `base_dir` when it looks like a relative path."""
    if not looks_like_path(value):
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
        return checked_config(data, str(config_path), base_dir), base_dir
    except InputError as exc:
        # Blame the knob that set the offending field when there is one, else the variant's change.
        field = exc.where.split(": ", 1)[-1]
        knob = field if field in arm.config else (arm.change[0] if arm.change else field)
        raise InputError(where(knob), exc.problem + f" ({exc.where})", exc.expected) from None


# ---- counts of a layout -------------------------------------------------------------------------


def instance_count(cfg: SimConfig) -> int:
    """Instances a config runs: all of them (colocated), or both pools (disaggregated)."""
    c = cfg.cluster
    return c.instances if c.layout == "colocated" else c.prefill_instances + c.decode_instances


def accelerator_count(cfg: SimConfig) -> int:
    """Accelerators a config uses: instances x tensor-parallel degree."""
    return instance_count(cfg) * cfg.hardware.tp


# ---- the pool -----------------------------------------------------------------------------------

# What a caller wants from a run besides its summary (e.g. the worst request), computed in the
# worker from the run's records: a module-level function, so that it can be sent to a process.
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
    """Simulate one job (in this process) and summarise it."""
    from infralab.sim.metrics import summarize
    from infralab.sim.run import simulate_config, with_seed

    cfg = with_seed(validate(SimConfig, dict(job.config), job.source), job.seed)
    record = simulate_config(cfg, Path(job.base_dir), source=job.source)
    summary = summarize(record, cfg.slo)
    metrics = summary.flat_metrics(instances=instance_count(cfg), accelerators=accelerator_count(cfg))
    return SimResult(summary, metrics, inspect(record, summary) if inspect is not None else None)


def run_pool(
    jobs: Sequence[SimJob],
    processes: int = 1,
    inspect: Inspect | None = None,
    on_done: Callable[[], None] | None = None,
) -> list[SimResult]:
    """Every job's result, in job order, over up to `processes` local processes (1: in this
    process). `on_done` is called in this process after each job (e.g. a progress bar). The
    first failure stops the pool without waiting for the jobs not started yet, and is raised."""
    work = functools.partial(run_one, inspect=inspect)
    results: list[SimResult | None] = [None] * len(jobs)
    if processes <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            results[i] = work(job)
            if on_done is not None:
                on_done()
    else:
        with ProcessPoolExecutor(max_workers=min(processes, len(jobs))) as pool:
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
