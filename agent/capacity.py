"""`infralab sim capacity CONFIG [--configs MORE.toml ...] [--seeds S,...] [--tolerance F]`: the
highest request rate a config sustains within its SLOs, found by bisection (docs/sweeps.md).

The attainment rule (`meets`): at a rate, EVERY seed's run has the chosen percentile (p90 by
default) of TTFT within slo.ttft_s and of TPOT within slo.tpot_s, and is not saturated (the
simulator's saturation verdict, docs/sim.md). A run with no such latency (no finished request, or no
output beyond the first token) does not meet it.

The search (`Bisection`): probe the config's own arrival rate (or --start); while it meets the
rule, double the rate, while it fails, halve it (at most MAX_EXPANSIONS times each way, and never
past the bounds of the config's rate field: `RateConfig.rate_bounds`), until a
meeting rate `low` and a failing rate `high` bracket the threshold; then probe the midpoint
until high - low <= tolerance x high. The capacity is `low`: the highest rate seen to meet the
rule, within `tolerance` (relative) below the lowest rate seen to fail. Bisection assumes the rule
holds below the threshold and fails above it (queues grow with load); a simulated run is
deterministic per seed, so the search is too. Capacity per accelerator is low / accelerators.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infralab.progress import progress
from infralab.agent.rate_grid import (
    RateConfig,
    RatePoint,
    check_rates,
    load_rate_configs,
    rate_config,
    rate_field_text,
    run_rates,
)
from infralab.agent.sim_pool import Execution
from infralab.agent.sweep import write_rows
from infralab.errors import InputError
from infralab.overrides import dotted_keys, set_path
from infralab.results import atomic_output_dir, dump_json

SCHEMA = "infralab.capacity/1"
DEFAULT_TOLERANCE = 0.05
QUANTILES = ("p50", "p90", "p99")
MAX_EXPANSIONS = 16  # 2**16 = 65,536 x the start rate either way


@dataclasses.dataclass
class Bisection:
    """The bracketing and bisection of one config's capacity, one probe at a time: `next_rate()`
    is the rate to try (None: done), `record(rate, ok)` its outcome. Rates in req/s; `tolerance`
    relative (0.05: the bracket is at most 5 % of its upper end)."""

    start: float
    tolerance: float
    # The rates the config's rate field accepts: the search stops at them, as at MAX_EXPANSIONS,
    # rather than probe a rate the config refuses.
    floor: float = 0.0
    ceiling: float = math.inf
    low: float | None = None  # highest rate seen to meet the rule
    high: float | None = None  # lowest rate seen to fail it
    probes: list[tuple[float, bool]] = dataclasses.field(default_factory=list)

    def next_rate(self) -> float | None:
        if not self.probes:
            return self.start
        if self.low is None or self.high is None:
            if len(self.probes) > MAX_EXPANSIONS:
                return None  # no bracket: capacity above (or below) every rate tried
            if self.high is None:
                return None if self.low >= self.ceiling else min(self.low * 2, self.ceiling)
            return None if self.high <= self.floor else max(self.high / 2, self.floor)
        if self.high - self.low <= self.tolerance * self.high:
            return None
        return (self.low + self.high) / 2

    def record(self, rate: float, ok: bool) -> None:
        self.probes.append((rate, ok))
        if ok:
            self.low = rate if self.low is None else max(self.low, rate)
        else:
            self.high = rate if self.high is None else min(self.high, rate)

    @property
    def bracketed(self) -> bool:
        return self.low is not None and self.high is not None


def meets(points: Sequence[RatePoint], quantile: str, slo_ttft_s: float, slo_tpot_s: float) -> tuple[bool, str]:
    """The attainment rule over one rate's runs (one per seed), and why not when it fails."""
    for p in points:
        ttft, tpot = p.metrics[f"ttft_{quantile}_s"], p.metrics[f"tpot_{quantile}_s"]
        if ttft is None or tpot is None:
            return False, f"seed {p.seed}: no {quantile} TTFT/TPOT (no finished request with output)"
        if p.metrics["saturated"]:
            return False, f"seed {p.seed}: saturated"
        if ttft > slo_ttft_s:
            return False, f"seed {p.seed}: {quantile} TTFT {ttft:.3g} s > {slo_ttft_s:g} s"
        if tpot > slo_tpot_s:
            return False, f"seed {p.seed}: {quantile} TPOT {tpot:.3g} s > {slo_tpot_s:g} s"
    return True, "meets"


