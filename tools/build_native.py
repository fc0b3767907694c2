"""Compile the simulator's hot modules (`infralab.sim.native.MODULES`) with mypyc, in place.

    .venv/bin/python tools/build_native.py [--strict]

`make setup` runs it. setup.py maps sim/ to the package infralab.sim, which mypyc cannot follow, so
the package is rebuilt as a tree of symlinks under build/native/ (tools/package_tree.py, as
tools/typecheck.sh does) and the extensions are built in place there: through the symlinks they land beside their
sources in sim/, with the shared library as sim/_native__mypyc*.so. The build record
(sim/_native_build.json, the sources' digests) is written last, so a build that fails part-way is
never used: `infralab.sim` then runs as Python. Without a C compiler, or if mypyc fails, it says
so and exits 0 (the simulator runs as Python, slower, with the same results); --strict exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from package_tree import package_tree  # tools/, this script's folder

ROOT = Path(__file__).resolve().parent.parent
SIM = ROOT / "sim"
TREE = ROOT / "build" / "native"


def _load_native():  # type: ignore[no-untyped-def]
    """sim/native.py by path: importing infralab.sim would already choose compiled or not."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_infralab_native", SIM / "native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def remove_build(native) -> None:  # type: ignore[no-untyped-def]
    """Delete every compiled module and the build record, so nothing stale can load."""
    (SIM / native.BUILD_RECORD).unlink(missing_ok=True)
    for so in SIM.rglob("*.so"):
        so.unlink()


def build(native) -> None:  # type: ignore[no-untyped-def]
    from mypyc.build import mypycify
    from setuptools import setup

    digests = native.source_digests()  # what this build is made from, read before compiling
    tree = package_tree(TREE)
    os.chdir(tree)
    paths = [f"infralab/sim/{m.replace('.', '/')}.py" for m in native.MODULES]
    extensions = mypycify(["--config-file", str(ROOT / "pyproject.toml"), *paths],
                          opt_level="3", group_name=native.GROUP)
    setup(name="infralab-native", ext_modules=extensions,
          script_args=["--quiet", "build_ext", "--inplace", "--parallel", str(os.cpu_count() or 1)])
    (SIM / native.BUILD_RECORD).write_text(json.dumps({"sources": digests}, indent=1, sort_keys=True) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true", help="exit 1 when the build fails")
    args = parser.parse_args()
    native = _load_native()
    remove_build(native)
    started = time.perf_counter()
    try:
        build(native)
    except (Exception, SystemExit) as error:  # setuptools reports a failed compile as SystemExit
        remove_build(native)
        print(f"build_native: mypyc build failed ({error!r}); the simulator runs as Python "
              "(same results, slower)", file=sys.stderr)
        return 1 if args.strict else 0
    print(f"build_native: {len(native.MODULES)} modules compiled in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
