"""Calibration tables, the kernels' side: build rows, write the CSV atomically, read it back.

The format is docs/calibration.md (the whole contract with the simulator, which has its own reader in
`infralab.sim.calibration`; the two parts never import each other). This module writes it and reads
it back so that the round trip is testable from `kernels` alone.

Formatting is deterministic: columns in `COLUMNS` order, integers as plain decimal digits, floats
with `FLOAT_FORMAT` (6 significant digits), shape fields in the order the kernel names them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from infralab.errors import InputError

COLUMNS: tuple[str, ...] = (
    "kernel",
    "variant",
    "shape",
    "dtype",
    "device",
    "median_s",
    "bytes",
    "flops",
    "achieved_gbps",
    "achieved_tflops",
    "roofline_fraction",
    "divisions",
    "transcendentals",
    "repeated_elementwise",
)

FLOAT_FORMAT = ".6g"
"""Six significant digits: far finer than run-to-run timing noise, short enough to read."""

_INT_COLUMNS = ("bytes", "flops", "divisions", "transcendentals", "repeated_elementwise")
_FLOAT_COLUMNS = ("median_s", "achieved_gbps", "achieved_tflops", "roofline_fraction")
_TEXT_COLUMNS = ("kernel", "variant", "dtype", "device")

Shape = tuple[tuple[str, int], ...]
"""A shape as (name, value) pairs in the kernel's own field order, e.g. (("M", 64), ("N", 64), ("K", 64))."""


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


@dataclass(frozen=True)
class CalibrationRow:
    """One row of the table (docs/calibration.md). Units: seconds, bytes, FLOPs, GB/s, TFLOP/s."""

    kernel: str
    variant: str
    shape: Shape
    dtype: str
    device: str
    median_s: float
    bytes: int
    flops: int
    achieved_gbps: float
    achieved_tflops: float
    roofline_fraction: float
    divisions: int
    transcendentals: int
    repeated_elementwise: int

    @property
    def shape_text(self) -> str:
        return format_shape(self.shape)


def format_shape(shape: Shape) -> str:
    """`(("M", 64), ("N", 32))` -> `"M=64;N=32"`."""
    return ";".join(f"{name}={value}" for name, value in shape)


def parse_shape(text: str, where: str) -> Shape:
    """`"M=64;N=32"` -> `(("M", 64), ("N", 32))`; InputError naming `where` on anything else."""
    expected = "name=value pairs joined by ';' with positive integer values, e.g. M=64;N=64;K=64"
    fields = []
    for part in text.split(";"):
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise InputError(where, f"bad shape {text!r}", expected)
        fields.append((name.strip(), int(value)))
    names = [name for name, _ in fields]
    if len(set(names)) != len(names):
        raise InputError(where, f"repeated field in shape {text!r}", expected)
    return tuple(fields)


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


def _cell(row: CalibrationRow, column: str) -> str:
    value = getattr(row, column)
    if column == "shape":
        return format_shape(value)
    if column in _FLOAT_COLUMNS:
        return format(float(value), FLOAT_FORMAT)
    if column in _INT_COLUMNS:
        return str(int(value))
    return str(value)


def render_table(rows: Iterable[CalibrationRow], comments: Sequence[str] = ()) -> str:
    """The CSV text of `rows` (in the given order) after `# comment` lines."""
    buffer = io.StringIO()
    for comment in comments:
        for line in comment.splitlines() or [""]:
            buffer.write(f"# {line}\n".replace("# \n", "#\n"))
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([_cell(row, column) for column in COLUMNS])
    return buffer.getvalue()


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


# ---- reading (round-trip tests; the simulator has its own reader) --------------------------------


def read_table(path: str | Path) -> list[CalibrationRow]:
    """Rows of a calibration CSV; bad content raises InputError naming file, line and column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(path), "file not found", "a calibration CSV (docs/calibration.md)") from None
    return parse_table(text, str(path))


def parse_table(text: str, source: str) -> list[CalibrationRow]:
    """Rows of calibration CSV `text`; `source` names it in errors."""
    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise InputError(source, "no header line", f"a header with columns {','.join(COLUMNS)}")
    header_number, header_line = lines[0]
    header = tuple(cell.strip() for cell in next(csv.reader([header_line])))
    if header != COLUMNS:
        raise InputError(f"{source}:{header_number}", f"header is {','.join(header)}", f"columns {','.join(COLUMNS)}")
    rows = []
    for number, line in lines[1:]:
        cells = [cell.strip() for cell in next(csv.reader([line]))]
        where = f"{source}:{number}"
        if len(cells) != len(COLUMNS):
            raise InputError(where, f"{len(cells)} columns", f"{len(COLUMNS)} columns")
        rows.append(_parse_row(dict(zip(COLUMNS, cells)), where))
    return rows


def _parse_row(cells: dict[str, str], where: str) -> CalibrationRow:
    values: dict[str, object] = {}
    for column in _TEXT_COLUMNS:
        if not cells[column]:
            raise InputError(f"{where}: column {column}", "is empty", "a non-empty name")
        values[column] = cells[column]
    values["shape"] = parse_shape(cells["shape"], f"{where}: column shape")
    for column in _INT_COLUMNS:
        raw = cells[column]
        if not raw.isdigit():
            raise InputError(f"{where}: column {column}", f"bad value {raw!r}", "an integer >= 0")
        values[column] = int(raw)
    for column in _FLOAT_COLUMNS:
        raw = cells[column]
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        positive = column == "median_s"
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise InputError(f"{where}: column {column}", f"bad value {raw!r}",
                             "a positive number" if positive else "a number >= 0")
        values[column] = value
    return CalibrationRow(**values)  # type: ignore[arg-type]
