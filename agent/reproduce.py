"""`infralab reproduce`: every study under experiments/ (a folder with a study.toml, see
`infralab.agent.studies`), each decided by `infralab test` on its hypothesis files, written as one
report.

    results/<timestamp>/
      report.md            every study: verdict, criteria with numbers, tables, figures, findings,
                           and the exact command that reproduces it
      report.json          schema infralab.reproduce/1: {"studies": [{..., "tests": [{..., "test": <infralab.test/1>}]}]}
      figures/*.png        matplotlib figures referenced by report.md
      studies/<name>/<validator>/...   raw files of each validator (timelines, tables, probe.json)

A study's tables and figures come from its hook's `report(results, out)` when it has one, else from
the generic report (each arm's metrics, and a chart of the first criterion's metric). The whole
folder is written atomically. `quick` uses each hypothesis file's `[quick]` table (smaller shapes,
fewer scenarios, a shorter trace window) for smoke tests.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infralab.agent.findings import combine_verdicts
from infralab.agent.hypothesis import load_hypothesis
from infralab.agent.report import md_table, study_tables_and_chart, test_markdown
from infralab.agent.studies import HookRun, Study, deciding_hook, discover_studies, reporting_hook
from infralab.agent.validators.ladder import TestResult, run_test, test_command, test_json
from infralab.results import atomic_output_dir, dump_json

SCHEMA = "infralab.reproduce/1"


def default_out() -> Path:
    return Path("results") / time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def reproduce(out: str | Path | None = None, quick: bool = False, studies: tuple[str, ...] | None = None,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the studies (all, or those named) and write the report folder atomically; returns report.json."""
    out = Path(out) if out is not None else default_out()
    say = progress or (lambda text: print(text, file=sys.stderr, flush=True))
    chosen = [s for s in discover_studies() if studies is None or s.name in studies]
    with atomic_output_dir(out) as tmp:
        (tmp / "figures").mkdir()
        entries, sections = [], []
        for i, study in enumerate(chosen, 1):
            say(f"[{i}/{len(chosen)}] {study.title} ...")
            if study.fidelity is not None:  # the simulator against the real engine (agent/fidelity)
                from infralab.agent.fidelity.in_reproduce import fidelity_study

                entry, section = fidelity_study(study.name, study.title, study.fidelity, tmp, quick, _relative, say)
                say(f"      {entry['verdict'].upper()} in {entry['wall_s']:.0f} s")
                entries.append(entry)
                sections.append(section)
                continue
            if study.measurements is not None:  # the cost model against public measurements
                from infralab.agent.public_points.in_reproduce import public_points_study

                entry, section = public_points_study(study.name, study.title, study.measurements, tmp, _relative, say)
                say(f"      {entry['verdict'].upper()} in {entry['wall_s']:.0f} s")
                entries.append(entry)
                sections.append(section)
                continue
            started = time.perf_counter()
            if not study.hypotheses:  # decided by its hook (agent/studies.py, HookRun)
                decided = deciding_hook(study).run(tmp, quick)
                entries.append(_hook_entry(study, decided, time.perf_counter() - started))
                sections.append(_hook_section(study, decided))
                say(f"      {decided.verdict.upper()} in {entries[-1]['wall_s']:.0f} s")
                continue
            results, tests = [], []
            for path in study.hypotheses:
                hyp = _with_source(load_hypothesis(path, quick=quick), _relative(path))
                workdir = tmp / "studies" / hyp.name
                workdir.mkdir(parents=True)
                result = run_test(hyp, confirm=study.confirm, workdir=workdir)
                results.append(result)
                command = test_command(hyp, study.confirm, as_json=False)
                tests.append({"hypothesis": hyp.source, "command": command, "verdict": result.verdict,
                              "decided_by": result.decided_by, "test": test_json(result)})
            figures, extra_md = study_report(study, results, tmp)
            seconds = time.perf_counter() - started
            verdict = combine_verdicts(r.verdict for r in results)
            say(f"      {verdict.upper()} in {seconds:.0f} s")
            entries.append({"name": study.name, "title": study.title, "verdict": verdict, "tests": tests,
                            "figures": figures, "wall_s": round(seconds, 1)})
            sections.append(_section(study, results, tests, figures, extra_md, quick))
        report = {"schema": SCHEMA, "quick": quick, "command": "infralab reproduce" + (" --quick" if quick else ""),
                  "machine": machine(), "studies": entries}
        dump_json(report, tmp / "report.json")
        (tmp / "report.md").write_text(_report_md(report, sections))
    say(f"report: {out / 'report.md'}")
    return report


