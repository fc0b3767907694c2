"""A RequestTable reads exactly like the list of requests it holds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.workload import Request, RequestTable

hashes = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3).map(tuple)


@st.composite
def request_lists(draw) -> list[Request]:
    rows = draw(st.lists(st.tuples(st.floats(0, 1e9), st.integers(1, 10**6), st.integers(1, 10**6), hashes),
                         max_size=30))
    with_hashes = draw(st.booleans())
    return [Request(i, t, p, o, h if with_hashes else ()) for i, (t, p, o, h) in enumerate(rows)]


@settings(max_examples=200, deadline=None)
@given(requests=request_lists(), index=st.integers(-40, 40), start=st.integers(-40, 40) | st.none(),
       stop=st.integers(-40, 40) | st.none(), step=st.sampled_from([None, 1, 2, -1, -3]))
def test_a_table_reads_like_its_list(requests, index, start, stop, step):
    table = RequestTable.of(requests)
    assert len(table) == len(requests)
    assert list(table) == requests and table == requests and requests == table
    assert table[start:stop:step] == requests[start:stop:step]
    if -len(requests) <= index < len(requests):
        assert table[index] == requests[index]
    else:
        with pytest.raises(IndexError):
            table[index]


def test_tables_differ_where_their_requests_do():
    a = RequestTable.of([Request(0, 0.0, 5, 1), Request(1, 1.0, 6, 2)])
    assert a != RequestTable.of([Request(0, 0.0, 5, 1), Request(1, 1.0, 6, 3)])
    assert a != RequestTable.of([Request(0, 0.0, 5, 1)])
    with pytest.raises(ValueError):
        RequestTable.of([Request(1, 0.0, 5, 1)])  # ids are positions
