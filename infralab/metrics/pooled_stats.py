"""numpy's statistics of a big sample that is never held whole: bit for bit what `np.mean`,
`np.std`, `np.median` and `np.percentile` (linear) give on the expanded array.

A `PooledSample` is the sample in two forms:
- `parts()`: (values, counts) pairs that hold every value as often as it occurs. Order
  statistics, and so the median and the percentiles, come from these: the value at rank k of the
  expanded sorted array is found by narrowing a value range over histograms of the parts until few
  enough entries are left to sort, so no step holds them all. The interpolation between two ranks
  is numpy's (`_lerp` in numpy/lib/_function_base_impl.py).
- `chunk(start, stop)`: the values at positions [start, stop) of the expanded array in its own
  order. numpy sums a float64 array pairwise: an array longer than its block is split at
  n2 = n // 2 rounded down to a multiple of 8, and the halves summed alone and added. Summing each
  half with numpy, recursively, down to chunks of at most `CHUNK` values, gives the same bits while
  holding one chunk at a time (`tests/metrics/test_pooled_stats.py` checks this against numpy).

The ITL of a run is such a sample: few distinct gaps (one per engine step), each shared by every
request decoding across that step, and many values (one per output token).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

# Order statistics: bins per narrowing round, and how many entries are few enough to sort.
BINS = 4096
SORT_LIMIT = 1 << 20
# Longest stretch of the expanded sample materialised at once (values; 2 MiB of float64; the work
# arrays of a pass over a chunk are a few times that). At least numpy's pairwise block (128), below
# which numpy does not split.
CHUNK = 1 << 18


@dataclass(frozen=True)
class PooledSample:
    """A sample of `n` float values, given twice and never whole:
    - `parts()`: an iterable of (values, counts) array pairs (counts int, >= 1) that together hold
      every value as often as it occurs; in any order, a value may appear in several parts;
    - `chunk(start, stop)`: the values at positions [start, stop) in the sample's own order."""

    n: int
    parts: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]
    chunk: Callable[[int, int], np.ndarray]

    def at_rank(self, ranks: np.ndarray) -> np.ndarray:
        """Values at 0-based `ranks` of the expanded sorted sample.

        Narrows a closed value range [lo, hi] that holds each rank: one pass over the parts
        histograms the entries in range over BINS bins and keeps those in range while they are few
        enough to sort (then the ranks in it are read off); otherwise each rank continues in the
        bin that holds it. Ranks in the same range share its passes."""
        wanted = sorted(set(np.asarray(ranks).tolist()))
        lo, hi = math.inf, -math.inf
        for values, _ in self.parts():
            if len(values):
                lo, hi = min(lo, float(values.min())), max(hi, float(values.max()))
        found: dict[int, float] = {}
        ranges: dict[tuple[float, float, int], list[int]] = {(lo, hi, 0): wanted} if wanted else {}
        while ranges:
            (lo, hi, below), mine = ranges.popitem()
            if lo == hi:
                found.update((k, lo) for k in mine)
                continue
            for k, where in self._narrow(lo, hi, below, mine).items():
                if isinstance(where, float):
                    found[k] = where
                else:
                    ranges.setdefault(where, []).append(k)
        return np.array([found[k] for k in np.asarray(ranks).tolist()], dtype=float)

    def _narrow(
        self, lo: float, hi: float, below: int, ranks: list[int]
    ) -> dict[int, float | tuple[float, float, int]]:
        """One pass over the entries in [lo, hi] (`below` values lie under lo): each rank's value,
        or the narrower (lo, hi, below) that holds it."""
        inner = np.linspace(lo, hi, BINS + 1)[1:-1]
        histogram = np.zeros(BINS, dtype=np.int64)
        picked_values, picked_counts, picked = [], [], 0
        for values, counts in self.parts():
            keep = (values >= lo) & (values <= hi)
            v, c = values[keep], counts[keep]
            histogram += np.bincount(np.searchsorted(inner, v, side="right"), weights=c, minlength=BINS).astype(
                np.int64
            )
            picked += len(v)
            if picked <= SORT_LIMIT:
                picked_values.append(v)
                picked_counts.append(c)
        if picked <= SORT_LIMIT:
            v = np.concatenate(picked_values) if picked_values else np.empty(0)
            c = np.concatenate(picked_counts) if picked_counts else np.empty(0, dtype=np.int64)
            order = np.argsort(v, kind="stable")
            at = np.searchsorted(np.cumsum(c[order]), np.array(ranks) - below, side="right")
            return dict(zip(ranks, v[order][at].tolist()))
        cumulative = np.cumsum(histogram)
        edges = np.concatenate(([lo], inner, [hi]))
        out: dict[int, float | tuple[float, float, int]] = {}
        for k in ranks:
            b = int(np.searchsorted(cumulative, k - below, side="right"))
            new_below = below + (int(cumulative[b - 1]) if b else 0)
            # Bin b holds edges[b] <= v < edges[b + 1] (the last bin: v <= hi); the next range is
            # closed, so its top steps below edges[b + 1] unless it is the last bin.
            new_lo = float(edges[b])
            new_hi = float(edges[b + 1]) if b == BINS - 1 else float(np.nextafter(edges[b + 1], -math.inf))
            out[k] = (new_lo, max(new_lo, new_hi), new_below)
        return out


