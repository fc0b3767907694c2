"""`infralab search SPACE.toml`: explore a configuration space with the simulator under SLO
constraints; report the best configurations and the Pareto front of throughput per accelerator vs
latency. The SPACE file format and the JSON schema are in docs/explain.md ("search").

Every point of the space (the Cartesian product of the axes, last axis fastest) is the base
simulation config with the `[fixed]` changes and the point's axis values applied (knobs as in
agent/sim_pool.py), validated as a whole before anything runs. Constraints that read only
STATIC_METRICS (accelerators) are checked then: a point that violates one is pruned, never
simulated. The other points run through the agent's one
simulation pool (`infralab.agent.sim_pool.run_pool`, also the `cluster` validator's) over local
processes or a Ray cluster (`--backend ray`); results are ordered by point index, never by
completion, and hold no wall-clock times, so the same SPACE file (and seed) gives byte-identical
search.json and search.csv on either backend and any number of workers.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic.dataclasses import dataclass

from infralab.agent import figure_style
from infralab.agent.acceptance import Criterion, evaluate, parse_criterion, shortfall
from infralab.progress import progress
from infralab.agent.sim_pool import (
    Execution,
    Inspect,
    SimJob,
    SimResult,
    accelerator_count,
    apply_knob,
    check_knobs_read,
    checked_config,
    layout_switch_note,
    run_pool,
)
from infralab.config_io import STRICT, load_toml, validate
from infralab.errors import InputError
from infralab.field_types import Int
from infralab.metrics.summary import LATENCY_STATS, RATES, metric_names
from infralab.results import atomic_output_dir, dump_json

SCHEMA = "infralab.search/1"

# Metrics of one point (flat metric names of infralab.metrics.summary, docs/sim.md), the names
# constraints, the objective and the Pareto axes may use; also the columns of search.csv.
METRICS = metric_names(
    "accelerators",
    "completed",
    "total_requests",
    "saturated",
    *RATES,
    *(f"{m}_per_accelerator" for m in RATES),
    *(f"{lat}_{s}_s" for lat in ("ttft", "tpot", "itl", "e2e") for s in LATENCY_STATS),
    "max_instance_busy",
    "max_link_busy",
)


# Metrics known from a point's config alone: a constraint that reads only these is checked before
# simulating, and a point that violates it is pruned (never simulated).
STATIC_METRICS = ("accelerators",)

# The most points one search runs (each is a full simulation); checked before any point is built.
MAX_POINTS = 10_000


@dataclass(frozen=True, config=STRICT)
class ParetoAxes:
    x: str = "ttft_p90_s"  # minimised
    y: str = "output_throughput_per_accelerator"  # maximised


@dataclass(frozen=True, config=STRICT)
class SearchInfo:
    base: str  # simulation config; relative paths resolve against the SPACE file's folder
    name: str = "search"
    seed: Int(ge=0, le=2**63 - 1) | None = None  # overrides run.seed of the base config
    objective: str = "maximize goodput_per_accelerator"  # "maximize NAME" or "minimize NAME"
    constraints: tuple[str, ...] = ()  # acceptance-style expressions over METRICS
    top: Int(gt=0, le=MAX_POINTS) = 5
    pareto: ParetoAxes = ParetoAxes()


@dataclass(frozen=True, config=STRICT)
class SpaceFile:
    search: SearchInfo
    axes: dict[str, list[Any]]
    fixed: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Space:
    """A validated SPACE file: the points' configs (as dicts) and what to optimise."""

    source: str
    info: SearchInfo
    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    fixed: tuple[tuple[str, Any], ...]
    objective_metric: str
    objective_goal: Literal["max", "min"]
    constraints: tuple[Criterion, ...]
    base_dir: Path  # where the base config's relative paths resolve
    base_name: str
    points: tuple[dict[str, Any], ...]  # simulation config of each point, as plain data
    knobs: tuple[tuple[tuple[str, Any], ...], ...]  # each point's axis values
    overrides: tuple[str, ...] = ()  # the --set assignments applied, in order
    static: tuple[dict[str, Any], ...] = ()  # STATIC_METRICS of each point, from its config
    # The optimiser's declarations for a space whose points are not simulation configs (a study
    # hook's knobs: `infralab.agent.hook_space`); None: the simulator's.
    declarations: Any = None

    def pruned(self, index: int) -> list[str]:
        """The constraints on STATIC_METRICS that point `index` violates (it is not simulated)."""
        return violations([c for c in self.constraints if c.names <= set(STATIC_METRICS)], self.static[index])


# ---- the SPACE file -----------------------------------------------------------------------------


