"""Calibration tables, the kernels' side: make rows from measurements, write the CSV atomically.

The format itself (columns, the row, reading and rendering the CSV) is `infralab.calibration_table`,
shared with the simulator's reader (`infralab.sim.calibration`) without the two parts importing each
other; docs/calibration.md is the contract. Its names are re-exported here so that kernels code and
its tests keep one import.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
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
class WorkCounts:
    """Static work of one call: bytes moved to/from device memory, FLOPs, and counts of the
    operations the KDA tuning story is about (divisions, transcendentals, elementwise work
    repeated across tiles). All are per call, independent of the device."""

    bytes: int
    flops: int
    divisions: int = 0
    transcendentals: int = 0
    repeated_elementwise: int = 0


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
    not list `compute`)."""
    if not (median_s > 0 and math.isfinite(median_s)):
        raise ValueError(f"median_s must be a positive finite number of seconds, got {median_s!r}")
    fraction = 0.0
    if peaks is not None and compute in peaks.flops_per_s:
        floor_s = max(work.bytes / peaks.memory_bytes_per_s, work.flops / peaks.flops_per_s[compute])
        fraction = floor_s / median_s
    return CalibrationRow(
        kernel=kernel,
        variant=variant,
        shape=tuple(shape),
        dtype=dtype,
        device=device,
        median_s=median_s,
        bytes=work.bytes,
        flops=work.flops,
        achieved_gbps=work.bytes / median_s / 1e9,
        achieved_tflops=work.flops / median_s / 1e12,
        roofline_fraction=fraction,
        divisions=work.divisions,
        transcendentals=work.transcendentals,
        repeated_elementwise=work.repeated_elementwise,
    )


# ---- writing -----------------------------------------------------------------------------------


def write_table(rows: Iterable[CalibrationRow], path: str | Path, comments: Sequence[str] = ()) -> Path:
    """Write the table to `path` atomically: a temporary file beside it, renamed into place only when
    complete, so a failure (even while rendering the rows) leaves no partial file and keeps any old one."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"--out {path}", "is a folder", "a file path ending in .csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(render_table(rows, comments))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    return path
