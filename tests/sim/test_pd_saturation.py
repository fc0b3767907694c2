"""A decode-starved P/D run is flagged saturated: the wait for decode blocks, the KV and a decode
slot is queueing (`queueing_delay_s`), so when the decode pool cannot keep up the delays grow with
arrival time even though every prefill starts at once; the backlog metrics show the growth."""

from __future__ import annotations

import numpy as np
from support.sim_fakes import FakeCost, sim_config

from infralab.metrics.run_metrics import queue_phase_s, saturation, summarize
from infralab.metrics.schema import SLOConfig
from infralab.random_streams import stream
from infralab.sim.cluster import simulate
from infralab.sim.config import ClusterConfig, EngineConfig, TransferConfig
from infralab.sim.specs import LinkSpec
from infralab.workload.request import Request

COST = FakeCost(10**6, per_step_s=1e-3, per_prefill_token_s=1e-6, per_decode_seq_s=1e-4)
LINK = LinkSpec(name="fast", bandwidth=100e9, latency=1e-5)


def pd_run(rate: float, first_token: str = "decode"):
    """One prefill and one decode instance of 4 slots; 100-token outputs keep a decode slot about
    0.15 s, so the decode pool serves about 4 / 0.15 = 27 requests/s, the prefill one hundreds."""
    cfg = sim_config(
        engine=EngineConfig(max_num_seqs=4, prefix_cache=False),
        cluster=ClusterConfig(layout="disaggregated", transfer=TransferConfig(first_token=first_token)),
    )
    gaps = stream(7, "test.pd").exponential(1.0 / rate, size=400)
    arrivals = np.cumsum(gaps) - gaps[0]
    requests = [Request(i, float(t), 100, 100) for i, t in enumerate(arrivals)]
    record = simulate(cfg, requests, COST, LINK)
    return record, summarize(record, SLOConfig())


def test_decode_starved_run_is_saturated_and_its_backlog_grows():
    record, summary = pd_run(rate=40.0)
    assert summary.saturation.saturated
    # Prefill alone keeps up: its queue phase says nothing is wrong.
    arrivals = np.array([r.arrival_s for r in record.requests])
    prefill_only = saturation(arrivals, np.array([queue_phase_s(r) for r in record.requests]))
    assert not prefill_only.saturated
    # TTFT carries the decode-side wait (decode-side first token, the default).
    assert summary.latency.ttft_s.stat("p90") > 1.0
    backlog = summary.backlog
    assert backlog.growth_per_s > 1.0 and backlog.final > 0.5 * backlog.peak > 20
    assert list(backlog.quarter_means) == sorted(backlog.quarter_means)
    assert summary.flat_metrics()["peak_queue"] == backlog.peak


def test_prefill_side_stamp_hides_the_starvation_from_ttft_but_not_from_saturation():
    _, decode = pd_run(rate=40.0)
    _, prefill = pd_run(rate=40.0, first_token="prefill")
    assert prefill.first_token_side == "prefill" and decode.first_token_side == "decode"
    assert prefill.latency.ttft_s.stat("p90") < 0.01 < 1.0 < decode.latency.ttft_s.stat("p90")
    assert prefill.saturation.saturated


def test_a_decode_pool_that_keeps_up_is_not_saturated():
    _, summary = pd_run(rate=10.0)
    assert not summary.saturation.saturated
    assert summary.backlog.final <= 2 and abs(summary.backlog.growth_per_s) < 0.1
