"""Load what a run left on disk, for `infralab explain`: a simulator results folder or a timeline.

Two kinds of input:
- a results folder (kind "sim-run"): `summary.json` and `requests.csv` required (a missing one is
  an InputError naming it), `trace.json` optional: `infralab sim run --no-timeline` and the run
  folders of `infralab test --out` write none (`LoadedRun.missing` says so, and explain then has
  no intervals to analyse);
- one Chrome/Perfetto timeline file (kind "timeline"), as a study writes under
  `timelines/`: intervals and counters only, no requests or summary.

Timelines are read back into the simulator's own records (`Interval`, `CounterSample`): a track is
the process name of an event's pid (infralab writes one process per track), times are seconds.
Requests come back as `RequestRecord`s without token times (requests.csv does not hold them); a
multimodal run's encode columns come back as `EncodeRecord`s (`LoadedRun.encodes`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from infralab.errors import InputError
from infralab.input_files import csv_error, read_json, read_text
from infralab.metrics.encode_records import ENCODE_FIELDS, EncodeRecord
from infralab.metrics.records import CounterSample, Interval, RequestRecord

SIM_RUN_FILES = ("summary.json", "requests.csv")  # required
TRACE_FILE = "trace.json"  # optional
NO_TRACE = ("trace.json: no timeline in this folder (written with --no-timeline, or a run folder of "
            "`infralab test`); no interval, thread, overlap or resource-timeline analysis")
_INT_FIELDS = ("id", "prompt_tokens", "output_tokens", "cached_tokens", "preemptions", "recomputed_tokens")
_STR_FIELDS = ("prefill_instance", "decode_instance")
_FLOAT_FIELDS = tuple(
    f.name
    for f in fields(RequestRecord)
    if f.name not in _INT_FIELDS + _STR_FIELDS + ("token_times_s",)
)
ALL_COLUMNS = _INT_FIELDS + _STR_FIELDS + _FLOAT_FIELDS
# What explain cannot do without; the other columns (instances, cache hits, the first scheduled
# step, KV transfer times, preemptions) take their RequestRecord defaults when absent, as in a run
# of an engine that does not measure them (their phases then count as zero).
REQUIRED_COLUMNS = ("id", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s", "finish_s")
# A multimodal run's encode columns (infralab.metrics.encode_records): all of them, or none.
_ENCODE_INT_FIELDS = ("images", "image_tokens")
_ENCODE_STR_FIELDS = ("encode_instance",)
_ENCODE_FLOAT_FIELDS = tuple(f for f in ENCODE_FIELDS if f not in _ENCODE_INT_FIELDS + _ENCODE_STR_FIELDS)


@dataclass(frozen=True)
class LoadedRun:
    """One run as `explain` sees it. Times in seconds of the run's own clock."""

    source: str  # the path as given
    kind: str  # "sim-run" or "timeline"
    intervals: tuple[Interval, ...]
    counters: tuple[CounterSample, ...] = ()
    requests: tuple[RequestRecord, ...] | None = None  # None for a timeline
    summary: dict[str, Any] | None = None  # summary.json, None for a timeline
    trace_metadata: dict[str, Any] = field(default_factory=dict)
    missing: tuple[str, ...] = ()  # what the folder lacks that explain could use, one line each
    # A multimodal run's encode stage, one per request in `requests`' order (requests.csv's encode
    # columns); None for a run without them (a text-only run, a timeline).
    encodes: tuple[EncodeRecord, ...] | None = None

    @property
    def truncated(self) -> bool:
        """True when the timeline holds only the run's first events (see infralab.metrics.timeline)."""
        return bool(self.trace_metadata.get("truncated"))

    def by_track(self) -> dict[str, list[Interval]]:
        """Intervals grouped by track, in file order."""
        out: dict[str, list[Interval]] = defaultdict(list)
        for iv in self.intervals:
            out[iv.track].append(iv)
        return dict(out)


def load_run(path: str | Path) -> LoadedRun:
    """Load a results folder (all of SIM_RUN_FILES) or one timeline JSON file."""
    path = Path(path)
    if path.is_dir():
        return _load_sim_run(path)
    if path.exists():  # a file; the input boundary refuses devices, pipes and the like
        intervals, counters, meta = load_trace(path)
        return LoadedRun(source=str(path), kind="timeline", intervals=intervals, counters=counters, trace_metadata=meta)
    raise InputError(
        str(path),
        "no such file or folder",
        "a results folder of `infralab sim run` or a timeline .json (e.g. a study's timelines/*.json)",
    )


