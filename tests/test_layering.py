"""The layering rules of design.md, checked: sim never pulls in torch or triton, kernels and real
never import sim, and none of them imports agent."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imported_modules(folder: Path) -> dict[str, set[str]]:
    """Every module name imported anywhere under `folder`, per file (static, so nothing runs)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


def _offenders(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for file, names in _imported_modules(ROOT / folder).items():
        for name in names:
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{file} imports {name}")
    return bad


def test_sim_imports_neither_torch_nor_triton_nor_agent_statically() -> None:
    assert _offenders("sim", ("torch", "triton", "transformers", "infralab.kernels", "infralab.agent",
                              "infralab.real")) == []


def test_kernels_never_import_sim_or_agent() -> None:
    assert _offenders("kernels", ("infralab.sim", "infralab.agent")) == []


def test_real_never_imports_sim_or_agent() -> None:
    assert _offenders("real", ("infralab.sim", "infralab.agent")) == []


def test_importing_every_real_module_loads_no_sim_or_agent() -> None:
    pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")
    code = (
        "import importlib, pkgutil, sys\n"
        "import infralab.real as pkg\n"
        "for m in pkgutil.walk_packages(pkg.__path__, 'infralab.real.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.startswith(('infralab.sim', 'infralab.agent')))\n"
        "print(bad[:5])\n"
        "raise SystemExit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_importing_every_sim_module_loads_no_torch_or_triton() -> None:
    # Dynamic check too: a sim module could reach torch through a third-party import.
    code = (
        "import importlib, pkgutil, sys\n"
        "import infralab.sim as pkg\n"
        "for m in pkgutil.walk_packages(pkg.__path__, 'infralab.sim.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'triton', 'transformers'))\n"
        "print(bad[:5])\n"
        "raise SystemExit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_shared_layer_imports_no_part() -> None:
    # infralab/ and its sub-packages (metrics/, workload/; not the part folders mapped under the
    # package name) are what sim, kernels, real and agent share.
    bad = []
    for path in sorted((ROOT / "infralab").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            bad += [f"{path.relative_to(ROOT)} imports {n}" for n in names
                    if n.startswith(("infralab.sim", "infralab.kernels", "infralab.agent", "infralab.real",
                                     "torch", "triton", "transformers"))]
    assert bad == []
