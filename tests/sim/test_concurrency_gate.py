"""Closed-loop load (`[workload] max_concurrency`, as `vllm bench serve --max-concurrency`): at most
N requests in flight, arrival order kept, a new one sent when one finishes."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

import pytest

from infralab.errors import InputError
from infralab.metrics.records import RequestRecord
from infralab.sim.config import config_from_doc
from infralab.sim.run import simulate_config
from support.toml_fixtures import synthetic_config

CONFIG = (synthetic_config(num_requests=80, rate=200.0, prompt=(50, 1500), output=(2, 60))
          + '\n[cluster]\nrouter = "least_outstanding_tokens"\n')
SIZES = {"colocated": "instances = 2", "disaggregated": 'layout = "disaggregated"\nprefill_instances = 2'}


def records(max_concurrency: int | None, layout: str = "colocated", scheduler: str = "fast") -> list[RequestRecord]:
    doc = tomllib.loads(CONFIG + SIZES[layout] + "\n")
    if max_concurrency is not None:
        doc["workload"]["max_concurrency"] = max_concurrency
    doc["engine"] = {"scheduler": scheduler}
    cfg = config_from_doc(doc, "test", Path("."))
    return sorted(simulate_config(cfg, Path("."), timeline=False).requests, key=lambda r: r.id)


def peak_in_flight(recs: list[RequestRecord]) -> int:
    # A finish and a submission at the same time: the finish first (the slot is handed over).
    events = sorted([(r.arrival_s, 1) for r in recs] + [(r.finish_s, -1) for r in recs])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize("layout", ["colocated", "disaggregated"])
@pytest.mark.parametrize("limit", [1, 3, 8])
def test_never_more_than_n_in_flight_and_arrival_order_is_kept(layout: str, limit: int) -> None:
    recs = records(limit, layout)
    assert all(not math.isnan(r.finish_s) for r in recs)
    assert peak_in_flight(recs) == limit  # reached (arrivals come much faster than service), never passed
    sent = [r.arrival_s for r in recs]
    assert sent == sorted(sent)  # submitted in arrival order
    finishes = {r.finish_s for r in recs}
    open_loop = records(None, layout)
    for closed, free in zip(recs, open_loop):
        # Sent at its own arrival, or later exactly when a slot freed (a finish).
        assert closed.arrival_s == free.arrival_s or closed.arrival_s in finishes
    if limit == 1:
        assert all(b.arrival_s >= a.finish_s for a, b in zip(recs, recs[1:]))


def test_a_limit_above_the_request_count_is_the_open_loop() -> None:
    assert records(1000) == records(None)


def test_the_fast_and_reference_schedulers_agree_under_a_closed_loop() -> None:
    fast, reference = records(3, scheduler="fast"), records(3, scheduler="reference")
    assert [dataclasses.astuple(r) for r in fast] == [dataclasses.astuple(r) for r in reference]


def test_closed_loop_latency_counts_from_submission() -> None:
    # One user: every request finds the cluster empty, so its TTFT is a lone prefill, far below
    # the open loop's, where 80 requests arrive within about half a second.
    closed, open_loop = records(1), records(None)
    ttft = lambda recs: sorted(r.first_token_s - r.arrival_s for r in recs)[len(recs) // 2]  # noqa: E731
    assert ttft(closed) < ttft(open_loop) / 3


def test_max_concurrency_must_be_a_positive_integer() -> None:
    doc = tomllib.loads(CONFIG + SIZES["colocated"] + "\n")
    doc["workload"]["max_concurrency"] = 0
    with pytest.raises(InputError, match=r"workload\.max_concurrency"):
        config_from_doc(doc, "test", Path("."))