def parse_objective(text: str, where: str, metrics: Sequence[str] = METRICS) -> tuple[str, Literal["max", "min"]]:
    """(metric, goal) of "maximize NAME" / "minimize NAME", NAME one of `metrics`."""
    match = re.fullmatch(r"\s*(maximize|minimize|max|min)\s+([A-Za-z0-9_]+)\s*", text)
    if not match:
        raise InputError(where, f"bad objective {text!r}", "'maximize NAME' or 'minimize NAME'")
    goal: Literal["max", "min"] = "max" if match.group(1).startswith("max") else "min"
    _check_metric(match.group(2), where, metrics)
    return match.group(2), goal


def _check_metric(name: str, where: str, metrics: Sequence[str] = METRICS) -> None:
    if name not in metrics:
        raise InputError(where, f"unknown metric {name!r}", f"one of {', '.join(metrics)}")


def check_axes(axes: Mapping[str, Sequence[Any]], source: str) -> None:
    """InputError naming the SPACE file and axis unless there is an axis, each with distinct values,
    and at most MAX_POINTS points in all."""
    if not axes:
        raise InputError(f"{source}: axes", "no axes", "at least one `key = [values]` under [axes]")
    for key, values in axes.items():
        if not values:
            raise InputError(f"{source}: axes.{key}", "empty list", "one or more values")
        if len({repr(v) for v in values}) != len(values):
            raise InputError(f"{source}: axes.{key}", "repeated values", "each value once")
    size = math.prod(len(values) for values in axes.values())
    if size > MAX_POINTS:
        counts = " x ".join(str(len(values)) for values in axes.values())
        raise InputError(f"{source}: axes", f"{counts} = {size} points", f"at most {MAX_POINTS} points per search")


def parse_constraints(texts: Sequence[str], source: str, metrics: Sequence[str] = METRICS) -> tuple[Criterion, ...]:
    """The `search.constraints` of a SPACE file, each over `metrics`."""
    constraints = []
    for i, text in enumerate(texts):
        where = f"{source}: search.constraints[{i}]"
        crit = parse_criterion(text, where)
        for name in sorted(crit.names):
            _check_metric(name, where, metrics)
        constraints.append(crit)
    return tuple(constraints)


def load_space(path: str | Path, overrides: Sequence[str] = ()) -> Space:
    """Read and validate a SPACE file and every point's config; InputError names file and key.
    `overrides` (`infralab search --set`): `dotted.key=value` assignments applied to the SPACE
    document before validation (infralab/overrides.py), e.g. `search.seed=1` or
    `fixed.workload.end_s=30` ([fixed] and [axes] tables are flattened into dotted knobs)."""
    from infralab.overrides import apply_overrides, blame_override, dotted_keys, set_flags
    from infralab.sim.config import load_config

    path = Path(path)
    source = str(path)
    raw = apply_overrides(load_toml(path), overrides, "--set")
    if isinstance(raw.get("axes"), dict):
        raw = {**raw, "axes": dotted_keys(raw["axes"])}
    if isinstance(raw.get("fixed"), dict):
        raw = {**raw, "fixed": dotted_keys(raw["fixed"])}
    try:
        spec = validate(SpaceFile, raw, source)
    except InputError as exc:
        raise blame_override(exc, source, set_flags(overrides)) from None
    check_axes(spec.axes, source)
    metric, goal = parse_objective(spec.search.objective, f"{source}: search.objective")
    _check_metric(spec.search.pareto.x, f"{source}: search.pareto.x")
    _check_metric(spec.search.pareto.y, f"{source}: search.pareto.y")
    constraints = parse_constraints(spec.search.constraints, source)

    space_dir = path.resolve().parent
    base_path = Path(spec.search.base).expanduser()
    base_path = base_path if base_path.is_absolute() else space_dir / base_path
    if not base_path.is_file():
        raise InputError(f"{source}: search.base", f"file not found: {spec.search.base} (resolved to {base_path})",
                         "a simulation config; relative paths resolve against the SPACE file's folder")
    base_cfg, base_dir = load_config(base_path)
    base = dataclasses.asdict(base_cfg)
    if spec.search.seed is not None:
        base["run"]["seed"] = spec.search.seed
    for key, value in spec.fixed.items():
        apply_knob(base, key, value, f"{source}: fixed.{key}", space_dir)

    axes = tuple((k, tuple(v)) for k, v in spec.axes.items())
    points, knobs, static, notes = [], [], [], {}
    for combo in itertools.product(*(values for _, values in axes)):
        data = _deep_copy(base)
        point = tuple((key, value) for (key, _), value in zip(axes, combo))
        for key, value in point:
            apply_knob(data, key, value, f"{source}: axes.{key} = {value!r}", space_dir)
        try:
            cfg = checked_config(data, str(base_path), base_dir)
        except InputError as exc:
            where = ", ".join(f"{k} = {v!r}" for k, v in point)
            raise InputError(f"{source}: axes ({where})", f"gives an invalid config: {exc.where}: {exc.problem}", exc.expected) from None
        set_here = (*spec.fixed.items(), *point)
        check_knobs_read(cfg, (key for key, _ in set_here), lambda key: f"{source}: {key} (point {dict(point)})")
        notes.setdefault(layout_switch_note(base_path, set_here, cfg))
        points.append(data)
        knobs.append(point)
        static.append({"accelerators": accelerator_count(cfg)})
    for note in notes:
        if note is not None:
            print(note, file=sys.stderr)  # once per distinct layout switch, not per point
    return Space(
        source=source,
        info=spec.search,
        axes=axes,
        fixed=tuple(spec.fixed.items()),
        objective_metric=metric,
        objective_goal=goal,
        constraints=constraints,
        base_dir=base_dir,
        base_name=base_path.name,
        points=tuple(points),
        knobs=tuple(knobs),
        overrides=tuple(overrides),
        static=tuple(static),
    )


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data


