"""A run's summary as typed values, its JSON form (summary.json) and its one flattening into metric
names. `infralab.metrics.run_metrics.summarize` computes it from a run's records.

Metric names (`RunSummary.flat_metrics`), the one scheme that `infralab search`, the `cluster`
validator, `infralab explain` and the reports use:
- a time in seconds ends in `_s`: `duration_s`, and `<latency>_<stat>_s` for latency in
  LATENCIES (ttft, tpot, itl, e2e, queueing_delay) and stat in LATENCY_STATS (mean, p50, p90, p99),
  e.g. `ttft_p90_s`, `tpot_mean_s`; a run configured with other percentiles (`[metrics]
  percentiles`) has the stats `mean` and `p<q>` for each of its percentiles q instead (`ttft_p99.9_s`);
- a rate per second of run duration has no suffix: `goodput` (requests within the SLOs per
  second), `request_throughput` (req/s), `output_throughput` and `total_token_throughput` (tok/s);
- counts: `completed`, `total_requests`; fractions: `max_instance_busy`, `max_link_busy` (busy
  fraction of the busiest instance or link); a flag: `saturated`; the backlog beside it (`Backlog`):
  `peak_queue`, `final_queue` (requests) and `queue_growth_per_s` (requests per second);
- only when the caller knows the layout (`instances`, `accelerators` given): `instances`,
  `accelerators` and each rate divided by them, `<rate>_per_instance`, `<rate>_per_accelerator`.
A statistic of an empty distribution (no finished request) is None.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from infralab.errors import InputError

PERCENTILES = (50, 90, 99)  # the default; a config may choose others (`[metrics] percentiles`)
PERCENTILE_METHOD = "numpy.percentile, linear interpolation (as vllm bench serve)"
LATENCIES = ("ttft", "tpot", "itl", "e2e", "queueing_delay")
LATENCY_STATS = ("mean", "p50", "p90", "p99")
RATES = ("goodput", "request_throughput", "output_throughput", "total_token_throughput")

Metric = float | int | bool | None

METRIC_NAMES: tuple[str, ...] = (
    "completed",
    "total_requests",
    "duration_s",
    "saturated",
    "peak_queue",
    "final_queue",
    "queue_growth_per_s",
    *RATES,
    *(f"{lat}_{stat}_s" for lat in LATENCIES for stat in LATENCY_STATS),
    "max_instance_busy",
    "max_link_busy",
)
INSTANCE_METRIC_NAMES: tuple[str, ...] = ("instances", *(f"{rate}_per_instance" for rate in RATES))
ACCELERATOR_METRIC_NAMES: tuple[str, ...] = ("accelerators", *(f"{rate}_per_accelerator" for rate in RATES))
ALL_METRIC_NAMES: tuple[str, ...] = METRIC_NAMES + INSTANCE_METRIC_NAMES + ACCELERATOR_METRIC_NAMES


def metric_names(*names: str) -> tuple[str, ...]:
    """`names`, checked to be flat metric names (a typo fails at import, not in a run)."""
    unknown = [n for n in names if n not in ALL_METRIC_NAMES]
    if unknown:
        raise ValueError(f"not flat metric names: {unknown}; known: {ALL_METRIC_NAMES}")
    return names


def percentile_key(q: float) -> str:
    """The name of percentile `q` (0..100) in summaries and metric names: 90 -> "p90", 99.9 ->
    "p99.9" (the shortest form that reads back as q, so two percentiles never share a name)."""
    return f"p{int(q)}" if q == int(q) else f"p{q!r}"


_PERCENTILE_KEY = re.compile(r"p\d+(\.\d+)?(e-\d+)?")  # what percentile_key writes


@dataclasses.dataclass(frozen=True, slots=True)
class Distribution:
    """Statistics of a sample of seconds; every value None when the sample is empty.

    `percentiles` maps `percentile_key(q)` to the q-th percentile for each configured q (by
    default PERCENTILES), in increasing q."""

    mean: float | None
    median: float | None
    std: float | None
    percentiles: Mapping[str, float | None]

    @classmethod
    def empty(cls, qs: Sequence[float] = PERCENTILES) -> Distribution:
        return cls(None, None, None, {percentile_key(q): None for q in qs})

    def stat(self, name: str) -> float | None:
        """mean, median, std or a computed percentile ("p90"); KeyError for one not computed."""
        if name in ("mean", "median", "std"):
            value: float | None = getattr(self, name)
            return value
        return self.percentiles[name]

    def to_json(self) -> dict[str, float | None]:
        return {"mean": self.mean, "median": self.median, "std": self.std, **self.percentiles}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Distribution:
        percentiles = {k: v for k, v in data.items() if _PERCENTILE_KEY.fullmatch(k)}
        ordered = dict(sorted(percentiles.items(), key=lambda kv: float(kv[0][1:])))
        return cls(data["mean"], data["median"], data["std"], ordered)


@dataclasses.dataclass(frozen=True, slots=True)
class Latencies:
    """Per-request latency distributions (seconds); `itl_s` pools every inter-token gap."""

    ttft_s: Distribution
    tpot_s: Distribution
    itl_s: Distribution
    e2e_s: Distribution
    queueing_delay_s: Distribution

    def of(self, latency: str) -> Distribution:
        """The distribution of one of LATENCIES."""
        distribution: Distribution = getattr(self, f"{latency}_s")
        return distribution


@dataclasses.dataclass(frozen=True, slots=True)
class RequestCounts:
    total: int
    completed: int


@dataclasses.dataclass(frozen=True, slots=True)
class Throughput:
    """Per second of run duration: requests, output tokens, input + output tokens."""

    request: float
    output: float
    total_token: float


@dataclasses.dataclass(frozen=True, slots=True)
class Goodput:
    """Completed requests within both SLOs (`ttft_s`, `tpot_s`, seconds), and per second."""

    per_s: float
    good_requests: int
    slo_ttft_s: float
    slo_tpot_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class CounterStats:
    """A counter track's time-weighted mean over the run window, and its maximum."""

    mean: float
    max: float


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceStats:
    """One instance or link: busy fraction of the run window, counters; an instance's role, a
    link's bytes moved (None where it does not apply)."""

    busy_fraction: float
    counters: Mapping[str, CounterStats]
    role: str | None = None
    bytes: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "busy_fraction": self.busy_fraction,
            "counters": {name: dataclasses.asdict(c) for name, c in self.counters.items()},
        }
        if self.role is not None:
            out["role"] = self.role
        if self.bytes is not None:
            out["bytes"] = self.bytes
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ResourceStats:
        return cls(
            busy_fraction=data["busy_fraction"],
            counters={name: CounterStats(**c) for name, c in data["counters"].items()},
            role=data.get("role"),
            bytes=data.get("bytes"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Saturation:
    """The saturation verdict (`infralab.metrics.run_metrics.saturation`): slope in s/s; the head and
    tail mean delays (seconds) are None when there were too few requests to judge."""

    saturated: bool
    slope: float | None
    tail_head_ratio: float | None
    rule: str
    head_mean_delay_s: float | None = None
    tail_mean_delay_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for key in ("head_mean_delay_s", "tail_mean_delay_s"):
            if out[key] is None:
                del out[key]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Saturation:
        fields: dict[str, Any] = {f.name: data.get(f.name) for f in dataclasses.fields(cls)}
        return cls(**fields)


@dataclasses.dataclass(frozen=True, slots=True)
class Backlog:
    """Requests queued cluster-wide over time: waiting for their first scheduled step, or (in
    disaggregated layouts) between the end of their prefill and their first decode step (for
    decode blocks, their KV or a decode slot). `peak`: most queued at once; `final`: queued at the
    last arrival; `quarter_means`: time-averaged queue over each quarter of the arrival window
    (first arrival to last arrival); `growth_per_s`: (last quarter's mean - first quarter's) /
    (3/4 of that window), requests per second (0 when the window has no length)."""

    peak: int
    final: int
    quarter_means: tuple[float, ...]
    growth_per_s: float

    def to_json(self) -> dict[str, Any]:
        quarters = {f"q{i + 1}": mean for i, mean in enumerate(self.quarter_means)}
        return {"peak": self.peak, "final": self.final, "quarter_means": quarters, "growth_per_s": self.growth_per_s}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Backlog:
        quarters = data["quarter_means"]
        means = tuple(quarters[f"q{i + 1}"] for i in range(len(quarters)))
        return cls(data["peak"], data["final"], means, data["growth_per_s"])


@dataclasses.dataclass(frozen=True, slots=True)
class RunSummary:
    """What one simulation run did: counts, rates, latencies, resources, saturation.

    `run` holds what was run (config name, seed, arm, ...) as plain JSON data, or None.
    `first_token_side`: who stamps token 1 ("instance" colocated; "decode" or "prefill" in a
    disaggregated layout, `cluster.transfer.first_token`); None when not known."""

    requests: RequestCounts
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    throughput: Throughput
    goodput: Goodput
    latency: Latencies
    instances: Mapping[str, ResourceStats]
    links: Mapping[str, ResourceStats]
    saturation: Saturation
    simulated_end_s: float
    run: Mapping[str, Any] | None = None
    # What trace.json holds (events_total, events_written, max_events, truncated,
    # truncated_after_s: `infralab.metrics.timeline.write_trace`'s counts); None when none was written.
    timeline: Mapping[str, Any] | None = None
    # KV capacity of one instance, {"kv_blocks", "block_size", "kv_tokens"}, when the caller knows it
    kv_cache: Mapping[str, Any] | None = None
    backlog: Backlog | None = None
    first_token_side: str | None = None
    # Multimodal runs: the encode stage (infralab.sim.encode_metrics.encode_summary); else None.
    encode: Mapping[str, Any] | None = None

    def with_run(self, facts: Mapping[str, Any]) -> RunSummary:
        return dataclasses.replace(self, run=dict(facts))

    def with_timeline(self, facts: Mapping[str, Any]) -> RunSummary:
        return dataclasses.replace(self, timeline=dict(facts))

    def with_encode(self, block: Mapping[str, Any]) -> RunSummary:
        return dataclasses.replace(self, encode=dict(block))

    def with_kv_cache(self, blocks: int, block_size: int, per_pool: Mapping[str, int] | None = None) -> RunSummary:
        """This summary with one instance's KV capacity: `blocks` blocks of `block_size` tokens;
        with `per_pool` (pool -> blocks of one of its instances, where pools' hardware differs),
        also "per_pool": {pool: {"kv_blocks", "kv_tokens"}}."""
        kv: dict[str, Any] = {"kv_blocks": blocks, "block_size": block_size, "kv_tokens": blocks * block_size}
        if per_pool:
            kv["per_pool"] = {pool: {"kv_blocks": n, "kv_tokens": n * block_size} for pool, n in per_pool.items()}
        return dataclasses.replace(self, kv_cache=kv)

    # ---- the one flattening ----------------------------------------------------------------

    def rate(self, name: str) -> float:
        """One of RATES, per second."""
        return {
            "goodput": self.goodput.per_s,
            "request_throughput": self.throughput.request,
            "output_throughput": self.throughput.output,
            "total_token_throughput": self.throughput.total_token,
        }[name]

    def flat_metrics(self, instances: int | None = None, accelerators: int | None = None) -> dict[str, Metric]:
        """The summary as metric names (module docstring) -> values, in METRIC_NAMES order, then
        INSTANCE_METRIC_NAMES when `instances` is given and ACCELERATOR_METRIC_NAMES when
        `accelerators` is given."""
        out: dict[str, Metric] = {
            "completed": self.requests.completed,
            "total_requests": self.requests.total,
            "duration_s": self.duration_s,
            "saturated": bool(self.saturation.saturated),
            "peak_queue": self.backlog.peak if self.backlog else None,
            "final_queue": self.backlog.final if self.backlog else None,
            "queue_growth_per_s": self.backlog.growth_per_s if self.backlog else None,
        }
        for name in RATES:
            out[name] = self.rate(name)
        for lat in LATENCIES:
            dist = self.latency.of(lat)
            out[f"{lat}_mean_s"] = dist.mean
            for key, value in dist.percentiles.items():
                out[f"{lat}_{key}_s"] = value
        out["max_instance_busy"] = max((s.busy_fraction for s in self.instances.values()), default=0.0)
        out["max_link_busy"] = max((s.busy_fraction for s in self.links.values()), default=0.0)
        for count, unit in ((instances, "instance"), (accelerators, "accelerator")):
            if count is not None:
                out[f"{unit}s"] = count
                for name in RATES:
                    out[f"{name}_per_{unit}"] = self.rate(name) / count
        return out

    # ---- summary.json --------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """summary.json's document (times in seconds, rates per second)."""
        out: dict[str, Any] = {
            "requests": dataclasses.asdict(self.requests),
            "duration_s": self.duration_s,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            "request_throughput": self.throughput.request,
            "output_throughput": self.throughput.output,
            "total_token_throughput": self.throughput.total_token,
            "goodput": self.goodput.per_s,
            "good_requests": self.goodput.good_requests,
            "slo": {"ttft_s": self.goodput.slo_ttft_s, "tpot_s": self.goodput.slo_tpot_s},
            **{f"{lat}_s": self.latency.of(lat).to_json() for lat in LATENCIES},
            "percentile_method": PERCENTILE_METHOD,
            "instances": {track: s.to_json() for track, s in self.instances.items()},
            "links": {track: s.to_json() for track, s in self.links.items()},
            "saturation": self.saturation.to_json(),
            "simulated_end_s": self.simulated_end_s,
        }
        if self.backlog is not None:
            out["backlog"] = self.backlog.to_json()
        if self.first_token_side is not None:
            out["first_token_side"] = self.first_token_side
        if self.run is not None:
            out["run"] = dict(self.run)
        if self.timeline is not None:
            out["timeline"] = dict(self.timeline)
        if self.kv_cache is not None:
            out["kv_cache"] = dict(self.kv_cache)
        if self.encode is not None:
            out["encode"] = dict(self.encode)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "summary.json") -> RunSummary:
        """The summary back from its JSON document; InputError naming `source` when a field is
        missing or malformed."""
        try:
            return cls(
                requests=RequestCounts(**data["requests"]),
                duration_s=data["duration_s"],
                total_input_tokens=data["total_input_tokens"],
                total_output_tokens=data["total_output_tokens"],
                throughput=Throughput(
                    request=data["request_throughput"],
                    output=data["output_throughput"],
                    total_token=data["total_token_throughput"],
                ),
                goodput=Goodput(
                    per_s=data["goodput"],
                    good_requests=data["good_requests"],
                    slo_ttft_s=data["slo"]["ttft_s"],
                    slo_tpot_s=data["slo"]["tpot_s"],
                ),
                latency=Latencies(**{f"{lat}_s": Distribution.from_json(data[f"{lat}_s"]) for lat in LATENCIES}),
                instances={t: ResourceStats.from_json(s) for t, s in data["instances"].items()},
                links={t: ResourceStats.from_json(s) for t, s in data["links"].items()},
                saturation=Saturation.from_json(data["saturation"]),
                simulated_end_s=data["simulated_end_s"],
                run=data.get("run"),
                timeline=data.get("timeline"),
                kv_cache=data.get("kv_cache"),
                backlog=Backlog.from_json(data["backlog"]) if "backlog" in data else None,
                first_token_side=data.get("first_token_side"),
                encode=data.get("encode"),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(source, f"not a run summary ({type(exc).__name__}: {exc})",
                             "summary.json as `infralab sim run` writes it") from None
