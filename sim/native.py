"""The simulator's hot path, compiled with mypyc where a current build exists.

`MODULES` (the engine loop, its scheduler and KV bookkeeping, the cost model, the cluster, links and
routers) are compiled in place by `tools/build_native.py` (`make setup` runs it) into extension
modules beside their sources; the compiled code is the same Python, type-checked strictly, so a run
gives the same bytes either way (tests/sim/test_native.py runs both and compares).

A compiled module would shadow its edited source, so a build records the SHA-256 of every source
under sim/ and infralab/ it was made from (mypyc also bakes in other modules' `Final` constants) in
`sim/_native_build.json`, written last. When `infralab.sim` is imported, `choose()` keeps the
compiled modules only if that record matches the sources now; otherwise, or when the environment
sets INFRALAB_PURE_PYTHON=1, a finder placed first on `sys.meta_path` loads `MODULES` from their
.py files. A stale build is reported once on stderr. Nothing here is imported by the compiled code.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# Under infralab.sim; each file sim/<path>.py.
MODULES = (
    "engine.instance",
    "engine.scheduler",
    "engine.kv_blocks",
    "engine.prefix_cache",
    "engine.request_state",
    "engine.step",
    "cost.attention",
    "cost.calibrated",
    "cost.collectives",
    "cost.gemm",
    "cost.geometry",
    "cost.host",
    "cost.linear_attention",
    "cost.memory",
    "cost.model",
    "cost.pipeline",
    "cost.small_ops",
    "cost.work",
    "cluster",
    "link",
    "kv_transfer",
    "routers",
)
PACKAGE = "infralab.sim"
# The shared library every compiled module's shim loads: infralab.sim._native__mypyc.
GROUP = f"{PACKAGE}._native"
BUILD_RECORD = "_native_build.json"
PURE_ENV = "INFRALAB_PURE_PYTHON"
SIM_ROOT = Path(__file__).resolve().parent
SHARED_ROOT = SIM_ROOT.parent / "infralab"


def source_files(sim_root: Path = SIM_ROOT, shared_root: Path = SHARED_ROOT) -> list[Path]:
    """Every .py a build depends on: sim/ and the shared layer infralab/, sorted."""
    files = [p for root in (sim_root, shared_root) if root.is_dir() for p in root.rglob("*.py")]
    return sorted(p for p in files if "__pycache__" not in p.parts)


def source_digests(sim_root: Path = SIM_ROOT, shared_root: Path = SHARED_ROOT) -> dict[str, str]:
    """SHA-256 (hex) of each source a build depends on, keyed by its path relative to the repo root."""
    base = sim_root.parent
    return {str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in source_files(sim_root, shared_root)}


def build_state(sim_root: Path = SIM_ROOT, shared_root: Path = SHARED_ROOT) -> str:
    """"compiled", "no build", or "stale: FILE changed" (the first source that differs)."""
    record = sim_root / BUILD_RECORD
    if not record.is_file():
        return "no build"
    try:
        built = json.loads(record.read_text())["sources"]
    except (ValueError, KeyError, TypeError):
        return "stale: unreadable build record"
    now = source_digests(sim_root, shared_root)
    for path in sorted(set(built) | set(now)):
        if built.get(path) != now.get(path):
            return f"stale: {path} changed"
    return "compiled"


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Loads `MODULES` from their .py files, ahead of any compiled extension beside them."""

    def __init__(self, sim_root: Path) -> None:
        self._files = {f"{PACKAGE}.{m}": sim_root / (m.replace(".", "/") + ".py") for m in MODULES}

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        source = self._files.get(fullname)
        if source is None:
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def choose(sim_root: Path = SIM_ROOT) -> str:
    """Decide once per process whether `MODULES` run compiled; returns the mode ("compiled", or
    "python (...)" with the reason)."""
    if any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        return "python (chosen earlier in this process)"
    forced = os.environ.get(PURE_ENV, "") not in ("", "0")
    state = "forced by " + PURE_ENV if forced else build_state(sim_root)
    if state == "compiled":
        return "compiled"
    sys.meta_path.insert(0, _SourceFirst(sim_root))
    if state.startswith("stale"):
        print(f"infralab: the compiled simulator is older than its sources ({state[7:]}); running it as "
              "Python, slower. `make setup` rebuilds it.", file=sys.stderr)
    return f"python ({state})"

