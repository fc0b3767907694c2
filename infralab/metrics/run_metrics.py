"""Per-request metrics and a run summary, defined as `vllm bench serve` defines them.

Definitions (all times in simulated seconds):
- TTFT  = first_token_s - arrival_s
- E2E   = finish_s - arrival_s
- TPOT  = (E2E - TTFT) / (output_tokens - 1), only for requests with more than one output token
- ITL   = every gap between consecutive output tokens, pooled over all requests
- duration = last finish - first arrival; request throughput = completed / duration; output and
  total (input + output) token throughput likewise per second of duration
- goodput = completed requests with TTFT <= slo.ttft_s and TPOT <= slo.tpot_s, per second of
  duration (a one-token request meets the TPOT SLO, as vllm counts its TPOT as 0)
- percentiles: numpy's default ("linear" interpolation), as vllm uses.

Resource statistics: busy fraction of each instance (union of its "batch" intervals) and link (union
of all its intervals) over the duration window, bytes moved per link, and the time-weighted mean and
the maximum of every counter (e.g. "waiting", "running") per track.

The saturation flag is described at `saturation`. `summarize` returns a typed `RunSummary`
(infralab.metrics.summary: its JSON form is summary.json, its `flat_metrics` the metric names that
search, the cluster validator and explain use).
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from infralab.metrics import pooled_stats
from infralab.metrics.pooled_stats import PooledSample
from infralab.metrics.records import RequestRecord, RunRecord, token_time_pieces
from infralab.metrics.schema import SLOConfig
from infralab.metrics.summary import (
    PERCENTILES,
    Backlog,
    CounterStats,
    Distribution,
    Goodput,
    Latencies,
    RequestCounts,
    ResourceStats,
    RunSummary,
    Saturation,
    Throughput,
    percentile_key,
)

# Saturation rule (see `saturation`): thresholds, chosen as round numbers, not fitted to any run.
SATURATION_MIN_REQUESTS = 10
SATURATION_SLOPE = 0.05  # seconds of extra queueing delay per second of arrival time
SATURATION_TAIL_HEAD_RATIO = 2.0
SATURATION_DELAY_FLOOR_S = 0.01  # head delays below this count as this (avoids dividing by ~0)
# The printed table also calls a run saturated when its busiest instance was busy this share of the
# run: an engine at capacity over a short replay need not show a growing queue (a round number).
SATURATION_BUSY = 0.95


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """Latencies of one finished request, in seconds; `tpot_s` is None for one-token outputs."""

    ttft_s: float
    tpot_s: float | None
    e2e_s: float


def is_finished(req: RequestRecord) -> bool:
    return not math.isnan(req.finish_s) and not math.isnan(req.first_token_s)


def request_metrics(req: RequestRecord) -> RequestMetrics:
    """TTFT, TPOT and E2E of one finished request (seconds)."""
    ttft = req.first_token_s - req.arrival_s
    e2e = req.finish_s - req.arrival_s
    tpot = (e2e - ttft) / (req.output_tokens - 1) if req.output_tokens > 1 else None
    return RequestMetrics(ttft_s=ttft, tpot_s=tpot, e2e_s=e2e)


def queue_end_s(req: RequestRecord) -> float:
    """When a request's queue phase ends (seconds): its first scheduled step, or its arrival when
    it was never scheduled. The queue phase is arrival -> queue_end_s, everywhere (explain's
    phases, the cluster validator's worst request, `queueing_delay_s`)."""
    return req.arrival_s if math.isnan(req.first_scheduled_s) else req.first_scheduled_s


def queue_phase_s(req: RequestRecord) -> float:
    """Seconds from arrival to the first scheduled step (0 when never scheduled)."""
    return queue_end_s(req) - req.arrival_s


def decode_wait_s(req: RequestRecord) -> float:
    """Disaggregated layouts: seconds from the end of its prefill to its first step on the decode
    instance: the wait for decode blocks (the reservation), for the KV to arrive and for a decode
    slot; 0 for a request that never went to a decode instance."""
    if math.isnan(req.decode_scheduled_s) or math.isnan(req.prefill_end_s):
        return 0.0
    return max(0.0, req.decode_scheduled_s - req.prefill_end_s)


def queueing_delay_s(req: RequestRecord) -> float:
    """Time a request waited for service: its queue phase (`queue_phase_s`) plus, in
    disaggregated layouts, its decode-side wait (`decode_wait_s`: blocks, KV, slot)."""
    return queue_phase_s(req) + decode_wait_s(req)


def distribution(values: np.ndarray, qs: Sequence[float] = PERCENTILES) -> Distribution:
    """mean, median, std and the percentiles `qs` (numpy linear percentiles); None when empty."""
    if len(values) == 0:
        return Distribution.empty(qs)
    percentiles = {percentile_key(q): float(v) for q, v in zip(qs, np.percentile(values, list(qs)))}
    return Distribution(float(np.mean(values)), float(np.median(values)), float(np.std(values)), percentiles)


def pooled_distribution(sample: PooledSample, qs: Sequence[float] = PERCENTILES) -> Distribution:
    """`distribution` of a sample given in pooled form (infralab.metrics.pooled_stats): the same bits
    as `distribution` of the expanded array, without holding it."""
    if sample.n == 0:
        return Distribution.empty(qs)
    mean = pooled_stats.mean(sample)
    median, values = pooled_stats.median_and_percentiles(sample, tuple(qs))
    percentiles = dict(zip((percentile_key(q) for q in qs), values))
    return Distribution(mean, median, pooled_stats.std(sample, mean), percentiles)


def itl_sample(done: Sequence[RequestRecord]) -> PooledSample:
    """Every inter-token gap of `done` (seconds), pooled in request order, as a PooledSample.

    The weighted form needs no expansion: a request's token times are pieces of arrays of step
    end times (`TokenTimes`), so within a piece its gaps are the gaps between consecutive steps,
    and each step gap is counted once for every request whose piece spans it (difference arrays
    over step indices). The gap between two pieces (first token to a later decode step,
    preemption, hand-off to a decode instance) is taken one by one."""
    lengths = np.fromiter((max(len(r.token_times_s) - 1, 0) for r in done), dtype=np.int64, count=len(done))
    ends = np.cumsum(lengths)  # position after each request's last gap

    def gaps_of(first: int, last: int) -> np.ndarray:
        """The gaps of requests first..last-1, in order."""
        views: list[np.ndarray] = []
        sizes: list[int] = []
        for r in done[first:last]:
            pieces = token_time_pieces(r.token_times_s)
            views.extend(np.frombuffer(t, dtype=float)[a : b + 1] for t, a, b in pieces)
            sizes.append(len(r.token_times_s))
        if not views:
            return np.empty(0)
        gaps = np.diff(np.concatenate(views))
        # Drop the differences across two requests (at each request's last token).
        return np.delete(gaps, np.cumsum(sizes)[:-1] - 1)

    def chunk(start: int, stop: int) -> np.ndarray:
        first = int(np.searchsorted(ends, start, side="right"))
        last = int(np.searchsorted(ends, stop, side="left")) + 1
        offset = int(ends[first - 1]) if first else 0
        return gaps_of(first, min(last, len(done)))[start - offset : stop - offset]

    return PooledSample(int(ends[-1]) if len(ends) else 0, _step_gap_parts(done), chunk)


def _step_gap_parts(done: Sequence[RequestRecord]) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """(gaps, counts) parts that together hold every inter-token gap of `done` (see `itl_sample`),
    made again on each call, one block of steps at a time."""
    # Piece bounds per shared array as int64 arrays (8 bytes each, not an int object per request).
    arrays: dict[int, tuple[array[float], array[int], array[int]]] = {}
    between: list[float] = []  # gaps from one piece to the next
    for r in done:
        previous = None
        for times, a, b in token_time_pieces(r.token_times_s):
            if previous is not None:
                between.append(times[a] - previous)
            if b > a:
                entry = arrays.get(id(times))
                if entry is None:
                    entry = arrays[id(times)] = (times, array("q"), array("q"))
                entry[1].append(a + 1)  # gaps times[m] - times[m - 1] for m in a+1..b
                entry[2].append(b + 1)
            previous = times[b]
    shared: list[tuple[np.ndarray, np.ndarray]] = []  # (step ends, requests spanning each gap)
    private: list[np.ndarray] = []  # gaps of arrays that only one piece uses (records made by hand)
    for times, starts, stops in arrays.values():
        t = np.frombuffer(times, dtype=float)
        if len(starts) == 1:
            private.append(np.diff(t[starts[0] - 1 : stops[0]]))
            continue
        spans = np.zeros(len(times) + 1, dtype=np.int32)
        np.add.at(spans, np.frombuffer(starts, dtype=np.int64), 1)
        np.add.at(spans, np.frombuffer(stops, dtype=np.int64), -1)
        np.cumsum(spans, dtype=np.int32, out=spans)  # in place: one array of the step count, not two
        shared.append((t, spans[:-1]))
    one = np.ones(1, dtype=np.int64)
    fixed = [(np.array(between, dtype=float), np.broadcast_to(one, (len(between),)))]
    if private:
        gaps = np.concatenate(private)
        fixed.append((gaps, np.broadcast_to(one, gaps.shape)))

    def parts() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield from fixed
        for t, counts in shared:
            for lo in range(1, len(t), pooled_stats.CHUNK):
                block = counts[lo : lo + pooled_stats.CHUNK]
                steps = np.flatnonzero(block) + lo
                yield t[steps] - t[steps - 1], counts[steps]

    return parts


def busy_time_s(spans: list[tuple[float, float]] | np.ndarray, lo: float, hi: float) -> float:
    """Length of the union of [start, end) spans, clipped to [lo, hi] (seconds)."""
    arr = np.asarray(spans, dtype=float).reshape(-1, 2)
    starts, ends = np.maximum(arr[:, 0], lo), np.minimum(arr[:, 1], hi)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)  # furthest end of any span so far
    # A new busy period begins where a span starts after everything before it has ended.
    new_period = np.empty(len(starts), dtype=bool)
    new_period[0] = True
    new_period[1:] = starts[1:] > reach[:-1]
    period_ends = np.append(reach[np.flatnonzero(new_period)[1:] - 1], reach[-1])
    return float(np.sum(period_ends - starts[new_period]))


