"""The one look of infralab's figures (sweeps, capacity, the search's Pareto plot): sizes that
fit a paper column, one colour per configuration in a fixed order, one line style per percentile,
log axes when the values span a decade or more, and files that are the same bytes for the same data.

    with figure_style.styled():
        fig, ax = figure_style.subplots()
        ...
        figure_style.save(fig, folder / "latency_vs_rate")   # latency_vs_rate.png and .pdf

Data go beside each figure as CSV (the callers write them); this module only draws.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Colour-blind-safe (Okabe-Ito), in the order configurations are given.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
# One dash pattern per percentile, the same in every figure.
PERCENTILE_LINES = {"p50": "-", "p90": "--", "p99": ":", "mean": "-."}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
FORMATS = ("png", "pdf")
PNG_DPI = 200
# A decade or more between the smallest and largest positive value: a log axis shows both ends.
LOG_SPAN = 10.0

RC = {
    "figure.figsize": (3.5, 2.6),  # one column of a two-column paper, inches
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "axes.grid": True,
    "grid.linewidth": 0.4,
    "grid.alpha": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.constrained_layout.use": True,  # room for labels and outside legends, no overlaps
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,  # TrueType in PDFs, as publishers ask
    "svg.hashsalt": "infralab",  # stable ids in SVGs
}


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def styled() -> Iterator[Any]:
    """pyplot with RC applied for the duration (the global style is restored afterwards)."""
    plt = pyplot()
    with plt.rc_context(RC):
        yield plt


def colour(index: int) -> str:
    return COLOURS[index % len(COLOURS)]


def marker(index: int) -> str:
    return MARKERS[index % len(MARKERS)]


def spans_decades(values: Iterable[float | None]) -> bool:
    """True when the positive finite values span at least LOG_SPAN (max / min)."""
    positive = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return bool(positive) and max(positive) / min(positive) >= LOG_SPAN


def scale_axes(ax: Any, xs: Sequence[float | None], ys: Sequence[float | None]) -> None:
    """A log x and/or y axis where the plotted values span decades (and all are positive)."""
    for values, set_scale in ((xs, ax.set_xscale), (ys, ax.set_yscale)):
        finite = [v for v in values if v is not None and math.isfinite(v)]
        if finite and min(finite) > 0 and spans_decades(finite):
            set_scale("log")


def save(fig: Any, stem: Path, formats: Sequence[str] = FORMATS) -> list[Path]:
    """`fig` as STEM.png, STEM.pdf (or `formats`), without the creation dates and software names
    that would make two runs' files differ; closes the figure. Returns the paths written."""
    plt = pyplot()
    paths = []
    for fmt in formats:
        path = stem.with_suffix(f".{fmt}")
        metadata: dict[str, Any] = {"png": {"Software": None}, "pdf": {"CreationDate": None, "Producer": None},
                                    "svg": {"Date": None}}.get(fmt, {})
        fig.savefig(path, dpi=PNG_DPI, metadata=metadata)
        paths.append(path)
    plt.close(fig)
    return paths
