"""Reports of `infralab test` results: Markdown for people, JSON (schema infralab.test/1) for programs.

`write_test_result(result, folder)` writes `result.json` and `report.md` into a result folder (the
validators' raw files are already under `folder/<validator>/`). `test_markdown` is also embedded,
one section per study, in the report of `infralab reproduce`; `study_tables_and_chart` is that
report's generic part of a study (each arm's metrics, and a chart of the first criterion's metric),
and `pyplot`, `save_figure` and `arm_means` are the helpers study hooks draw with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infralab.agent.acceptance import NOISE_RULE
from infralab.agent.figure_style import pyplot  # re-exported: study hooks draw with it
from infralab.agent.validators.ladder import TestResult, test_command, test_json
from infralab.results import dump_json


def fmt(value: Any) -> str:
    """A number for a table: 4 significant digits; mappings as key=value lists."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={fmt(v)}" for k, v in value.items())
    return str(value)


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c).replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def test_markdown(result: TestResult, level: int = 2, file_prefix: str = "") -> str:
    """The Markdown section of one test: claim, arms, criteria with their numbers, the ladder, findings."""
    hyp = result.hypothesis
    data = test_json(result)
    h = "#" * level
    out = [f"{h} {hyp.name}: **{result.verdict.upper()}**" + (f" (decided by `{result.decided_by}`)" if result.decided_by else ""),
           "", f"Claim: {hyp.claim}", "",
           f"Reproduce: `{test_command(hyp, result.confirm)}`", ""]
    out += [f"{h}# Arms", "", md_table(["arm", "what it is"], [[a.name, a.describe()] for a in hyp.arms])]
    out += [f"{h}# Acceptance", ""]
    rows = []
    for c in data["criteria"]:
        numbers = "; ".join(
            f"{x['text']}: {fmt(x['left'])} vs {fmt(x['right'])} (noise σ {fmt(x['noise_std'])}, n={x['samples']})"
            for x in c["comparisons"])
        if c["unmeasured"]:
            numbers = f"not measured: {c['unmeasured']}"
        rows.append([f"`{c['expr']}`", c["verdict"], numbers])
    out += [md_table(["criterion", "verdict", "numbers"], rows), f"Noise rule: {NOISE_RULE}.", ""]
    out += [f"{h}# Validator ladder", ""]
    out += [md_table(["validator", "status", "verdict", "why"],
                     [[r.validator, r.status, r.verdict or "—", r.reason or "—"] for r in result.rungs])]
    for r in result.rungs:
        if r.measurement is not None and r.measurement.notes:
            out.append(f"- `{r.validator}`: " + "; ".join(r.measurement.notes))
    out += ["", f"{h}# Findings", ""]
    for f in result.findings:
        files = ", ".join(f"`{file_prefix}{f.validator}/{p}`" for p in f.evidence.files)
        out.append(f"- **{f.verdict}** · `{f.validator}` · {f.arm} · {f.where.text()}: {f.what}"
                   + (f" (files: {files})" if files else ""))
    return "\n".join(out) + "\n"


def save_figure(fig, path: Path) -> None:
    """Write `fig` as a PNG without a software stamp (same inputs, same bytes) and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})
    pyplot().close(fig)


def measured_rung(result: TestResult) -> str | None:
    """The validator whose numbers a report shows: the deciding one, else the last that ran."""
    if result.decided_by:
        return result.decided_by
    ran = [r.validator for r in result.rungs if r.status == "ran"]
    return ran[-1] if ran else None


def arm_means(result: TestResult, validator: str) -> dict[str, dict[str, Any]]:
    """Per arm, the mean of each metric `validator` measured ({} when it did not run)."""
    rung = result.rung(validator)
    if rung is None or rung.measurement is None:
        return {}
    data = test_json(result)
    entry = next(r for r in data["rungs"] if r["validator"] == validator and r["status"] == "ran")
    return {arm: stats["mean"] for arm, stats in entry["arms"].items()}


def chart_metric(result: TestResult) -> str:
    """The metric of the first acceptance criterion (the first `<arm>.<metric>` in its text)."""
    criterion = result.hypothesis.acceptance[0]
    first = min(criterion.names, key=lambda name: (criterion.text.find(name), name))
    return first.split(".", 1)[1]


def study_tables_and_chart(results: list[TestResult], out: Path, chart: bool) -> tuple[list[str], str]:
    """The generic report of a study: per hypothesis, a table of each arm's metrics (means over
    samples, from the validator that decided) and, with `chart`, bars of the first criterion's
    metric per arm in `out/figures/<hypothesis>_<metric>.png`. Returns (figures, Markdown)."""
    figures, text = [], []
    for result in results:
        hyp = result.hypothesis
        validator = measured_rung(result)
        means = arm_means(result, validator) if validator else {}
        arms = [a for a in hyp.arms if a.name in means]
        if not arms:
            text.append(f"`{hyp.name}`: no measurements.\n")
            continue
        rows = [[a.name, a.describe(), *[means[a.name].get(m) for m in hyp.metrics]] for a in arms]
        text += [f"`{hyp.name}` (measured by `{validator}`):", "", md_table(["arm", "change", *hyp.metrics], rows)]
        metric = chart_metric(result)
        values = [means[a.name].get(metric) for a in arms]
        if chart and all(isinstance(v, (int, float)) for v in values):
            name = f"figures/{hyp.name}_{metric}.png"
            plt = pyplot()
            fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(arms) + 2), 3.8))
            ax.bar([a.name for a in arms], [float(v) for v in values], color="#4f81bd")
            ax.set_ylabel(metric)
            ax.set_title(f"{hyp.name}: {metric} per arm ({validator})")
            ax.tick_params(axis="x", rotation=30)
            save_figure(fig, out / name)
            figures.append(name)
    return figures, "\n".join(text) + "\n"


def write_test_result(result: TestResult, folder: Path) -> dict[str, Any]:
    """result.json and report.md in `folder`; returns the JSON object."""
    data = test_json(result)
    dump_json(data, folder / "result.json")
    (folder / "report.md").write_text(f"# infralab test\n\n{test_markdown(result)}")
    return data


def test_text(result: TestResult) -> str:
    """The short text `infralab test` prints for people."""
    hyp = result.hypothesis
    lines = [f"{hyp.name}: {result.verdict.upper()}" + (f" (decided by {result.decided_by})" if result.decided_by else ""),
             f"  claim: {hyp.claim}"]
    data = test_json(result)
    for c in data["criteria"]:
        nums = "; ".join(f"{fmt(x['left'])} vs {fmt(x['right'])}" for x in c["comparisons"])
        lines.append(f"  [{c['verdict']}] {c['expr']}" + (f"   ({nums})" if nums else ""))
    for r in result.rungs:
        lines.append(f"  ladder: {r.validator}: {r.status}" + (f", {r.verdict}" if r.verdict else "")
                     + (f" ({r.reason})" if r.reason and r.reason != "decided" else ""))
    judged = [f for f in result.findings if f.verdict != "not-judged"]
    for f in judged[:12]:
        lines.append(f"  finding: {f.headline()}")
    if len(judged) > 12:
        lines.append(f"  ... {len(judged) - 12} more findings (--json or --out for all)")
    return "\n".join(lines) + "\n"
