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
  holding one chunk at a time (`tests/sim/test_pooled_stats.py` checks this against numpy).

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
# Longest stretch of the expanded sample materialised at once (values; 8 MiB of float64). At least
# numpy's pairwise block (128), below which numpy does not split.
CHUNK = 1 << 20


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
        """Values at 0-based `ranks` of the expanded sorted sample."""
        lo, hi = math.inf, -math.inf
        for values, _ in self.parts():
            if len(values):
                lo, hi = min(lo, float(values.min())), max(hi, float(values.max()))
        found = {k: self._at_rank(k, lo, hi) for k in sorted(set(np.asarray(ranks).tolist()))}
        return np.array([found[k] for k in np.asarray(ranks).tolist()], dtype=float)

    def _at_rank(self, rank: int, lo: float, hi: float) -> float:
        # Narrow a value range [lo, hi] that holds the rank: histogram the entries in range over
        # BINS bins, keep the bin that holds it, until few enough entries remain to sort.
        below = 0  # how many values lie below lo
        while True:
            if lo == hi:
                return lo
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
                at = np.searchsorted(np.cumsum(c[order]), rank - below, side="right")
                return float(v[order][at])
            cumulative = np.cumsum(histogram)
            b = int(np.searchsorted(cumulative, rank - below, side="right"))
            below += int(cumulative[b - 1]) if b else 0
            edges = np.concatenate(([lo], inner, [hi]))
            new_lo, new_hi = float(edges[b]), float(edges[b + 1])
            # Bin b holds lo <= v < new_hi (the last bin: v <= hi); the next round's range is
            # closed, so step its top below new_hi unless it is the last bin.
            lo, hi = new_lo, new_hi if b == BINS - 1 else float(np.nextafter(new_hi, -math.inf))
            if hi < lo:
                hi = lo


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
    n = sample.n
    if n % 2:
        return float(sample.at_rank(np.array([n // 2]))[0])
    a, b = sample.at_rank(np.array([n // 2 - 1, n // 2])).tolist()
    return (a + b) / 2


def percentiles(sample: PooledSample, qs: tuple[float, ...]) -> list[float]:
    """`np.percentile(expanded, qs)` with numpy's default ("linear") method."""
    n = sample.n
    virtual = (n - 1) * np.true_divide(np.asarray(qs), 100)
    previous = np.floor(virtual)
    nxt = previous + 1
    above = virtual >= n - 1
    previous[above] = n - 1
    nxt[above] = n - 1
    previous_i, next_i = previous.astype(np.int64), nxt.astype(np.int64)
    # numpy takes gamma against the index it replaced by -1 above the bounds; a == b there, so any
    # finite gamma gives a.
    gamma = virtual - np.where(above, -1, previous_i)
    a, b = sample.at_rank(previous_i), sample.at_rank(next_i)
    diff_b_a = b - a
    out = a + diff_b_a * gamma
    high = gamma >= 0.5
    out[high] = (b - diff_b_a * (1 - gamma))[high]
    return out.tolist()