def counter_stats(
    times: np.ndarray | Sequence[float], values: np.ndarray | Sequence[float], lo: float, hi: float
) -> CounterStats:
    """Time-weighted mean over [lo, hi] of a step-function counter (0 before its first sample),
    and its maximum; `times` (s) and `values` are the samples in recording order."""
    times = np.asarray(times, dtype=float)
    if len(times) > 1 and bool(np.all(times[1:] >= times[:-1])):
        return _sorted_counter_stats(times, np.asarray(values), lo, hi)
    values = np.asarray(values, dtype=float)
    order = np.argsort(times, kind="stable")  # equal times keep recording order: the last wins
    times, values = np.clip(times[order], lo, hi), values[order]
    edges = np.append(times, hi)
    weighted = float(np.sum(values * np.diff(edges)))
    span = hi - lo
    return CounterStats(mean=weighted / span if span > 0 else float(values[-1]), max=float(values.max()))


def _sorted_counter_stats(times: np.ndarray, values: np.ndarray, lo: float, hi: float) -> CounterStats:
    """`counter_stats` of samples already in time order, the same bits without a sorted copy: the
    weighted values are made and summed a chunk at a time, as numpy's pairwise sum splits them
    (`pooled_stats.pairwise_sum`), so a long series (a million requests make tens of millions of
    samples) needs no work arrays of its length."""
    n = len(times)

    def weighted(start: int, stop: int) -> np.ndarray:
        edges = np.clip(times[start : stop + 1], lo, hi)
        if stop == n:
            edges = np.append(edges, hi)
        products: np.ndarray = values[start:stop].astype(float) * np.diff(edges)
        return products

    span = hi - lo
    mean = pooled_stats.pairwise_sum(weighted, 0, n) / span if span > 0 else float(values[-1])
    return CounterStats(mean=mean, max=float(values.max()))


