"""`infralab fidelity public POINTS.toml --out DIR [--json]`: the cost model against public
measurements (docs/calibration.md, "Public measurements"); the folder is written atomically.

    DIR/public_points.json   schema infralab.public_points/1
    DIR/public_points.md     the family table and every point with its source (also printed)
    DIR/figures/public_parity.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infralab.agent.public_points.report import markdown, parity_plot, to_json
from infralab.agent.public_points.score import family_stats, score
from infralab.agent.public_points.spec import load_points
from infralab.results import atomic_output_dir, dump_json

FIGURE = Path("figures") / "public_parity.png"


def run_into(points_file: str | Path, folder: Path, say: Callable[[str], None]) -> tuple[dict[str, Any], str, list[Path]]:
    """Score the points of `points_file` with the outputs in the existing `folder`; returns the
    JSON document, the Markdown and the figure paths."""
    points = load_points(points_file)
    scored = score(points, say)
    stats = family_stats(scored)
    doc = to_json(scored, stats, str(points_file))
    text = markdown(scored, stats)
    dump_json(doc, folder / "public_points.json")
    (folder / "public_points.md").write_text(text + "\n")
    parity_plot(scored, folder / FIGURE)
    return doc, text, [folder / FIGURE]


def run(args: argparse.Namespace) -> int:
    load_points(args.points)  # bad input stops before the folder exists

    def say(text: str) -> None:
        if not args.no_progress:
            print(text, file=sys.stderr, flush=True)

    with atomic_output_dir(args.out) as folder:
        doc, text, _ = run_into(args.points, folder, say)
    print(json.dumps(doc, indent=1) if args.json else text)
    return 0
