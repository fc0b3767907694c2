"""The public-measurements study as one study of `infralab reproduce` (a study.toml naming
`measurements = "points.toml"`): its entry in report.json and its section of report.md."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infralab.agent.public_points.cli import run_into


def public_points_study(name: str, title: str, points_file: Path, out: Path, relative: Callable[[Path], str],
                        say: Callable[[str], None]) -> tuple[dict[str, Any], str]:
    """Score the points into out/studies/<name>; returns the report.json entry and the report.md
    section (figures relative to `out`)."""
    started = time.perf_counter()
    folder = out / "studies" / name
    folder.mkdir(parents=True)
    doc, text, figures = run_into(points_file, folder, lambda line: say(f"      {line}"))
    figure = out / "figures" / f"{name}_parity.png"
    figure.write_bytes(figures[0].read_bytes())
    command = f"infralab fidelity public {relative(points_file)} --out DIR"
    path = str(figure.relative_to(out))
    entry = {"name": name, "title": title, "verdict": doc["verdict"], "tests": [],
             "public_points": {"command": command, "file": str((folder / "public_points.json").relative_to(out)),
                               "families": doc["families"]},
             "figures": [path], "wall_s": round(time.perf_counter() - started, 1)}
    lines = [f"## {title}", "", f"Command that reproduces this study: `{command}` → **{doc['verdict']}**", "",
             f"![parity]({path})", "", text, ""]
    return entry, "\n".join(lines)
