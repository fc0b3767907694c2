"""Where infralab finds its shipped files.

`experiments_dir()` is the one lookup of the studies folder: the environment variable
`INFRALAB_EXPERIMENTS` when set, else the repository's `experiments/` beside the package (an
editable install or a checkout).
"""

from __future__ import annotations

import os
from pathlib import Path

from infralab.errors import InputError

EXPERIMENTS_ENV = "INFRALAB_EXPERIMENTS"


def experiments_dir() -> Path:
    """The folder of studies and hypothesis files; InputError when it does not exist."""
    override = os.environ.get(EXPERIMENTS_ENV)
    if override:
        path, where = Path(override).expanduser(), f"${EXPERIMENTS_ENV}"
    else:
        path, where = Path(__file__).resolve().parent.parent / "experiments", "the experiments folder"
    if not path.is_dir():
        raise InputError(where, f"{path} is not a folder",
                         f"the experiments/ folder of an infralab checkout, or set {EXPERIMENTS_ENV} to one")
    return path
