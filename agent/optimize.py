"""`infralab optimize SPACE.toml --out DIR`: walk a search space (the `search` file format) one
trial at a time, each next point chosen from the feedback of the runs so far.

The explain-guided method reads, for the best point so far, where its requests' time went (the
request phases of `infralab explain`: queue, prefill, kv_wait, kv_transfer, decode, per finished
request) and which bounds are tight (the violated constraints, else how close each constraint is,
and the accelerators a per-accelerator objective divides by). It weighs each cause by that feedback
and scores every untried point one axis away by what its change acts on: the difference of the two
configs in the fields the simulator declares (`infralab.sim.knob_effects`: which causes a field
moves when it goes up). It tries the best-scoring one (a finding: the cause read, the knob moved,
the prediction, the measured effect, kept or reverted) and, when no neighbour is predicted to help,
a random untried point. Nothing here names a study or a knob: the table of causes per knob is the
simulator's, and any knob without a declaration is only tried by the random step.

With `--confirm` (the explain-guided method, one seed) the ladder's next rung decides each step the
simulator would keep: the point is run on the real engine (`infralab real run` of the space's base
config with the point's knobs set; its run folder under DIR/real/), and the step is kept only if the
real engine's objective also beats the real objective of the best point so far (the start point is
run too); otherwise it is reverted and the finding says the real rung decided. A space whose knobs
the real engine does not read (the simulator's `[hardware]`, `[cost]`, `[cluster]`) is refused.

Baselines on the same space and budget, through one interface: `grid` (the points in the space's
order), `random` (a seeded permutation) and `tpe` (Optuna's TPE sampler, seeded, one categorical
parameter per axis). `compare` runs every method over several seeds against one table of the
points' results (each point is simulated at most once: the simulator is deterministic per config
and seed) and reports trials to reach 95 % of the best objective any method found.
"""

from __future__ import annotations

import ast
import json
import math
import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from infralab.agent.acceptance import Criterion, comparison_sides
from infralab.agent.search import Space, load_space, point_label, point_metrics, pruned_metrics, simulate, violations
from infralab.agent.sim_pool import Execution
from infralab.errors import InputError
from infralab.overrides import dotted_keys
from infralab.sim.knob_effects import KNOB_EFFECTS, KNOB_SCALES, knob_value

SCHEMA = "infralab.optimize/1"
METHODS: tuple[str, ...] = ("explain", "grid", "random", "tpe")
TARGET_FRACTION = 0.95  # "reached": within 5 % of the best objective any method found

# The request phases each latency metric is made of (a metric family of infralab.metrics.summary):
# what a violated or tight constraint on it points at.
METRIC_PHASES: Mapping[str, tuple[str, ...]] = {
    "ttft": ("encode", "queue", "prefill"),
    "tpot": ("decode",),
    "itl": ("decode",),
    "e2e": ("encode", "queue", "prefill", "kv_wait", "kv_transfer", "decode"),
    "saturated": ("queue",),
}


@dataclass(frozen=True)
class Declarations:
    """What the explain-guided method reads about a space besides its runs: per knob (dotted path),
    which causes raising it moves (-1 down, +1 up); the number a named value stands for; per metric
    family (a substring of metric names), the causes its value is made of; the cause an infeasible
    point with no measured causes points at (None: none)."""

    effects: Mapping[str, Mapping[str, int]]
    scales: Mapping[str, Mapping[str, float]]
    metric_causes: Mapping[str, tuple[str, ...]]
    fallback: str | None = None

    def value(self, path: str, value: object) -> float | None:
        """The number a knob's value stands for (None: no direction), by these scales."""
        return knob_value(path, value, self.scales)


# The simulator's: its knobs' declarations (infralab.sim.knob_effects) and the request phases of its
# latency metrics; a saturated run's time goes to the queue.
SIM_DECLARATIONS = Declarations(KNOB_EFFECTS, KNOB_SCALES, METRIC_PHASES, "queue")


def declarations_of(space: Space) -> Declarations:
    """A space's declarations: its own (a hook space's), else the simulator's."""
    own = space.declarations
    return own if isinstance(own, Declarations) else SIM_DECLARATIONS