def rule_text(quantile: str, seeds: Sequence[int] | None) -> str:
    who = f"every seed of {', '.join(map(str, seeds))}" if seeds is not None else "the config's seed"
    return (f"{quantile} TTFT <= slo.ttft_s and {quantile} TPOT <= slo.tpot_s and not saturated, "
            f"for {who}")


def find_capacities(
    configs: Sequence[RateConfig],
    seeds: Sequence[int] | None,
    tolerance: float,
    quantile: str,
    start: float | None = None,
    jobs: int = 2,
    show_progress: bool = True,
    execution: Execution = Execution(),
) -> tuple[list[Bisection], list[dict[str, Any]]]:
    """Each config's bisection, run in lockstep (one pool call per round holds every unfinished
    config's probe at every seed), and every probe's runs as rows for capacity_probes.csv."""
    if start is not None:
        check_rates(configs, (start,), "--start")
    searches = [Bisection(start if start is not None else c.own_rate, tolerance, *c.rate_bounds) for c in configs]
    rows: list[dict[str, Any]] = []
    with progress(len(configs), "capacity", "config", enabled=show_progress) as tick:
        while True:
            round_ = [(i, b.next_rate()) for i, b in enumerate(searches)]
            round_ = [(i, rate) for i, rate in round_ if rate is not None]
            if not round_:
                break
            work = [(configs[i], rate, seed) for i, rate in round_
                    for seed in (seeds if seeds is not None else (configs[i].seed,))]
            points = run_rates(work, jobs=jobs, execution=execution)
            for i, rate in round_:
                c = configs[i]
                mine = [p for p in points if p.label == c.label and p.rate == rate]
                ok, why = meets(mine, quantile, c.slo_ttft_s, c.slo_tpot_s)
                searches[i].record(rate, ok)
                for p in mine:
                    rows.append({"config": c.label, "probe": len(searches[i].probes), "rate_rps": rate, "seed": p.seed,
                                 "meets": ok, "why": why, f"ttft_{quantile}_s": p.metrics[f"ttft_{quantile}_s"],
                                 f"tpot_{quantile}_s": p.metrics[f"tpot_{quantile}_s"],
                                 "saturated": p.metrics["saturated"]})
                if searches[i].next_rate() is None:
                    tick()
    return searches, rows


def run_capacity(
    config_paths: Sequence[str | Path],
    seeds: Sequence[int] | None,
    tolerance: float = DEFAULT_TOLERANCE,
    quantile: str = "p90",
    start: float | None = None,
    out: str | Path | None = None,
    jobs: int = 2,
    show_progress: bool = True,
    execution: Execution = Execution(),
) -> dict[str, Any]:
    """Everything `infralab sim capacity` does; returns capacity.json's document (also written,
    with capacity_probes.csv, to `out` when given)."""
    if not 0 < tolerance < 1:
        raise InputError("--tolerance", f"{tolerance!r}", "a fraction between 0 and 1, e.g. 0.05 for 5 %")
    if start is not None and not (math.isfinite(start) and start > 0):
        raise InputError("--start", f"{start!r}", "a positive rate in requests per second")
    if quantile not in QUANTILES:
        raise InputError("--quantile", f"{quantile!r}", f"one of {', '.join(QUANTILES)}")
    configs = load_rate_configs(config_paths)
    searches, rows = find_capacities(configs, seeds, tolerance, quantile, start, jobs, show_progress, execution)
    doc = {
        "schema": SCHEMA,
        "rule": rule_text(quantile, seeds),
        "tolerance": tolerance,
        "tolerance_rule": "stops when high - low <= tolerance x high; capacity = low",
        "rate_field": rate_field_text(configs),
        "seeds": list(seeds) if seeds is not None else None,
        "configs": [_config_doc(c, b) for c, b in zip(configs, searches)],
    }
    if out is not None:
        with atomic_output_dir(out) as tmp:
            dump_json(doc, tmp / "capacity.json")
            columns = ("config", "probe", "rate_rps", "seed", "meets", "why", f"ttft_{quantile}_s",
                       f"tpot_{quantile}_s", "saturated")
            write_rows(rows, columns, tmp / "capacity_probes.csv")
    return doc


