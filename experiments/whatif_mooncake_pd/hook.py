"""Report of the Mooncake what-if study: goodput, latency and the busiest resources per arm, and
goodput per arm annotated with its p90 TTFT."""

from __future__ import annotations

from pathlib import Path

from infralab.agent.report import arm_means, md_table, pyplot, save_figure
from infralab.agent.validators.ladder import TestResult

COLUMNS = ("goodput", "goodput_per_instance", "request_throughput", "ttft_p90_s", "tpot_p90_s", "max_link_busy",
           "max_instance_busy", "saturated")


def report(results: list[TestResult], out: Path) -> tuple[list[str], str]:
    result = results[0]
    means = arm_means(result, "sim")
    arms = [a for a in result.hypothesis.arms if a.name in means]
    if not arms:
        return [], "No simulator measurements.\n"
    rows = [[a.name, a.describe(), *[means[a.name][k] for k in COLUMNS]] for a in arms]
    for row in rows:
        row[-1] = bool(row[-1])
    table = md_table(["arm", "change", "goodput (req/s)", "goodput / instance", "req/s", "p90 TTFT (s)",
                      "p90 TPOT (s)", "busiest link", "busiest instance", "saturated"], rows)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.bar([a.name for a in arms], [means[a.name]["goodput"] for a in arms], color="#4f81bd")
    for bar, a in zip(bars, arms):
        ax.annotate(f"p90 TTFT {means[a.name]['ttft_p90_s']:.2f} s", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("goodput (req/s within TTFT and TPOT SLOs)")
    window = result.hypothesis.setup.get("window_s")
    ax.set_title("Mooncake conversation trace" + (f", window {window[0]:g}-{window[1]:g} s" if window else ""))
    save_figure(fig, out / "figures" / "whatif_goodput.png")
    return ["figures/whatif_goodput.png"], table