# ---- one point's result ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PointResult:
    """A simulated point: its metrics (search's METRICS), the mean seconds per finished request
    of each request phase, and the constraints it violates."""

    index: int
    metrics: Mapping[str, Any]
    phases: Mapping[str, float]
    violated: tuple[str, ...]


def phase_means(record: Any, summary: Any) -> dict[str, float]:
    """Mean seconds per finished request of each request phase (explain's split of the latency);
    runs in the simulation worker (`sim_pool.Inspect`)."""
    from infralab.agent.explain import request_phases

    totals: dict[str, float] = {}
    finished = [r for r in record.requests if not math.isnan(r.finish_s)]
    for req in finished:
        for phase, seconds in request_phases(req).items():
            totals[phase] = totals.get(phase, 0.0) + seconds
    return {phase: total / len(finished) for phase, total in totals.items()} if finished else {}


Evaluate = Callable[[int], PointResult]
Confirm = Callable[[int], PointResult]  # a point's result on the next rung of the ladder (the real engine)


def simulator(space: Space, execution: Execution = Execution()) -> Evaluate:
    """Evaluate point `index` of `space` with the simulator (once: results are kept)."""
    done: dict[int, PointResult] = {}

    def evaluate(index: int) -> PointResult:
        if index not in done:
            done.update(simulate_points(space, [index], jobs=1, execution=execution))
        return done[index]

    return evaluate


def simulate_points(space: Space, indices: Sequence[int], jobs: int = 2,
                    execution: Execution = Execution()) -> dict[int, PointResult]:
    """The results of `indices` (pruned points are infeasible without a run), `jobs` at once."""
    done = simulate(space, indices, jobs, execution, inspect=phase_means)
    out: dict[int, PointResult] = {}
    for i in indices:
        if i in done:
            metrics = point_metrics(done[i])
            out[i] = PointResult(i, metrics, dict(done[i].details), tuple(violations(space.constraints, metrics)))
        else:
            out[i] = PointResult(i, pruned_metrics(space, i), {}, tuple(space.pruned(i)))
    return out


def objective(space: Space, result: PointResult) -> float | None:
    """The objective of a feasible point, signed so that larger is better; None if infeasible."""
    value = result.metrics.get(space.objective_metric)
    if result.violated or value is None or isinstance(value, bool) or not math.isfinite(float(value)):
        return None
    return float(value) if space.objective_goal == "max" else -float(value)


# ---- the trials ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trial:
    """One trial: the point tried, its objective (None: infeasible), the best so far after it,
    and, for the explain-guided method, the step's finding."""

    number: int
    index: int
    label: str
    objective: float | None
    best: float | None
    finding: Mapping[str, Any] = field(default_factory=dict)


def _trial(space: Space, number: int, result: PointResult, best: float | None, finding: Mapping[str, Any],
           counts: bool = True) -> Trial:
    """Trial `number` of `result`; `counts`: whether its objective may become the best so far (False:
    a step the real rung reverted)."""
    value = objective(space, result)
    best = value if counts and (best is None or (value is not None and value > best)) else best
    return Trial(number, result.index, point_label(result.index, space.knobs[result.index]), value, best, finding)


def _neighbours(space: Space, index: int) -> list[int]:
    """Points one axis away from `index` (any other value of one axis)."""
    sizes = [len(values) for _, values in space.axes]
    coords = _coords(index, sizes)
    out = []
    for axis, size in enumerate(sizes):
        for value in range(size):
            if value != coords[axis]:
                out.append(_index([*coords[:axis], value, *coords[axis + 1:]], sizes))
    return out


def _coords(index: int, sizes: Sequence[int]) -> list[int]:
    coords = []
    for size in reversed(sizes):  # last axis fastest, as the space's points are ordered
        coords.append(index % size)
        index //= size
    return coords[::-1]


def _index(coords: Sequence[int], sizes: Sequence[int]) -> int:
    index = 0
    for c, size in zip(coords, sizes):
        index = index * size + c
    return index


