"""The calibration table format (docs/calibration.md), in one place for both of its sides.

`infralab.kernels` writes these tables and `infralab.sim` reads them; the two never import each
other, so the format itself lives here, in the neutral top-level package: the columns and their
order, the row, reading CSV text into rows (one InputError naming file, line and column), and
rendering rows as text. What only one side needs stays with it: making rows from measurements and
writing the file atomically in `infralab.kernels.calibration`; lookups and scaling to other shapes
in `infralab.sim.calibration`. Plain Python only (no torch, no numpy), so either side may import it.

Formatting is deterministic: columns in `COLUMNS` order, integers as plain decimal digits, floats
with `FLOAT_FORMAT` (6 significant digits), shape fields in the order the row holds them (the order
the kernel names them).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from infralab.errors import InputError
from infralab.input_files import csv_error, read_text

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

TEXT_COLUMNS = ("kernel", "variant", "dtype", "device")
INT_COLUMNS = ("bytes", "flops", "divisions", "transcendentals", "repeated_elementwise")
FLOAT_COLUMNS = ("median_s", "achieved_gbps", "achieved_tflops", "roofline_fraction")

Shape = tuple[tuple[str, int], ...]
"""A shape as (name, value) pairs in the kernel's own field order, e.g. (("M", 64), ("N", 64), ("K", 64))."""

_SHAPE_EXPECTED = "name=value pairs joined by ';' with positive integer values, e.g. M=4096;N=4096;K=4096"
_FILE_EXPECTED = "a calibration CSV (docs/calibration.md)"


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    """One row of the table: one call of `kernel` (`variant`) at `shape` took `median_s` seconds,
    moving `bytes` and doing `flops`. Rates in GB/s and TFLOP/s; the last three are counts per call.
    The derived columns default to 0 so that a row can be built from a measurement alone."""

    kernel: str
    variant: str
    shape: Shape
    dtype: str
    device: str
    median_s: float
    bytes: int
    flops: int
    achieved_gbps: float = 0.0
    achieved_tflops: float = 0.0
    roofline_fraction: float = 0.0
    divisions: int = 0
    transcendentals: int = 0
    repeated_elementwise: int = 0

    @property
    def shape_text(self) -> str:
        """The shape as the table writes it, e.g. `"M=64;N=32"`."""
        return format_shape(self.shape)

    @property
    def shape_dict(self) -> dict[str, int]:
        """The shape as a mapping from field name to value."""
        return dict(self.shape)


# ---- shapes ------------------------------------------------------------------------------------


def format_shape(shape: Shape) -> str:
    """`(("M", 64), ("N", 32))` -> `"M=64;N=32"`."""
    return ";".join(f"{name}={value}" for name, value in shape)


def parse_shape(text: str, where: str) -> Shape:
    """`"M=64;N=32"` -> `(("M", 64), ("N", 32))`, in the order written; InputError naming `where`
    on anything else (empty, a field without `=`, a value that is not a positive integer in plain
    decimal digits, a repeated field)."""
    fields = []
    for part in text.split(";"):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not _is_plain_digits(value) or int(value) < 1:
            raise InputError(where, f"bad shape {text!r}", _SHAPE_EXPECTED)
        fields.append((name, int(value)))
    names = [name for name, _ in fields]
    if len(set(names)) != len(names):
        raise InputError(where, f"repeated field in shape {text!r}", _SHAPE_EXPECTED)
    return tuple(fields)


def _is_plain_digits(text: str) -> bool:
    # str.isdigit alone also accepts digits int() cannot read (e.g. superscripts): ASCII only.
    return text.isascii() and text.isdigit()


# ---- writing -----------------------------------------------------------------------------------


def _cell(row: CalibrationRow, column: str) -> str:
    value = getattr(row, column)
    if column == "shape":
        return format_shape(value)
    if column in FLOAT_COLUMNS:
        return format(float(value), FLOAT_FORMAT)
    if column in INT_COLUMNS:
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


# ---- reading -----------------------------------------------------------------------------------


def read_table(path: str | Path) -> list[CalibrationRow]:
    """Rows of a calibration CSV file; bad content raises InputError naming file, line and column."""
    path = Path(path)
    return parse_table(read_text(path, "table", _FILE_EXPECTED), str(path))


