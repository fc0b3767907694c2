"""Result directories that are never half-written, and deterministic JSON.

A run writes into a temporary sibling folder and renames it into place only when everything is
written. An existing folder is replaced only if an earlier infralab run made it (it holds the
marker file); anything else at that path belongs to the user and is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infralab.errors import InputError

MARKER = ".infralab-result"


@contextlib.contextmanager
def atomic_output_dir(final: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder; on success it becomes `final`, on any error it vanishes."""
    final = Path(final)
    if final.exists() and not (final / MARKER).exists():
        if final.is_file() or any(final.iterdir()):
            raise InputError(
                f"--out {final}",
                "exists and was not written by infralab; refusing to overwrite it",
                "a new folder, or one an earlier infralab run wrote",
            )
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        (tmp / MARKER).write_text("written by infralab\n")
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(old)
    tmp.rename(final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def dump_json(obj: Any, path: str | Path) -> None:
    """Write JSON with sorted keys and a trailing newline, so equal inputs give equal bytes."""
    Path(path).write_text(json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n")
