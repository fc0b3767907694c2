"""The validators of the ladder, discovered: each is one module in `agent/validators/` (or in a
folder appended to the package's `__path__`) that declares `VALIDATOR`, its class. The class
carries its `name` (as hypothesis files write it) and its `rung`: its place on the ladder, cheapest
first (kernel-check 10, microbench 20, sim 30, real 40). Adding a validator is adding its module;
nothing here or in `agent/hypothesis.py` names one.

Importing this module imports no validator; `validators()` imports them when first asked.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType

from infralab.agent import validators as validators_package
from infralab.agent.validators.base import Validator
from infralab.errors import InputError


def validators() -> Mapping[str, type[Validator]]:
    """Name -> validator class, in ladder order (`rung`, then name)."""
    found: list[type[Validator]] = []
    for module in pkgutil.iter_modules(validators_package.__path__):
        declared = getattr(importlib.import_module(f"{validators_package.__name__}.{module.name}"), "VALIDATOR", None)
        if declared is not None:
            found.append(declared)
    ordered = sorted(found, key=lambda cls: (cls.rung, cls.name))
    return MappingProxyType({cls.name: cls for cls in ordered})


def names() -> tuple[str, ...]:
    """The validators' names, cheapest first (the ladder)."""
    return tuple(validators())


def validator_class(name: str) -> type[Validator]:
    """The class of validator `name`; an InputError naming the known ones otherwise."""
    found = validators().get(name)
    if found is None:
        raise InputError("validator", f"is {name!r}", f"one of {', '.join(names())}")
    return found
