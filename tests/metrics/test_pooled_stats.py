"""The pooled statistics give numpy's results on the expanded sample, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.metrics import pooled_stats
from infralab.metrics.pooled_stats import PooledSample, weighted
from infralab.metrics.summary import PERCENTILES


def sample_of(x: np.ndarray, parts: int = 3) -> PooledSample:
    """`x` as a PooledSample whose weighted form comes in `parts` pieces (a value may be in several)."""
    pieces = [weighted(p) for p in np.array_split(x, parts) if len(p)]
    return PooledSample(len(x), lambda: iter(pieces), lambda a, b: x[a:b])


def assert_same_as_numpy(x: np.ndarray) -> None:
    s = sample_of(x)
    m = pooled_stats.mean(s)
    assert m == np.mean(x)
    assert pooled_stats.std(s, m) == np.std(x)
    assert pooled_stats.median(s) == np.median(x)
    assert pooled_stats.percentiles(s, PERCENTILES) == np.percentile(x, PERCENTILES).tolist()


# Gaps as a run has them: few distinct values, repeated many times, in no particular order.
gaps = st.lists(st.floats(1e-6, 10.0, allow_nan=False), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(gaps, st.lists(st.integers(0, 40), min_size=1, max_size=200), st.data())
def test_small_samples_match_numpy(distinct, picks, data):
    x = np.array([distinct[i % len(distinct)] for i in picks], dtype=float)
    assert_same_as_numpy(x)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.1, 1000.0), st.integers(0, 2**32 - 1), st.sampled_from([3, 1000, 3 * pooled_stats.CHUNK + 17]))
def test_samples_longer_than_a_chunk_match_numpy(monkey_scale, seed, n):
    rng = np.random.default_rng(seed)
    steps = rng.exponential(monkey_scale, size=max(1, n // 50))
    x = steps[rng.integers(0, len(steps), size=n)]
    assert_same_as_numpy(x)


@pytest.mark.parametrize("chunk", [128, 1000, 8192])
def test_chunked_sum_matches_numpy_across_split_points(monkeypatch, chunk):
    # numpy splits only above its block of 128 values, so chunks are at least that long.
    monkeypatch.setattr(pooled_stats, "CHUNK", chunk)
    rng = np.random.default_rng(1)
    for n in (1, 7, 8, 127, 128, 129, 1000, 8193, 100_003):
        x = rng.exponential(size=n) * rng.choice([1e-3, 1.0, 1e3], size=n)
        assert pooled_stats.pairwise_sum(lambda a, b: x[a:b], 0, n) == np.sum(x)
        assert_same_as_numpy(x)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=300), st.integers(1, 5))
def test_order_statistics_narrow_down_when_too_many_to_sort(values, copies):
    # Small bins and sort limit force several narrowing rounds.
    x = np.repeat(np.array(values), copies)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pooled_stats, "BINS", 4)
        mp.setattr(pooled_stats, "SORT_LIMIT", 3)
        assert_same_as_numpy(x)