# ---- one point ----------------------------------------------------------------------------------


def simulate(space: Space, indices: Iterable[int], jobs: int = 2, execution: Execution = Execution(),
             inspect: Inspect | None = None, show_progress: bool = False) -> dict[int, SimResult]:
    """The runs of the points `indices` of `space` that are not pruned (a pruned point is never
    simulated), by point index; `jobs` workers of `execution`'s backend (local processes, 1: in
    this process; or the CPUs of the local Ray cluster started for the run), `inspect` as
    `sim_pool.run_pool` takes it. Progress: infralab/progress.py."""
    kept = [i for i in indices if not space.pruned(i)]
    sims = [SimJob(config=space.points[i], base_dir=str(space.base_dir), source=space.source) for i in kept]
    with progress(len(sims), f"search {space.info.name}", "config", enabled=show_progress) as tick:
        results = run_pool(sims, workers=jobs, inspect=inspect, on_done=tick, execution=execution)
    return dict(zip(kept, results))


def point_metrics(result: SimResult) -> dict[str, Any]:
    """A simulated point's METRICS."""
    return {name: result.metrics[name] for name in METRICS}


def pruned_metrics(space: Space, index: int) -> dict[str, Any]:
    """A pruned point's METRICS: the static ones from its config, the rest None."""
    return {name: space.static[index].get(name) for name in METRICS}


def run_points(
    space: Space, jobs: int = 2, show_progress: bool = True, execution: Execution = Execution()
) -> list[dict[str, Any] | None]:
    """Every point's METRICS in point order, None for a pruned point (never simulated)."""
    done = simulate(space, range(len(space.points)), jobs, execution, show_progress=show_progress)
    return [point_metrics(done[i]) if i in done else None for i in range(len(space.points))]


# ---- ranking and the Pareto front ---------------------------------------------------------------


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None if value is None else float(value)
    value = float(value)
    return value if math.isfinite(value) else None


def pareto_front(points: Sequence[tuple[float, float]], x_goal: str = "min", y_goal: str = "max") -> list[int]:
    """Indices of the points no other point dominates, sorted by x then index.

    A dominates B when A is at least as good on both axes and strictly better on one (goals
    "min"/"max" per axis). Equal points do not dominate each other: both stay on the front."""
    sx = 1.0 if x_goal == "min" else -1.0
    sy = 1.0 if y_goal == "min" else -1.0
    keyed = [(sx * x, sy * y) for x, y in points]  # both axes minimised from here on
    front = []
    for i, (xi, yi) in enumerate(keyed):
        dominated = any(
            xj <= xi and yj <= yi and (xj < xi or yj < yi) for j, (xj, yj) in enumerate(keyed) if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], i))


def feasibility(space: Space, metrics: dict[str, Any]) -> list[str]:
    """The constraints `metrics` violates (a constraint on an undefined metric counts as violated)."""
    return violations(space.constraints, metrics)


def violations(constraints: Sequence[Criterion], metrics: dict[str, Any]) -> list[str]:
    """The texts of `constraints` that `metrics` violates (undefined or missing metric: violated)."""
    violated = []
    for crit in constraints:
        try:
            ok = bool(evaluate(crit, metrics))
        except (TypeError, KeyError, ArithmeticError):  # a None metric (no finished request), or x / 0, cannot satisfy it
            ok = False
        if not ok:
            violated.append(crit.text)
    return violated


