"""Calibration tables: measured operator times that replace the cost model's roofline for the
operators they cover. The one module that reads calibration data, whatever produced it (format in
docs/calibration.md): a CSV written by `infralab kernels bench`, or a folder of Vidur's public GPU
profiles (converted into the same rows by `infralab.vidur_profile`); `load_calibration` merges them.

A lookup finds rows with the same kernel, dtype and device, and per variant (the fastest variant
wins: a table lists the implementations one could deploy):

1. an exact shape match gives the measured time;
2. else, when rows differ from the query in one shape field only (a "line", e.g. a GEMM measured at
   many token counts M for this N and K), the time is interpolated linearly in that field between
   the two measured sizes around the query. When no line brackets the query, the line whose end
   is nearest the query (by the ratio of sizes) gives its end row, scaled by the work ratio (as in
   rule 3);
3. else the nearest measured shape (Euclidean distance over the log of each shape field) gives an
   achieved rate, and the query's time is its own work at that rate
   (`infralab.work_formulas.scaling_work`, shared with the kernels).

Tables measured on a grid over several fields (a real engine's step profile: `engine_step` rows
over (q_tokens, kv_tokens, seqs)) ask with `grid=True`, which puts one rule between 1 and 2:

1b. when the query lies inside the measured range of every field, the time is interpolated
    multilinearly over the corners of the smallest box of measured values around it (linear in each
    field; on a line this is rule 2's interpolation). Corners the producer did not measure (shapes it
    could not run, e.g. fewer query tokens than sequences) drop out and the weights of the others are
    renormalized; a box with no measured corner falls through to rules 2 and 3.

Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from infralab.calibration_table import COLUMNS, CalibrationRow, Shape, read_table
from infralab.vidur_profile import read_vidur_profile
from infralab.work_formulas import scaling_work

# The format (COLUMNS, CalibrationRow, Shape, reading the CSV) is shared with the kernels' writer in
# `infralab.calibration_table`; it is re-exported here for the cost model and the tests.
__all__ = ["COLUMNS", "CalibrationRow", "CalibrationTable", "Shape", "load_calibration", "scale", "shape_key"]

# A line: the measured sizes of one field (ascending), their times, the other fields fixed, and the
# fastest rows at the smallest and the largest size (what a query outside is scaled from).
_Line = tuple[tuple[int, ...], tuple[float, ...], tuple[CalibrationRow, CalibrationRow]]


def shape_key(shape: Mapping[str, int]) -> Shape:
    """The canonical (sorted by field name, hashable) form of a shape: rows keep the kernel's field
    order, exact-shape lookups compare this form."""
    return tuple(sorted((name, int(value)) for name, value in shape.items()))


ANSWERS_KEPT = 1 << 16  # lookups a table remembers (`CalibrationTable.lookup`), bounding its memory


class CalibrationTable:
    """Rows of one calibration CSV, indexed for lookups by (kernel, dtype, device)."""

    def __init__(self, rows: Iterable[CalibrationRow], source: str = "<rows>") -> None:
        self.source = source
        self.rows: tuple[CalibrationRow, ...] = tuple(rows)
        self._groups: dict[tuple[str, str, str], dict[str, list[CalibrationRow]]] = {}
        exact: dict[tuple[str, str, str, Shape], list[float]] = {}
        for row in self.rows:
            variants = self._groups.setdefault((row.kernel, row.dtype, row.device), {})
            variants.setdefault(row.variant, []).append(row)
            key = (row.kernel, row.dtype, row.device, shape_key(row.shape_dict))
            exact.setdefault(key, []).append(row.median_s)
        # Repeated measurements of one shape collapse to the fastest variant's median time.
        self._exact = {key: min(times) for key, times in exact.items()}
        # Lines per (kernel, dtype, device, field), built on first use: {variant: {others: line}}.
        self._lines: dict[tuple[str, str, str, str], dict[str, dict[Shape, _Line]]] = {}
        # Measured values per field, per (kernel, dtype, device), built on first use (rule 1b).
        self._axes: dict[tuple[str, str, str], dict[str, tuple[int, ...]]] = {}
        # `lookup`'s answers by its arguments (the shape as given), at most ANSWERS_KEPT of them
        # (then forgotten at once): a step table is asked the same shapes again by every
        # simulation that loads it (`load` shares the table), and a step's two rows each time.
        self._answers: dict[tuple[object, ...], float | None] = {}

    @classmethod
    def load(cls, path: str | Path) -> CalibrationTable:
        """Read a calibration CSV; any bad row raises InputError naming file, line and column.
        A file unchanged since it was last read in this process (same size and modification time)
        is not parsed again: the table is read-only, and a rate search or the fidelity study's
        mirror simulates many runs on the same one."""
        path = Path(path)
        try:
            stat = path.stat()
        except OSError:
            return cls(read_table(path), source=str(path))  # read_table names the problem
        return _load_table(str(path), stat.st_size, stat.st_mtime_ns)

    def merged(self, other: CalibrationTable) -> CalibrationTable:
        """This table's rows followed by `other`'s (one table answers for both sources)."""
        return CalibrationTable((*self.rows, *other.rows), source=f"{self.source} + {other.source}")

    # -- queries --

    def covers(self, kernel: str, dtype: str, device: str) -> bool:
        """Whether any row measures `kernel` in `dtype` on `device`."""
        return (kernel, dtype, device) in self._groups

    def exact(self, kernel: str, dtype: str, device: str, shape: Shape) -> float | None:
        """Measured seconds for exactly this shape (`shape_key` form), fastest variant; else None."""
        return self._exact.get((kernel, dtype, device, shape))

    def nearest(
        self, kernel: str, dtype: str, device: str, shape: Mapping[str, float]
    ) -> list[CalibrationRow]:
        """Per variant, the row whose shape is nearest `shape` in log space (ties: first listed).

        Only rows that measure every field of `shape` qualify; fields a row has beyond those (such
        as a replay ring length) are not compared. Variants in name order."""
        variants = self._groups.get((kernel, dtype, device), {})
        logs = {name: math.log(max(float(value), 1e-12)) for name, value in shape.items()}
        chosen = []
        for variant in sorted(variants):
            best, best_distance = None, math.inf
            for row in variants[variant]:
                fields = row.shape_dict
                if not all(name in fields for name in logs):
                    continue
                distance = sum((math.log(fields[name]) - log) ** 2 for name, log in logs.items())
                if distance < best_distance:
                    best, best_distance = row, distance
            if best is not None:
                chosen.append(best)
        return chosen

    def lookup(
        self,
        kernel: str,
        dtype: str,
        device: str,
        shape: Mapping[str, int],
        *,
        peaks: tuple[float, float] | None = None,
        grid: bool = False,
    ) -> float | None:
        """Seconds for one call of `kernel` at `shape`, or None when no row covers it.

        An exact shape match returns the measured time. With `grid`, rule 1b of the module
        (`inside_grid`) comes next. Otherwise each variant's nearest row is
        scaled by `scale` and the fastest result is returned. `peaks` = (peak FLOP/s for `dtype`,
        memory bytes/s) of the device decides whether a row is compute- or memory-bound."""
        key = (kernel, dtype, device, tuple(shape.items()), peaks, grid)
        if key in self._answers:
            return self._answers[key]
        if len(self._answers) >= ANSWERS_KEPT:
            self._answers.clear()
        answer = self._answers[key] = self._lookup(kernel, dtype, device, shape, peaks, grid)
        return answer

    def _lookup(self, kernel: str, dtype: str, device: str, shape: Mapping[str, int],
                peaks: tuple[float, float] | None, grid: bool) -> float | None:
        measured = self.exact(kernel, dtype, device, shape_key(shape))
        if measured is not None:
            return measured
        if grid:
            inside = self.inside_grid(kernel, dtype, device, shape)
            if inside is not None:
                return inside
        along = self.along_line(kernel, dtype, device, shape, peaks)
        if along is not None:
            return along
        rows = self.nearest(kernel, dtype, device, shape)
        if not rows:
            return None
        return min(scale(row, shape, peaks) for row in rows)

    def measured_range(self, kernel: str, dtype: str, device: str) -> dict[str, tuple[int, int]]:
        """(smallest, largest) measured value of each shape field of `kernel`'s rows ({} if none)."""
        return {name: (values[0], values[-1]) for name, values in self._axes_of(kernel, dtype, device).items()}

    def inside_grid(self, kernel: str, dtype: str, device: str, shape: Mapping[str, int]) -> float | None:
        """Rule 1b of the module: seconds interpolated multilinearly over the measured corners of
        the box around `shape` (exact rows, fastest variant), or None when `shape` lies outside the
        measured range of a field or no corner is measured."""
        axes = self._axes_of(kernel, dtype, device)
        per_field: list[list[tuple[str, int, float]]] = []  # (field, corner value, weight)
        for name, value in shape.items():
            values = axes.get(name)
            if values is None or not values[0] <= value <= values[-1]:
                return None
            i = bisect.bisect_left(values, value)
            if values[i] == value:
                per_field.append([(name, value, 1.0)])
                continue
            lo, hi = values[i - 1], values[i]
            above = (value - lo) / (hi - lo)
            per_field.append([(name, lo, 1.0 - above), (name, hi, above)])
        total = weights = 0.0
        for corner in itertools.product(*per_field):
            seconds = self.exact(kernel, dtype, device, shape_key({name: v for name, v, _ in corner}))
            if seconds is not None:
                weight = math.prod(w for _, _, w in corner)
                total += weight * seconds
                weights += weight
        return total / weights if weights > 0 else None

    def _axes_of(self, kernel: str, dtype: str, device: str) -> dict[str, tuple[int, ...]]:
        key = (kernel, dtype, device)
        axes = self._axes.get(key)
        if axes is None:
            values: dict[str, set[int]] = {}
            for rows in self._groups.get(key, {}).values():
                for row in rows:
                    for name, value in row.shape:
                        values.setdefault(name, set()).add(value)
            axes = self._axes[key] = {name: tuple(sorted(v)) for name, v in values.items()}
        return axes

    def along_line(
        self, kernel: str, dtype: str, device: str, shape: Mapping[str, int], peaks: tuple[float, float] | None
    ) -> float | None:
        """Rule 2 of the module: seconds from rows that differ from `shape` in one field only
        (fastest variant), or None when no row does. A line whose measured sizes bracket the query
        wins (fields in the query's order); else the line whose end is nearest the query."""
        outside: tuple[float, float] | None = None  # (log distance to the line's end, seconds)
        for field, value in shape.items():
            others = shape_key({name: v for name, v in shape.items() if name != field})
            times = []
            for lines in self._lines_of(kernel, dtype, device, field).values():
                line = lines.get(others)
                if line is not None:
                    times.append(self._on_line(field, line, shape, peaks))
            if not times:
                continue
            inside = [seconds for distance, seconds in times if distance == 0.0]
            if inside:
                return min(inside)
            nearest = min(times)
            if outside is None or nearest < outside:
                outside = nearest
        return None if outside is None else outside[1]

    @staticmethod
    def _on_line(field: str, line: _Line, shape: Mapping[str, int],
                 peaks: tuple[float, float] | None) -> tuple[float, float]:
        """(0 inside the measured sizes, else |log(query / nearest end)|; seconds) for `shape` on
        one variant's line."""
        sizes, times, ends = line
        value = shape[field]
        i = bisect.bisect_left(sizes, value)
        if i < len(sizes) and sizes[i] == value:
            return 0.0, times[i]
        if 0 < i < len(sizes):
            lo, hi = sizes[i - 1], sizes[i]
            return 0.0, times[i - 1] + (times[i] - times[i - 1]) * (value - lo) / (hi - lo)
        end = ends[0] if i == 0 else ends[1]
        return abs(math.log(value / end.shape_dict[field])), scale(end, shape, peaks)

    def _lines_of(self, kernel: str, dtype: str, device: str, field: str) -> dict[str, dict[Shape, _Line]]:
        key = (kernel, dtype, device, field)
        built = self._lines.get(key)
        if built is None:
            built = self._lines[key] = _build_lines(self._groups.get((kernel, dtype, device), {}), field)
        return built