def _numeric_fields(data: Mapping[str, Any], decl: Declarations) -> dict[str, float]:
    """A config's fields that have a direction (numbers, and names with a declared scale), by
    dotted path."""
    values = {path: decl.value(path, value) for path, value in dotted_keys(dict(data)).items()}
    return {path: value for path, value in values.items() if value is not None}


def predicted_effect(space: Space, a: int, b: int) -> dict[str, int]:
    """What moving from point `a` to point `b` acts on: per cause, the sum over the config fields
    that differ of the declared sign of the field's effect times the sign of its change."""
    decl = declarations_of(space)
    before, after = _numeric_fields(space.points[a], decl), _numeric_fields(space.points[b], decl)
    effect: dict[str, int] = {}
    for path, value in after.items():
        old = before.get(path)
        if old is None or old == value:
            continue
        direction = 1 if value > old else -1
        for cause, sign in decl.effects.get(path, {}).items():
            effect[cause] = effect.get(cause, 0) + sign * direction
    return effect


def cause_weights(space: Space, result: PointResult) -> dict[str, float]:
    """How much each cause limits the point, from its feedback. Infeasible: the phases of the
    violated constraints' metrics, by their seconds per request (no finished request to read: the
    queue, where a saturated run's time goes). Feasible: `accelerators` (1) when
    the objective is per accelerator; a latency objective to minimise, its phases by their share
    of its time (1 in all); and the phases of every constraint by how tight it is (value / bound)
    and their share of the metric's time, so that moves which add to a tight phase score lower."""
    metrics, decl = result.metrics, declarations_of(space)
    weights: dict[str, float] = {}
    if result.violated:
        for crit in space.constraints:
            if crit.text in result.violated:
                for phase in _phases_of(crit.names, decl):
                    weights[phase] = weights.get(phase, 0.0) + result.phases.get(phase, 0.0)
        total = sum(weights.values())
        if total > 0:
            return {c: w / total for c, w in weights.items() if w > 0}
        return {decl.fallback: 1.0} if decl.fallback is not None else {}
    if space.objective_metric.endswith("_per_accelerator"):
        weights["accelerators"] = 1.0 if space.objective_goal == "max" else -1.0
    if space.objective_goal == "min":
        _add_shares(weights, result, _phases_of([space.objective_metric], decl), 1.0)
    for crit in space.constraints:
        _add_shares(weights, result, _phases_of(crit.names, decl), _tightness(crit, metrics))
    return weights


def _add_shares(weights: dict[str, float], result: PointResult, phases: Sequence[str], scale: float) -> None:
    """Add to `weights` each of `phases` at `scale` x its share of their seconds per request."""
    seconds = sum(result.phases.get(p, 0.0) for p in phases)
    for p in phases:
        if seconds > 0:
            weights[p] = weights.get(p, 0.0) + scale * result.phases.get(p, 0.0) / seconds


def _phases_of(names: Iterable[str], decl: Declarations = SIM_DECLARATIONS) -> tuple[str, ...]:
    """The causes of the metrics `names` (by family: for the simulator ttft, tpot, itl, e2e, saturated)."""
    found: list[str] = []
    for name in sorted(names):
        for family, phases in decl.metric_causes.items():
            if family in name:
                found += [p for p in phases if p not in found]
    return tuple(found)


def _tightness(crit: Criterion, metrics: Mapping[str, Any]) -> float:
    """value / bound of a constraint `value <= bound` (0 for any other form, or when it cannot
    be evaluated)."""
    if not isinstance(crit.tree.body, ast.Compare) or not isinstance(crit.tree.body.ops[0], ast.LtE):
        return 0.0
    try:
        sides = comparison_sides(crit, metrics)
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return 0.0
    if sides is None:
        return 0.0
    value, limit = sides
    return value / limit if limit > 0 else 0.0


