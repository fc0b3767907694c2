"""Overlap fractions on hand-made intervals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.metrics.records import Interval
from infralab.sim.host.overlap import intersection, merge, op_of, overlap_fraction, spans, total


def test_merge_joins_touching_and_overlapping_spans() -> None:
    assert merge([(3, 4), (0, 1), (1, 2), (5, 5), (3.5, 6)]) == [(0, 2), (3, 6)]


def test_overlap_fraction_by_hand() -> None:
    a = [(0, 10), (20, 30)]  # 20 s
    b = [(5, 25)]  # covers 5 s of the first and 5 s of the second
    assert overlap_fraction(a, b) == pytest.approx(0.5)
    assert overlap_fraction(b, a) == pytest.approx(10 / 20)
    assert overlap_fraction(a, []) == 0.0
    assert overlap_fraction([], b) == 0.0
    assert overlap_fraction(a, [(-1, 40)]) == pytest.approx(1.0)
    assert intersection(a, b) == [(5, 10), (20, 25)]


def test_disjoint_sets_overlap_zero() -> None:
    assert overlap_fraction([(0, 1), (2, 3)], [(1, 2), (3, 4)]) == 0.0


def test_spans_select_by_track_name_and_op() -> None:
    ivs = [
        Interval("thread/main", "native-hold-gil", 0, 1, (("op", "dispatch"),)),
        Interval("thread/main", "python", 1, 2, (("op", "launch"),)),
        Interval("thread/kv-transfer", "python", 0.5, 1.5),
        Interval("stream/gpu0-compute", "attention", 0, 2),
    ]
    assert spans(ivs, track="thread/main", where=lambda iv: op_of(iv) == "dispatch") == [(0, 1)]
    assert spans(ivs, track="thread/", names=["python"]) == [(1, 2), (0.5, 1.5)]
    assert spans(ivs, track="stream/gpu0-compute") == [(0, 2)]
    assert op_of(ivs[2]) == ""


span = st.tuples(st.floats(0, 100), st.floats(0, 10)).map(lambda p: (p[0], p[0] + p[1]))


@settings(max_examples=60, deadline=None)
@given(a=st.lists(span, max_size=8), b=st.lists(span, max_size=8))
def test_overlap_is_a_fraction_and_symmetric_in_covered_time(a, b) -> None:
    f = overlap_fraction(a, b)
    assert 0.0 <= f <= 1.0 + 1e-12
    both = total(intersection(a, b))
    assert both == pytest.approx(total(intersection(b, a)))
    assert both <= min(total(a), total(b)) + 1e-9
    if total(a) > 0:
        assert f == pytest.approx(both / total(a))
