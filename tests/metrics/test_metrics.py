"""Metrics on hand-built run records whose answers are worked out by hand."""

from __future__ import annotations

import io
import json
import math
from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.errors import InputError
from infralab.metrics.records import CounterSample, Interval, RequestRecord, RunRecord, TokenTimes, is_busy_interval
from infralab.metrics.run_metrics import (
    busy_time_s,
    counter_stats,
    distribution,
    itl_sample,
    pooled_distribution,
    print_summary,
    request_metrics,
    saturation,
    summarize,
)
from infralab.metrics.schema import SLOConfig
from infralab.metrics.summary import (
    ACCELERATOR_METRIC_NAMES,
    INSTANCE_METRIC_NAMES,
    METRIC_NAMES,
    RequestCounts,
    RunSummary,
)


def finished(rid: int, arrival: float, prompt: int, token_times: list[float], start=None) -> RequestRecord:
    return RequestRecord(
        id=rid,
        arrival_s=arrival,
        prompt_tokens=prompt,
        output_tokens=len(token_times),
        first_scheduled_s=arrival if start is None else start,
        first_token_s=token_times[0],
        token_times_s=array("d", token_times),
        finish_s=token_times[-1],
    )


def two_request_run() -> RunRecord:
    # r0: arrives 0, tokens at 1.0, 1.5, 2.5 -> TTFT 1.0, E2E 2.5, TPOT (2.5-1)/2 = 0.75, ITL 0.5, 1.0
    # r1: arrives 1, one token at 3.0     -> TTFT 2.0, E2E 2.0, no TPOT, no ITL
    r0 = finished(0, 0.0, 100, [1.0, 1.5, 2.5], start=0.2)
    r1 = finished(1, 1.0, 300, [3.0], start=2.5)
    return RunRecord(
        requests=[r0, r1],
        intervals=[
            Interval("instance/colocated-0", "batch", 0.2, 1.0),
            Interval("instance/colocated-0", "batch", 1.0, 1.5),
            Interval("instance/colocated-0", "prefill", 0.2, 1.0),  # not a batch: not counted
            Interval("link/nic-0", "transfer", 0.0, 1.0, (("bytes", 1000),)),
            Interval("link/nic-0", "transfer", 0.5, 1.5, (("bytes", 500),)),
        ],
        counters=[
            CounterSample("instance/colocated-0", "waiting", 0.0, 2.0),
            CounterSample("instance/colocated-0", "waiting", 1.5, 0.0),
        ],
        resources={"instance/colocated-0": {"role": "colocated"}},
        end_s=3.0,
    )


def test_request_metrics_follow_vllm_definitions():
    r0, r1 = two_request_run().requests
    m0, m1 = request_metrics(r0), request_metrics(r1)
    assert (m0.ttft_s, m0.e2e_s, m0.tpot_s) == (1.0, 2.5, 0.75)
    assert (m1.ttft_s, m1.e2e_s, m1.tpot_s) == (2.0, 2.0, None)


def test_summary_known_answers():
    s = summarize(two_request_run(), SLOConfig(ttft_s=1.5, tpot_s=1.0)).to_json()  # summary.json's form
    assert s["requests"] == {"total": 2, "completed": 2}
    assert s["duration_s"] == 3.0  # last finish 3.0 - first arrival 0.0
    assert s["request_throughput"] == pytest.approx(2 / 3)
    assert s["output_throughput"] == pytest.approx(4 / 3)
    assert s["total_token_throughput"] == pytest.approx(404 / 3)
    assert s["ttft_s"]["mean"] == 1.5 and s["ttft_s"]["median"] == 1.5
    assert s["ttft_s"]["p90"] == pytest.approx(1.9)  # numpy linear: 1 + 0.9 * (2 - 1)
    assert s["ttft_s"]["p99"] == pytest.approx(1.99)
    assert s["tpot_s"]["mean"] == 0.75  # the one-token request has no TPOT
    assert s["itl_s"]["mean"] == 0.75 and s["itl_s"]["p50"] == 0.75  # gaps 0.5 and 1.0 pooled
    assert s["e2e_s"]["mean"] == 2.25
    # only r0 meets TTFT <= 1.5 (r1's TTFT is 2.0)
    assert s["good_requests"] == 1 and s["goodput"] == pytest.approx(1 / 3)
    inst = s["instances"]["instance/colocated-0"]
    assert inst["busy_fraction"] == pytest.approx(1.3 / 3.0)
    assert inst["role"] == "colocated"
    # waiting is 2 over [0, 1.5) and 0 over [1.5, 3]: time-weighted mean 1.0
    assert inst["counters"]["waiting"] == {"mean": pytest.approx(1.0), "max": 2.0}
    link = s["links"]["link/nic-0"]
    assert link["busy_fraction"] == pytest.approx(1.5 / 3.0)  # union of overlapping flows
    assert link["bytes"] == 1500
    json.dumps(s, allow_nan=False)  # JSON-able, no NaN