def _build_lines(variants: Mapping[str, list[CalibrationRow]], field: str) -> dict[str, dict[Shape, _Line]]:
    """Per variant, the rows grouped by their other fields, as lines along `field` (repeated
    sizes keep their fastest time)."""
    result: dict[str, dict[Shape, _Line]] = {}
    for variant, rows in variants.items():
        points: dict[Shape, dict[int, float]] = {}
        fastest: dict[tuple[Shape, int], CalibrationRow] = {}
        for row in rows:
            fields = row.shape_dict
            if field not in fields:
                continue
            others = shape_key({name: v for name, v in fields.items() if name != field})
            line = points.setdefault(others, {})
            size = fields[field]
            if row.median_s < line.get(size, math.inf):
                line[size] = row.median_s
                fastest[(others, size)] = row
        result[variant] = {
            others: (
                tuple(sorted(line)),
                tuple(line[size] for size in sorted(line)),
                (fastest[(others, min(line))], fastest[(others, max(line))]),
            )
            for others, line in points.items()
        }
    return result


@functools.lru_cache(maxsize=16)
def _load_table(path: str, size: int, mtime_ns: int) -> CalibrationTable:
    """`CalibrationTable.load`'s parse, memoised on the file's identity (`size`, `mtime_ns`: part of
    the key only); an InputError is raised each time, never cached."""
    return CalibrationTable(read_table(path), source=path)