def explain_guided(space: Space, evaluate: Evaluate, budget: int, seed: int,
                   confirm: Confirm | None = None) -> list[Trial]:
    """The explain-guided walk (module docstring): start at a seeded random point, then at each
    step the untried neighbour of the best point whose predicted effect the best point's feedback
    favours most, or a random untried point when none is favoured. With `confirm`, a step the
    simulator would keep is kept only if the real rung's objective beats its best so far."""
    rng = random.Random(seed)
    untried = list(range(len(space.points)))
    trials: list[Trial] = []
    anchor = rng.choice(untried)
    step: Mapping[str, Any] = {"move": "start", "reason": "a seeded random point"}
    best_result: PointResult | None = None
    real_best: float | None = None  # the real rung's objective of the best point so far
    while untried and len(trials) < budget:
        untried.remove(anchor)
        result = evaluate(anchor)
        previous = trials[-1].best if trials else None
        value = objective(space, result)
        kept = value is not None and (previous is None or value > previous)
        finding: dict[str, Any] = {**step, "measured": _measured(space, result)}
        if kept and confirm is not None:
            real_result = confirm(anchor)
            real = objective(space, real_result)
            confirmed = real is not None and (real_best is None or real > real_best)
            finding["real"] = {**_measured(space, real_result), "confirms": confirmed,
                               "best_before": _signed(space, real_best)}
            if confirmed:
                real_best = real
            kept = confirmed
        if best_result is None or kept or (previous is None and value is None and _closer(result, best_result)):
            best_result = result
        finding["kept"] = kept
        if "real" in finding:
            finding["decided_by"] = "real"
        trials.append(_trial(space, len(trials) + 1, result, previous, finding, counts=confirm is None or kept))
        if not untried:
            break
        anchor, step = _next_point(space, best_result, untried, rng)
    return trials


def _closer(result: PointResult, other: PointResult) -> bool:
    """Between two infeasible points, the one that violates fewer constraints."""
    return len(result.violated) < len(other.violated)


def _measured(space: Space, result: PointResult) -> dict[str, Any]:
    value = result.metrics.get(space.objective_metric)
    return {space.objective_metric: value, "violated": list(result.violated),
            "phases_s": {p: round(s, 6) for p, s in sorted(result.phases.items())}}


def _next_point(space: Space, best: PointResult, untried: list[int],
                rng: random.Random) -> tuple[int, Mapping[str, Any]]:
    weights = cause_weights(space, best)
    scored = []
    for candidate in _neighbours(space, best.index):
        if candidate in untried:
            effect = predicted_effect(space, best.index, candidate)
            score = -sum(weights.get(cause, 0.0) * sign for cause, sign in effect.items())
            scored.append((score, rng.random(), candidate, effect))
    scored.sort(key=lambda s: (-s[0], s[1]))
    top_cause = max(weights, key=lambda c: weights[c]) if weights else None
    if scored and scored[0][0] > 0:
        score, _, candidate, effect = scored[0]
        changed = [k for (k, v), (_, w) in zip(space.knobs[best.index], space.knobs[candidate]) if v != w]
        # the cause the move is chosen for: the largest part of its score
        gains = {cause: -weights.get(cause, 0.0) * sign for cause, sign in effect.items()}
        return candidate, {
            "move": "guided", "from": point_label(best.index, space.knobs[best.index]),
            "cause": max(gains, key=lambda c: gains[c]), "weights": {c: round(w, 4) for c, w in sorted(weights.items())},
            "knob": {k: dict(space.knobs[candidate])[k] for k in changed},
            "prediction": {c: ("down" if s < 0 else "up") for c, s in sorted(effect.items()) if s},
            "score": round(score, 4)}
    candidate = rng.choice(untried)
    return candidate, {"move": "explore", "cause": top_cause,
                       "reason": "no untried neighbour of the best point is predicted to help"}


def grid(space: Space, evaluate: Evaluate, budget: int, seed: int) -> list[Trial]:
    """The points in the space's order (the seed is unused: the grid has one order)."""
    return _walk(space, evaluate, list(range(len(space.points)))[:budget])


def random_search(space: Space, evaluate: Evaluate, budget: int, seed: int) -> list[Trial]:
    """A seeded random permutation of the points."""
    order = list(range(len(space.points)))
    random.Random(seed).shuffle(order)
    return _walk(space, evaluate, order[:budget])


def _walk(space: Space, evaluate: Evaluate, order: Sequence[int]) -> list[Trial]:
    trials: list[Trial] = []
    for index in order:
        trials.append(_trial(space, len(trials) + 1, evaluate(index), trials[-1].best if trials else None, {}))
    return trials


