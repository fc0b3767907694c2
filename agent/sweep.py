"""`infralab sim sweep CONFIG --rates R1,R2,... [--seeds S1,...] [--configs MORE.toml ...] --out DIR`:
every config at every request rate and seed, and figures a paper can use (docs/sweeps.md).

DIR holds (written atomically):
- runs.csv: one row per (config, rate, seed) with the run's metrics (agent/rate_grid.py);
- latency_vs_rate.{png,pdf,csv}: TTFT, TPOT and E2E p50/p90/p99 against the rate, per config;
- slo_attainment_vs_rate.{png,pdf,csv}: the share of requests within both SLOs;
- throughput_vs_latency.{png,pdf,csv}: p90 TTFT and p90 TPOT against output throughput per
  accelerator, one point per rate;
- sweep.json: what was run and every figure's data (schema infralab.sweep/1).
Each figure's CSV holds exactly the numbers drawn: per (config, rate, metric) the mean over seeds
(drawn as the line), and the spread (std with n-1, min and max; min-max drawn as the band).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infralab.agent import figure_style
from infralab.progress import progress
from infralab.agent.rate_grid import (ATTAINMENT, RUN_METRICS, RateConfig, RatePoint, check_rates, load_rate_configs,
                                      rate_field_text, run_rates)
from infralab.agent.sim_pool import Execution
from infralab.results import atomic_output_dir, dump_json

SCHEMA = "infralab.sweep/1"
PERCENTILES = ("p50", "p90", "p99")
LATENCY_PANELS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E latency"))
THROUGHPUT_X = "output_throughput_per_accelerator"
THROUGHPUT_PANELS = (("ttft_p90_s", "p90 TTFT"), ("tpot_p90_s", "p90 TPOT"))
SLO_LINE = {"color": "#777777", "linewidth": 0.8, "linestyle": (0, (1, 2))}
STATS_COLUMNS = ("config", "rate_rps", "metric", "seeds", "mean", "std", "min", "max")
FIGURES = {
    "latency_vs_rate": tuple(f"{lat}_{p}_s" for lat, _ in LATENCY_PANELS for p in PERCENTILES),
    "slo_attainment_vs_rate": (ATTAINMENT,),
    "throughput_vs_latency": (THROUGHPUT_X, *(m for m, _ in THROUGHPUT_PANELS)),
}


# ---- statistics over seeds -----------------------------------------------------------------------


def spread(values: Sequence[Any]) -> dict[str, Any]:
    """Mean, sample std (n-1; 0 for one value), min and max of the defined values (None: a run
    that had no such value, e.g. no finished request), and how many there were."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return {"seeds": 0, "mean": None, "std": None, "min": None, "max": None}
    return {"seeds": len(xs), "mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "min": min(xs), "max": max(xs)}


def aggregate(points: Sequence[RatePoint], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """One row per (config, rate, metric) in the order of first appearance: STATS_COLUMNS."""
    groups: dict[tuple[str, float], list[RatePoint]] = {}
    for p in points:
        groups.setdefault((p.label, p.rate), []).append(p)
    rows = []
    for (label, rate), group in groups.items():
        for metric in metrics:
            rows.append({"config": label, "rate_rps": rate, "metric": metric,
                         **spread([p.metrics[metric] for p in group])})
    return rows


def write_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], path: Path) -> None:
    """A CSV of `rows` (None as an empty cell, floats as repr: exact and stable)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row[c] is None else repr(row[c]) if isinstance(row[c], float) else row[c]
                             for c in columns])


# ---- figures -------------------------------------------------------------------------------------


def _series(rows: Sequence[dict[str, Any]], label: str, metric: str) -> tuple[list[float], list[dict[str, Any]]]:
    mine = [r for r in rows if r["config"] == label and r["metric"] == metric and r["mean"] is not None]
    return [r["rate_rps"] for r in mine], mine


def latency_figure(rows: Sequence[dict[str, Any]], configs: Sequence[RateConfig], stem: Path) -> list[Path]:
    """TTFT, TPOT, E2E panels: a line per config (colour) and percentile (dash), min-max band."""
    with figure_style.styled() as plt:
        fig, axes = plt.subplots(1, len(LATENCY_PANELS), figsize=(7.0, 2.8))
        for ax, (lat, title) in zip(axes, LATENCY_PANELS):
            ys: list[float] = []
            for i, c in enumerate(configs):
                for p in PERCENTILES:
                    xs, mine = _series(rows, c.label, f"{lat}_{p}_s")
                    ax.plot(xs, [r["mean"] for r in mine], color=figure_style.colour(i),
                            linestyle=figure_style.PERCENTILE_LINES[p], marker=figure_style.marker(i))
                    ax.fill_between(xs, [r["min"] for r in mine], [r["max"] for r in mine],
                                    color=figure_style.colour(i), alpha=0.15, linewidth=0)
                    ys += [r["min"] for r in mine] + [r["max"] for r in mine]
            slo = {"ttft": configs[0].slo_ttft_s, "tpot": configs[0].slo_tpot_s}.get(lat)
            if slo is not None:
                ax.axhline(slo, **SLO_LINE)
                ys.append(slo)
            figure_style.scale_axes(ax, [], ys)
            ax.set_title(title)
            ax.set_xlabel("request rate (req/s)")
            ax.set_ylabel("seconds")
        handles = [plt.Line2D([], [], color=figure_style.colour(i), marker=figure_style.marker(i), label=c.label)
                   for i, c in enumerate(configs)]
        handles += [plt.Line2D([], [], color="#333333", linestyle=figure_style.PERCENTILE_LINES[p], label=p)
                    for p in PERCENTILES]
        handles.append(plt.Line2D([], [], **SLO_LINE, label="SLO"))
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False)
        fig.suptitle("Latency percentiles vs request rate (mean over seeds; band: min to max)")
        return figure_style.save(fig, stem)


def attainment_figure(rows: Sequence[dict[str, Any]], configs: Sequence[RateConfig], stem: Path) -> list[Path]:
    """Share of requests within both SLOs against the rate, a line per config, min-max band."""
    with figure_style.styled() as plt:
        fig, ax = plt.subplots()
        for i, c in enumerate(configs):
            xs, mine = _series(rows, c.label, ATTAINMENT)
            ax.plot(xs, [r["mean"] for r in mine], color=figure_style.colour(i), marker=figure_style.marker(i),
                    label=c.label)
            ax.fill_between(xs, [r["min"] for r in mine], [r["max"] for r in mine], color=figure_style.colour(i),
                            alpha=0.15, linewidth=0)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel("requests within TTFT and TPOT SLOs")
        ax.set_title("SLO attainment vs request rate")
        ax.legend(loc="lower left")  # attainment starts at 1: the lower left stays clear longest
        return figure_style.save(fig, stem)


def throughput_figure(rows: Sequence[dict[str, Any]], configs: Sequence[RateConfig], stem: Path) -> list[Path]:
    """p90 TTFT and p90 TPOT against output throughput per accelerator, one point per rate,
    error bars = std over seeds on both axes."""
    with figure_style.styled() as plt:
        fig, axes = plt.subplots(1, len(THROUGHPUT_PANELS), figsize=(7.0, 2.6))
        for ax, (metric, title) in zip(axes, THROUGHPUT_PANELS):
            xs_all: list[float] = []
            ys_all: list[float] = []
            for i, c in enumerate(configs):
                _, tput = _series(rows, c.label, THROUGHPUT_X)
                _, lat = _series(rows, c.label, metric)
                by_rate = {r["rate_rps"]: r for r in lat}
                pairs = [(t, by_rate[t["rate_rps"]]) for t in tput if t["rate_rps"] in by_rate]
                xs = [t["mean"] for t, _ in pairs]
                ys = [y["mean"] for _, y in pairs]
                ax.errorbar(xs, ys, xerr=[t["std"] for t, _ in pairs], yerr=[y["std"] for _, y in pairs],
                            color=figure_style.colour(i), marker=figure_style.marker(i), label=c.label, capsize=2)
                xs_all += xs
                ys_all += ys
            figure_style.scale_axes(ax, xs_all, ys_all)
            ax.set_xlabel("output throughput per accelerator (tok/s)")
            ax.set_ylabel(f"{title} (s)")
            ax.set_title(f"{title} vs throughput (one point per rate)")
        axes[0].legend()
        return figure_style.save(fig, stem)


DRAW = {"latency_vs_rate": latency_figure, "slo_attainment_vs_rate": attainment_figure,
        "throughput_vs_latency": throughput_figure}


# ---- the command ---------------------------------------------------------------------------------


def run_sweep(
    config_paths: Sequence[str | Path],
    rates: Sequence[float],
    seeds: Sequence[int] | None,
    out: str | Path,
    jobs: int = 2,
    show_progress: bool = True,
    execution: Execution = Execution(),
) -> dict[str, Any]:
    """Everything `infralab sim sweep` does; returns sweep.json's document. `seeds` None: each
    config's own run.seed."""
    configs = load_rate_configs(config_paths)
    check_rates(configs, rates, "--rates")
    work = [(c, float(rate), seed) for c in configs for rate in sorted(rates)
            for seed in (seeds if seeds is not None else (c.seed,))]
    with atomic_output_dir(out) as tmp:
        with progress(len(work), "sweep", "run", enabled=show_progress) as tick:
            points = run_rates(work, jobs=jobs, on_done=tick, execution=execution)
        write_rows([{"config": p.label, "rate_rps": p.rate, "seed": p.seed, **p.metrics} for p in points],
                   ("config", "rate_rps", "seed", ATTAINMENT, *RUN_METRICS), tmp / "runs.csv")
        figures = {}
        for name, metrics in FIGURES.items():
            rows = aggregate(points, metrics)
            write_rows(rows, STATS_COLUMNS, tmp / f"{name}.csv")
            files = [p.name for p in DRAW[name](rows, configs, tmp / name)]
            figures[name] = {"files": [f"{name}.csv", *files], "rows": rows}
        doc = {
            "schema": SCHEMA,
            "configs": [{"label": c.label, "file": c.source, "accelerators": c.accelerators,
                         "slo": {"ttft_s": c.slo_ttft_s, "tpot_s": c.slo_tpot_s}} for c in configs],
            "rates_rps": sorted(float(r) for r in rates),
            "seeds": list(seeds) if seeds is not None else None,
            "rate_field": rate_field_text(configs),
            "figures": figures,
        }
        dump_json(doc, tmp / "sweep.json")
    return doc