def _load_sim_run(folder: Path) -> LoadedRun:
    missing = [name for name in SIM_RUN_FILES if not (folder / name).is_file()]
    if missing:
        hint = ""
        if (folder / "timelines").is_dir():
            hint = f"; this looks like a folder of timelines: pass one of {folder / 'timelines'}/*.json"
        raise InputError(
            str(folder / missing[0]),
            f"missing from the run folder ({', '.join(missing)} absent){hint}",
            f"a folder written by `infralab sim run` holding {', '.join(SIM_RUN_FILES)} (and {TRACE_FILE})",
        )
    summary = load_summary(folder / "summary.json")
    requests, absent = load_requests_with_gaps(folder / "requests.csv")
    encodes = load_encodes(folder / "requests.csv")
    if (folder / TRACE_FILE).is_file():
        intervals, counters, meta = load_trace(folder / TRACE_FILE)
        missing: tuple[str, ...] = ()
    else:
        intervals, counters, meta, missing = (), (), {}, (NO_TRACE,)
    if absent:
        missing += (f"requests.csv: no column {', '.join(absent)} (default values used: their phases count as zero)",)
    missing += not_observed(summary)
    return LoadedRun(
        source=str(folder),
        kind="sim-run",
        intervals=intervals,
        counters=counters,
        requests=requests,
        summary=summary,
        trace_metadata=meta,
        missing=missing,
        encodes=encodes,
    )


def not_observed(summary: dict[str, Any]) -> tuple[str, ...]:
    """What the engine that made the run could not observe, as its summary.json says (a real
    engine's run lists it under run.not_observed: counters and timeline parts it lacks)."""
    run = summary.get("run")
    items = run.get("not_observed", []) if isinstance(run, dict) else []
    return tuple(f"not observed by this engine: {item}" for item in items if isinstance(item, str)) \
        if isinstance(items, list) else ()


def load_summary(path: Path) -> dict[str, Any]:
    """summary.json as a dict (InputError naming the file when it is not a JSON object)."""
    data = _read_json(path)
    if not isinstance(data, dict):
        raise InputError(str(path), "not a JSON object", "summary.json as `infralab sim run` writes it")
    _check_summary_values(data, path)
    return data


# Keys of summary.json whose values are text (names, the percentile method, the saturation rule,
# who stamps the first token);
# every other value is a number, a flag or null (a latency of a run that completed no request);
# per-resource figures (instances, links) are never null.
_SUMMARY_TEXT = ("run", "role", "percentile_method", "rule", "first_token_side")
_SUMMARY_RESOURCES = ("instances", "links")


def _check_summary_values(node: Any, path: Path, dotted: str = "") -> None:
    for key, value in node.items():
        where = f"{dotted}.{key}" if dotted else str(key)
        if isinstance(value, dict):
            if key not in _SUMMARY_TEXT:
                _check_summary_values(value, path, where)
        elif not ((value is None and not where.startswith(_SUMMARY_RESOURCES))
                  or isinstance(value, (bool, int, float)) or (key in _SUMMARY_TEXT and isinstance(value, str))):
            raise InputError(f"{path}: {where}", f"bad value {str(value)[:40]!r}",
                             "a number, true/false or null (summary.json as `infralab sim run` writes it)")


def _read_json(path: Path) -> Any:
    """A JSON file through the one input boundary (size cap, UTF-8, nesting, NaN refused)."""
    return read_json(path, "run", "a JSON document")


def _number(text: str, where: str, kind: type) -> Any:
    """A requests.csv cell: an integer >= 0, or a time in seconds >= 0 (empty: unset, NaN)."""
    if text == "":
        if kind is float:
            return math.nan
        raise InputError(where, "empty", "an integer")
    try:
        value = kind(text)
    except ValueError:
        raise InputError(where, f"bad value {text!r}", "an integer" if kind is int else "a number") from None
    if (kind is float and not math.isfinite(value)) or value < 0:
        expected = "an integer >= 0" if kind is int else "seconds >= 0, or empty when unset"
        raise InputError(where, f"bad value {text!r}", expected)
    return value


def load_requests(path: Path) -> tuple[RequestRecord, ...]:
    """requests.csv rows as RequestRecords (token times empty), ordered as in the file."""
    return load_requests_with_gaps(path)[0]


@contextlib.contextmanager
def _readable_csv(path: Path) -> Iterator[None]:
    """A row the csv module cannot read (a field over its size limit, a NUL byte) is an InputError
    naming the file, not a traceback."""
    try:
        yield
    except csv.Error as exc:
        raise csv_error(str(path), exc) from None


