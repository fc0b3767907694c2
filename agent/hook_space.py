"""A search space whose points are not simulation configs: a study's own knobs, evaluated by the
study's Python file (`infralab optimize SPACE.toml` when `[search] hook` names one).

The SPACE file is the `search` format with `hook` in place of `base`:

    [search]
    name = "..."
    hook = "space.py"                    # next to the SPACE file
    objective = "minimize degradation"   # a metric the hook declares
    constraints = ["..."]                # acceptance-style, over the hook's metrics
    seed = 0                             # optional: passed to evaluate
    [axes]
    "scenario.page_tokens" = [1, 16, 64] # the hook's knob names and their values

The hook file declares, as module attributes:
- `METRICS`: the metric names `evaluate` returns;
- `EFFECTS`: per knob, the causes raising it moves ({cause: -1 | +1}), and `SCALES`: per knob whose
  values are names, the number each stands for (its direction);
- `METRIC_CAUSES`: per metric family (a substring of metric names), the causes its value is made of;
- `evaluate(knobs, seed) -> (metrics, causes)`: a point's metrics and the seconds (or any common
  unit) each cause contributed, the feedback the explain-guided method reads.
The optimiser reads only these (`infralab.agent.optimize.Declarations`); nothing here names a study.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic.dataclasses import dataclass

from infralab.agent.search import SearchInfo, Space, check_axes, parse_constraints, parse_objective, violations
from infralab.config_io import STRICT, load_toml, validate
from infralab.errors import InputError
from infralab.field_types import Int

HOOK_ATTRIBUTES = ("METRICS", "EFFECTS", "SCALES", "METRIC_CAUSES", "evaluate")


@dataclass(frozen=True, config=STRICT)
class HookSearchInfo:
    hook: str  # a Python file; relative paths resolve against the SPACE file's folder
    name: str = "search"
    seed: Int(ge=0, le=2**63 - 1) | None = None
    objective: str = "minimize degradation"
    constraints: tuple[str, ...] = ()


@dataclass(frozen=True, config=STRICT)
class HookSpaceFile:
    search: HookSearchInfo
    axes: dict[str, list[Any]]


def is_hook_space(path: str | Path) -> bool:
    """Whether the SPACE file at `path` names a hook (`[search] hook`) rather than a base config."""
    search = load_toml(Path(path)).get("search")
    return isinstance(search, dict) and "hook" in search


def load_hook_space(path: str | Path) -> tuple[Space, Callable[[Mapping[str, Any]], tuple[dict[str, Any], dict[str, float]]]]:
    """The space of a hook SPACE file and its evaluator (a point's knobs -> metrics, causes).
    InputError names the file and field for a bad file or a hook that lacks a declaration."""
    from infralab.agent.optimize import Declarations
    from infralab.agent.studies import load_hook

    path = Path(path)
    source = str(path)
    spec = validate(HookSpaceFile, load_toml(path), source)
    check_axes(spec.axes, source)
    hook_path = Path(spec.search.hook)
    hook_path = hook_path if hook_path.is_absolute() else path.resolve().parent / hook_path
    if not hook_path.is_file():
        raise InputError(f"{source}: search.hook", f"file not found: {spec.search.hook}", "a Python file next to the SPACE file")
    hook = load_hook(hook_path)
    missing = [name for name in HOOK_ATTRIBUTES if not hasattr(hook, name)]
    if missing:
        raise InputError(f"{hook_path}", f"declares no {', '.join(missing)}", f"the module attributes {', '.join(HOOK_ATTRIBUTES)}")
    metrics = tuple(hook.METRICS)
    metric, goal = parse_objective(spec.search.objective, f"{source}: search.objective", metrics)
    constraints = parse_constraints(spec.search.constraints, source, metrics)
    known = getattr(hook, "KNOBS", None)  # optional: the knobs the hook reads
    unknown_knobs = sorted(set(spec.axes) - set(known)) if known is not None else []
    if unknown_knobs:
        raise InputError(f"{source}: axes.{unknown_knobs[0]}", "not a knob of the hook", f"one of {', '.join(known)}")
    axes = tuple((key, tuple(values)) for key, values in spec.axes.items())
    knobs = tuple(tuple(zip((key for key, _ in axes), combo)) for combo in itertools.product(*(v for _, v in axes)))
    declarations = Declarations(effects=hook.EFFECTS, scales=hook.SCALES, metric_causes=hook.METRIC_CAUSES)
    info = SearchInfo(base=str(hook_path), name=spec.search.name, seed=spec.search.seed,
                      objective=spec.search.objective, constraints=spec.search.constraints)
    space = Space(source=source, info=info, axes=axes, fixed=(), objective_metric=metric,
                  objective_goal=goal, constraints=constraints,
                  base_dir=hook_path.parent, base_name=hook_path.name, points=tuple(dict(k) for k in knobs),
                  knobs=knobs, static=tuple({} for _ in knobs), declarations=declarations)
    seed = spec.search.seed if spec.search.seed is not None else 0

    def evaluate(point: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        return hook.evaluate(dict(point), seed)

    return space, evaluate


def hook_results(space: Space, evaluate: Callable[[Mapping[str, Any]], tuple[dict[str, Any], dict[str, float]]],
                 indices: range | list[int]) -> dict[int, Any]:
    """The `PointResult` of each point of `indices`, evaluated in this process (in point order)."""
    from infralab.agent.optimize import PointResult

    out = {}
    for i in indices:
        metrics, causes = evaluate(space.points[i])
        out[i] = PointResult(i, metrics, causes, tuple(violations(space.constraints, metrics)))
    return out
