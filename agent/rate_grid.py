"""Simulation configs run at chosen request rates and seeds: what `infralab sim sweep` and
`infralab sim capacity` share (docs/sweeps.md).

A rate is a mean arrival rate in requests per second: a synthetic workload's
`workload.arrival.rate` (Poisson or gamma), or a trace's own rate (its requests over its span, in
the window it keeps) times `workload.rate_scale`, so a trace replays its own arrival pattern and
prefix identities, compressed or stretched to the rate. Every (config, rate, seed) is one job of the agent's
simulation pool (agent/sim_pool.py), so the numbers are those `infralab sim run --seed` gives for
the same config with that rate; results come back in job order.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from infralab.agent.sim_pool import Execution, SimJob, accelerator_count, checked_config, run_pool
from infralab.errors import InputError
from infralab.field_types import MAX_RATE, MAX_RATE_SCALE, MIN_RATE, MIN_RATE_SCALE
from infralab.metrics.summary import LATENCY_STATS, RunSummary, metric_names
from infralab.sim.config import SimConfig

RATE_FIELD = "workload.arrival.rate"
TRACE_RATE_FIELD = "workload.rate_scale"  # a trace's rate = its own rate x this
# The flat metrics (docs/sim.md) a sweep records per run, besides slo_attainment.
RUN_METRICS = metric_names(
    "completed",
    "total_requests",
    "saturated",
    "request_throughput",
    "output_throughput",
    "goodput",
    "accelerators",
    "output_throughput_per_accelerator",
    "goodput_per_accelerator",
    *(f"{lat}_{stat}_s" for lat in ("ttft", "tpot", "itl", "e2e") for stat in LATENCY_STATS),
)
ATTAINMENT = "slo_attainment"  # good requests / all requests of the run (0..1)


@dataclasses.dataclass(frozen=True)
class RateConfig:
    """A simulation config to be run at several rates: its label in tables and legends (run.name,
    made unique), the config as plain data, the folder its paths resolve against, its file, its
    accelerator count and SLOs (seconds)."""

    label: str
    data: dict[str, Any]
    base_dir: Path
    source: str
    accelerators: int
    slo_ttft_s: float
    slo_tpot_s: float
    seed: int  # the config's run.seed, the default seed
    # A trace workload's own mean arrival rate (req/s at rate_scale 1, in the window it keeps);
    # None for a synthetic workload.
    trace_rate: float | None = None

    @property
    def rate_field(self) -> str:
        """The config field a rate sets: the arrival rate, or a trace's rate_scale."""
        return RATE_FIELD if self.trace_rate is None else TRACE_RATE_FIELD

    @property
    def rate_bounds(self) -> tuple[float, float]:
        """The lowest and highest rate (req/s) its rate field accepts: the arrival rate's bounds,
        or a trace's own rate times rate_scale's."""
        if self.trace_rate is None:
            return MIN_RATE, MAX_RATE
        return self.trace_rate * MIN_RATE_SCALE, self.trace_rate * MAX_RATE_SCALE

    @property
    def own_rate(self) -> float:
        """The rate the config runs at as written (req/s)."""
        workload = self.data["workload"]
        if self.trace_rate is None:
            return float(workload["arrival"]["rate"])
        return self.trace_rate * float(workload["rate_scale"])


@dataclasses.dataclass(frozen=True)
class RatePoint:
    """One run's outcome: the config's label, the rate (req/s), the seed and RUN_METRICS plus
    ATTAINMENT."""

    label: str
    rate: float
    seed: int
    metrics: dict[str, Any]


def rate_field_text(configs: Sequence[RateConfig]) -> str:
    """What a rate sets, for a document's `rate_field`: the arrival rate, and for traces their own
    rate x rate_scale."""
    if all(c.trace_rate is None for c in configs):
        return RATE_FIELD
    return f"{RATE_FIELD} (a trace: its own rate x {TRACE_RATE_FIELD})"


def load_rate_configs(paths: Sequence[str | Path]) -> list[RateConfig]:
    """Each config, validated (a synthetic workload, or a trace with a rate of its own); labels are
    the configs' run.name, with the file stem added where two would collide."""
    from infralab.sim.config import load_config

    loaded = []
    for path in paths:
        cfg, base_dir = load_config(path)
        loaded.append((str(path), cfg, base_dir))
    names = [cfg.run.name for _, cfg, _ in loaded]
    out = []
    for source, cfg, base_dir in loaded:
        label = cfg.run.name if names.count(cfg.run.name) == 1 else f"{cfg.run.name} ({Path(source).stem})"
        out.append(rate_config(label, cfg, base_dir, source))
    labels = [c.label for c in out]
    if len(set(labels)) != len(labels):
        raise InputError("--configs", "the same config given twice", "each config file once")
    return out


