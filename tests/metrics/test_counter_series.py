"""Counter samples kept compactly (`CounterSeries`) and summarised without sorted copies
(`counter_stats` of time-ordered samples): the same bits as the plain float64 computation."""

from __future__ import annotations

import math
from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.metrics import pooled_stats
from infralab.metrics.run_metrics import counter_stats
from infralab.metrics.records import CounterSample, CounterSeries, ResourceTally
from infralab.metrics.summary import CounterStats


def plain_counter_stats(times, values, lo: float, hi: float) -> CounterStats:
    """The computation `counter_stats` must match bit for bit: float64 arrays, stable sort by time,
    clip to [lo, hi], numpy's sum of value x duration."""
    times = np.asarray(times, dtype=float)
    values = np.asarray(values, dtype=float)
    order = np.argsort(times, kind="stable")
    times, values = np.clip(times[order], lo, hi), values[order]
    edges = np.append(times, hi)
    weighted = float(np.sum(values * np.diff(edges)))
    span = hi - lo
    return CounterStats(mean=weighted / span if span > 0 else float(values[-1]), max=float(values.max()))


def same(a: CounterStats, b: CounterStats) -> bool:
    """Equal bits (NaN equal to NaN)."""
    return all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in ((a.mean, b.mean), (a.max, b.max)))


counter_values = st.one_of(
    st.integers(0, 255), st.integers(0, 70_000), st.integers(-(2**31), 2**31 - 1),
    st.floats(-1e6, 1e6, allow_nan=False),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 100.0, allow_nan=False), counter_values), min_size=1, max_size=400),
    st.booleans(),
    st.floats(0.0, 60.0),
    st.floats(0.0, 60.0),
    st.sampled_from([128, 136, pooled_stats.CHUNK]),
)
def test_series_summary_matches_the_plain_computation(samples, in_time_order, lo, width, chunk):
    if in_time_order:
        samples = sorted(samples, key=lambda s: s[0])
    series = CounterSeries()
    for t, v in samples:
        series.add(t, v)
    times, values = zip(*samples)
    assert list(series.times) == list(times) and list(series.values) == [float(v) for v in values]
    saved = pooled_stats.CHUNK
    pooled_stats.CHUNK = chunk  # small chunks: the pairwise split points are exercised
    try:
        got = counter_stats(series.times, series.values, lo, lo + width)
    finally:
        pooled_stats.CHUNK = saved
    assert same(got, plain_counter_stats(times, values, lo, lo + width))


@pytest.mark.parametrize("chunk", [128, 1000])
def test_long_time_ordered_series_matches_across_chunks(monkeypatch, chunk):
    monkeypatch.setattr(pooled_stats, "CHUNK", chunk)
    rng = np.random.default_rng(3)
    for n in (2, 129, 1001, 20_011):
        times = np.cumsum(rng.exponential(0.01, size=n) * (rng.random(n) < 0.8))  # ties too
        values = rng.integers(0, 5000, size=n)
        series = CounterSeries()
        for t, v in zip(times.tolist(), values.tolist()):
            series.add(t, v)
        assert series.values.typecode == "H"
        for lo, hi in ((0.0, float(times[-1])), (float(times[n // 3]), float(times[-1]) + 1.0), (-1.0, 0.5)):
            assert same(counter_stats(series.times, series.values, lo, hi), plain_counter_stats(times, values, lo, hi))


def test_series_widens_only_as_far_as_its_values_need():
    series = CounterSeries()
    series.add(0.0, 3)
    assert series.values.typecode == "B"
    series.add(1.0, 300)
    assert series.values.typecode == "H"
    series.add(2.0, -1)
    assert series.values.typecode == "i"
    series.add(3.0, 0.5)
    assert series.values.typecode == "d"
    assert list(series.values) == [3.0, 300.0, -1.0, 0.5] and list(series.times) == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(TypeError):
        series.add(4.0, "many")


def test_tally_series_is_what_counter_samples_fold_into():
    tally = ResourceTally()
    tally.add_counter(CounterSample("instance/a", "waiting", 0.5, 2))
    tally.series("instance/a", "waiting").add(0.75, 1)
    times, values = tally.counters["instance/a"]["waiting"]
    assert times == array("d", [0.5, 0.75]) and list(values) == [2, 1]