def _with_source(hyp, source: str):
    import dataclasses

    return dataclasses.replace(hyp, source=source)


def _hook_entry(study: Study, decided: HookRun, seconds: float) -> dict[str, Any]:
    test = {"hypothesis": decided.claim, "command": decided.command, "verdict": decided.verdict,
            "decided_by": "sim", "test": None}
    return {"name": study.name, "title": study.title, "verdict": decided.verdict, "tests": [test],
            "figures": list(decided.figures), "wall_s": round(seconds, 1)}


def _hook_section(study: Study, decided: HookRun) -> str:
    lines = [f"## {study.title}", "", f"Claim: {decided.claim} → **{decided.verdict}**", "",
             f"Reproduce: `{decided.command}`", ""]
    for figure in decided.figures:
        lines += [f"![{Path(figure).stem}]({figure})", ""]
    return "\n".join(lines + [decided.markdown, ""])


def _section(study: Study, results: list[TestResult], tests: list[dict[str, Any]], figures: list[str],
             extra_md: str, quick: bool) -> str:
    lines = [f"## {study.title}", "", "Commands that reproduce this study:", ""]
    lines += [f"- `{t['command']}` → **{t['verdict']}**" for t in tests] + [""]
    again = f"infralab reproduce --study {study.name}" + (" --quick" if quick else "")
    for figure in figures:
        lines += [f"![{Path(figure).stem}]({figure})", "", f"*{figure}: reproduce with `{again}`*", ""]
    lines += [extra_md, ""]
    lines += [test_markdown(r, level=3, file_prefix=f"studies/{r.hypothesis.name}/") for r in results]
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    gpu = None
    try:
        import torch

        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except ImportError:
        pass
    return {"cpus": os.cpu_count(), "gpu": gpu, "python": platform.python_version(), "platform": platform.platform()}


def _report_md(report: dict[str, Any], sections: list[str]) -> str:
    m = report["machine"]
    head = [
        "# infralab reproduce: the published case studies", "",
        f"Command: `{report['command']}` · machine: {m['cpus']} CPUs, GPU: {m['gpu'] or 'none'}, "
        f"Python {m['python']}" + (" · QUICK mode (smoke-test sizes, not the published setup)" if report["quick"] else ""),
        "",
        "Each study is one or more hypothesis files under `experiments/`, decided by `infralab test` (the validator "
        "ladder: the cheapest validator that can decide answers; `--confirm` adds the next, more real one).",
        "",
        md_table(["study", "verdict", "hypotheses (verdict, decided by)"],
                 [[s["title"], f"**{s['verdict']}**",
                   "; ".join(f"`{t['hypothesis']}` {t['verdict']} ({t['decided_by'] or 'undecided'})" for t in s["tests"])]
                  for s in report["studies"]]),
    ]
    return "\n".join(head) + "\n" + "\n".join(sections)


def study_report(study: Study, results: list[TestResult], out: Path) -> tuple[list[str], str]:
    """The study's figures (relative to `out`) and Markdown: its hook's, else the generic report's."""
    hook = reporting_hook(study)
    if hook is not None:
        return hook.report(results, out)
    return study_tables_and_chart(results, out, study.chart)


def study_names() -> list[str]:
    return [s.name for s in discover_studies()]


__all__ = ["reproduce", "study_names", "study_report"]
