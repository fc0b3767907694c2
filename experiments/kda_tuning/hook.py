"""Report of the KDA decode tuning study: work per decode step of each arm, and those counts
relative to the baseline as one grouped bar chart."""

from __future__ import annotations

from pathlib import Path

from infralab.agent.report import arm_means, md_table, pyplot, save_figure
from infralab.agent.validators.ladder import TestResult

WORK = ("divisions", "repeated_elementwise", "transcendentals", "flops", "bytes")


def report(results: list[TestResult], out: Path) -> tuple[list[str], str]:
    result = results[0]
    means = arm_means(result, "microbench")
    arms = [a for a in result.hypothesis.arms if a.name in means]
    if not arms:
        return [], "No microbench measurements.\n"
    timed = any(means[a.name].get("time_s") is not None for a in arms)
    header = ["arm", "variant", *WORK, "state bytes/seq"] + (["time (µs)", "GB/s"] if timed else [])
    rows = []
    for a in arms:
        m = means[a.name]
        row = [a.name, a.config["variant"], *[int(m[k]) for k in WORK], int(m["state_bytes_per_seq"])]
        if timed:
            row += [m.get("time_s", 0) * 1e6 if m.get("time_s") else None, m.get("achieved_gbps")]
        rows.append(row)
    note = ("Times: median of `triton.testing.do_bench` per repetition on the GPU present."
            if timed else "Times: not measured (no GPU here; the Triton interpreter is not a timer). "
            "Run on a GPU for the time criterion.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    base = means[arms[0].name]
    width = 0.8 / len(arms)
    for i, a in enumerate(arms):
        ratios = [means[a.name][k] / base[k] if base[k] else 0.0 for k in WORK]
        ax.bar([j + (i - (len(arms) - 1) / 2) * width for j in range(len(WORK))], ratios, width=width,
               label=f"{a.name} ({a.config['variant']})")
    ax.set_xticks(range(len(WORK)), [k.replace("_", "\n") for k in WORK], fontsize=8)
    ax.set_ylabel(f"per decode step, relative to {arms[0].name}")
    ax.set_title(f"KDA decode work per step, shape {arms[0].config['shape']}")
    ax.legend(fontsize=8)
    save_figure(fig, out / "figures" / "kda_work.png")
    return ["figures/kda_work.png"], md_table(header, rows) + "\n" + note + "\n"