def build_report(space: Space, results: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """The search.json document from the points' metrics (None: a pruned point)."""
    points = []
    for i, (knobs, metrics) in enumerate(zip(space.knobs, results)):
        pruned = metrics is None
        if pruned:
            metrics = pruned_metrics(space, i)
            violated = space.pruned(i)
        else:
            violated = feasibility(space, metrics)
        points.append({"index": i, "label": point_label(i, knobs), "knobs": dict(knobs), "metrics": metrics,
                       "feasible": not violated, "pruned": pruned, "violated": violated, "on_pareto_front": False})
    px, py = space.info.pareto.x, space.info.pareto.y
    candidates = [p for p in points if p["feasible"] and _number(p["metrics"][px]) is not None
                  and _number(p["metrics"][py]) is not None]
    front = pareto_front([(_number(p["metrics"][px]), _number(p["metrics"][py])) for p in candidates], "min", "max")
    front_indices = [candidates[i]["index"] for i in front]
    for i in front_indices:
        points[i]["on_pareto_front"] = True
    sign = -1.0 if space.objective_goal == "max" else 1.0
    ranked = sorted(
        (p for p in points if p["feasible"] and _number(p["metrics"][space.objective_metric]) is not None),
        key=lambda p: (sign * _number(p["metrics"][space.objective_metric]), p["index"]),
    )
    best = [{"rank": r, "index": p["index"], "knobs": p["knobs"], "objective": p["metrics"][space.objective_metric]}
            for r, p in enumerate(ranked[: space.info.top], start=1)]
    return {
        "schema": SCHEMA,
        "name": space.info.name,
        "space": Path(space.source).name,
        "base": space.base_name,
        "seed": space.info.seed,
        "overrides": list(space.overrides),
        "axes": [{"key": k, "values": list(v)} for k, v in space.axes],
        "fixed": dict(space.fixed),
        "objective": {"metric": space.objective_metric, "goal": space.objective_goal},
        "constraints": [c.text for c in space.constraints],
        "pareto_axes": {"x": {"metric": px, "goal": "min"}, "y": {"metric": py, "goal": "max"}},
        "points": points,
        "feasible": sum(p["feasible"] for p in points),
        "pruned": sum(p["pruned"] for p in points),
        "best": best,
        "pareto_front": front_indices,
        "nearest_misses": nearest_misses(space, points) if not best else [],
        "nearest_miss_rule": NEAREST_MISS_RULE,
    }


NEAREST_MISS_RULE = (
    "when no point meets the constraints: the simulated points ranked by how many constraints they "
    "violate, then by the sum of their shortfalls (per violated comparison L op R: |L - R| / max(|L|, "
    "|R|); 1 for `not saturated` and other non-comparisons; inf when a metric is undefined), then by index"
)


def nearest_misses(space: Space, points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `space.info.top` simulated points closest to feasible (NEAREST_MISS_RULE)."""
    scored = []
    for p in points:
        if p["pruned"]:
            continue
        gaps = {c.text: shortfall(c, p["metrics"]) for c in space.constraints if c.text in p["violated"]}
        scored.append((len(gaps), sum(gaps.values()), p["index"], gaps))
    scored.sort(key=lambda s: s[:3])
    return [{"rank": r, "index": i, "label": points[i]["label"], "knobs": points[i]["knobs"],
             "violated": [{"constraint": text, "shortfall": _finite_or_none(gap)} for text, gap in gaps.items()]}
            for r, (_, _, i, gaps) in enumerate(scored[: space.info.top], start=1)]


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def point_label(index: int, knobs: Sequence[tuple[str, Any]]) -> str:
    """`#index key=value, ...` with each key's last dotted part (engine.max_batched_tokens ->
    max_batched_tokens): what a figure and the text name a point by."""
    return f"#{index} " + ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in knobs)


# ---- outputs ------------------------------------------------------------------------------------


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return value


def write_csv(report: dict[str, Any], path: Path) -> None:
    """One row per point: index, the axis values, feasible, pruned, on_pareto_front, then METRICS
    (empty for a pruned point, except the STATIC_METRICS)."""
    keys = [a["key"] for a in report["axes"]]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["index", *keys, "feasible", "pruned", "on_pareto_front", *METRICS])
        for p in report["points"]:
            writer.writerow([p["index"], *(_csv_value(p["knobs"][k]) for k in keys), p["feasible"], p["pruned"],
                             p["on_pareto_front"], *(_csv_value(p["metrics"][m]) for m in METRICS)])


def pareto_figure(report: dict[str, Any], path: Path) -> None:
    """Every simulated point (feasible: filled, infeasible: grey x), the Pareto front as a line;
    front points are labelled "#index" (alternately above and below the line, so that neighbours
    do not collide) and named in full in the legend; log axes where values span decades
    (agent/figure_style.py)."""
    px, py = report["pareto_axes"]["x"]["metric"], report["pareto_axes"]["y"]["metric"]
    drawn = [p for p in report["points"] if not p["pruned"]
             and _number(p["metrics"][px]) is not None and _number(p["metrics"][py]) is not None]
    with figure_style.styled() as plt:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for feasible, style in ((False, {"marker": "x", "color": "#999999", "label": "violates a constraint"}),
                                (True, {"marker": "o", "color": figure_style.colour(0), "label": "feasible"})):
            pts = [p for p in drawn if p["feasible"] == feasible]
            if pts:
                ax.scatter([p["metrics"][px] for p in pts], [p["metrics"][py] for p in pts], **style)
        front = [report["points"][i] for i in report["pareto_front"]]
        if front:
            ax.plot([p["metrics"][px] for p in front], [p["metrics"][py] for p in front], color=figure_style.colour(1),
                    drawstyle="steps-post", label="Pareto front")
            for k, p in enumerate(front):
                above = k % 2 == 0
                ax.annotate(f"#{p['index']}", (p["metrics"][px], p["metrics"][py]), fontsize=7,
                            xytext=(-4, 6) if above else (4, -10), textcoords="offset points",
                            ha="right" if above else "left")
                ax.plot([], [], linestyle="none", label=p["label"])  # the legend names each front point
        figure_style.scale_axes(ax, [p["metrics"][px] for p in drawn], [p["metrics"][py] for p in drawn])
        ax.set_xlabel(f"{px} (lower is better)")
        ax.set_ylabel(f"{py} (higher is better)")
        pruned = f", {report['pruned']} pruned before simulating" if report["pruned"] else ""
        ax.set_title(f"search {report['name']}: {report['feasible']}/{len(report['points'])} feasible{pruned}")
        fig.legend(loc="outside lower center", ncol=2, frameon=False)
        figure_style.save(fig, path.with_suffix(""), formats=("png",))


def format_text(report: dict[str, Any]) -> str:
    obj = report["objective"]
    pruned = f"; {report['pruned']} pruned before simulating" if report["pruned"] else ""
    lines = [f"search {report['name']}: {len(report['points'])} configurations of {report['base']}, "
             f"{report['feasible']} meet the constraints ({'; '.join(report['constraints']) or 'none'}){pruned}"]
    lines.append(f"best by {obj['goal']} {obj['metric']}:")
    for b in report["best"]:
        knobs = ", ".join(f"{k}={v}" for k, v in b["knobs"].items())
        lines.append(f"  {b['rank']}. #{b['index']} {knobs}: {b['objective']:.6g}")
    if not report["best"]:
        lines.append("  (no configuration meets the constraints)")
    if report["nearest_misses"]:
        lines.append("nearest misses (fewest violated constraints, then smallest relative shortfall):")
        for m in report["nearest_misses"]:
            misses = "; ".join(f"{v['constraint']} (short by " + ("undefined" if v["shortfall"] is None
                               else f"{100 * v['shortfall']:.0f}%") + ")" for v in m["violated"])
            lines.append(f"  {m['rank']}. {m['label']}: {misses}")
    px, py = report["pareto_axes"]["x"]["metric"], report["pareto_axes"]["y"]["metric"]
    lines.append(f"Pareto front ({px} min, {py} max):")
    for i in report["pareto_front"]:
        p = report["points"][i]
        knobs = ", ".join(f"{k}={v}" for k, v in p["knobs"].items())
        lines.append(f"  #{i} {knobs}: {px}={p['metrics'][px]:.6g}, {py}={p['metrics'][py]:.6g}")
    return "\n".join(lines) + "\n"


def run_search(
    space_path: str | Path,
    out: str | Path,
    jobs: int = 2,
    progress: bool = True,
    execution: Execution = Execution(),
    overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """Everything `infralab search` does: validate (with the `--set` overrides), run every point on
    `execution`'s backend, write DIR/search.json, DIR/search.csv and DIR/pareto.png atomically;
    returns the report."""
    if jobs < 1:
        raise InputError("--jobs", f"{jobs}", "a positive number of processes")
    space = load_space(space_path, overrides)
    with atomic_output_dir(out) as tmp:
        results = run_points(space, jobs=jobs, show_progress=progress, execution=execution)
        report = build_report(space, results)
        dump_json(report, tmp / "search.json")
        write_csv(report, tmp / "search.csv")
        pareto_figure(report, tmp / "pareto.png")
    return report