def load_requests_with_gaps(path: Path) -> tuple[tuple[RequestRecord, ...], tuple[str, ...]]:
    """requests.csv rows as RequestRecords, and the optional columns the file lacks (their fields
    keep RequestRecord's defaults)."""
    text = read_text(path, "run", "requests.csv as `infralab sim run` writes it")
    with _readable_csv(path), io.StringIO(text, newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise InputError(
                f"{path}: header",
                f"missing column(s) {', '.join(missing)}",
                "the columns `infralab sim run` writes (RequestRecord fields)",
            )
        absent = tuple(c for c in ALL_COLUMNS if c not in columns)
        out = []
        for row in reader:
            where = f"{path}: line {reader.line_num}"
            if None in row.values() or None in row:
                raise InputError(where, "a row with a different number of cells than the header",
                                 "one cell per column")
            values: dict[str, Any] = {name: row[name] for name in _STR_FIELDS if name in columns}
            for name in _INT_FIELDS:
                if name in columns:
                    values[name] = _number(row[name], f"{where}, column {name}", int)
            for name in _FLOAT_FIELDS:
                if name in columns:
                    values[name] = _number(row[name], f"{where}, column {name}", float)
            out.append(RequestRecord(**values))
    return tuple(out), absent


def load_encodes(path: Path) -> tuple[EncodeRecord, ...] | None:
    """A multimodal run's encode columns of requests.csv (ENCODE_FIELDS) as EncodeRecords, in the
    rows' order (empty cells: NaN); None when the file has none of them. A file with some of them
    but not all is an InputError naming the absent ones."""
    text = read_text(path, "run", "requests.csv as `infralab sim run` writes it")
    with _readable_csv(path), io.StringIO(text, newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        present = [c for c in ENCODE_FIELDS if c in columns]
        if not present:
            return None
        if len(present) != len(ENCODE_FIELDS):
            absent = ", ".join(c for c in ENCODE_FIELDS if c not in columns)
            raise InputError(f"{path}: header", f"some encode columns but not {absent}",
                             f"all of {', '.join(ENCODE_FIELDS)} (a multimodal run's), or none")
        out = []
        for row in reader:
            where = f"{path}: line {reader.line_num}"
            values: dict[str, Any] = {name: row[name] or "" for name in _ENCODE_STR_FIELDS}
            for name in _ENCODE_INT_FIELDS:
                values[name] = _number(row[name] or "", f"{where}, column {name}", int)
            for name in _ENCODE_FLOAT_FIELDS:
                values[name] = _number(row[name] or "", f"{where}, column {name}", float)
            values["arrival_s"] = _number(row.get("arrival_s") or "", f"{where}, column arrival_s", float)
            out.append(EncodeRecord(**values))
    return tuple(out)


def load_trace(path: Path) -> tuple[tuple[Interval, ...], tuple[CounterSample, ...], dict[str, Any]]:
    """A Trace Event JSON file as (intervals, counters, metadata); "X" and "C" events are read,
    named by the process_name of their pid (or "pid N" when a pid has none)."""
    doc = _read_json(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc if isinstance(doc, list) else None
    if not isinstance(events, list):
        raise InputError(str(path), "no traceEvents list", "Chrome/Perfetto Trace Event JSON")
    for index, ev in enumerate(events):
        where = f"{path}: traceEvents[{index}]"
        if not isinstance(ev, dict):
            raise InputError(where, f"a JSON {type(ev).__name__}, not an event object",
                             "Trace Event objects with ph, name, pid, ts")
        if not isinstance(ev.get("pid", 0), (int, str)) or not isinstance(ev.get("args") or {}, dict):
            raise InputError(where, "a pid that is not a number or name, or args that are not an object",
                             "Trace Event objects with ph, name, pid, ts and an args object")
    tracks: dict[Any, str] = {}
    for ev in events:
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            tracks[ev.get("pid")] = str((ev.get("args") or {}).get("name", f"pid {ev.get('pid')}"))
    intervals: list[Interval] = []
    counters: list[CounterSample] = []
    for index, ev in enumerate(events):
        if ev.get("ph") not in ("X", "C"):
            continue
        track = tracks.get(ev.get("pid"), f"pid {ev.get('pid')}")
        try:
            ts = _event_number(ev["ts"], low=-math.inf) * 1e-6
            args = ev.get("args") or {}
            if not isinstance(args, dict):
                raise TypeError
            if ev["ph"] == "X":
                end = ts + _event_number(ev.get("dur", 0.0), low=0.0) * 1e-6
                intervals.append(Interval(track, str(ev["name"]), ts, end, tuple(sorted(args.items()))))
            else:
                for name, value in sorted(args.items()):
                    counters.append(CounterSample(track, str(name), ts, _event_number(value, low=-math.inf)))
        except (KeyError, TypeError, ValueError):
            raise InputError(
                f"{path}: traceEvents[{index}]",
                f"malformed {ev.get('ph')!r} event",
                "finite numeric ts and dur >= 0 in microseconds, a name, and finite numeric counter args",
            ) from None
    meta = doc.get("metadata", {}) if isinstance(doc, dict) else {}
    return tuple(intervals), tuple(counters), meta if isinstance(meta, dict) else {}


def _event_number(value: Any, low: float) -> float:
    """A finite number (not a boolean or text) at least `low`; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(value)
    number = float(value)
    if not math.isfinite(number) or number < low:
        raise ValueError(value)
    return number
