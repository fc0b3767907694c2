"""The shipped model catalog's TOML tables, by name, for the sides that must not import the simulator.

The catalog files live with the simulator (`sim/catalog/models/*.toml`, package data of
`infralab.sim.catalog`), which validates them (`infralab.sim.specs.load_model`). The real engine
(`infralab.real.model_shape`) builds its models from the same files, read here with tomllib, so
that both sides name one model with one set of numbers. Finding the folder does not import the
simulator: `importlib.util.find_spec("infralab.sim")` locates its folder without running it (a
deeper name would import its parents).
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from typing import Any

from infralab.errors import InputError

SIM_PACKAGE = "infralab.sim"


def model_file(name: str) -> Path:
    """The catalog TOML of model `name` (e.g. "small-llama-cpu"); InputError when there is none."""
    spec = importlib.util.find_spec(SIM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(SIM_PACKAGE, "is not installed with this package", "a reinstall of infralab")
    path = Path(next(iter(spec.submodule_search_locations))) / "catalog" / "models" / f"{name}.toml"
    if not path.is_file():
        raise InputError(f"model {name!r}", f"no catalog file {path}", "a model of the catalog (infralab sim catalog)")
    return path


def model_table(name: str) -> dict[str, Any]:
    """The TOML table of catalog model `name`, as written (not validated)."""
    with model_file(name).open("rb") as handle:
        return tomllib.load(handle)
