"""The trace reader's lean parts (line splitting, window by bisection) against what they replace."""

from __future__ import annotations

import io
import math
from array import array
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.workload import Request, read_trace
from infralab.workload.traces import _window, text_lines


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab,\r\n\"\x0b\x0c\u2028 ", max_size=60))
def test_text_lines_split_as_stringio_does(text):
    assert list(text_lines(text)) == list(io.StringIO(text, newline=""))


sorted_times = st.lists(st.floats(0, 1e4), min_size=1, max_size=50).map(sorted)


@settings(max_examples=300, deadline=None)
@given(
    times=sorted_times,
    start=st.floats(0, 1e4),
    length=st.floats(0.0, 1e4, exclude_min=True) | st.none(),
    most=st.integers(1, 60) | st.none(),
)
def test_window_by_bisection_is_the_scan(times, start, length, most):
    end = None if length is None else start + length
    first, stop = times[0], math.inf if end is None else end
    scanned = [i for i, t in enumerate(times) if start <= t - first < stop][:most]
    if not scanned:
        return  # an empty window is an InputError (tests/workload/test_traces.py)
    assert list(_window(Path("t.csv"), array("d", times), start, end, most)) == scanned


rows = st.lists(
    st.tuples(st.floats(0, 100), st.integers(1, 5000), st.integers(1, 500)), min_size=1, max_size=40
)


@settings(max_examples=100, deadline=None)
@given(rows=rows, newline=st.sampled_from(["\n", "\r\n", "\r"]), scale=st.floats(0.25, 4.0),
       clip=st.integers(1, 5000) | st.none())
def test_read_trace_gives_the_rows_as_requests(tmp_path_factory, rows, newline, scale, clip):
    """A Vidur CSV read the lean way gives the requests its rows describe."""
    rows = sorted(rows)
    path = tmp_path_factory.mktemp("trace") / "t.csv"
    lines = ["arrived_at,num_prefill_tokens,num_decode_tokens"] + [f"{t!r},{p},{o}" for t, p, o in rows]
    path.write_bytes(newline.join(lines).encode())
    expected = [
        Request(i, (t - rows[0][0]) / scale, min(p, clip or p), o, ()) for i, (t, p, o) in enumerate(rows)
    ]
    assert read_trace(path, "vidur", rate_scale=scale, max_prompt_tokens=clip) == expected