def test_goodput_counts_one_token_requests_as_meeting_tpot():
    s = summarize(two_request_run(), SLOConfig(ttft_s=5.0, tpot_s=0.1))
    assert s.goodput.good_requests == 1  # r0's TPOT 0.75 > 0.1 fails; r1 has one token and passes


def test_unfinished_requests_are_not_completed():
    run = two_request_run()
    run.requests.append(RequestRecord(id=2, arrival_s=2.0, prompt_tokens=10, output_tokens=5))
    s = summarize(run, SLOConfig())
    assert s.requests == RequestCounts(total=3, completed=2)
    assert s.duration_s == 3.0


def test_empty_run_summary_is_json_and_prints():
    s = summarize(RunRecord(), SLOConfig())
    assert s.latency.ttft_s.mean is None and s.throughput.request == 0.0
    json.dumps(s.to_json(), allow_nan=False)
    print_summary(s, file=io.StringIO())


def test_print_summary_looks_like_vllm_table():
    buf = io.StringIO()
    print_summary(summarize(two_request_run(), SLOConfig()), file=buf)
    text = buf.getvalue()
    assert "Successful requests:" in text and "Mean TTFT (ms):" in text and "1500.00" in text
    assert "P99 TPOT (ms):" in text and "Median ITL (ms):" in text and "Saturated:" in text


def test_print_summary_calls_a_run_busy_all_through_saturated_and_leaves_unset_slos_out():
    run = two_request_run()
    run.intervals.append(Interval("instance/colocated-0", "batch", 1.5, 3.0))  # busy 0.2 .. 3.0 of 3 s: 93 %
    buf = io.StringIO()
    print_summary(summarize(run, SLOConfig()), file=buf)
    assert "Saturated:                              no" in buf.getvalue()
    run.intervals.append(Interval("instance/colocated-0", "batch", 0.0, 0.2))  # now 100 %
    buf = io.StringIO()
    print_summary(summarize(run, SLOConfig()), file=buf, slo_set=False)
    text = buf.getvalue()
    assert "YES (an instance busy 100% of the run)" in text and "n/a (no [slo] table in the config)" in text
    assert "SLOs: TTFT, TPOT" not in text


def test_busy_time_merges_overlaps_and_clips():
    assert busy_time_s([(0, 2), (1, 3), (5, 6)], 0, 10) == 4
    assert busy_time_s([(0, 2), (1, 3), (5, 6)], 1.5, 5.5) == 2.0
    assert busy_time_s([], 0, 1) == 0


def test_counter_stats_step_function():
    stats = counter_stats([1.0, 3.0], [4.0, 1.0], 0.0, 4.0)  # 0 on [0,1), 4 on [1,3), 1 on [3,4]
    assert (stats.mean, stats.max) == (pytest.approx(9 / 4), 4.0)


def queue_run(arrival_rate: float, service_s: float, n: int = 400) -> RunRecord:
    """A single FIFO server with deterministic arrivals and service times."""
    reqs, free_at = [], 0.0
    for i in range(n):
        arrival = i / arrival_rate
        start = max(arrival, free_at)
        free_at = start + service_s
        reqs.append(finished(i, arrival, 10, [free_at], start=start))
    return RunRecord(requests=reqs, end_s=free_at)


def test_saturation_false_for_light_load_true_for_overload():
    light = summarize(queue_run(arrival_rate=5.0, service_s=0.1), SLOConfig()).saturation
    over = summarize(queue_run(arrival_rate=15.0, service_s=0.1), SLOConfig()).saturation
    assert light.saturated is False
    assert over.saturated is True
    assert over.slope == pytest.approx(0.5, rel=0.05)  # waits grow at lambda/mu - 1 = 15/10 - 1
    assert over.tail_head_ratio > 2


def test_saturation_ignores_a_burst_that_drains():
    # A queue that builds during the first half then drains: delays rise then fall back to zero.
    arrivals = np.linspace(0, 100, 200)
    delays = np.where(arrivals < 50, arrivals * 0.2, np.maximum(0.0, 10 - (arrivals - 50) * 0.5))
    assert saturation(arrivals, delays).saturated is False


def test_saturation_needs_enough_requests():
    assert saturation(np.arange(5.0), np.arange(5.0) * 10).saturated is False


