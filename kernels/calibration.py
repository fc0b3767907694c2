"""Calibration tables, the kernels' side: make rows from measurements, write the CSV atomically.

The format itself (columns, the row, reading and rendering the CSV) is `infralab.calibration_table`,
shared with the simulator's reader (`infralab.sim.calibration`) without the two parts importing each
other; docs/calibration.md is the contract. Its names are re-exported here so that kernels code and
its tests keep one import. `WorkCounts` is the shared layer's (`infralab.work_formulas`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from infralab.calibration_table import (
    COLUMNS,
    FLOAT_FORMAT,
    CalibrationRow,
    Shape,
    format_shape,
    parse_shape,
    parse_table,
    read_table,
    render_table,
)
from infralab.errors import InputError
from infralab.results import atomic_output_file
from infralab.work_formulas import WorkCounts

__all__ = [
    "COLUMNS",
    "FLOAT_FORMAT",
    "CalibrationRow",
    "DevicePeaks",
    "Shape",
    "WorkCounts",
    "format_shape",
    "make_row",
    "parse_shape",
    "parse_table",
    "read_table",
    "render_table",
    "write_table",
]


@dataclass(frozen=True)
class DevicePeaks:
    """Datasheet peaks of one accelerator: HBM bytes/s and dense FLOP/s per compute mode."""

    name: str
    memory_bytes_per_s: float
    flops_per_s: dict[str, float]


def make_row(
    kernel: str,
    variant: str,
    shape: Shape,
    dtype: str,
    device: str,
    median_s: float,
    work: WorkCounts,
    peaks: DevicePeaks | None,
    compute: str,
) -> CalibrationRow:
    """A row with its derived columns: achieved rates from `work` over `median_s` seconds, and the
    roofline fraction against `peaks` (FLOP/s of the `compute` mode; 0 when `peaks` is None or does
    not list `compute`). `median_s` and the row's counts are per decode step: work covering several
    steps (a ReplaySSM cycle) is divided by them and rounded to whole operations."""
    if not (median_s > 0 and math.isfinite(median_s)):
        raise ValueError(f"median_s must be a positive finite number of seconds, got {median_s!r}")

    def per_step(count: int) -> int:
        return count if work.steps == 1 else round(count / work.steps)

    bytes_, flops = per_step(work.bytes), per_step(work.flops)
    fraction = 0.0
    if peaks is not None and compute in peaks.flops_per_s:
        floor_s = max(bytes_ / peaks.memory_bytes_per_s, flops / peaks.flops_per_s[compute])
        fraction = floor_s / median_s
    return CalibrationRow(
        kernel=kernel,
        variant=variant,
        shape=tuple(shape),
        dtype=dtype,
        device=device,
        median_s=median_s,
        bytes=bytes_,
        flops=flops,
        achieved_gbps=bytes_ / median_s / 1e9,
        achieved_tflops=flops / median_s / 1e12,
        roofline_fraction=fraction,
        divisions=per_step(work.divisions),
        transcendentals=per_step(work.transcendentals.total),
        repeated_elementwise=per_step(work.repeated_elementwise),
    )


# ---- writing -----------------------------------------------------------------------------------


def write_table(rows: Iterable[CalibrationRow], path: str | Path, comments: Sequence[str] = ()) -> Path:
    """Write the table to `path` atomically: a temporary file beside it, renamed into place only when
    complete, so a failure (even while rendering the rows) leaves no partial file and keeps any old one."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"--out {path}", "is a folder", "a file path ending in .csv")
    with atomic_output_file(path) as handle:
        handle.write(render_table(rows, comments))
    return path
