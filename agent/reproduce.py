"""`infralab reproduce`: the four published case studies, each decided by `infralab test` on its
hypothesis files under experiments/, written as one report.

    results/<timestamp>/
      report.md            every study: verdict, criteria with numbers, tables, figures, findings,
                           and the exact command that reproduces it
      report.json          schema infralab.reproduce/1: {"studies": [{..., "tests": [{..., "test": <infralab.test/1>}]}]}
      figures/*.png        matplotlib figures referenced by report.md
      studies/<name>/<validator>/...   raw files of each validator (timelines, tables, probe.json)

The whole folder is written atomically. `quick` uses each hypothesis file's `[quick]` table
(smaller shapes, fewer scenarios, a shorter trace window) for smoke tests.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infralab.agent.findings import combine_verdicts
from infralab.agent.hypothesis import load_hypothesis
from infralab.agent.report import md_table, test_markdown
from infralab.agent.validators.ladder import TestResult, run_test, test_json
from infralab.locations import experiments_dir
from infralab.results import atomic_output_dir, dump_json

SCHEMA = "infralab.reproduce/1"


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    hypotheses: tuple[str, ...]  # files under experiments/, each decided by `infralab test`
    confirm: bool  # also run the next rung (the real run) after the first decision
    extras: Callable[[list[TestResult], Path], tuple[list[str], str]]  # figures (relative) and Markdown


def default_out() -> Path:
    return Path("results") / time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})
    _plt().close(fig)


def _means(result: TestResult, validator: str) -> dict[str, dict[str, Any]]:
    rung = result.rung(validator)
    if rung is None or rung.measurement is None:
        return {}
    data = test_json(result)
    entry = next(r for r in data["rungs"] if r["validator"] == validator and r["status"] == "ran")
    return {arm: stats["mean"] for arm, stats in entry["arms"].items()}


# ---- study 1: correctness across partitioning ----------------------------------------------------


def partition_extras(results: list[TestResult], out: Path) -> tuple[list[str], str]:
    figures, text = [], []
    for result in results:
        rung = result.rung("kernel-check")
        measured = rung.measurement.extras.get("table", []) if rung and rung.measurement else []
        if not measured:
            text.append(f"{result.hypothesis.name}: no kernel-check measurements.\n")
            continue
        rows = [[r["arm"], r["kernel"], r["variant"], r["shape"], r["split"], r["rel_err"], r["rel_err_vs_unsplit"],
                 int(r["max_ulp"]), bool(r["bitwise_equal"])] for r in measured]
        text += [f"`{result.hypothesis.name}` ({result.verdict}):", "",
                 md_table(["arm", "kernel", "variant", "shape", "split", "rel. err vs float64", "rel. err vs unsplit",
                           "max ULP vs unsplit", "bitwise = unsplit"], rows)]
        if all(r["kernel"] == "matmul" for r in measured):
            name = f"figures/{result.hypothesis.name}_rel_err.png"
            _matmul_figure(measured, out / name)
            figures.append(name)
    return figures, "\n".join(text) + "\n"


def _matmul_figure(measured: list[dict[str, Any]], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    colors = {"fp32": "#4f81bd", "tf32": "#c0504d", "3xtf32": "#9bbb59"}
    ax.bar([r["arm"] for r in measured], [r["rel_err"] for r in measured],
           color=[colors.get(r["variant"], "grey") for r in measured])
    ax.set_yscale("log")
    ax.set_ylabel("relative Frobenius error vs float64")
    ax.set_title("Matmul precision under tensor-parallel splits (green 3xTF32, red TF32, blue FP32)")
    ax.tick_params(axis="x", rotation=30)
    _save(fig, path)


# ---- study 2: KV transfer vs prefill (GIL) -------------------------------------------------------


def gil_extras(results: list[TestResult], out: Path) -> tuple[list[str], str]:
    result = results[0]
    figures, text = [], []
    sim = result.rung("sim")
    if sim is not None and sim.measurement is not None:
        src = out / "studies" / result.hypothesis.name / "sim" / "figures" / "degradation.png"
        if src.exists():
            shutil.copyfile(src, out / "figures" / "gil_degradation.png")
            figures.append("figures/gil_degradation.png")
        text += ["Simulated degradation table (fine-grained host model; per scenario, dispatch/combine "
                 "holding vs releasing the GIL; overlap = share of dispatch/combine covered by the "
                 "transfer thread's Python):", "", sim.measurement.extras.get("table_md", "")]
    real = result.rung("real")
    if real is not None and real.measurement is not None:
        text += ["Confirmation on this machine (real threads; probe vs the simulator on the same schedule):", "",
                 real.measurement.extras.get("table_md", "")]
        variants = real.measurement.extras["probe"]["variants"]
        plt = _plt()
        fig, ax = plt.subplots(figsize=(7, 3.8))
        labels = [f"{v['granularity']}\n{v['mode']}" for v in variants]
        x = range(len(variants))
        ax.bar([i - 0.2 for i in x], [100 * v["probe"]["degradation"] for v in variants], width=0.4,
               label="probe (real threads)", color="#c0504d")
        ax.bar([i + 0.2 for i in x], [100 * v["sim"]["degradation"] for v in variants], width=0.4,
               label="simulator, same schedule", color="#4f81bd")
        ax.axhline(5, color="black", linestyle="--", linewidth=1, label="acceptance 5 %")
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.set_ylabel("prefill lost to KV transfer (%)")
        ax.set_title("KV transfer vs prefill on this machine")
        ax.legend(fontsize=8)
        _save(fig, out / "figures" / "gil_probe_vs_sim.png")
        figures.append("figures/gil_probe_vs_sim.png")
    elif result.rung("sim") is not None:
        text.append("The real-threads probe did not run (see the ladder above).")
    return figures, "\n".join(text) + "\n"


# ---- study 3: KDA decode tuning --------------------------------------------------------------------

KDA_METRICS = ("divisions", "repeated_elementwise", "transcendentals", "flops", "bytes")


def kda_extras(results: list[TestResult], out: Path) -> tuple[list[str], str]:
    result = results[0]
    means = _means(result, "microbench")
    arms = [a for a in result.hypothesis.arms if a.name in means]
    if not arms:
        return [], "No microbench measurements.\n"
    timed = any(means[a.name].get("time_s") is not None for a in arms)
    header = ["arm", "variant", *KDA_METRICS, "state bytes/seq"] + (["time (µs)", "GB/s"] if timed else [])
    rows = []
    for a in arms:
        m = means[a.name]
        row = [a.name, a.config["variant"], *[int(m[k]) for k in KDA_METRICS], int(m["state_bytes_per_seq"])]
        if timed:
            row += [m.get("time_s", 0) * 1e6 if m.get("time_s") else None, m.get("achieved_gbps")]
        rows.append(row)
    note = ("Times: median of `triton.testing.do_bench` per repetition on the GPU present."
            if timed else "Times: not measured (no GPU here; the Triton interpreter is not a timer). "
            "Run on a GPU for the time criterion.")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    base = means[arms[0].name]
    width = 0.8 / len(arms)
    for i, a in enumerate(arms):
        ratios = [means[a.name][k] / base[k] if base[k] else 0.0 for k in KDA_METRICS]
        ax.bar([j + (i - (len(arms) - 1) / 2) * width for j in range(len(KDA_METRICS))], ratios, width=width,
               label=f"{a.name} ({a.config['variant']})")
    ax.set_xticks(range(len(KDA_METRICS)), [k.replace("_", "\n") for k in KDA_METRICS], fontsize=8)
    ax.set_ylabel(f"per decode step, relative to {arms[0].name}")
    ax.set_title(f"KDA decode work per step, shape {arms[0].config['shape']}")
    ax.legend(fontsize=8)
    _save(fig, out / "figures" / "kda_work.png")
    return ["figures/kda_work.png"], md_table(header, rows) + "\n" + note + "\n"


# ---- study 4: what-if on the Mooncake trace --------------------------------------------------------


def whatif_extras(results: list[TestResult], out: Path) -> tuple[list[str], str]:
    result = results[0]
    means = _means(result, "sim")
    arms = [a for a in result.hypothesis.arms if a.name in means]
    if not arms:
        return [], "No simulator measurements.\n"
    keys = ("goodput", "goodput_per_instance", "request_throughput", "ttft_p90", "tpot_p90", "max_link_busy",
            "max_instance_busy", "saturated")
    rows = [[a.name, a.describe(), *[means[a.name][k] for k in keys]] for a in arms]
    for row in rows:
        row[-1] = bool(row[-1])
    table = md_table(["arm", "change", "goodput (req/s)", "goodput / instance", "req/s", "p90 TTFT (s)",
                      "p90 TPOT (s)", "busiest link", "busiest instance", "saturated"], rows)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.bar([a.name for a in arms], [means[a.name]["goodput"] for a in arms], color="#4f81bd")
    for bar, a in zip(bars, arms):
        ax.annotate(f"p90 TTFT {means[a.name]['ttft_p90']:.2f} s", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("goodput (req/s within TTFT and TPOT SLOs)")
    window = result.hypothesis.setup.get("window_s")
    ax.set_title("Mooncake conversation trace" + (f", window {window[0]:g}-{window[1]:g} s" if window else ""))
    _save(fig, out / "figures" / "whatif_goodput.png")
    return ["figures/whatif_goodput.png"], table


STUDIES: tuple[Study, ...] = (
    Study("partition_correctness", "Correctness across partitioning: 3xTF32 vs TF32 under N- and K-splits; "
          "KDA and attention head splits",
          ("partition_correctness.toml", "partition_heads.toml", "partition_attention.toml"), False, partition_extras),
    Study("gil_kv_transfer", "KV transfer vs prefill: the GIL case", ("gil_kv_transfer_hypothesis.toml",), True,
          gil_extras),
    Study("kda_tuning", "KDA decode tuning: v1 → v2 → v3 and ReplaySSM", ("kda_tuning.toml",), False, kda_extras),
    Study("whatif_mooncake_pd", "What-if on the Mooncake conversation trace: P:D ratio and KV bandwidth",
          ("whatif_mooncake_pd.toml",), False, whatif_extras),
)


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
    chosen = [s for s in STUDIES if studies is None or s.name in studies]
    with atomic_output_dir(out) as tmp:
        (tmp / "figures").mkdir()
        entries, sections = [], []
        for i, study in enumerate(chosen, 1):
            say(f"[{i}/{len(chosen)}] {study.title} ...")
            started = time.perf_counter()
            results, tests = [], []
            for file in study.hypotheses:
                path = experiments_dir() / file
                hyp = _with_source(load_hypothesis(path, quick=quick), _relative(path))
                workdir = tmp / "studies" / hyp.name
                workdir.mkdir(parents=True)
                result = run_test(hyp, confirm=study.confirm, workdir=workdir)
                results.append(result)
                command = f"infralab test {hyp.source}" + (" --confirm" if study.confirm else "")
                command += " --quick" if quick else ""
                tests.append({"hypothesis": hyp.source, "command": command, "verdict": result.verdict,
                              "decided_by": result.decided_by, "test": test_json(result)})
            figures, extra_md = study.extras(results, tmp)
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


def study_names() -> list[str]:
    return [s.name for s in STUDIES]


__all__ = ["STUDIES", "reproduce", "study_names"]