def saturation(arrivals: np.ndarray, delays: np.ndarray) -> Saturation:
    """Do queues grow without bound? Looks at queueing delay against arrival time.

    Rule: with requests ordered by arrival, `saturated` is True when BOTH
    (a) the least-squares slope of queueing delay over arrival time exceeds SATURATION_SLOPE
        (0.05 s of extra wait per second of trace: in a queue fed faster than it serves, waits
        grow at arrival_rate/service_rate - 1, so this flags more than about 5 % overload), and
    (b) the mean delay of the last quarter of requests exceeds SATURATION_TAIL_HEAD_RATIO (2x)
        the mean of the first quarter (floored at 10 ms), so a burst that drains does not count.
    Fewer than SATURATION_MIN_REQUESTS finished requests: never saturated (not enough evidence).
    """
    rule = (
        f"slope of queueing delay vs arrival time > {SATURATION_SLOPE} s/s and "
        f"mean delay of last quarter > {SATURATION_TAIL_HEAD_RATIO}x first quarter "
        f"(floored at {SATURATION_DELAY_FLOOR_S} s), over >= {SATURATION_MIN_REQUESTS} requests"
    )
    n = len(delays)
    if n < SATURATION_MIN_REQUESTS:
        return Saturation(saturated=False, slope=None, tail_head_ratio=None, rule=rule)
    order = np.argsort(arrivals, kind="stable")
    x, y = arrivals[order], delays[order]
    var = float(np.var(x))
    slope = float(np.mean((x - x.mean()) * (y - y.mean())) / var) if var > 0 else 0.0
    quarter = max(1, n // 4)
    head = max(float(np.mean(y[:quarter])), SATURATION_DELAY_FLOOR_S)
    ratio = float(np.mean(y[-quarter:])) / head
    return Saturation(
        saturated=bool(slope > SATURATION_SLOPE and ratio > SATURATION_TAIL_HEAD_RATIO),
        slope=slope,
        tail_head_ratio=ratio,
        rule=rule,
        head_mean_delay_s=float(np.mean(y[:quarter])),
        tail_mean_delay_s=float(np.mean(y[-quarter:])),
    )


def queued_spans(requests: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) in seconds of every span in which a request was queued: arrival -> first
    scheduled step, and, in disaggregated layouts, prefill end -> first decode step (`decode_wait_s`)."""
    arrivals = _column(requests, "arrival_s")
    starts = [arrivals, _column(requests, "prefill_end_s")]
    ends = [np.fromiter((queue_end_s(r) for r in requests), dtype=float, count=len(requests)),
            _column(requests, "decode_scheduled_s")]
    start, end = np.concatenate(starts), np.concatenate(ends)
    keep = end > start  # NaN compares False: spans that did not happen drop out
    return start[keep], end[keep]


def backlog(requests: Sequence[RequestRecord]) -> Backlog:
    """The cluster-wide queue over time (`Backlog`), exact: the step function of the number of
    requests in a `queued_spans` span, with every change at one instant applied together."""
    if not requests:
        return Backlog(0, 0, (0.0,) * 4, 0.0)
    start, end = queued_spans(requests)
    times = np.concatenate([start, end])
    order = np.argsort(times, kind="stable")
    t = times[order]
    level = np.cumsum(np.concatenate([np.ones(len(start)), -np.ones(len(end))])[order])
    last_at_time = np.append(t[1:] != t[:-1], True) if len(t) else np.empty(0, dtype=bool)
    t, level = t[last_at_time], level[last_at_time]
    arrivals = _column(requests, "arrival_s")
    lo, hi = float(arrivals.min()), float(arrivals.max())
    at_last = int(np.searchsorted(t, hi, side="right")) - 1
    final = int(level[at_last]) if at_last >= 0 else 0
    if len(t) == 0:
        return Backlog(0, 0, (0.0,) * 4, 0.0)
    edges = np.linspace(lo, hi, 5)
    quarters = tuple(
        counter_stats(t, level, a, b).mean if b > a else float(final) for a, b in zip(edges[:-1], edges[1:])
    )
    growth = (quarters[-1] - quarters[0]) / (0.75 * (hi - lo)) if hi > lo else 0.0
    return Backlog(peak=int(level.max()), final=final, quarter_means=quarters, growth_per_s=growth)


def _resource_stats(
    run: RunRecord, lo: float, hi: float
) -> tuple[dict[str, ResourceStats], dict[str, ResourceStats]]:
    """Per-instance and per-link busy fractions, link bytes, counter statistics."""
    tally = run.tally()
    tracks = set(tally.spans) | set(tally.counters) | set(run.resources)
    span = hi - lo
    instances: dict[str, ResourceStats] = {}
    links: dict[str, ResourceStats] = {}
    for track in sorted(tracks):
        if not track.startswith(("instance/", "link/")):
            continue
        spans = tally.spans.get(track)
        busy = busy_time_s(np.frombuffer(spans, dtype=float) if spans else np.empty((0, 2)), lo, hi)
        fraction = busy / span if span > 0 else 0.0
        series = tally.counters.get(track, {})
        counters = {name: counter_stats(t, v, lo, hi) for name, (t, v) in sorted(series.items())}
        if track.startswith("link/"):
            links[track] = ResourceStats(fraction, counters, bytes=float(tally.link_bytes.get(track, 0.0)))
        else:
            instances[track] = ResourceStats(fraction, counters, role=run.resources.get(track, {}).get("role"))
    return instances, links


def _column(records: Sequence[RequestRecord], name: str) -> np.ndarray:
    return np.fromiter((getattr(r, name) for r in records), dtype=float, count=len(records))


def summarize(run: RunRecord, slo: SLOConfig, percentiles: Sequence[float] = PERCENTILES) -> RunSummary:
    """The run's summary; times in seconds, throughputs per second (`RunSummary.to_json` is
    summary.json); latency distributions at `percentiles` (0..100, increasing; a config's
    `metrics.percentiles`)."""
    done = [r for r in run.requests if is_finished(r)]
    # First, while no per-request column is held: its work arrays are the summary's largest.
    itl = pooled_distribution(itl_sample(done), percentiles)
    # `request_metrics` over arrays (the same float operations, without an object per request).
    arrivals = _column(done, "arrival_s")
    outputs = np.fromiter((r.output_tokens for r in done), dtype=np.int64, count=len(done))
    ttft = _column(done, "first_token_s") - arrivals
    e2e = _column(done, "finish_s") - arrivals
    several = outputs > 1
    tpot = (e2e[several] - ttft[several]) / (outputs[several] - 1)

    first_arrival = min((r.arrival_s for r in run.requests), default=0.0)
    last_finish = max((r.finish_s for r in done), default=first_arrival)
    duration = last_finish - first_arrival
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)

    meets_tpot = np.ones(len(done), dtype=bool)  # a one-token request meets the TPOT SLO
    meets_tpot[several] = tpot <= slo.tpot_s
    good = int(np.count_nonzero((ttft <= slo.ttft_s) & meets_tpot))
    input_tokens = sum(r.prompt_tokens for r in done)
    output_tokens = sum(r.output_tokens for r in done)
    instances, links = _resource_stats(run, first_arrival, last_finish)
    delays = np.array([queueing_delay_s(r) for r in done], dtype=float)
    return RunSummary(
        requests=RequestCounts(total=len(run.requests), completed=len(done)),
        duration_s=duration,
        total_input_tokens=input_tokens,
        total_output_tokens=output_tokens,
        throughput=Throughput(
            request=per_s(len(done)), output=per_s(output_tokens), total_token=per_s(input_tokens + output_tokens)
        ),
        goodput=Goodput(per_s=per_s(good), good_requests=good, slo_ttft_s=slo.ttft_s, slo_tpot_s=slo.tpot_s),
        latency=Latencies(
            ttft_s=distribution(ttft, percentiles),
            tpot_s=distribution(tpot, percentiles),
            itl_s=itl,
            e2e_s=distribution(e2e, percentiles),
            queueing_delay_s=distribution(delays, percentiles),
        ),
        instances=instances,
        links=links,
        saturation=saturation(arrivals, delays),
        simulated_end_s=run.end_s,
        backlog=backlog(run.requests),
        first_token_side=run.resources.get("cluster", {}).get("first_token"),
    )


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.2f}"


def print_summary(summary: RunSummary, file: TextIO = sys.stdout, title: str = "Simulated Serving Benchmark Result",
                  slo_set: bool = True) -> None:
    """Print the summary as a table laid out like `vllm bench serve`'s (latencies in ms) under
    `title` (a real engine's run says so). `slo_set=False` (a config without an [slo] table, where
    the defaults mean nothing for the engine): goodput is not printed against targets nobody set."""
    width = 50

    def line(label: str, value: object) -> None:
        print(f"{label:<40}{value:<10}", file=file)

    def rule(title: str) -> None:
        print(f"{title:-^{width}}", file=file)

    print(f"{' ' + title + ' ':=^{width}}", file=file)
    line("Successful requests:", summary.requests.completed)
    line("Total requests:", summary.requests.total)
    line("Benchmark duration (s):", f"{summary.duration_s:.2f}")
    line("Total input tokens:", summary.total_input_tokens)
    line("Total generated tokens:", summary.total_output_tokens)
    line("Request throughput (req/s):", f"{summary.throughput.request:.2f}")
    good = summary.goodput
    if slo_set:
        line("Request goodput (req/s):", f"{good.per_s:.2f}")
        line("  SLOs: TTFT, TPOT (ms):", f"{good.slo_ttft_s * 1e3:g}, {good.slo_tpot_s * 1e3:g}")
    else:
        line("Request goodput (req/s):", "n/a (no [slo] table in the config)")
    line("Output token throughput (tok/s):", f"{summary.throughput.output:.2f}")
    line("Total Token throughput (tok/s):", f"{summary.throughput.total_token:.2f}")
    ttft_title = "Time to First Token"
    if summary.first_token_side == "prefill":
        ttft_title += " (stamped at prefill end)"
    for latency, title, short in (
        ("ttft", ttft_title, "TTFT"),
        ("tpot", "Time per Output Token (excl. 1st token)", "TPOT"),
        ("itl", "Inter-token Latency", "ITL"),
        ("e2e", "End-to-end Latency", "E2EL"),
    ):
        rule(title)
        d = summary.latency.of(latency)
        line(f"Mean {short} (ms):", _ms(d.mean))
        line(f"Median {short} (ms):", _ms(d.median))
        for key, value in d.percentiles.items():
            if key != "p50":  # P50 is the median, printed above
                line(f"P{key[1:]} {short} (ms):", _ms(value))
    if summary.encode is not None:  # multimodal runs only (infralab.sim.encode_metrics)
        print_encode(summary.encode, line, rule)
    rule("Resources")
    for track, stats in summary.instances.items():
        waiting = stats.counters.get("waiting")
        queue = f", queue mean {waiting.mean:.1f} max {waiting.max:.0f}" if waiting else ""
        print(f"{track:<28}busy {stats.busy_fraction * 100:5.1f}%{queue}", file=file)
    for track, stats in summary.links.items():
        print(
            f"{track:<28}busy {stats.busy_fraction * 100:5.1f}%, "
            f"{(stats.bytes or 0.0) / 1e9:.2f} GB moved",
            file=file,
        )
    busiest = max((stats.busy_fraction for stats in summary.instances.values()), default=0.0)
    if summary.saturation.saturated:
        verdict = "YES (queues grow without bound)"
    elif busiest >= SATURATION_BUSY:
        verdict = f"YES (an instance busy {busiest:.0%} of the run)"
    else:
        verdict = "no"
    line("Saturated:", verdict)
    if summary.backlog is not None:
        b = summary.backlog
        line("Queued requests: peak, at last arrival:", f"{b.peak}, {b.final}")
        line("Queue mean by quarter of arrivals:", ", ".join(f"{q:.1f}" for q in b.quarter_means))
        line("Queue growth (req/s):", f"{b.growth_per_s:+.3f}")
    print("=" * width, file=file)


def print_encode(encode: Mapping[str, Any], line: Callable[[str, object], None], rule: Callable[[str], None]) -> None:
    """print_summary's lines of a multimodal run's encode stage (summary.json "encode"): image
    counts, the seconds the encode stage adds to TTFT (encode_s, in ms) and, with an encode pool,
    its busy fractions."""
    rule("Encode (images)")
    line("Image requests, images:", f"{encode['image_requests']}, {encode['images']}")
    where = "encode pool" if encode.get("encode_pool") else "inline, in the prefill step"
    line("  encoded:", where)
    dist = encode.get("encode_s") or {}
    for key, short in (("mean", "Mean"), ("p90", "P90")):
        if key in dist:
            line(f"{short} encode (ms):", _ms(dist[key]))
    busy = encode.get("encode_pool_busy")
    if busy is not None:
        line("Encode pool busy (mean, max %):", f"{busy['mean'] * 100:.1f}, {busy['max'] * 100:.1f}")
