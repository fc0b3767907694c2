"""Overlap of two named interval sets: how much of set A's time set B covers.

A telltale of this kind: "the transfer thread's activity overlapped 0 % of the communication
intervals": A = one thread's native communication calls, B = another thread's active
intervals. Both sets are merged first, so overlapping members are not counted twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from infralab.metrics.records import Interval

Span = tuple[float, float]


def merge(spans: Iterable[Span]) -> list[Span]:
    """Sorted, disjoint union of (start, end) spans; empty spans are dropped."""
    merged: list[list[float]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def total(spans: Iterable[Span]) -> float:
    """Length of the union of `spans`, seconds."""
    return sum(b - a for a, b in merge(spans))


def intersection(a: Iterable[Span], b: Iterable[Span]) -> list[Span]:
    """Disjoint spans covered by both unions."""
    ma, mb = merge(a), merge(b)
    out: list[Span] = []
    i = j = 0
    while i < len(ma) and j < len(mb):
        lo, hi = max(ma[i][0], mb[j][0]), min(ma[i][1], mb[j][1])
        if hi > lo:
            out.append((lo, hi))
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return out


def overlap_fraction(a: Iterable[Span], b: Iterable[Span]) -> float:
    """Fraction of the union of `a` covered by the union of `b` (0 when `a` is empty)."""
    ma = merge(a)
    length = sum(e - s for s, e in ma)
    if length <= 0:
        return 0.0
    return sum(e - s for s, e in intersection(ma, b)) / length


def spans(
    intervals: Sequence[Interval],
    track: str | None = None,
    names: Iterable[str] | None = None,
    where: Callable[[Interval], bool] | None = None,
) -> list[Span]:
    """The (start, end) spans of the intervals on `track` (prefix match when it ends in '/'),
    with a name in `names`, passing `where`; None means any."""
    wanted = None if names is None else set(names)
    out = []
    for iv in intervals:
        if track is not None and not (iv.track == track or (track.endswith("/") and iv.track.startswith(track))):
            continue
        if wanted is not None and iv.name not in wanted:
            continue
        if where is not None and not where(iv):
            continue
        out.append((iv.start_s, iv.end_s))
    return out


def op_of(interval: Interval) -> str:
    """The "op" label a host thread attached to an interval ("" if none)."""
    op: str = dict(interval.args).get("op", "")
    return op
