"""The fidelity study as one study of `infralab reproduce` (experiments/fidelity/study.toml names
its study file): its entry in report.json and its section of report.md.

Verdict (the reproduce vocabulary): "accepted" when every comparison met its target or, where
no target is claimed, the simulated value lay within the real runs' range; "rejected" when none
did; "partial" otherwise; "unmeasured" when no case had two finished real runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infralab.agent.fidelity.cli import run_into


def verdict(counts: dict[str, int]) -> str:
    passed = counts["met"] + counts["in range"]
    failed = counts["missed"] + counts["out of range"]
    if passed + failed == 0:
        return "unmeasured"
    return "accepted" if failed == 0 else "rejected" if passed == 0 else "partial"


def fidelity_study(name: str, title: str, study_file: Path, out: Path, quick: bool, relative: Callable[[Path], str],
                   say: Callable[[str], None]) -> tuple[dict[str, Any], str]:
    """Run the study into out/studies/<name>; returns its report.json entry and report.md section
    (figures as paths relative to `out`)."""
    started = time.perf_counter()
    folder = out / "studies" / name
    folder.mkdir(parents=True)
    doc, table, figures = run_into(study_file, folder, quick, lambda text: say(f"      {text}"))
    command = f"infralab fidelity run {relative(study_file)} --out DIR" + (" --quick" if quick else "")
    paths = [str(p.relative_to(out)) for p in figures]
    result = verdict(doc["counts"])
    entry = {"name": name, "title": title, "verdict": result, "tests": [],
             "fidelity": {"command": command, "file": str((folder / "fidelity.json").relative_to(out)),
                          "counts": doc["counts"], "failures": len(doc["failures"])},
             "figures": paths, "wall_s": round(time.perf_counter() - started, 1)}
    lines = [f"## {title}", "", f"Command that reproduces this study: `{command}` → **{result}**", ""]
    lines += [f"![{Path(p).stem}]({p})" for p in paths if p.endswith("parity.png")] + [""]
    lines += [table.replace("\n# ", "\n### ").removeprefix("# ").split("\n", 1)[1], ""]
    lines += [f"Per-case CDFs: " + ", ".join(f"[{Path(p).stem}]({p})" for p in paths if not p.endswith("parity.png")), ""]
    return entry, "\n".join(lines)