def load_calibration(table: str | Path | None = None, vidur_profile: str | Path | None = None) -> CalibrationTable | None:
    """The calibration a run names: a calibration CSV, a Vidur profile folder, both (merged), or
    None when it names neither."""
    tables = []
    if table is not None:
        tables.append(CalibrationTable.load(table))
    if vidur_profile is not None:
        tables.append(CalibrationTable(read_vidur_profile(vidur_profile), source=str(Path(vidur_profile))))
    if not tables:
        return None
    return tables[0] if len(tables) == 1 else tables[0].merged(tables[1])


def scale(row: CalibrationRow, shape: Mapping[str, float], peaks: tuple[float, float] | None) -> float:
    """The time of `shape` at the rate `row` achieved.

    With the device's peaks known, a row is compute-bound when flops/peak_flops exceeds
    bytes/peak_bw, and the query's time is the row's time scaled by the ratio of flops (else of
    bytes). Without peaks, the larger of the two ratios is used (the conservative choice: the
    query cannot run faster than either resource's measured rate allows)."""
    row_fields = row.shape_dict
    query = {**row_fields, **shape}  # fields the query does not name keep the row's value
    q_flops, q_bytes = scaling_work(row.kernel, query)
    r_flops, r_bytes = scaling_work(row.kernel, row_fields)
    # a kernel that does no arithmetic (a collective, a copy) scales by its bytes alone
    flops_ratio = q_flops / r_flops if r_flops else 0.0
    bytes_ratio = q_bytes / r_bytes if r_bytes else 0.0
    if peaks is None or not row.flops or not row.bytes:
        return row.median_s * max(flops_ratio, bytes_ratio)
    peak_flops, peak_bw = peaks
    compute_bound = row.flops / peak_flops > row.bytes / peak_bw
    return row.median_s * (flops_ratio if compute_bound else bytes_ratio)