@settings(max_examples=40, deadline=None)
@given(
    gaps=st.lists(st.floats(0.001, 1.0), min_size=1, max_size=20),
    arrival=st.floats(0.0, 100.0),
    ttft=st.floats(0.001, 10.0),
)
def test_tpot_is_mean_itl_of_one_request(gaps, arrival, ttft):
    times = list(arrival + ttft + np.cumsum([0.0] + gaps))
    s = summarize(RunRecord(requests=[finished(0, arrival, 5, times)]), SLOConfig()).flat_metrics()
    assert s["tpot_mean_s"] == pytest.approx(s["itl_mean_s"], rel=1e-9)
    assert s["ttft_mean_s"] == pytest.approx(ttft, rel=1e-9, abs=1e-9)
    assert not math.isnan(s["e2e_p99_s"])


# ---- the typed summary: its one flattening and its JSON form -----------------------------------


def test_flat_metrics_names_and_values():
    s = summarize(two_request_run(), SLOConfig(ttft_s=1.5, tpot_s=1.0))
    flat = s.flat_metrics()
    assert tuple(flat) == METRIC_NAMES  # no per-instance/accelerator names without the counts
    assert flat["completed"] == 2 and flat["total_requests"] == 2 and flat["saturated"] is False
    assert flat["duration_s"] == 3.0
    assert flat["goodput"] == pytest.approx(1 / 3) and flat["request_throughput"] == pytest.approx(2 / 3)
    assert flat["ttft_p90_s"] == pytest.approx(1.9) and flat["ttft_mean_s"] == 1.5
    assert flat["tpot_mean_s"] == 0.75 and flat["itl_p50_s"] == 0.75 and flat["e2e_mean_s"] == 2.25
    # queueing delays: r0 waits 0.2 s (arrival 0, scheduled 0.2), r1 1.5 s (arrival 1, scheduled 2.5)
    assert flat["queueing_delay_mean_s"] == pytest.approx(0.85)
    assert flat["max_instance_busy"] == pytest.approx(1.3 / 3.0)
    assert flat["max_link_busy"] == pytest.approx(1.5 / 3.0)

    scaled = s.flat_metrics(instances=1, accelerators=4)
    assert tuple(scaled) == METRIC_NAMES + INSTANCE_METRIC_NAMES + ACCELERATOR_METRIC_NAMES
    assert scaled["instances"] == 1 and scaled["accelerators"] == 4
    assert scaled["goodput_per_instance"] == scaled["goodput"]
    assert scaled["output_throughput_per_accelerator"] == pytest.approx((4 / 3) / 4)


def test_flat_metrics_of_an_empty_run_are_none_or_zero():
    flat = summarize(RunRecord(), SLOConfig()).flat_metrics()
    assert flat["ttft_p90_s"] is None and flat["goodput"] == 0.0 and flat["completed"] == 0
    assert flat["max_instance_busy"] == 0.0 and flat["max_link_busy"] == 0.0


@pytest.mark.parametrize(
    "run",
    [two_request_run(), RunRecord(), queue_run(arrival_rate=15.0, service_s=0.1, n=40)],
    ids=["two-requests", "empty", "saturated"],
)
def test_summary_json_round_trip(run):
    summary = summarize(run, SLOConfig()).with_run({"name": "x", "seed": 3})
    text = json.dumps(summary.to_json(), sort_keys=True, indent=2, allow_nan=False)
    back = RunSummary.from_json(json.loads(text))
    assert back == summary
    assert json.dumps(back.to_json(), sort_keys=True, indent=2, allow_nan=False) == text


def test_summary_from_json_rejects_other_documents():
    doc = summarize(two_request_run(), SLOConfig()).to_json()
    del doc["ttft_s"]
    with pytest.raises(InputError, match="not a run summary"):
        RunSummary.from_json(doc, source="x/summary.json")


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.0, 100.0), st.lists(st.floats(0.001, 2.0), min_size=1, max_size=5)),
        max_size=15,
    )
)
def test_summary_json_round_trip_on_random_runs(requests):
    run = RunRecord(
        requests=[finished(i, a, 10, list(a + np.cumsum(gaps))) for i, (a, gaps) in enumerate(requests)]
    )
    summary = summarize(run, SLOConfig())
    doc = json.loads(json.dumps(summary.to_json(), allow_nan=False))
    assert RunSummary.from_json(doc) == summary
    assert RunSummary.from_json(doc).to_json() == doc


# ---- the pooled ITL equals the expanded one ---------------------------------------------------


