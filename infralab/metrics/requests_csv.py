"""requests.csv: one row per request of a run, the same file for the simulator's runs (`infralab
sim run`) and the real engine's (`infralab real run`).

Columns: every `RequestRecord` field but the token times (REQUEST_FIELDS), then the derived
latencies ttft_s, tpot_s, e2e_s (DERIVED_FIELDS; seconds, `run_metrics.request_metrics`; empty
when not defined); in multimodal runs, the encode stage's columns (ENCODE_COLUMNS,
infralab.metrics.encode_records). Unset times are empty cells.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infralab.metrics.encode_records import ENCODE_COLUMNS, encode_values
from infralab.metrics.records import RequestRecord, RunRecord
from infralab.metrics.run_metrics import is_finished, request_metrics

REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord) if f.name != "token_times_s")
# Time fields are written as floats even when the engine stored an int (0 -> "0.0"), so a column
# always has one form.
_FLOAT_FIELDS = frozenset(f.name for f in dataclasses.fields(RequestRecord) if f.type in ("float", float))
DERIVED_FIELDS = ("ttft_s", "tpot_s", "e2e_s")


def _csv_value(value: object) -> object:
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return value


def _csv_time(value: float) -> str:
    value = float(value)
    return "" if math.isnan(value) else repr(value)


def _request_rows(run: RunRecord) -> Iterator[list[object]]:
    """requests.csv's rows, ordered by request id (one getter per row: this is a hot loop at a
    million requests)."""
    fields = operator.attrgetter(*REQUEST_FIELDS)
    formats = [_csv_time if name in _FLOAT_FIELDS else _csv_value for name in REQUEST_FIELDS]
    no_latencies = ["", "", ""]
    encodes = dict(zip((r.id for r in run.requests), run.encodes)) if run.encodes is not None else None
    for req in sorted(run.requests, key=operator.attrgetter("id")):
        row = [fmt(v) for fmt, v in zip(formats, fields(req))]
        if is_finished(req):
            m = request_metrics(req)
            row += [_csv_time(m.ttft_s), "" if m.tpot_s is None else _csv_time(m.tpot_s), _csv_time(m.e2e_s)]
        else:
            row += no_latencies
        if encodes is not None:  # multimodal runs: the encode stage's columns
            row += [_csv_value(v) for v in encode_values(encodes[req.id])]
        yield row


def write_requests_csv(run: RunRecord, path: Path) -> None:
    """One row per request (ordered by id): its record fields and derived latencies (seconds)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(REQUEST_FIELDS + DERIVED_FIELDS + (ENCODE_COLUMNS if run.encodes is not None else ()))
        writer.writerows(_request_rows(run))