def weighted(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values ascending, counts) of `values`."""
    distinct, counts = np.unique(values, return_counts=True)
    return distinct, counts.astype(np.int64)


def pairwise_sum(chunk: Callable[[int, int], np.ndarray], start: int, stop: int) -> float:
    """`np.sum` of the values [start, stop) of a sample given by `chunk`, the same bits."""
    n = stop - start
    if n <= CHUNK:
        return float(np.add.reduce(chunk(start, stop)))
    half = n // 2
    half -= half % 8
    return pairwise_sum(chunk, start, start + half) + pairwise_sum(chunk, start + half, stop)


def mean(sample: PooledSample) -> float:
    """`np.mean` of the expanded sample."""
    n = sample.n
    return pairwise_sum(sample.chunk, 0, n) / n


def std(sample: PooledSample, mean_value: float) -> float:
    """`np.std` of the expanded sample whose `np.mean` is `mean_value`."""

    def squared_deviations(start: int, stop: int) -> np.ndarray:
        x = sample.chunk(start, stop) - mean_value
        return np.multiply(x, x)

    n = sample.n
    return math.sqrt(pairwise_sum(squared_deviations, 0, n) / n)


def median(sample: PooledSample) -> float:
    """`np.median` of the expanded sample: the middle value, or the mean of the middle two."""
    return median_and_percentiles(sample, ())[0]


def percentiles(sample: PooledSample, qs: tuple[float, ...]) -> list[float]:
    """`np.percentile(expanded, qs)` with numpy's default ("linear") method."""
    return median_and_percentiles(sample, qs)[1]


def median_and_percentiles(sample: PooledSample, qs: tuple[float, ...]) -> tuple[float, list[float]]:
    """`np.median` and `np.percentile(expanded, qs)` (linear) of the expanded sample, from one
    search for all the ranks they need."""
    n = sample.n
    middle = [n // 2] if n % 2 else [n // 2 - 1, n // 2]
    virtual = (n - 1) * np.true_divide(np.asarray(qs, dtype=float), 100)
    previous = np.floor(virtual)
    nxt = previous + 1
    above = virtual >= n - 1
    previous[above] = n - 1
    nxt[above] = n - 1
    previous_i, next_i = previous.astype(np.int64), nxt.astype(np.int64)
    values = sample.at_rank(np.concatenate([np.array(middle, dtype=np.int64), previous_i, next_i]))
    m = len(middle)
    med = float(values[0]) if m == 1 else (float(values[0]) + float(values[1])) / 2
    a, b = values[m : m + len(qs)], values[m + len(qs) :]
    # numpy takes gamma against the index it replaced by -1 above the bounds; a == b there, so any
    # finite gamma gives a.
    gamma = virtual - np.where(above, -1, previous_i)
    diff_b_a = b - a
    out = a + diff_b_a * gamma
    high = gamma >= 0.5
    out[high] = (b - diff_b_a * (1 - gamma))[high]
    return med, out.tolist()
