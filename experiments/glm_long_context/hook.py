"""`infralab reproduce`'s entry for the long-context setting: the pre-registered runner
(experiments/glm_stack/long_context.py) at the registration's quick sizes, its report and
evolution figure placed in the reproduce report."""

from __future__ import annotations

import shutil
from pathlib import Path

from infralab.agent.studies import HookRun, load_hook

RUNNER = Path(__file__).resolve().parents[1] / "glm_stack" / "long_context.py"
STUDY = "glm_long_context"
FULL_COMMAND = ".venv/bin/python experiments/glm_stack/long_context.py --out results/glm_long_context"


def run(out: Path, quick: bool) -> HookRun:
    """The setting at its quick sizes (both `reproduce` and `--quick`: the full sizes are the
    runner's own command); files under out/studies/glm_long_context and out/figures."""
    runner = load_hook(RUNNER)
    folder = out / "studies" / STUDY
    doc = runner.run("quick", folder, atomic=False)
    (out / "figures").mkdir(exist_ok=True)
    figure = Path("figures") / f"{STUDY}_evolution.png"
    shutil.copyfile(folder / "evolution.png", out / figure)
    markdown = (folder / "report.md").read_text(encoding="utf-8").split("\n", 2)[2]  # without its title line
    return HookRun(doc["verdict"], doc["claim"], f"infralab reproduce --study {STUDY} (full: {FULL_COMMAND})",
                   (str(figure),), markdown + f"\nFiles: `studies/{STUDY}/long_context.json`, `studies/{STUDY}/report.md`.\n")
