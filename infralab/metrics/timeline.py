"""A run's timeline as Chrome/Perfetto Trace Event JSON (opens in ui.perfetto.dev).

Layout, generic over `Interval.track` (so tracks that other modules add, such as "thread/..." or
"stream/...", appear without changes here):
- one process (pid) per track name, named by the track ("instance/prefill-0", "link/nic-0", ...),
  ordered by name;
- its intervals as "X" (complete) events on thread lanes of that process. Intervals that overlap
  without nesting (concurrent flows on a link) cannot share a lane in the format, so they are spread
  over lanes "<track> #0", "#1", ... (the fewest lanes a greedy first-fit by start time gives);
- its counters as "C" events, one series per counter name.
Times are microseconds (the format's unit) written from whole nanoseconds: each event's start and
end are rounded to the nanosecond once (`ns`) and its duration is their difference, so events that
meet on a lane meet exactly and none partially overlaps another (Perfetto drops a complete event
that does; `partial_overlaps` checks a written trace). Output is byte-stable.

Big runs: at most `max_events` interval/counter events are written (DEFAULT_MAX_EVENTS = 150,000,
about 30 MB with the engine's per-step details). When a run has more, the timeline keeps the earliest events by start time, i.e. the
full picture of the run up to a cutoff time, and says so in the top-level "metadata".
Events are written one per line straight to the file, without building the whole document. A run
need not keep more than the earliest `max_events` + 1 events for this (`RunRecord.with_timeline`,
`EarliestEvents` in infralab.metrics.records): `infralab sim run` keeps no more.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from infralab.metrics.records import CounterSample, Interval, RunRecord

DEFAULT_MAX_EVENTS = 150_000
# The counts of `write_trace`'s metadata that a run's summary records (RunSummary.timeline).
SUMMARY_FACTS = ("events_total", "events_written", "max_events", "truncated", "truncated_after_s")


def ns(t_s: float) -> int:
    """Seconds as whole nanoseconds (rounded to nearest). Every time in the trace goes through
    this once: an event's duration is `ns(end) - ns(start)`, so an event that ends when the next
    begins ends at exactly its start; rounding start and duration separately made such neighbours
    overlap by 1 ns, and Perfetto drops a complete event that partially overlaps another on its
    lane. Rounding is monotone, so two intervals that nest or do not overlap still do."""
    return round(t_s * 1e9)


def _us(t_ns: int) -> str:
    """Whole nanoseconds as a JSON number of microseconds with three decimals (exact, so equal
    times always print the same bytes)."""
    if t_ns < 0:
        return "-" + _us(-t_ns)
    whole, frac = divmod(t_ns, 1000)
    return f"{whole}.{frac:03d}"


def _json_value(value: Any) -> str:
    kind = type(value)  # exact types: bool is not int here
    if kind is int:
        return str(value)
    if kind is float and math.isfinite(value):
        return repr(value)  # what json.dumps writes for a finite float
    return json.dumps(value, sort_keys=True, allow_nan=False)


class _ArgsFormatter:
    """Interval args as a JSON object with sorted keys; the key order and quoted keys are worked out
    once per distinct key tuple (events of one kind share their keys)."""

    def __init__(self) -> None:
        self._layouts: dict[tuple[str, ...], tuple[list[int], str]] = {}

    def __call__(self, args: tuple[tuple[str, Any], ...]) -> str:
        keys = tuple([k for k, _ in args])
        layout = self._layouts.get(keys)
        if layout is None:
            order = sorted(range(len(keys)), key=lambda i: str(keys[i]))
            template = "{" + ",".join(json.dumps(str(keys[i])).replace("%", "%%") + ":%s" for i in order) + "}"
            layout = self._layouts[keys] = (order, template)
        order, template = layout
        return template % tuple([_json_value(args[i][1]) for i in order])


def assign_lanes(intervals: list[Interval]) -> list[tuple[int, Interval]]:
    """Place intervals on lanes so that, within a lane, any two either nest or do not overlap, in
    the whole nanoseconds the trace writes (`ns`).

    Returns (lane, interval) pairs sorted by (start, -end). First fit: each lane keeps a stack of the
    intervals still open at the current start time; an interval fits a lane if it ends within that
    lane's innermost open interval (it nests) or the lane has nothing open.
    """
    spans = sorted(((ns(iv.start_s), ns(iv.end_s), iv) for iv in intervals), key=lambda x: (x[0], -x[1], x[2].name))
    stacks: list[list[int]] = []  # per lane: end times (ns) of open intervals, outermost first
    placed: list[tuple[int, Interval]] = []
    for start, end, iv in spans:
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                placed.append((lane, iv))
                break
        else:
            stacks.append([end])
            placed.append((len(stacks) - 1, iv))
    return placed


def _kept(run: RunRecord, max_events: int) -> tuple[list[Interval], list[CounterSample], float | None]:
    """The intervals and counters to write: all of them, or, when there are more than
    `max_events`, those that start before the cutoff time (returned too) that leaves at most
    `max_events`. Ties at the cutoff all go, so the cap is never exceeded."""
    n_iv, n_c = len(run.intervals), len(run.counters)
    if n_iv + n_c <= max_events:
        return run.intervals, run.counters, None
    iv_t = np.fromiter((iv.start_s for iv in run.intervals), dtype=float, count=n_iv)
    c_t = np.fromiter((c.t_s for c in run.counters), dtype=float, count=n_c)
    cutoff = float(np.partition(np.concatenate([iv_t, c_t]), max_events)[max_events])
    intervals = [run.intervals[i] for i in np.flatnonzero(iv_t < cutoff).tolist()]
    counters = [run.counters[i] for i in np.flatnonzero(c_t < cutoff).tolist()]
    return intervals, counters, cutoff


def _meta_line(event: dict[str, Any]) -> str:
    return json.dumps(event, sort_keys=True, separators=(",", ":"), allow_nan=False)


def write_trace(
    run: RunRecord,
    out: TextIO,
    max_events: int = DEFAULT_MAX_EVENTS,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the Trace Event JSON of `run` to `out`; returns the metadata written (counts, cutoff).

    A record that kept only its earliest events (`RunRecord.with_timeline(..., max_events=N)`)
    gives the same file as one that kept them all, for any `max_events` up to N."""
    total = len(run.intervals) + len(run.counters) if run.events_total is None else run.events_total
    if run.max_events is not None and max_events > run.max_events and total > run.max_events:
        raise ValueError(f"the run kept only the events of a {run.max_events}-event timeline, not {max_events}")
    kept_intervals, kept_counters, cutoff = _kept(run, max_events)
    intervals: dict[str, list[Interval]] = defaultdict(list)
    counters: dict[str, list[CounterSample]] = defaultdict(list)
    for iv in kept_intervals:
        intervals[iv.track].append(iv)
    for c in kept_counters:
        counters[c.track].append(c)
    tracks = sorted(set(intervals) | set(counters) | set(run.resources))

    out.write('{"displayTimeUnit":"ms","traceEvents":[')
    written = 0
    names: dict[str, str] = {}  # event name -> its JSON string, computed once
    args_json = _ArgsFormatter()

    def quoted(name: str) -> str:
        if name not in names:
            names[name] = json.dumps(name)
        return names[name]

    for pid, track in enumerate(tracks, start=1):
        # Every track opens with its process_name event (the array's first element has no comma).
        out.write(("\n" if pid == 1 else ",\n") + _meta_line({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": track}}))
        out.write(",\n" + _meta_line({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}}))
        placed = assign_lanes(intervals.get(track, []))
        lanes = 1 + max((lane for lane, _ in placed), default=-1)
        for lane in range(lanes):
            name = track if lanes == 1 else f"{track} #{lane}"
            meta = {"ph": "M", "pid": pid, "tid": lane, "name": "thread_name", "args": {"name": name}}
            out.write(",\n" + _meta_line(meta))
        # Events are formatted by hand, keys in sorted order as json.dumps(sort_keys=True) writes
        # them: calling json.dumps per event dominated the time of writing big traces.
        for lane, iv in placed:
            args = f'"args":{args_json(iv.args)},' if iv.args else ""
            start = ns(iv.start_s)
            out.write(
                f',\n{{{args}"dur":{_us(ns(iv.end_s) - start)},"name":{quoted(iv.name)},"ph":"X",'
                f'"pid":{pid},"tid":{lane},"ts":{_us(start)}}}'
            )
        written += len(placed)
        mine = sorted(counters.get(track, []), key=lambda c: (c.name, c.t_s))
        for c in mine:
            name = quoted(c.name)
            out.write(
                f',\n{{"args":{{{name}:{_json_value(c.value)}}},"name":{name},"ph":"C",'
                f'"pid":{pid},"ts":{_us(ns(c.t_s))}}}'
            )
        written += len(mine)

    # The simulator's tags (kept byte for byte); another producer overrides them through `metadata`.
    meta = {
        "generator": "infralab.sim.timeline",
        "time_unit": "microseconds of simulated time",
        "events_total": total,
        "events_written": written,
        "max_events": max_events,
        "truncated": cutoff is not None,
        "truncated_after_s": cutoff,
        **(metadata or {}),
    }
    out.write('\n],"metadata":' + _meta_line(meta) + "}\n")
    return meta


def save_trace(
    run: RunRecord,
    path: str | Path,
    max_events: int = DEFAULT_MAX_EVENTS,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the timeline of `run` to `path` (see `write_trace`)."""
    with Path(path).open("w", encoding="utf-8") as handle:
        return write_trace(run, handle, max_events=max_events, metadata=metadata)


def truncation_warning(facts: Mapping[str, Any], end_s: float) -> str | None:
    """The line to print when a written timeline was cut at its event cap (None when whole)."""
    if not facts["truncated"]:
        return None
    return (
        f"warning: trace.json is truncated: it holds the earliest {facts['events_written']:,} of "
        f"{facts['events_total']:,} timeline events (simulated time up to "
        f"{facts['truncated_after_s']:.3f} s of {end_s:.3f} s); raise --max-trace-events to keep more"
    )


# ---- checking a written trace -------------------------------------------------------------------


def _exact_ns(value: Decimal | float) -> int:
    """A ts/dur value (microseconds) as whole nanoseconds; exact for a Decimal (`load_exact`)."""
    if isinstance(value, Decimal):
        return int((value * 1000).to_integral_value())
    return round(value * 1000)


def load_exact(path: str | Path) -> dict[str, Any]:
    """A trace file parsed with its numbers as Decimals, so times compare exactly in ns."""
    with Path(path).open(encoding="utf-8") as handle:
        trace: dict[str, Any] = json.load(handle, parse_float=Decimal)
        return trace


def partial_overlaps(trace: dict[str, Any]) -> list[tuple[tuple[int, int], dict[str, Any], dict[str, Any]]]:
    """Pairs of complete ("X") events on one lane, (pid, tid), that overlap without nesting:
    the events Perfetto would drop. Empty for every trace `write_trace` writes. Each item is
    ((pid, tid), the earlier event, the later one)."""
    lanes: dict[tuple[int, int], list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for event in trace["traceEvents"]:
        if event.get("ph") == "X":
            start = _exact_ns(event["ts"])
            lanes[(event["pid"], event.get("tid", 0))].append((start, start + _exact_ns(event["dur"]), event))
    found = []
    for lane, events in sorted(lanes.items()):
        events.sort(key=lambda e: (e[0], -e[1]))
        open_events: list[tuple[int, int, dict[str, Any]]] = []  # nested, outermost first
        for start, end, event in events:
            while open_events and open_events[-1][1] <= start:
                open_events.pop()
            if open_events and end > open_events[-1][1]:
                found.append((lane, open_events[-1][2], event))
                continue  # judged against its neighbour; not kept as an enclosing event
            open_events.append((start, end, event))
    return found
