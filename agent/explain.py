"""`infralab explain RUN [--against BASELINE]`: where a run's time went, and why it differs from a
baseline. The JSON schema and the definitions are in docs/explain.md; this module computes them.

What is explained (the "metric", seconds):
- a simulator results folder: the mean E2E latency (or TTFT with metric="ttft") of the finished
  requests present in both runs (paired by request id), split per request into phases
  queue | prefill | kv_wait | kv_transfer | decode that add up to it exactly (a multimodal run,
  one with encode records: encode | queue | prefill | ...);
- a timeline with prefill steps ("prefill/steps" track, as a host-thread study writes): the span of the
  steps, split by what the critical thread (thread/main) was doing: its ops, and "gil-wait";
- any other timeline: the span of all its intervals.

Causes, ranked (RANKING_RULE): critical-path components (phases, the critical thread's
activities), GIL waits per thread (with the threads and ops that held the GIL meanwhile), and
overlap changes between named interval sets (seconds of set A no longer hidden under set B).
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from infralab.agent.explain_text import percent
from infralab.agent.interval_sets import IntervalSet, default_pairs, op_or_label
from infralab.agent.run_dir import LoadedRun
from infralab.errors import InputError
from infralab.metrics.encode_records import EncodeRecord
from infralab.metrics.records import Interval, RequestRecord
from infralab.metrics.run_metrics import is_finished, queue_end_s
from infralab.metrics.summary import LATENCIES, LATENCY_STATS, Metric, RunSummary, metric_names
from infralab.sim.host.overlap import intersection, merge, total
from infralab.sim.host.thread import GIL_WAIT, NATIVE_HOLD, PYTHON

SCHEMA = "infralab.explain/1"
PHASES = ("queue", "prefill", "kv_wait", "kv_transfer", "decode")
TTFT_PHASES = ("queue", "prefill")
ENCODE = "encode"  # the phase of multimodal runs only (runs with encode records), before queue
STEP_TRACK = "prefill/steps"
CRITICAL_THREAD = "thread/main"
GIL_HOLDING = (PYTHON, NATIVE_HOLD)  # thread states that hold the GIL
UNTRACKED = "untracked"
KIND_ORDER = ("phase", "thread_activity", "gil_wait", "overlap")
RANKING_RULE = (
    "causes whose change goes the same way as the metric's (agrees_with_metric: delta_s and the "
    "metric change have the same sign; more time in a phase, activity, GIL wait or exposed work is "
    "worse, as a larger metric is) come first, those going the other way last; within each group, "
    "for a results folder the request phases (seconds per request) come before the overlaps "
    "(seconds over the run), and then causes are ranked by |delta_s| (RUN minus BASELINE; alone: by "
    "run_s), largest first, ties by kind (phase, thread_activity, gil_wait, overlap) then key. "
    "delta_s is, per kind: phase = change of that phase's part of the metric, in seconds per request "
    "as the metric weighs them (the phases add up to the metric change; totals over the requests "
    "are in details.*_total_s); thread_activity = change of the critical thread's time in that "
    "op inside the explained span; gil_wait = change of the thread's time waiting for the GIL (for "
    "the critical thread: inside the span, so that its activities and GIL wait add up to the metric "
    "change); overlap = change of the seconds of set A not covered "
    "by set B (work that no longer hides under B). Critical-path kinds carry share_of_metric_delta; "
    "gil_wait of other threads and overlap act on the metric through waits, so their delta_s may "
    "exceed the metric change"
)
_EPS = 1e-9  # seconds: timelines store nanosecond resolution, smaller differences are rounding


# ---- spans ------------------------------------------------------------------------------------


def _spans(intervals: Sequence[Interval]) -> list[tuple[float, float]]:
    return [(iv.start_s, iv.end_s) for iv in intervals]


def _clip_total(intervals: Sequence[Interval], lo: float, hi: float) -> float:
    return total(intersection(_spans(intervals), [(lo, hi)]))


class Coverage:
    """Seconds of any [lo, hi] covered by a fixed set of spans, in O(log n) per query plus the
    spans it touches (merging once, not per query: runs have tens of thousands of intervals)."""

    def __init__(self, spans: Sequence[tuple[float, float]]) -> None:
        self.spans = merge(spans)
        self.starts = [a for a, _ in self.spans]

    def covered(self, lo: float, hi: float) -> float:
        i = max(bisect.bisect_right(self.starts, lo) - 1, 0)
        seconds = 0.0
        while i < len(self.spans) and self.spans[i][0] < hi:
            a, b = self.spans[i]
            seconds += max(0.0, min(b, hi) - max(a, lo))
            i += 1
        return seconds


def interval_json(iv: Interval) -> dict[str, Any]:
    args = {str(k): v for k, v in iv.args}
    return {
        "track": iv.track,
        "name": iv.name,
        "op": op_or_label(iv),
        "start_s": iv.start_s,
        "end_s": iv.end_s,
        "duration_s": iv.end_s - iv.start_s,
        "args": args,
    }


def _longest(intervals: Sequence[Interval], n: int = 3) -> list[dict[str, Any]]:
    ranked = sorted(intervals, key=lambda iv: (-(iv.end_s - iv.start_s), iv.start_s, iv.track))
    return [interval_json(iv) for iv in ranked[:n]]


def _delta(run: float, base: float | None) -> float | None:
    return None if base is None else run - base


# ---- request phases ---------------------------------------------------------------------------


def request_phases(req: RequestRecord, enc: EncodeRecord | None = None) -> dict[str, float]:
    """A finished request's life split into PHASES (seconds); they sum to E2E exactly.

    queue: arrival -> first scheduled step (the simulator's queue phase, `queue_end_s`); prefill:
    -> end of prefill (the first token, or in a disaggregated layout the prefill instance's last
    step, `prefill_end_s`); kv_wait: -> KV transfer start, when it starts after that;
    kv_transfer: -> KV transfer end (the part after prefill: a layerwise transfer hidden under
    prefill costs no latency); decode: -> finish. Boundaries are clamped to be non-decreasing, so a
    missing (NaN) time gives a zero phase.

    With `enc` (a multimodal run's encode record), an ENCODE phase comes first (`encode_phases`).
    """
    marks = [req.arrival_s, max(req.arrival_s, queue_end_s(req))]
    prefill_end = req.first_token_s if math.isnan(req.prefill_end_s) else req.prefill_end_s
    for t in (prefill_end, req.kv_transfer_start_s, req.kv_transfer_end_s, req.finish_s):
        marks.append(marks[-1] if math.isnan(t) else max(marks[-1], t))
    phases = {name: marks[i + 1] - marks[i] for i, name in enumerate(PHASES)}
    return phases if enc is None else encode_phases(phases, marks, enc)


def encode_phases(phases: dict[str, float], marks: list[float], enc: EncodeRecord) -> dict[str, float]:
    """PHASES with ENCODE carved out in front (the parts still add up to E2E exactly):
    - encoded by an encode pool (EPD): encode = arrival -> embeddings ready at the prefill
      instance, taken from the front of what was the queue phase (the request reaches the prefill
      pool only then); queue = the rest, waiting at the prefill instance;
    - encoded inline (the prefilling instance's step runs the encoder first): encode = the
      encoder's compute (encode_start_s -> encode_end_s) inside the prefill phase, taken out of
      prefill. requests.csv holds the last encoding: a request preempted and recomputed encodes
      again, and the earlier encodings stay in prefill (before the first token) or decode;
    - no images: encode = 0."""
    arrival, queue_end, prefill_end = marks[0], marks[1], marks[2]
    encode = 0.0
    if enc.images and enc.pooled and not math.isnan(enc.embeddings_ready_s):
        encode = min(max(enc.embeddings_ready_s, arrival), queue_end) - arrival
        phases = {**phases, "queue": phases["queue"] - encode}
    elif enc.images and not math.isnan(enc.encode_start_s) and not math.isnan(enc.encode_end_s):
        encode = max(0.0, min(enc.encode_end_s, prefill_end) - max(enc.encode_start_s, queue_end))
        phases = {**phases, "prefill": phases["prefill"] - encode}
    return {ENCODE: encode, **phases}


def with_encode(phases: tuple[str, ...]) -> tuple[str, ...]:
    """A metric's phases in a multimodal run: ENCODE before queue when the metric counts queue and
    prefill (e2e, ttft; the encode phase is carved out of those two)."""
    return (ENCODE, *phases) if "queue" in phases and "prefill" in phases else phases


def _encodes(run: LoadedRun, ids: Sequence[int]) -> dict[int, EncodeRecord]:
    """Request id -> its encode record, for `ids`; a request of a run without encode records (a
    text-only run compared with a multimodal one) has no images."""
    mine = {r.id: enc for r, enc in zip(run.requests or (), run.encodes or ())}
    return {i: mine[i] if i in mine else EncodeRecord(images=0, image_tokens=0) for i in ids}


def _finished(run: LoadedRun) -> dict[int, RequestRecord]:
    return {r.id: r for r in (run.requests or ()) if is_finished(r)}


# ---- steps and the critical thread ------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """A piece of the explained span: a prefill step, including the wait before it."""

    id: int
    start_s: float
    end_s: float


def step_units(run: LoadedRun) -> list[Unit]:
    steps = sorted((iv for iv in run.intervals if iv.track == STEP_TRACK), key=lambda iv: (iv.start_s, iv.end_s))
    units, prev_end = [], None
    for index, iv in enumerate(steps):
        start = iv.start_s if prev_end is None else prev_end
        units.append(Unit(int(dict(iv.args).get("step", index)), start, iv.end_s))
        prev_end = iv.end_s
    return units


def explained_span(run: LoadedRun) -> tuple[float, float]:
    """[start, end] of the explained span: the prefill steps when present, else all intervals."""
    units = step_units(run)
    if units:
        return units[0].start_s, units[-1].end_s
    if not run.intervals:
        return 0.0, 0.0
    return min(iv.start_s for iv in run.intervals), max(iv.end_s for iv in run.intervals)


def critical_thread(runs: Sequence[LoadedRun]) -> str | None:
    """thread/main when a run has it; else the thread track covering most of the first run's span."""
    threads = sorted({iv.track for r in runs for iv in r.intervals if iv.track.startswith("thread/")})
    if not threads:
        return None
    if CRITICAL_THREAD in threads:
        return CRITICAL_THREAD
    lo, hi = explained_span(runs[0])
    by_track = runs[0].by_track()
    return max(threads, key=lambda t: (_clip_total(by_track.get(t, []), lo, hi), t))


def activity(iv: Interval) -> str:
    """A thread interval's category: "gil-wait", else its op (else its state name)."""
    if iv.name == GIL_WAIT:
        return GIL_WAIT
    return op_or_label(iv) or iv.name


def thread_categories(intervals: Sequence[Interval], lo: float, hi: float) -> dict[str, float]:
    """Seconds per activity of one thread inside [lo, hi], plus UNTRACKED for the rest."""
    out: dict[str, float] = defaultdict(float)
    groups: dict[str, list[Interval]] = defaultdict(list)
    for iv in intervals:
        groups[activity(iv)].append(iv)
    for name, ivs in groups.items():
        seconds = _clip_total(ivs, lo, hi)
        if seconds > 0:
            out[name] += seconds
    covered = _clip_total(intervals, lo, hi)
    if hi - lo - covered > _EPS:
        out[UNTRACKED] = hi - lo - covered
    return dict(out)


# ---- GIL waits and their blockers -------------------------------------------------------------


def gil_waits(run: LoadedRun) -> dict[str, dict[str, Any]]:
    """Per thread track: total GIL wait (s), and who held the GIL meanwhile, by
    (thread, state, op): seconds of its GIL-holding intervals inside the waits. The rest of
    the wait, when nobody held it (hand-off latency), is the blocker "(hand-off)"."""
    tracks = run.by_track()
    threads = sorted(t for t in tracks if t.startswith("thread/"))
    holding = {
        t: [iv for iv in tracks[t] if iv.name in GIL_HOLDING] for t in threads
    }
    out = {}
    for t in threads:
        waits = Coverage(_spans([iv for iv in tracks[t] if iv.name == GIL_WAIT]))
        waited = total(waits.spans)
        blockers: dict[tuple[str, str, str], float] = defaultdict(float)
        held_any: list[tuple[float, float]] = []
        for other in threads:
            if other == t:
                continue
            for iv in holding[other]:
                seconds = waits.covered(iv.start_s, iv.end_s)
                if seconds > 0:
                    blockers[(other, iv.name, op_or_label(iv))] += seconds
                    held_any.append((iv.start_s, iv.end_s))
        handoff = waited - total(intersection(waits.spans, held_any))
        if handoff > _EPS:
            blockers[("(hand-off)", "", "")] += handoff
        out[t] = {"total_s": waited, "blockers": dict(blockers), "intervals": [iv for iv in tracks[t] if iv.name == GIL_WAIT]}
    return out


# ---- overlaps -----------------------------------------------------------------------------------


def overlap_stats(run: LoadedRun, a: IntervalSet, b: IntervalSet) -> dict[str, float]:
    """Seconds of A, of B, of both; the fraction of A covered by B and of B covered by A; and
    A's exposed seconds (not covered by B). Each set is merged first (no double counting)."""
    sa, sb = merge(_spans(a.select(run.intervals))), merge(_spans(b.select(run.intervals)))
    ta, tb = total(sa), total(sb)
    both = total(intersection(sa, sb))
    return {
        "a_s": ta,
        "b_s": tb,
        "both_s": both,
        "a_covered_by_b": both / ta if ta > 0 else 0.0,
        "b_covered_by_a": both / tb if tb > 0 else 0.0,
        "a_exposed_s": ta - both,
    }


def _exposed_intervals(run: LoadedRun, a: IntervalSet, b: IntervalSet, n: int = 3) -> list[dict[str, Any]]:
    sb = Coverage(_spans(b.select(run.intervals)))
    scored = []
    for iv in a.select(run.intervals):
        exposed = (iv.end_s - iv.start_s) - sb.covered(iv.start_s, iv.end_s)
        scored.append((-exposed, iv.start_s, iv))
    scored.sort(key=lambda x: (x[0], x[1]))
    out = []
    for neg, _, iv in scored[:n]:
        item = interval_json(iv)
        item["exposed_s"] = -neg
        out.append(item)
    return out


# ---- resources ----------------------------------------------------------------------------------


def resource_usage(run: LoadedRun) -> dict[str, dict[str, Any]]:
    """Busy seconds and fraction per instance/link/stream track. An instance is busy during its
    "batch" intervals, other tracks during any interval; the window is the run's summary duration
    (first arrival to last finish) when it has a summary (whose busy fractions are used as they
    are: they are not cut by timeline truncation), else the span of its timeline."""
    tracks = run.by_track()
    summary = run_summary(run)
    known = {**summary.instances, **summary.links} if summary is not None else {}
    duration = summary.duration_s if summary is not None else None
    if summary is None and run.summary is not None:  # a summary lacking keys: the busy fractions it has
        known = {track: stats for table in ("instances", "links") if isinstance(run.summary.get(table), dict)
                 for track, stats in run.summary[table].items()
                 if isinstance(stats, dict) and isinstance(stats.get("busy_fraction"), (int, float))}
        duration = run.summary.get("duration_s") if isinstance(run.summary.get("duration_s"), (int, float)) else None
    lo, hi = (
        (min(iv.start_s for iv in run.intervals), max(iv.end_s for iv in run.intervals)) if run.intervals else (0.0, 0.0)
    )
    out: dict[str, dict[str, Any]] = {}
    for track in sorted(set(tracks) | set(known)):
        kind = track.split("/", 1)[0]
        if kind not in ("instance", "link", "stream"):
            continue
        if track in known and duration:
            stats = known[track]
            fraction = float(stats["busy_fraction"] if isinstance(stats, dict) else stats.busy_fraction)
            out[track] = {"kind": kind, "busy_s": fraction * float(duration), "busy_fraction": fraction}
            continue
        ivs = [iv for iv in tracks.get(track, []) if kind != "instance" or iv.name == "batch"]
        busy = _clip_total(ivs, lo, hi)
        out[track] = {"kind": kind, "busy_s": busy, "busy_fraction": busy / (hi - lo) if hi > lo else 0.0}
    return out


# ---- summary metrics ----------------------------------------------------------------------------

# Flat metric names of the run summary (infralab.metrics.summary, docs/sim.md) that explain compares.
SUMMARY_METRICS = metric_names(
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "goodput",
    "duration_s",
    "completed",
    "saturated",
    *(f"{lat}_{stat}_s" for lat in LATENCIES for stat in LATENCY_STATS),
)


# What summary.json must hold for the typed summary (RunSummary.from_json reads these keys).
SUMMARY_KEYS = ("requests", "duration_s", "total_input_tokens", "total_output_tokens", "request_throughput",
                "output_throughput", "total_token_throughput", "goodput", "good_requests", "slo",
                *(f"{lat}_s" for lat in LATENCIES), "instances", "links", "saturation", "simulated_end_s")


def summary_gaps(run: LoadedRun) -> list[str]:
    """The summary.json keys (top level, and `counters` of each instance and link) that `run`
    lacks: a run of another engine may not measure everything the simulator does."""
    if run.summary is None:
        return []
    data = run.summary
    gaps = [key for key in SUMMARY_KEYS if key not in data]
    for table in ("instances", "links"):
        if isinstance(data.get(table), dict):
            gaps += [f"{table}.{track}.{field}" for track, stats in sorted(data[table].items())
                     for field in ("busy_fraction", "counters") if isinstance(stats, dict) and field not in stats]
    return gaps


def run_summary(run: LoadedRun) -> RunSummary | None:
    """The run's summary.json as a typed summary; None for a timeline, or for a summary that
    lacks keys (`summary_gaps`; explain then reads what is there, `flat_summary`)."""
    if run.summary is None or summary_gaps(run):
        return None
    source = f"{run.source}/summary.json"
    summary = RunSummary.from_json(run.summary, source=source)
    # A summary.json edited by hand can hold a table or null where a figure belongs: refuse it
    # here, as one input error, rather than fail while comparing.
    expected = "summary.json as `infralab sim run` writes it"
    try:
        flat = summary.flat_metrics()
    except (TypeError, ValueError, AttributeError) as exc:
        raise InputError(source, f"not a run summary ({type(exc).__name__}: {exc})", expected) from None
    for name, value in flat.items():
        if not (value is None or isinstance(value, (bool, int, float))):
            raise InputError(f"{source}: {name}", f"bad value {str(value)[:40]!r}", f"a number ({expected})")
    return summary


def _summary_path(name: str) -> tuple[str, ...]:
    """Where flat metric `name` lives in summary.json."""
    if name == "completed":
        return ("requests", "completed")
    if name == "saturated":
        return ("saturation", "saturated")
    for lat in LATENCIES:
        for stat in LATENCY_STATS:
            if name == f"{lat}_{stat}_s":
                return (f"{lat}_s", stat)
    return (name,)


def flat_summary(run: LoadedRun) -> dict[str, Metric]:
    """SUMMARY_METRICS of the run: from the typed summary when summary.json is whole, else those
    present in it (an absent one is left out; a present one must be a number, a flag or null)."""
    summary = run_summary(run)
    if summary is not None:
        return dict(summary.flat_metrics())
    out: dict[str, Metric] = {}
    for name in SUMMARY_METRICS:
        node: Any = run.summary or {}
        for part in _summary_path(name):
            node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
        if node is KeyError:
            continue
        if not (node is None or isinstance(node, (bool, int, float))):
            raise InputError(f"{run.source}/summary.json: {name}", f"bad value {str(node)[:40]!r}",
                             "a number, true/false or null")
        out[name] = node
    return out


def _as_number(value: Metric) -> float | bool | None:
    """A metric for the document: flags as they are, counts and times as floats."""
    return value if value is None or isinstance(value, bool) else float(value)


def summary_metrics(run: LoadedRun, base: LoadedRun | None) -> list[dict[str, Any]]:
    if run.summary is None:
        return []
    run_flat = flat_summary(run)
    base_flat = flat_summary(base) if base is not None else {}
    out = []
    for name in SUMMARY_METRICS:
        r, b = _as_number(run_flat.get(name)), _as_number(base_flat.get(name))
        if r is None and b is None:
            continue
        delta = None
        if isinstance(r, float) and isinstance(b, float):
            delta = r - b
        out.append({"name": name, "run": r, "baseline": b, "delta": delta})
    return out


# ---- the explanation ----------------------------------------------------------------------------


def _run_info(run: LoadedRun) -> dict[str, Any]:
    missing = list(run.missing) + [f"summary.json: no {key} (left out of the comparison)" for key in summary_gaps(run)]
    return {
        "missing": missing,
        "source": run.source,
        "kind": run.kind,
        "requests": None if run.requests is None else len(run.requests),
        "intervals": len(run.intervals),
        "timeline_truncated": run.truncated,
        "timeline_truncated_after_s": run.trace_metadata.get("truncated_after_s"),
    }


def explain(
    run: LoadedRun,
    baseline: LoadedRun | None = None,
    metric: str = "auto",
    overlaps: Sequence[tuple[IntervalSet, IntervalSet]] | None = None,
    top: int = 10,
) -> dict[str, Any]:
    """The explanation of `run` (against `baseline` when given) as the JSON document of
    docs/explain.md. `metric`: "auto", "e2e" or "ttft" (results folders), "span" (timelines).
    `overlaps`: (A, B) interval-set pairs; None means the defaults present in the runs."""
    runs = [run] + ([baseline] if baseline is not None else [])
    if baseline is not None and (run.requests is None) != (baseline.requests is None):
        raise InputError(
            "--against",
            f"cannot compare a {run.kind} ({run.source}) with a {baseline.kind} ({baseline.source})",
            "two results folders of `infralab sim run`, or two timeline files",
        )
    has_requests = run.requests is not None
    request_choices = ", ".join(REQUEST_METRICS)
    if metric == "auto":
        metric = "e2e" if has_requests else "span"
    if metric in REQUEST_METRICS and not has_requests:
        raise InputError("--metric", f"{metric!r} needs requests, but {run.source} is a timeline", "span")
    if metric in TIMELINE_METRICS and has_requests:
        raise InputError("--metric", f"{metric!r} is for timelines", f"one of {request_choices} for a results folder")
    if metric not in METRIC_CHOICES:
        raise InputError("--metric", f"unknown metric {metric!r}", f"one of {', '.join(METRIC_CHOICES)}")
    if overlaps is None:
        overlaps = default_pairs([iv for r in runs for iv in r.intervals],
                                 [(r.source, r.trace_metadata) for r in runs])

    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "run": _run_info(run),
        "baseline": None if baseline is None else _run_info(baseline),
        "ranking_rule": RANKING_RULE,
        "metrics": summary_metrics(run, baseline),
        "resources": _resources(run, baseline),
    }
    causes: list[dict[str, Any]] = []
    if has_requests:
        doc.update(_request_part(run, baseline, metric, top, causes))
    else:
        doc.update(_timeline_part(runs, top, causes))
    threads = _threads_part(run, baseline, doc["breakdown"], causes)
    doc["threads"] = threads
    doc["overlaps"] = _overlaps_part(run, baseline, overlaps, causes)
    # Shares and agreement against the metric's own change (a mean, for requests): the causes on
    # the critical path are in the same unit and add up to it.
    total_delta = doc["metric"]["delta"]
    moved = total_delta is not None and abs(total_delta) > _EPS
    for cause in causes:
        share = None
        if cause["on_critical_path"] and cause["delta_s"] is not None and moved:
            share = cause["delta_s"] / total_delta
        cause["share_of_metric_delta"] = share
        # More time in a phase, activity, GIL wait or exposed work is worse, as a larger metric is.
        agrees = None
        if moved and cause["delta_s"] is not None:
            agrees = (cause["delta_s"] > 0) == (total_delta > 0)
        cause["agrees_with_metric"] = agrees
    causes = [c for c in causes if abs(c["delta_s"] if c["delta_s"] is not None else c["run_s"]) > _EPS]
    # Request phases are seconds per request, overlaps seconds over the run: not comparable, so
    # with requests the phases (the critical path) rank before the overlaps.
    causes.sort(
        key=lambda c: (
            c["agrees_with_metric"] is False,
            has_requests and not c["on_critical_path"],
            -abs(c["delta_s"] if c["delta_s"] is not None else c["run_s"]),
            KIND_ORDER.index(c["kind"]),
            c["key"],
        )
    )
    for rank, cause in enumerate(causes, start=1):
        cause["rank"] = rank
    doc["causes"] = causes
    return doc


def _cause(kind: str, key: str, description: str, run_s: float, base_s: float | None, critical: bool,
           details: dict[str, Any], intervals: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": kind,
        "key": key,
        "description": description,
        "run_s": run_s,
        "baseline_s": base_s,
        "delta_s": _delta(run_s, base_s),
        "on_critical_path": critical,
        "details": details,
        "intervals": intervals,
    }


@dataclass(frozen=True)
class RequestMetric:
    """A per-request latency that explain splits into PHASES: which phases make it up, and how
    requests are weighed. `per_token`: a request's value is its phases / (output_tokens - 1)
    (only requests with 2+ output tokens count); `pooled`: one mean over all tokens of all requests
    (sum of the phases / sum of (output_tokens - 1), as the summary pools ITL), else the mean
    over requests."""

    phases: tuple[str, ...]
    description: str
    per_token: bool = False
    pooled: bool = False


POST_FIRST_TOKEN = ("kv_wait", "kv_transfer", "decode")
REQUEST_METRICS = {
    "e2e": RequestMetric(PHASES, "mean E2E latency"),
    "ttft": RequestMetric(TTFT_PHASES, "mean TTFT"),
    "tpot": RequestMetric(POST_FIRST_TOKEN, "mean TPOT (first token excluded), over requests with 2+ output tokens",
                          per_token=True),
    "itl": RequestMetric(POST_FIRST_TOKEN, "mean ITL: every inter-token gap of every request pooled",
                         per_token=True, pooled=True),
    # The queue phase alone; the summary's queueing_delay also counts, in disaggregated layouts, the
    # wait between the KV's arrival and the second token, which needs token times requests.csv lacks.
    "queue": RequestMetric(("queue",), "mean queue phase (arrival to the first scheduled step)"),
}
TIMELINE_METRICS = ("span",)
METRIC_CHOICES = ("auto", *REQUEST_METRICS, *TIMELINE_METRICS)


def request_weights(requests: dict[int, RequestRecord], ids: Sequence[int], spec: RequestMetric) -> dict[int, float]:
    """Each counted request's weight in the metric: metric = sum over requests of weight x (its
    phases' seconds). 1/N for a mean over N requests; 1/((n-1) N) per token; 1/sum(n-1) pooled."""
    if not spec.per_token:
        return {i: 1.0 / len(ids) for i in ids} if ids else {}
    counted = [i for i in ids if requests[i].output_tokens > 1]
    if spec.pooled:
        tokens = sum(requests[i].output_tokens - 1 for i in counted)
        return {i: 1.0 / tokens for i in counted}
    return {i: 1.0 / ((requests[i].output_tokens - 1) * len(counted)) for i in counted}


def _request_part(run: LoadedRun, base: LoadedRun | None, metric: str, top: int,
                  causes: list[dict[str, Any]]) -> dict[str, Any]:
    spec = REQUEST_METRICS[metric]
    # Multimodal runs (either side has encode records) get the encode phase; text-only runs exactly
    # the phases they always had.
    multimodal = run.encodes is not None or (base is not None and base.encodes is not None)
    phases = with_encode(spec.phases) if multimodal else spec.phases
    mine, theirs = _finished(run), (_finished(base) if base is not None else None)
    paired = sorted(mine) if theirs is None else sorted(set(mine) & set(theirs))
    run_w = request_weights(mine, paired, spec)
    base_w = request_weights(theirs, paired, spec) if theirs is not None else None
    ids = [i for i in paired if i in run_w and (base_w is None or i in base_w)]
    run_enc = _encodes(run, ids) if multimodal else {}
    base_enc = _encodes(base, ids) if multimodal and base is not None else {}
    run_ph = {i: request_phases(mine[i], run_enc.get(i)) for i in ids}
    base_ph = {i: request_phases(theirs[i], base_enc.get(i)) for i in ids} if theirs is not None else None
    n = len(ids)

    def contribution(ph: str, table: dict[int, dict[str, float]], weights: dict[int, float]) -> float:
        return sum(weights[i] * table[i][ph] for i in ids)

    def total(ph: str, table: dict[int, dict[str, float]]) -> float:
        return sum(table[i][ph] for i in ids)

    run_value = sum(contribution(ph, run_ph, run_w) for ph in phases) if n else None
    base_value = (sum(contribution(ph, base_ph, base_w) for ph in phases) if n else None) if base_ph is not None else None
    run_total = sum(total(ph, run_ph) for ph in phases)
    base_total = sum(total(ph, base_ph) for ph in phases) if base_ph is not None else None
    metric_doc = {
        "name": f"{metric}_s_mean",
        "unit": "s",
        "description": f"{spec.description}, over the {'paired ' if base is not None else ''}finished requests",
        "run": run_value,
        "baseline": base_value,
        "delta": _delta(run_value, base_value) if run_value is not None and base_value is not None else None,
        "delta_total_s": _delta(run_total, base_total),
        "units": n,
        "per": "token" if spec.per_token else "request",  # what one second of a phase part is per
    }
    if metric_doc["delta"] is not None and metric_doc["baseline"]:
        metric_doc["relative"] = metric_doc["delta"] / metric_doc["baseline"]
    else:
        metric_doc["relative"] = None
    categories = []
    for ph in phases:
        r = contribution(ph, run_ph, run_w) if n else 0.0
        b = (contribution(ph, base_ph, base_w) if n else 0.0) if base_ph is not None else None
        r_tot = total(ph, run_ph)
        b_tot = total(ph, base_ph) if base_ph is not None else None
        categories.append({"name": ph, "run_s": r, "baseline_s": b, "delta_s": _delta(r, b),
                           "run_total_s": r_tot, "baseline_total_s": b_tot, "delta_total_s": _delta(r_tot, b_tot)})
        per_req = sorted(
            ids, key=lambda i: (-abs(run_ph[i][ph] - (base_ph[i][ph] if base_ph is not None else 0.0)), i)
        )[:3]
        evidence = [
            {"id": i, "run_s": run_ph[i][ph], "baseline_s": base_ph[i][ph] if base_ph is not None else None}
            for i in per_req
        ]
        totals = {"run_total_s": r_tot, "baseline_total_s": b_tot, "delta_total_s": _delta(r_tot, b_tot), "requests": n}
        per = "token" if spec.per_token else "request"
        causes.append(_cause("phase", ph, f"requests' {ph} phase (its part of the metric, s per {per})", r, b, True,
                             {"top_requests": evidence, **totals}, _phase_intervals(run, ph, per_req)))
    units = []
    for i in ids:
        scale = 1.0 / (mine[i].output_tokens - 1) if spec.per_token else 1.0
        r = scale * sum(run_ph[i][ph] for ph in phases)
        b = scale * sum(base_ph[i][ph] for ph in phases) if base_ph is not None else None
        req = mine[i]
        ph_doc = {ph: {"run_s": run_ph[i][ph], "baseline_s": base_ph[i][ph] if base_ph is not None else None,
                       "delta_s": _delta(run_ph[i][ph], base_ph[i][ph] if base_ph is not None else None)}
                  for ph in phases}
        key = (lambda ph: abs(ph_doc[ph]["delta_s"])) if base_ph is not None else (lambda ph: ph_doc[ph]["run_s"])
        units.append({
            "id": i, "start_s": req.arrival_s, "end_s": req.finish_s, "run_s": r, "baseline_s": b,
            "delta_s": _delta(r, b), "phases": ph_doc, "dominant_phase": max(phases, key=lambda ph: (key(ph), -phases.index(ph))),
            "prefill_instance": req.prefill_instance, "decode_instance": req.decode_instance,
        })
    units.sort(key=lambda u: (-abs(u["delta_s"] if u["delta_s"] is not None else u["run_s"]), u["id"]))
    return {
        "metric": metric_doc,
        "breakdown": {"unit": "request", "critical_track": None, "categories": categories},
        "units": {
            "kind": "request",
            "paired": len(paired) if base is not None else None,
            "counted": n,
            "only_run": len(set(mine) - set(paired)),
            "only_baseline": len(set(theirs) - set(paired)) if theirs is not None else None,
            "top": units[:top],
        },
    }


def _phase_intervals(run: LoadedRun, phase: str, ids: list[int]) -> list[dict[str, Any]]:
    """Timeline evidence for a phase: the KV flows of the top requests for kv_transfer; their
    encode instances' batches and embedding flows for encode."""
    if phase not in ("kv_transfer", ENCODE):
        return []
    wanted = set(ids)
    if phase == ENCODE:
        mine = [iv for iv in run.intervals if dict(iv.args).get("request") in wanted
                and (iv.track.startswith("instance/encode-") or dict(iv.args).get("label") == "embeddings")]
        return _longest(mine)
    flows = [iv for iv in run.intervals if iv.track.startswith("link/") and dict(iv.args).get("request") in wanted
             and dict(iv.args).get("label") != "embeddings"]
    return _longest(flows)


def _timeline_part(runs: list[LoadedRun], top: int, causes: list[dict[str, Any]]) -> dict[str, Any]:
    run, base = runs[0], (runs[1] if len(runs) > 1 else None)
    crit = critical_thread(runs)
    r_lo, r_hi = explained_span(run)
    b_lo, b_hi = explained_span(base) if base is not None else (0.0, 0.0)
    has_steps = bool(step_units(run))
    r_val, b_val = r_hi - r_lo, (b_hi - b_lo if base is not None else None)
    metric_doc = {
        "name": "prefill_span_s" if has_steps else "span_s",
        "unit": "s",
        "description": "first prefill step start to last prefill step end" if has_steps
        else "first interval start to last interval end",
        "run": r_val,
        "baseline": b_val,
        "delta": _delta(r_val, b_val),
        "delta_total_s": _delta(r_val, b_val),
        "relative": (r_val - b_val) / b_val if b_val else None,
        "units": len(step_units(run)),
    }
    categories: list[dict[str, Any]] = []
    if crit is not None:
        r_ivs = run.by_track().get(crit, [])
        b_ivs = base.by_track().get(crit, []) if base is not None else []
        r_cat = thread_categories(r_ivs, r_lo, r_hi)
        b_cat = thread_categories(b_ivs, b_lo, b_hi) if base is not None else None
        for name in sorted(set(r_cat) | set(b_cat or {})):
            r = r_cat.get(name, 0.0)
            b = b_cat.get(name, 0.0) if b_cat is not None else None
            categories.append({"name": name, "run_s": r, "baseline_s": b, "delta_s": _delta(r, b)})
            if name == GIL_WAIT:
                continue  # ranked as the thread's gil_wait cause
            mine = [iv for iv in r_ivs if activity(iv) == name]
            causes.append(_cause("thread_activity", f"{crit}:{name}", f"{crit} in {name!r} inside the span",
                                 r, b, True, {"track": crit}, _longest(mine)))
    units = _step_units_doc(run, base, crit, top)
    return {
        "metric": metric_doc,
        "breakdown": {"unit": "step" if has_steps else "run", "critical_track": crit, "categories": categories},
        "units": units,
    }


def _step_units_doc(run: LoadedRun, base: LoadedRun | None, crit: str | None, top: int) -> dict[str, Any]:
    r_units = {u.id: u for u in step_units(run)}
    b_units = {u.id: u for u in step_units(base)} if base is not None else None
    ids = sorted(r_units) if b_units is None else sorted(set(r_units) & set(b_units))
    r_crit = run.by_track().get(crit, []) if crit else []
    b_crit = base.by_track().get(crit, []) if crit and base is not None else []
    out = []
    for i in ids:
        ru = r_units[i]
        bu = b_units[i] if b_units is not None else None
        r_cat = thread_categories(r_crit, ru.start_s, ru.end_s) if crit else {}
        b_cat = thread_categories(b_crit, bu.start_s, bu.end_s) if crit and bu is not None else {}
        names = sorted(set(r_cat) | set(b_cat))
        ph = {n: {"run_s": r_cat.get(n, 0.0), "baseline_s": b_cat.get(n, 0.0) if bu is not None else None,
                  "delta_s": _delta(r_cat.get(n, 0.0), b_cat.get(n, 0.0) if bu is not None else None)} for n in names}
        r = ru.end_s - ru.start_s
        b = bu.end_s - bu.start_s if bu is not None else None
        key = (lambda n: abs(ph[n]["delta_s"])) if bu is not None else (lambda n: ph[n]["run_s"])
        out.append({"id": i, "start_s": ru.start_s, "end_s": ru.end_s, "run_s": r, "baseline_s": b,
                    "delta_s": _delta(r, b), "phases": ph,
                    "dominant_phase": max(names, key=lambda n: (key(n), n)) if names else None})
    out.sort(key=lambda u: (-abs(u["delta_s"] if u["delta_s"] is not None else u["run_s"]), u["id"]))
    return {
        "kind": "step",
        "paired": len(ids) if base is not None else None,
        "only_run": len(set(r_units) - set(ids)),
        "only_baseline": len(set(b_units) - set(ids)) if b_units is not None else None,
        "top": out[:top],
    }


def _threads_part(run: LoadedRun, base: LoadedRun | None, breakdown: dict[str, Any],
                  causes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    crit = breakdown["critical_track"]
    in_span = next((c for c in breakdown["categories"] if c["name"] == GIL_WAIT), None)
    r_waits = gil_waits(run)
    b_waits = gil_waits(base) if base is not None else None
    out = []
    for track in sorted(set(r_waits) | set(b_waits or {})):
        r = r_waits.get(track, {"total_s": 0.0, "blockers": {}, "intervals": []})
        b = (b_waits or {}).get(track, {"total_s": 0.0, "blockers": {}, "intervals": []}) if b_waits is not None else None
        keys = sorted(set(r["blockers"]) | set(b["blockers"] if b else {}))
        blockers = []
        for key in keys:
            rs = r["blockers"].get(key, 0.0)
            bs = b["blockers"].get(key, 0.0) if b is not None else None
            blockers.append({"thread": key[0], "state": key[1], "op": key[2], "run_s": rs, "baseline_s": bs,
                             "delta_s": _delta(rs, bs)})
        blockers.sort(key=lambda x: (-abs(x["delta_s"] if x["delta_s"] is not None else x["run_s"]), x["thread"], x["state"], x["op"]))
        r_act = _activities(run, track)
        b_act = _activities(base, track) if base is not None else None
        activities = [
            {"name": n, "run_s": r_act.get(n, 0.0), "baseline_s": (b_act.get(n, 0.0) if b_act is not None else None),
             "delta_s": _delta(r_act.get(n, 0.0), b_act.get(n, 0.0) if b_act is not None else None)}
            for n in sorted(set(r_act) | set(b_act or {}))
        ]
        gil = {"run_s": r["total_s"], "baseline_s": b["total_s"] if b is not None else None,
               "delta_s": _delta(r["total_s"], b["total_s"] if b is not None else None), "blocked_by": blockers}
        out.append({"track": track, "critical": track == crit, "gil_wait": gil, "activities": activities})
        r_s, b_s = r["total_s"], (b["total_s"] if b is not None else None)
        if track == crit:  # on the critical path only inside the explained span
            r_s, b_s = (in_span["run_s"], in_span["baseline_s"]) if in_span else (0.0, 0.0 if b is not None else None)
        causes.append(_cause("gil_wait", track, f"{track} waiting for the GIL", r_s, b_s, track == crit,
                             {"blocked_by": blockers[:5]}, _longest(r["intervals"])))
    return out


def _activities(run: LoadedRun, track: str) -> dict[str, float]:
    groups: dict[str, list[Interval]] = defaultdict(list)
    for iv in run.by_track().get(track, []):
        groups[activity(iv)].append(iv)
    return {name: total(_spans(ivs)) for name, ivs in groups.items()}


def _overlaps_part(run: LoadedRun, base: LoadedRun | None, pairs: Sequence[tuple[IntervalSet, IntervalSet]],
                   causes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for a, b in pairs:
        name = f"{a.name} vs {b.name}"
        r = overlap_stats(run, a, b)
        bs = overlap_stats(base, a, b) if base is not None else None
        delta = {k: r[k] - bs[k] for k in r} if bs is not None else None
        out.append({"name": name, "a": {"name": a.name, "selector": a.selector},
                    "b": {"name": b.name, "selector": b.selector}, "run": r, "baseline": bs, "delta": delta})
        was = (lambda key: f"{percent(bs[key])} -> ") if bs else (lambda key: "")
        text = (f"{a.name} not hidden under {b.name}: {b.name} covered by {a.name} "
                f"{was('b_covered_by_a')}{percent(r['b_covered_by_a'])}, "
                f"{a.name} inside {b.name} {was('a_covered_by_b')}{percent(r['a_covered_by_b'])}")
        causes.append(_cause("overlap", name, text, r["a_exposed_s"], bs["a_exposed_s"] if bs else None, False,
                             {"run": r, "baseline": bs}, _exposed_intervals(run, a, b)))
    return out


def _resources(run: LoadedRun, base: LoadedRun | None) -> list[dict[str, Any]]:
    r = resource_usage(run)
    b = resource_usage(base) if base is not None else None
    out = []
    for track in sorted(set(r) | set(b or {})):
        ru = r.get(track, {"busy_s": 0.0, "busy_fraction": 0.0})
        bu = (b or {}).get(track, {"busy_s": 0.0, "busy_fraction": 0.0}) if b is not None else None
        out.append({
            "track": track,
            "kind": track.split("/", 1)[0],
            "run": {"busy_s": ru["busy_s"], "busy_fraction": ru["busy_fraction"]},
            "baseline": None if bu is None else {"busy_s": bu["busy_s"], "busy_fraction": bu["busy_fraction"]},
            "delta_busy_s": None if bu is None else ru["busy_s"] - bu["busy_s"],
            "delta_busy_fraction": None if bu is None else ru["busy_fraction"] - bu["busy_fraction"],
        })
    return out