def check_rate_settable(cfg: SimConfig, source: str, base_dir: Path) -> float | None:
    """None for a synthetic workload (its arrival rate is set directly); for a trace, its own mean
    arrival rate (req/s: requests after the first over the span, in the window the config keeps,
    before rate_scale). InputError naming `source` for a trace whose rate is not defined (fewer
    than two requests, or all at one instant)."""
    if cfg.workload.kind == "synthetic":
        return None
    from infralab.locations import resolve_path
    from infralab.workload.traces import read_trace

    w = cfg.workload
    requests = read_trace(resolve_path(w.path, base_dir), w.format, start_s=w.start_s, end_s=w.end_s,
                          max_requests=w.max_requests)
    span = requests[-1].arrival_s - requests[0].arrival_s if len(requests) else 0.0
    if len(requests) < 2 or span <= 0:
        raise InputError(f"{source}: workload.path", f"{len(requests)} request(s) over {span:g} s: no arrival rate",
                         f"a trace window with at least two requests at different times (its rate x "
                         f"{TRACE_RATE_FIELD} is the rate the search sets), or a synthetic workload")
    return (len(requests) - 1) / span


def rate_config(label: str, cfg: SimConfig, base_dir: Path, source: str) -> RateConfig:
    """A validated config as a RateConfig labelled `label` (a trace's own rate read once here)."""
    return RateConfig(label=label, data=dataclasses.asdict(cfg), base_dir=base_dir, source=source,
                      accelerators=accelerator_count(cfg), slo_ttft_s=float(cfg.slo.ttft_s),
                      slo_tpot_s=float(cfg.slo.tpot_s), seed=int(cfg.run.seed),
                      trace_rate=check_rate_settable(cfg, source, base_dir))


def check_rates(configs: Sequence[RateConfig], rates: Sequence[float], flag: str) -> None:
    """InputError naming `flag` (where the user wrote the rate) for a rate beyond what a config's
    rate field accepts; otherwise the error would name that field in a config that did not set it."""
    for c in configs:
        low, high = c.rate_bounds
        for rate in rates:
            if not low <= rate <= high:
                raise InputError(flag, f"{rate:g} req/s is beyond what {c.label}'s {c.rate_field} accepts",
                                 f"rates from {low:g} to {high:g} req/s")


def at_rate(config: RateConfig, rate: float) -> dict[str, Any]:
    """The config's data at `rate` (req/s): the arrival rate set, or a trace's rate_scale = rate /
    its own rate; validated."""
    workload = dict(config.data["workload"])
    if config.trace_rate is None:
        workload["arrival"] = {**workload["arrival"], "rate": rate}
    else:
        # Clamped only against the rounding of the division at the bounds (`rate_bounds`: rates
        # beyond them are refused before any run).
        workload["rate_scale"] = min(max(rate / config.trace_rate, MIN_RATE_SCALE), MAX_RATE_SCALE)
    data = {**config.data, "workload": workload}
    checked_config(data, config.source, config.base_dir)
    return data


def parse_numbers(text: str, flag: str, kind: type = float, positive: bool = True,
                  at_most: float | None = None) -> tuple[Any, ...]:
    """A comma-separated list of numbers from the command line ("4,8,16"); InputError naming the
    flag for an empty list, a bad item, a repeat, (with `positive`) a value <= 0, or one above
    `at_most` (the bound of the field it goes to, e.g. `run.seed`'s)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    ints = "integers >= 0" if at_most is None else f"integers from 0 to {at_most}"
    expected = f"comma-separated {'positive numbers' if kind is float else ints}, e.g. " + (
        "4,8,16" if kind is float else "0,1,2")
    if not items:
        raise InputError(flag, "empty list", expected)
    values = []
    for item in items:
        try:
            value = kind(item)
        except ValueError:
            raise InputError(flag, f"bad value {item!r}", expected) from None
        if ((kind is float and not math.isfinite(value)) or (positive and value <= 0) or value < 0
                or (at_most is not None and value > at_most)):
            raise InputError(flag, f"bad value {item!r}", expected)
        values.append(value)
    if len(set(values)) != len(values):
        raise InputError(flag, "a value is repeated", expected)
    return tuple(values)


def point_metrics(summary: RunSummary, accelerators: int) -> dict[str, Any]:
    """RUN_METRICS and ATTAINMENT of one run's summary."""
    flat = summary.flat_metrics(accelerators=accelerators)
    out = {name: flat[name] for name in RUN_METRICS}
    total = summary.requests.total
    out[ATTAINMENT] = summary.goodput.good_requests / total if total else None
    return out


def run_rates(
    work: Sequence[tuple[RateConfig, float, int]],
    jobs: int,
    on_done: Callable[[], None] | None = None,
    execution: Execution = Execution(),
) -> list[RatePoint]:
    """Each (config, rate, seed) simulated, in the order given, over `jobs` workers."""
    sims = [SimJob(config=at_rate(c, rate), base_dir=str(c.base_dir), source=c.source, seed=seed)
            for c, rate, seed in work]
    results = run_pool(sims, workers=jobs, on_done=on_done, execution=execution)
    return [RatePoint(c.label, rate, seed, point_metrics(r.summary, c.accelerators))
            for (c, rate, seed), r in zip(work, results)]