def _config_doc(c: RateConfig, b: Bisection) -> dict[str, Any]:
    capacity = b.low if b.bracketed else None
    return {
        "label": c.label, "file": c.source, "accelerators": c.accelerators,
        **({} if c.trace_rate is None else {"trace_rate_rps": c.trace_rate}),
        "slo": {"ttft_s": c.slo_ttft_s, "tpot_s": c.slo_tpot_s},
        "capacity_rps": capacity,
        "capacity_rps_per_accelerator": None if capacity is None else capacity / c.accelerators,
        "fails_at_rps": b.high,
        "bracketed": b.bracketed,
        "note": None if b.bracketed else (
            f"met the rule at every rate up to {b.low:g} req/s" if b.high is None
            else f"failed the rule at every rate down to {b.high:g} req/s"),
        "probes": [{"rate_rps": r, "meets": ok} for r, ok in b.probes],
    }


# ---- capacity per arm over config overlays --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Overlay:
    """A named set of changes to a base config: dotted field -> TOML value (tables made on the
    way), e.g. {"hardware.linear_tp": 4, "cost.kv_layer_dtypes": ["int8", "bf16"]}. `where`
    names the overlay's origin in errors (e.g. "stack.toml: arm[2].set")."""

    label: str
    changes: Mapping[str, Any]
    where: str


def overlay_config(base: str | Path, overlay: Overlay) -> RateConfig:
    """The base config's document with the overlay's changes set, validated as a whole config
    (every check `sim run` makes; relative paths resolve against the base config's folder). An
    error names the overlay's key and the config field it broke."""
    from infralab.sim.config import config_doc, config_from_doc

    base = Path(base)
    doc = config_doc(base)
    changes = dotted_keys(dict(overlay.changes))  # a TOML sub-table changes its keys, never replaces a base table
    for key, value in changes.items():
        set_path(doc, key.split("."), value, f"{overlay.where}.{key}")
    try:
        cfg = config_from_doc(doc, str(base), base.resolve().parent)
    except InputError as exc:
        field = exc.where.split(": ", 1)[-1]
        key = next((k for k in changes if field == k or field.startswith(k + ".")), None)
        where = f"{overlay.where}.{key}" if key is not None else overlay.where
        raise InputError(where, f"{exc.problem} ({exc.where})", exc.expected) from None
    return rate_config(overlay.label, cfg, base.resolve().parent, str(base))


def overlay_capacities(
    base: str | Path,
    overlays: Sequence[Overlay],
    seeds: Sequence[int] | None,
    tolerance: float = DEFAULT_TOLERANCE,
    quantile: str = "p90",
    start: float | None = None,
    jobs: int = 2,
    show_progress: bool = True,
    execution: Execution = Execution(),
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Capacity per arm, each arm the base config with one overlay: per overlay the document
    `_config_doc` gives (capacity.json's per-config entry, `label` = the overlay's), and every
    probe's rows (capacity_probes.csv's). Searched in lockstep, as `sim capacity --configs`."""
    configs = [overlay_config(base, o) for o in overlays]
    labels = [c.label for c in configs]
    if len(set(labels)) != len(labels):
        raise InputError(overlays[0].where, "two overlays share a label", "a unique label per overlay")
    searches, rows = find_capacities(configs, seeds, tolerance, quantile, start, jobs, show_progress, execution)
    return [_config_doc(c, b) for c, b in zip(configs, searches)], rows


def format_text(doc: dict[str, Any]) -> str:
    lines = [f"capacity: the highest rate with {doc['rule']}",
             f"(bisection on {doc['rate_field']}; {doc['tolerance_rule']}, tolerance {doc['tolerance']:g})"]
    for c in doc["configs"]:
        if c["capacity_rps"] is None:
            lines.append(f"  {c['label']:<24} not bracketed: {c['note']} ({len(c['probes'])} probes)")
            continue
        lines.append(f"  {c['label']:<24} {c['capacity_rps']:8.3f} req/s = {c['capacity_rps_per_accelerator']:.3f} "
                     f"req/s per accelerator ({c['accelerators']} accelerators); fails at {c['fails_at_rps']:.3f} "
                     f"req/s; {len(c['probes'])} probes")
    return "\n".join(lines) + "\n"
