"""`infralab fidelity run STUDY.toml --out DIR [--quick]`: run a fidelity study and write its
folder atomically (docs/fidelity.md, "Fidelity study"):

    DIR/fidelity.json        schema infralab.fidelity/1: settings, capacities, every case's real runs,
                             simulation and comparison, the failing comparisons
    DIR/table.md             the per-case error table (also printed)
    DIR/figures/*.png        cdf-<case>.png per case, parity.png
    DIR/profiles/<setting>.csv   the step profiles (calibration tables, docs/calibration.md)
    DIR/replays/<case>-rep<k>.json   every real run: token times, engine steps, fingerprints
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from infralab.agent.fidelity.report import write_outputs
from infralab.agent.fidelity.runner import Say, run_study
from infralab.agent.fidelity.spec import load_study
from infralab.results import atomic_output_dir


def run_into(study_file: str | Path, folder: Path, quick: bool, say: Say) -> tuple[dict[str, Any], str, list[Path]]:
    """Run the study of `study_file` with its outputs in the existing `folder` (the caller's
    atomic folder); returns fidelity.json's document, the table and the figures."""
    study = load_study(study_file, quick=quick)
    return write_outputs(run_study(study, folder, say), folder)


def run(args: argparse.Namespace) -> int:
    study = load_study(args.study, quick=args.quick)  # bad input stops before the folder exists

    def say(text: str) -> None:
        if not args.no_progress:
            print(text, file=sys.stderr, flush=True)

    with atomic_output_dir(args.out) as folder:
        _, table, _ = write_outputs(run_study(study, folder, say), folder)
    print(table)
    return 0
