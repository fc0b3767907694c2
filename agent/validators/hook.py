"""Hypotheses measured by their study's own code: kind `hook`, answered by the `sim` and `real`
validators through the Python file the hypothesis names as `setup.hook` (relative to it).

What such a hypothesis may say comes from the hook, not from this module: the hook declares its
knobs, metrics and `[setup]` table, and measures. The contract (a module, loaded by path):

    SETUP: type                          a pydantic dataclass of the [setup] table (it has `hook: str`)
    KNOBS: dict[str, KnobSpec]           what an arm may set, with the allowed values
    REQUIRED: tuple[str, ...]            knobs the baseline must set
    METRICS: dict[str, tuple[str, ...]]  per validator name ("sim", "real"): the metrics it measures
    MAPPINGS: tuple[str, ...]            metrics whose values map a key to a number (`m['key']`)
    check(hyp, setup, where) -> None     optional: the setup's references (raise where.error(...))
    measure_<validator>(hyp, setup, workdir) -> Measurement
    unavailable_<validator>(hyp, setup) -> str | None   optional: why it cannot run here

A validator the hook does not measure (no METRICS entry, no measure_<validator>) cannot answer the
hypothesis. The generic declaration below is a placeholder until the hypothesis file's setup names
the hook (`Declaration.resolve`, called by infralab.agent.hypothesis).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic.dataclasses import dataclass

from infralab.agent.hypothesis import Hypothesis, Locator, setup_as
from infralab.agent.studies import load_hook
from infralab.agent.validators.base import Declaration, Measurement
from infralab.config_io import STRICT
from infralab.errors import InputError

KIND = "hook"
CONTRACT = ("SETUP", "KNOBS", "REQUIRED", "METRICS", "MAPPINGS")


@dataclass(frozen=True, config=STRICT)
class HookOnly:
    """The one setup key every hook-measured hypothesis has, before its hook is known."""

    hook: str  # the study's Python file that declares and measures (see the module docstring)


def hook_path(setup: Mapping[str, Any], base_dir: Path) -> Path | None:
    value = setup.get("hook")
    if not isinstance(value, str):
        return None
    p = Path(value).expanduser()
    return p if p.is_absolute() else base_dir / p


def load(setup: Mapping[str, Any], base_dir: Path, source: str = "hypothesis") -> ModuleType:
    """The hook the setup names, checked against the contract (InputError at setup.hook)."""
    path = hook_path(setup, base_dir)
    if path is None:
        raise InputError(f"{source}: setup.hook", "is missing", "the study's hook .py file, relative to the hypothesis file")
    if not path.is_file():
        raise InputError(f"{source}: setup.hook", f"{path} is not a file", "a study hook .py file")
    module = load_hook(path)
    missing = [name for name in CONTRACT if not hasattr(module, name)]
    if missing:
        raise InputError(f"{source}: setup.hook", f"{path} does not declare {', '.join(missing)}",
                         "a hook with SETUP, KNOBS, REQUIRED, METRICS and MAPPINGS (agent/validators/hook.py)")
    return module


def declaration(validator: str) -> Declaration:
    """`validator`'s declaration for kind `hook`: resolved from the hook the setup names."""

    def resolve(setup: Mapping[str, Any], base_dir: Path, where: Locator) -> Declaration:
        try:
            module = load(setup, base_dir)
        except InputError as exc:
            raise where.error("setup.hook", exc.problem, exc.expected) from None
        metrics = tuple(module.METRICS.get(validator, ()))
        if not metrics or not hasattr(module, f"measure_{validator}"):
            raise where.error("hypothesis.validators", f"the hook does not measure for validator {validator!r}",
                              f"one of {', '.join(module.METRICS)}", needle=f'"{validator}"')
        check = getattr(module, "check", None)
        return Declaration(KIND, metrics, dict(module.KNOBS), module.SETUP, required=tuple(module.REQUIRED),
                           check=check, mappings=tuple(m for m in metrics if m in module.MAPPINGS))

    return Declaration(KIND, (), {}, HookOnly, resolve=resolve)


def hook_of(hyp: Hypothesis) -> ModuleType:
    return load(hyp.setup, hyp.base_dir, hyp.source)


def unavailable(hyp: Hypothesis, validator: str) -> str | None:
    module = hook_of(hyp)
    why = getattr(module, f"unavailable_{validator}", None)
    return None if why is None else why(hyp, setup_as(hyp, module.SETUP))


def measure(hyp: Hypothesis, workdir: Path | None, validator: str) -> Measurement:
    """The hook's measurement for `validator` ("sim" or "real")."""
    module = hook_of(hyp)
    measurement: Measurement = getattr(module, f"measure_{validator}")(hyp, setup_as(hyp, module.SETUP), workdir)
    return measurement


__all__ = ["KIND", "declaration", "hook_of", "load", "measure", "unavailable"]