def tpe(space: Space, evaluate: Evaluate, budget: int, seed: int) -> list[Trial]:
    """Optuna's TPE sampler (seeded), one categorical parameter per axis (value indices); an
    infeasible point scores below every feasible one. A point it proposes again counts as a
    trial (it spent one), as it would in a study with a budget of trials."""
    try:
        import optuna
    except ImportError as exc:
        raise InputError("--methods tpe", f"needs Optuna ({exc.name} is not installed)",
                         "the extra infralab[optimize] (`make setup` installs it)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sizes = [len(values) for _, values in space.axes]
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    trials: list[Trial] = []
    floor = -1e300
    for _ in range(min(budget, len(space.points) * 4)):
        ask = study.ask()
        coords = [ask.suggest_categorical(f"axis{a}", list(range(size))) for a, size in enumerate(sizes)]
        result = evaluate(_index(coords, sizes))
        trial = _trial(space, len(trials) + 1, result, trials[-1].best if trials else None, {})
        trials.append(trial)
        study.tell(ask, floor if trial.objective is None else trial.objective)
        if len(trials) >= budget:
            break
    return trials


METHOD_FUNCTIONS: Mapping[str, Callable[[Space, Evaluate, int, int], list[Trial]]] = {
    "explain": explain_guided, "grid": grid, "random": random_search, "tpe": tpe}


# ---- comparison --------------------------------------------------------------------------------------


def trials_to_reach(trials: Sequence[Trial], target: float) -> int | None:
    """The number of the first trial whose best-so-far reaches `target` (None: never)."""
    return next((t.number for t in trials if t.best is not None and t.best >= target), None)


def target_of(best: float) -> float:
    """95 % of the best objective (larger is better; for a minimised objective, stored negated,
    within 5 % of it)."""
    return best * TARGET_FRACTION if best >= 0 else best / TARGET_FRACTION


def compare(space: Space, evaluate: Evaluate, methods: Sequence[str], budget: int,
            seeds: Sequence[int], confirm: Confirm | None = None) -> dict[str, Any]:
    """Every method over every seed on the same space and budget; trials to reach 95 % of the
    best objective any method found (None: not within the budget), per method: median and
    spread over the seeds. `confirm`: the real rung of the explain-guided method's steps."""
    def walk(method: str, seed: int) -> list[Trial]:
        if method == "explain" and confirm is not None:
            return explain_guided(space, evaluate, budget, seed, confirm)
        return METHOD_FUNCTIONS[method](space, evaluate, budget, seed)

    runs = {m: {s: walk(m, s) for s in seeds} for m in methods}
    found = [t.best for by_seed in runs.values() for trials in by_seed.values() for t in trials if t.best is not None]
    best = max(found) if found else None  # None: no method found a feasible point
    target = target_of(best) if best is not None else None
    summary = {}
    for m, by_seed in runs.items():
        reached = {s: trials_to_reach(trials, target) if target is not None else None for s, trials in by_seed.items()}
        counts = [n if n is not None else budget + 1 for n in reached.values()]
        summary[m] = {"trials_to_target": reached, "median": statistics.median(counts),
                      "min": min(counts), "max": max(counts),
                      "reached": sum(n is not None for n in reached.values()), "seeds": len(seeds)}
    return {"best": _signed(space, best), "target": _signed(space, target), "budget": budget, "seeds": list(seeds),
            "methods": summary, "trials": {m: {str(s): [asdict(t) for t in trials] for s, trials in by_seed.items()}
                                           for m, by_seed in runs.items()}}


def _signed(space: Space, value: float | None) -> float | None:
    if value is None:
        return None
    return value if space.objective_goal == "max" else -value


# ---- the command -------------------------------------------------------------------------------------


def real_rung(space: Space, out: Path) -> Confirm:
    """Run point `index` of `space` on the real engine, once: `infralab real run` of the space's base
    config with the space's fixed knobs and the point's axes set (`--set`), its seed, its run folder
    at `out/point-<index>`. The result's metrics are search's METRICS of the real run's summary;
    its phases are not read (the simulator's feedback guides the walk, the real rung only decides)."""
    import io

    from infralab.agent.search import METRICS
    from infralab.agent.sim_pool import config_metrics
    from infralab.config_io import validate
    from infralab.real.run import run_real_config_file
    from infralab.sim.config import SimConfig

    base = space.base_dir / space.base_name
    done: dict[int, PointResult] = {}

    def confirm(index: int) -> PointResult:
        if index not in done:
            sets = [f"{key}={json.dumps(value)}" for key, value in (*space.fixed, *space.knobs[index])]
            summary = run_real_config_file(base, out / f"point-{index}", overrides=sets, seed=space.info.seed,
                                           stdout=io.StringIO())
            cfg = validate(SimConfig, dict(space.points[index]), space.source)
            flat = config_metrics(summary, cfg)
            metrics = {name: flat[name] for name in METRICS}
            done[index] = PointResult(index, metrics, {}, tuple(violations(space.constraints, metrics)))
        return done[index]

    return confirm


def check_confirmable(space: Space) -> None:
    """InputError unless the real engine reads every knob the space's axes move (`real.config`'s
    simulator-only tables and engine fields are not read there; a fixed one, such as the step
    table the simulator times the engine by, is the same at every point and is allowed)."""
    from infralab.real.config import SIM_ONLY_ENGINE_FIELDS, SIM_ONLY_TABLES

    for key, _ in space.axes:
        parts = key.split(".")
        if parts[0] in SIM_ONLY_TABLES or (parts[0] == "engine" and parts[-1] in SIM_ONLY_ENGINE_FIELDS):
            raise InputError(f"{space.source}: {key}", "is read by the simulator only, so the real engine cannot "
                             "confirm a move of it", "--confirm on a space whose knobs the real engine reads "
                             f"(not [{'], ['.join(SIM_ONLY_TABLES)}], nor engine.{', engine.'.join(SIM_ONLY_ENGINE_FIELDS)})")


def table_evaluator(results: Mapping[int, PointResult]) -> Evaluate:
    """Evaluate from a table of the points' results (what `compare` replays every method on)."""
    return lambda index: results[index]


def run_optimize(space_path: str | Path, out: str | Path, methods: Sequence[str] = ("explain",), budget: int = 20,
                 seeds: Sequence[int] = (0,), jobs: int = 2, overrides: Sequence[str] = (),
                 execution: Execution = Execution(), confirm: bool = False) -> dict[str, Any]:
    """Everything `infralab optimize` does: validate the space, run the methods (with more than
    one method or seed, every point is simulated once up front, `jobs` at once, and each method
    sees only the points it asks for), write DIR/optimize.json and DIR/trajectory.png atomically;
    returns the report. `confirm`: the real rung decides the explain-guided method's steps (one
    method, one seed; the real runs' folders in DIR/real/)."""
    from infralab.results import atomic_output_dir, dump_json

    unknown = [m for m in methods if m not in METHOD_FUNCTIONS]
    if unknown or not methods:
        raise InputError("--methods", f"unknown method {unknown[0]!r}" if unknown else "names no method",
                         f"a comma-separated list of {', '.join(METHODS)}")
    if budget < 1:
        raise InputError("--budget", f"{budget}", "a positive number of trials")
    if confirm and (tuple(methods) != ("explain",) or len(seeds) != 1):
        raise InputError("--confirm", f"with --methods {','.join(methods)} and {len(seeds)} seed(s)",
                         "--methods explain and one seed: the real rung decides one walk's steps")
    from infralab.agent.hook_space import hook_results, is_hook_space, load_hook_space

    hooked = is_hook_space(space_path)
    if hooked and (overrides or confirm):
        raise InputError("--set" if overrides else "--confirm", "with a SPACE file that names a hook",
                         "a SPACE file over a simulation config (its base)")
    if hooked:
        space, run_point = load_hook_space(space_path)
    else:
        space = load_space(space_path, overrides)
    if confirm:
        check_confirmable(space)
    with atomic_output_dir(out) as tmp:
        if hooked:  # the study's own model: fast, evaluated here, every point once
            evaluate = table_evaluator(hook_results(space, run_point, range(len(space.points))))
        elif len(methods) > 1 or len(seeds) > 1:
            evaluate = table_evaluator(simulate_points(space, range(len(space.points)), jobs=jobs, execution=execution))
        else:
            evaluate = simulator(space, execution)
        rung = real_rung(space, tmp / "real") if confirm else None
        result = compare(space, evaluate, methods, min(budget, len(space.points)), seeds, confirm=rung)
        report = {"schema": SCHEMA, "space": space.source, "objective": f"{space.objective_goal} {space.objective_metric}",
                  "constraints": [c.text for c in space.constraints], "points": len(space.points),
                  "target_fraction": TARGET_FRACTION, **result}
        if confirm:
            report["confirm"] = {"rung": "real", "runs": str(Path("real") / "point-<index>")}
        dump_json(report, tmp / "optimize.json")
        trajectory_figure(report, space, tmp / "trajectory.png")
    return report


def trajectory_figure(report: Mapping[str, Any], space: Space, path: Path) -> None:
    """Best objective so far by trial, per method (the median over seeds), with the first seed's
    explain-guided steps annotated by the knob they moved and the cause they read."""
    from infralab.agent import figure_style

    sign = 1.0 if space.objective_goal == "max" else -1.0
    with figure_style.styled() as plt:
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        for i, (method, by_seed) in enumerate(report["trials"].items()):
            length = max(len(t) for t in by_seed.values())
            medians = []
            for n in range(length):
                # a seed with no feasible point yet ranks below every value (not left out, which
                # would make the median of the others jump)
                bests = [trials[min(n, len(trials) - 1)]["best"] for trials in by_seed.values()]
                middle = statistics.median(-math.inf if b is None else b for b in bests)
                medians.append(sign * middle if math.isfinite(middle) else float("nan"))
            ax.plot(range(1, length + 1), medians, marker=figure_style.marker(i), markersize=3,
                    color=figure_style.colour(i), label=method)
        first = next(iter(report["trials"].get("explain", {}).values()), [])
        for t in first:
            knob = t["finding"].get("knob")
            if knob and t["objective"] is not None:
                text = ", ".join(f"{k}={v}" for k, v in knob.items())
                ax.annotate(f"{text} ({t['finding'].get('cause')})", (t["number"], sign * t["objective"]),
                            fontsize=6, rotation=20, xytext=(3, 4), textcoords="offset points")
        if report["target"] is not None:
            ax.axhline(report["target"], color="grey", linestyle=":", linewidth=1, label="95 % of the best found")
        ax.set_xlabel("trial")
        ax.set_ylabel(f"best {space.objective_metric} so far\n(median over seeds)")
        ax.legend(fontsize=8)
        fig.savefig(path, dpi=130, bbox_inches="tight")
        plt.close(fig)


def format_text(report: Mapping[str, Any]) -> str:
    """The comparison as a table: trials to 95 % of the best found, median [min..max] over seeds."""
    lines = [f"optimize {report['space']}: {report['objective']}, {report['points']} points, budget "
             f"{report['budget']} trials, seeds {report['seeds']}",
             (f"best found {report['best']:.6g}; target (95 %) {report['target']:.6g}" if report["best"] is not None
              else "no method found a point that meets the constraints within the budget"),
             f"{'method':<10} {'trials to target: median [min..max]':<38} reached"]
    for method, s in report["methods"].items():
        never = " (budget+1 = not reached)" if s["reached"] < s["seeds"] else ""
        lines.append(f"{method:<10} {s['median']:>6g} [{s['min']}..{s['max']}]{never:<26} {s['reached']}/{s['seeds']}")
    if "confirm" in report:
        metric = report["objective"].split()[-1]
        lines.append(f"steps the simulator would keep, decided by the real engine ({metric}: simulated / real):")
        for trials in report["trials"]["explain"].values():
            for t in trials:
                real = t["finding"].get("real")
                if real is not None:
                    verdict = "kept" if real["confirms"] else "reverted"
                    sim_value, real_value = (_shown(v[metric]) for v in (t["finding"]["measured"], real))
                    lines.append(f"  trial {t['number']} {t['label']}: {sim_value} / {real_value} -> {verdict}")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
