"""Calibration tables: measured kernel times (written by `infralab kernels bench`, format in
docs/calibration.md) that replace the cost model's roofline for the operators they cover.

A lookup finds rows with the same kernel, dtype and device. An exact shape match gives the measured
time. Otherwise, per variant, the nearest measured shape (Euclidean distance over the log of each
shape field) gives an achieved rate, and the query's time is its own work at that rate
(`infralab.work_formulas.scaling_work`, shared with the kernels); the fastest variant wins (a table
lists the implementations one could deploy). Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from infralab.calibration_table import COLUMNS, CalibrationRow, Shape, read_table
from infralab.work_formulas import scaling_work

# The format (COLUMNS, CalibrationRow, Shape, reading the CSV) is shared with the kernels' writer in
# `infralab.calibration_table`; it is re-exported here for the cost model and the tests.
__all__ = ["COLUMNS", "CalibrationRow", "CalibrationTable", "Shape", "scale", "shape_key"]


def shape_key(shape: Mapping[str, int]) -> Shape:
    """The canonical (sorted by field name, hashable) form of a shape: rows keep the kernel's field
    order, exact-shape lookups compare this form."""
    return tuple(sorted((name, int(value)) for name, value in shape.items()))


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

    @classmethod
    def load(cls, path: str | Path) -> CalibrationTable:
        """Read a calibration CSV; any bad row raises InputError naming file, line and column."""
        return cls(read_table(path), source=str(Path(path)))

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
    ) -> float | None:
        """Seconds for one call of `kernel` at `shape`, or None when no row covers it.

        An exact shape match returns the measured time. Otherwise each variant's nearest row is
        scaled by `scale` and the fastest result is returned. `peaks` = (peak FLOP/s for `dtype`,
        memory bytes/s) of the device decides whether a row is compute- or memory-bound."""
        measured = self.exact(kernel, dtype, device, shape_key(shape))
        if measured is not None:
            return measured
        rows = self.nearest(kernel, dtype, device, shape)
        if not rows:
            return None
        return min(scale(row, shape, peaks) for row in rows)


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
    flops_ratio, bytes_ratio = q_flops / r_flops, q_bytes / r_bytes
    if peaks is None or not row.flops or not row.bytes:
        return row.median_s * max(flops_ratio, bytes_ratio)
    peak_flops, peak_bw = peaks
    compute_bound = row.flops / peak_flops > row.bytes / peak_bw
    return row.median_s * (flops_ratio if compute_bound else bytes_ratio)
