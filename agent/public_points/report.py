"""The public-measurements report: per-point table, per-family statistics, a parity plot, and
points.json (schema infralab.public_points/1).

    OUT/public_points.json   every point: source, setting, measured, simulated, error, role
    OUT/public_points.md     the tables
    OUT/figures/public_parity.png
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infralab.agent.public_points.score import MEDIAN_TARGET, WORST_TARGET, FamilyStats, Scored, verdict
from infralab.agent.report import md_table, pyplot, save_figure
from infralab.results import dump_json

SCHEMA = "infralab.public_points/1"
MARKERS = {"decode": "o", "prefill": "s", "collective": "^", "serving": "D"}


def to_json(scored: Sequence[Scored], stats: Sequence[FamilyStats], source: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "points_file": source,
        "verdict": verdict(stats),
        "targets": {"median_abs": MEDIAN_TARGET, "worst_abs": WORST_TARGET},
        "families": [vars(s) | {"met": s.met} for s in stats],
        "points": [
            {"id": s.point.id, "family": s.point.family, "role": s.point.role, "scored": s.point.scored,
             "metric": s.point.metric, "measured": s.point.measured, "simulated": s.simulated.value if s.simulated_ok else None,
             "error": s.error if s.simulated_ok else None, "top_term": s.top_term, "detail": s.simulated.detail,
             "accelerator": s.point.accelerator, "model": s.point.model, "dtype": s.point.dtype, "tp": s.point.tp,
             "includes": list(s.point.includes), "source": s.point.source, "locator": s.point.locator,
             "engine": s.point.engine}
            for s in scored
        ],
    }


def markdown(scored: Sequence[Scored], stats: Sequence[FamilyStats]) -> str:
    """The family table, then every point (evaluation first), with its source."""
    lines = [f"Targets per family and overall, evaluation points only: median |error| <= {MEDIAN_TARGET:.0%}, "
             f"worst <= {WORST_TARGET:.0%}. Error = (simulated - measured) / measured.", ""]
    lines.append(md_table(
        ["family", "scored points", "median |err|", "worst |err|", "signed median", "sim above / below", "met"],
        [[s.family, s.n, f"{s.median_abs:.1%}", f"{s.worst_abs:.1%}", f"{s.signed_median:+.1%}",
          f"{s.over} / {s.under}", "yes" if s.met else "no"] for s in stats]))
    misses = _misses(scored, stats)
    if misses:
        lines += ["", "Families that miss a target, their worst evaluation points and the largest term of each "
                  "point's dominant step (docs/calibration.md, \"Public measurements\", says why and the next fix):",
                  "", md_table(["family", "point", "error", "largest term", "setting"], misses)]
    order = sorted(scored, key=lambda s: (s.point.role != "evaluation", s.point.family, s.point.id))
    rows = []
    for s in order:
        p = s.point
        setting = _setting(s)
        role = p.role if p.scored or p.role == "calibration" else "evaluation, not scored (" + ", ".join(p.includes) + ")"
        simulated = f"{s.simulated.value:.4g}" if s.simulated_ok else s.simulated.detail
        error = f"{s.error:+.1%}" if s.simulated_ok else "-"
        rows.append([p.id, p.family, role, setting, p.metric, f"{p.measured:.4g}", simulated, error, s.top_term,
                     f"{p.engine}; {p.source} ({p.locator})"])
    lines += ["", md_table(["point", "family", "role", "setting", "metric", "measured", "simulated", "error",
                            "largest term", "source"], rows)]
    return "\n".join(lines)


def _misses(scored: Sequence[Scored], stats: Sequence[FamilyStats], worst: int = 3) -> list[list[str]]:
    """Rows of the `worst` evaluation points of each family that misses a target."""
    rows = []
    for family in (s.family for s in stats if not s.met and s.family != "overall"):
        members = sorted((s for s in scored if s.point.family == family and s.counted), key=lambda s: -abs(s.error))
        rows += [[family, s.point.id, f"{s.error:+.1%}", s.top_term or "-", _setting(s)] for s in members[:worst]]
    return rows


def _setting(s: Scored) -> str:
    p = s.point
    if p.family == "collective":
        return f"{p.accelerator} x{p.world}, {p.collective}, {p.message_bytes} B"
    shape = f"{p.model} {p.dtype} {p.accelerator} tp{p.tp}" + (f" pp{p.pp}" if p.pp > 1 else "")
    if p.family == "serving":
        rate = "inf" if p.request_rate is None else f"{p.request_rate:g}/s"
        return f"{shape}, {p.num_prompts} x {p.input_tokens}/{p.output_tokens} at {rate}"
    return f"{shape}, batch {p.batch}, {p.input_tokens}/{p.output_tokens}"


def parity_plot(scored: Sequence[Scored], path: Path) -> None:
    """Measured vs simulated per family on log axes, y = x and the +-25 % band; calibration points
    hollow."""
    plt = pyplot()
    families = sorted({s.point.family for s in scored}, key=list(MARKERS).index)
    fig, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 4.0), squeeze=False)
    for ax, family in zip(axes[0], families):
        members = [s for s in scored if s.point.family == family and s.simulated_ok]
        for role, face in (("evaluation", None), ("calibration", "none")):
            xs = [s.point.measured for s in members if s.point.role == role]
            ys = [s.simulated.value for s in members if s.point.role == role]
            if xs:
                ax.scatter(xs, ys, marker=MARKERS[family], facecolors=face, edgecolors="C0" if face else "C1",
                           color="C0" if face is None else None, label=role, s=24)
        values = [v for s in members for v in (s.point.measured, s.simulated.value) if v > 0]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.fill_between([lo, hi], [lo * (1 - WORST_TARGET), hi * (1 - WORST_TARGET)],
                        [lo * (1 + WORST_TARGET), hi * (1 + WORST_TARGET)], color="0.9", zorder=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        unit = "s" if family != "serving" else "value"
        ax.set_xlabel(f"measured ({unit})")
        ax.set_ylabel(f"simulated ({unit})")
        ax.set_title(family)
        ax.legend(fontsize=7)
    save_figure(fig, path)
