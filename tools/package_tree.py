"""The `infralab` package as a tree of symlinks: DEST/infralab/ holds every entry of infralab/ and
the folders setup.py maps into the package (sim/, kernels/, agent/, real/, experiments/) under
their package names. setup.py's editable install resolves those folders with an import finder that
mypy and mypyc cannot follow, so both run from such a tree (tools/typecheck.sh, tools/build_native.py).

    python tools/package_tree.py DEST
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("sim", "kernels", "agent", "real", "experiments")


def package_tree(dest: Path) -> Path:
    """Make DEST/infralab afresh (what was there is removed); returns DEST."""
    pkg = dest / "infralab"
    if pkg.is_symlink() or pkg.is_file():
        pkg.unlink()
    elif pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    for entry in (ROOT / "infralab").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for part in PARTS:
        (pkg / part).symlink_to(ROOT / part)
    return dest


if __name__ == "__main__":
    package_tree(Path(sys.argv[1]))