@st.composite
def requests_on_shared_steps(draw):
    """Requests whose token times are pieces of a few shared arrays of step ends (as the engine
    records them), some with a hand-made piece (a first token elsewhere, a preemption)."""
    n_arrays = draw(st.integers(1, 3))
    arrays = []
    for _ in range(n_arrays):
        gaps = draw(st.lists(st.sampled_from([0.01, 0.02, 0.025, 0.1, 0.3]), min_size=2, max_size=60))
        arrays.append(array("d", np.cumsum(gaps).tolist()))
    reqs = []
    for rid in range(draw(st.integers(0, 25))):
        times = TokenTimes()
        if draw(st.booleans()):
            times.append(draw(st.floats(0.0, 0.01)))
        for _ in range(draw(st.integers(1, 3))):
            steps = arrays[draw(st.integers(0, n_arrays - 1))]
            first = draw(st.integers(0, len(steps) - 1))
            times.add_steps(steps, first, draw(st.integers(first, len(steps) - 1)))
        reqs.append(
            RequestRecord(id=rid, arrival_s=0.0, prompt_tokens=1, output_tokens=len(times), first_scheduled_s=0.0,
                          first_token_s=times[0], token_times_s=times, finish_s=times[len(times) - 1])
        )
    return reqs


@settings(max_examples=150, deadline=None)
@given(requests_on_shared_steps())
def test_pooled_itl_is_bit_identical_to_the_expanded_gaps(reqs):
    expanded = [np.diff(np.array(list(r.token_times_s))) for r in reqs]
    itl = np.concatenate(expanded) if expanded else np.empty(0)
    assert pooled_distribution(itl_sample(reqs)) == distribution(itl)


def test_token_times_read_like_a_sequence():
    steps = array("d", [1.0, 2.0, 3.0, 4.0])
    times = TokenTimes([0.5])
    times.add_steps(steps, 1, 2)
    times.add_steps(steps, 3, 3)  # continues the piece
    assert list(times) == [0.5, 2.0, 3.0, 4.0] and len(times) == 4 and times[-1] == 4.0 and times[1] == 2.0
    assert len(times.pieces) == 2
    assert times == [0.5, 2.0, 3.0, 4.0]


# ---- a record without its timeline summarises the same ----------------------------------------


def replayed(run: RunRecord, keep: bool) -> RunRecord:
    """`run`'s requests, intervals and counters recorded into a record that keeps its timeline
    only when `keep`."""
    out = RunRecord.with_timeline(keep)
    for iv in run.intervals:
        out.intervals.append(iv)
    for c in run.counters:
        out.counters.append(c)
    out.requests, out.resources, out.end_s = run.requests, run.resources, run.end_s
    return out


@st.composite
def busy_runs(draw):
    """Back-to-back, overlapping and gapped spans on an instance and a link, counters that change."""
    run = two_request_run()
    t = 0.0
    for _ in range(draw(st.integers(0, 30))):
        t += draw(st.sampled_from([0.0, 0.0, 0.1, 0.25]))  # 0: back to back
        d = draw(st.sampled_from([0.05, 0.1, 0.5]))
        track = draw(st.sampled_from(["instance/colocated-0", "link/nic-0", "thread/x"]))
        name = draw(st.sampled_from(["batch", "transfer"]))
        start = t - draw(st.sampled_from([0.0, 0.05]))  # sometimes starting inside the last span
        run.intervals.append(Interval(track, name, start, start + d, (("bytes", draw(st.integers(0, 9))),)))
        run.counters.append(CounterSample("instance/colocated-0", "running", t, float(draw(st.integers(0, 5)))))
        t += d
    return run


@settings(max_examples=100, deadline=None)
@given(busy_runs())
def test_a_record_without_its_timeline_summarises_the_same(run):
    kept, dropped = replayed(run, keep=True), replayed(run, keep=False)
    assert len(dropped.intervals) == len(dropped.counters) == 0 and not dropped.keeps_timeline
    assert list(kept.intervals) == list(run.intervals)
    expected = summarize(run, SLOConfig())  # plain lists: folded on demand
    assert summarize(kept, SLOConfig()) == expected
    assert summarize(dropped, SLOConfig()) == expected


@settings(max_examples=100, deadline=None)
@given(busy_runs(), st.floats(0.0, 2.0), st.floats(0.0, 10.0))
def test_merged_busy_spans_give_the_busy_time_of_the_raw_spans(run, lo, length):
    tally = replayed(run, keep=False).tally()
    for track, spans in tally.spans.items():
        busy = [iv for iv in run.intervals if iv.track == track and is_busy_interval(iv.track, iv.name)]
        raw = [(iv.start_s, iv.end_s) for iv in busy]
        assert busy_time_s(np.frombuffer(spans), lo, lo + length) == busy_time_s(raw, lo, lo + length)
    assert set(tally.spans) == {iv.track for iv in run.intervals if is_busy_interval(iv.track, iv.name)}
