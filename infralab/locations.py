"""Where infralab finds its studies and the shared data, and how a path in a file resolves.

The rule (docs/architecture.md, "Where files are found"):
- Studies: `$INFRALAB_EXPERIMENTS` if set, else the `experiments/` folder shipped with the package
  (package data `infralab.experiments`; in a checkout, the repository's `experiments/`).
- Shared data (traces, public profiles): `$INFRALAB_DATA` if set, else `../shared/data` beside the
  checkout the package was installed from (the repository layout), else the first `shared/data`
  found walking up from the current directory. A path written `@data/<rest>` in a config, study or
  search space resolves there; any other relative path resolves against the file that names it.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from infralab.errors import InputError

DATA_PREFIX = "@data/"
"""A path that starts with this resolves against the shared data folder, not the file naming it."""


EXPERIMENTS_ENV = "INFRALAB_EXPERIMENTS"
DATA_ENV = "INFRALAB_DATA"


def experiments_dir() -> Path:
    """The folder holding the studies (`experiments/`); InputError when it does not exist."""
    override = os.environ.get(EXPERIMENTS_ENV)
    if override:
        path, where = Path(override).expanduser(), f"${EXPERIMENTS_ENV}"
    else:
        spec = importlib.util.find_spec("infralab.experiments")
        if spec is None or not spec.submodule_search_locations:
            raise InputError("infralab.experiments", "is not installed with this package",
                             f"a reinstall of infralab, or {EXPERIMENTS_ENV}=<path to an experiments/ folder>")
        path, where = Path(next(iter(spec.submodule_search_locations))), "the experiments folder"
    if not path.is_dir():
        raise InputError(where, f"{path} is not a folder",
                         f"the experiments/ folder of an infralab checkout, or set {EXPERIMENTS_ENV} to one")
    return path


def shared_data_dir() -> Path:
    """The shared data folder (holds `traces/` and `profiles/`); InputError when none is found."""
    env = os.environ.get(DATA_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise InputError(f"${DATA_ENV}", f"{path} is not a folder", "the path of the shared data folder")
        return path
    checkout = _checkout_root()
    candidates = [checkout.parent / "shared" / "data"] if checkout else []
    here = Path.cwd().resolve()
    candidates += [d / "shared" / "data" for d in (here, *here.parents)]
    for path in candidates:
        if (path / "traces").is_dir():
            return path
    raise InputError(DATA_ENV, "is not set and no shared/data folder was found beside the checkout "
                     "or above the current directory", "INFRALAB_DATA=<folder holding traces/ and profiles/>")


def _checkout_root() -> Path | None:
    """The repository the package runs from (an editable install), or None (an installed copy)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def is_data_path(value: str) -> bool:
    return value.startswith(DATA_PREFIX)


def resolve_path(value: str, base_dir: Path) -> Path:
    """A path from a file: `@data/...` under the shared data folder, absolute as written, else
    relative to `base_dir` (the folder of the file that names it)."""
    if is_data_path(value):
        return shared_data_dir() / value[len(DATA_PREFIX):]
    p = Path(value).expanduser()
    return p if p.is_absolute() else base_dir / p


def require_file(value: str, base_dir: Path, where: str, what: str) -> None:
    """InputError at `where` unless the path `value` (resolved as `resolve_path` does) names an
    existing regular file; `what` names the kind of file expected (e.g. "mooncake trace")."""
    try:
        resolved = resolve_path(value, base_dir)
    except InputError as exc:  # an @data/ path with no shared data folder: blame the field too
        raise InputError(where, f"{value}: {exc.where} {exc.problem}", exc.expected) from None
    if resolved.exists() and not resolved.is_file():
        what_it_is = "a folder" if resolved.is_dir() else "not a regular file (a device, pipe or socket)"
        raise InputError(where, f"{value} is {what_it_is}", f"a {what} file")
    if not resolved.is_file():
        raise InputError(
            where,
            f"file not found: {value} (resolved to {resolved})",
            f"an existing {what} file; relative paths resolve against the config's folder, @data/ paths against the shared data folder",
        )