def format_text(doc: dict[str, Any]) -> str:
    """A table per config: rate, p90 TTFT, p90 TPOT, SLO attainment and output throughput per
    accelerator (means over seeds, ± std)."""
    rows = {(r["config"], r["rate_rps"], r["metric"]): r for fig in doc["figures"].values() for r in fig["rows"]}
    cols = (("ttft_p90_s", "p90 TTFT s", 3), ("tpot_p90_s", "p90 TPOT s", 4), (ATTAINMENT, "SLO attain.", 3),
            (THROUGHPUT_X, "out tok/s/acc", 1))
    lines = []
    for c in doc["configs"]:
        lines.append(f"{c['label']} ({c['file']}, {c['accelerators']} accelerators; mean ± std over seeds)")
        lines.append(f"  {'rate req/s':>10}" + "".join(f"{title:>22}" for _, title, _ in cols))
        for rate in doc["rates_rps"]:
            cells = []
            for metric, _, digits in cols:
                r = rows.get((c["label"], rate, metric))
                cells.append("-" if r is None or r["mean"] is None else f"{r['mean']:.{digits}f} ± {r['std']:.{digits}f}")
            lines.append(f"  {rate:>10g}" + "".join(f"{cell:>22}" for cell in cells))
    return "\n".join(lines) + "\n"