def parse_table(text: str, source: str) -> list[CalibrationRow]:
    """Rows of calibration CSV `text`, in file order; `source` names it in errors (`source:line`)."""
    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise InputError(source, "no header line", f"a header with columns {','.join(COLUMNS)}")
    header_number, header_line = lines[0]
    header = tuple(cell.strip() for cell in _cells(header_line, f"{source}:{header_number}"))
    if header != COLUMNS:
        raise InputError(f"{source}:{header_number}", f"header is {','.join(header)}", f"columns {','.join(COLUMNS)}")
    rows = []
    for number, line in lines[1:]:
        where = f"{source}:{number}"
        cells = [cell.strip() for cell in _cells(line, where)]
        if len(cells) != len(COLUMNS):
            raise InputError(where, f"{len(cells)} columns", f"{len(COLUMNS)} columns")
        rows.append(_parse_row(dict(zip(COLUMNS, cells)), where))
    return rows


def _cells(line: str, where: str) -> list[str]:
    """One CSV line's cells; a line the csv module cannot read (a field over its size limit, a NUL
    byte) is an InputError at `where`."""
    try:
        return next(csv.reader([line]))
    except csv.Error as exc:
        raise csv_error(where, exc) from None


def _parse_row(cells: dict[str, str], where: str) -> CalibrationRow:
    """One row from its (stripped) cells; the first bad cell, in column order, raises InputError."""
    values: dict[str, object] = {}
    for column in COLUMNS:
        cell_where = f"{where}: column {column}"
        raw = cells[column]
        if column == "shape":
            values[column] = parse_shape(raw, cell_where)
        elif column in TEXT_COLUMNS:
            if not raw:
                raise InputError(cell_where, "is empty", "a non-empty name")
            values[column] = raw
        elif column in INT_COLUMNS:
            if not _is_plain_digits(raw):
                raise InputError(cell_where, f"bad value {raw!r}", "an integer >= 0")
            values[column] = int(raw)
        else:
            values[column] = _parse_float(raw, cell_where, positive=column == "median_s")
    return CalibrationRow(**values)  # type: ignore[arg-type]


def _parse_float(raw: str, where: str, positive: bool) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise InputError(where, f"bad value {raw!r}", "a positive number" if positive else "a number >= 0")
    return value


# ---- provenance: what produced a table, as one JSON comment line -------------------------------

PROVENANCE = "provenance: "


def provenance_line(facts: dict[str, object]) -> str:
    """A comment line (without '# ') that `read_provenance` reads back: `facts` as one JSON object."""
    return PROVENANCE + json.dumps(facts, sort_keys=True)


def read_provenance(path: str | Path) -> dict[str, object] | None:
    """The facts of a table's provenance comment line, or None when it has none (tables written
    before it existed, kernel benches); a provenance line that is not a JSON object is an
    InputError naming the file and line."""
    text = read_text(Path(path), "table", _FILE_EXPECTED)
    for number, line in enumerate(text.splitlines(), start=1):
        body = line.lstrip().removeprefix("#").strip()
        if line.lstrip().startswith("#") and body.startswith(PROVENANCE):
            try:
                facts = json.loads(body[len(PROVENANCE):])
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{number}", f"provenance is not JSON ({exc.msg})", "a JSON object") from None
            if not isinstance(facts, dict):
                raise InputError(f"{path}:{number}", "provenance is not a JSON object", "a JSON object")
            return facts
    return None


def check_provenance(source: str, facts: dict[str, object] | None, wanted: dict[str, object]) -> None:
    """InputError at `source: provenance.<field>` when a step table's provenance
    (`infralab.real.profile` writes it) names another value of a field the step times depend on
    than the run's `wanted` (a simulation checks model, dtype and cache_tokens; a real run also
    threads and device); a table without provenance, or without the field, passes."""
    for field, want in wanted.items():
        have = (facts or {}).get(field)
        if have is not None and want is not None and have != want:
            raise InputError(f"{source}: provenance.{field}", f"{have!r}, but this run's is {want!r}",
                             "a step table profiled for this run's model, dtype, KV cache (the engine's attention "
                             "mask spans the whole cache) and threads: infralab real profile of this config")
