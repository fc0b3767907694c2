"""Instance counters are exact step functions of the engine's state, so their time integrals obey
Little's law on the sample path: over a window that opens and closes with the instance empty,
integral of "waiting" dt = sum over requests of their waits, integral of "running" dt = sum of
their times in service, integral of "kv_used_blocks" dt = sum of blocks x time held. These are
identities, not estimates: the only tolerance is floating-point rounding (1e-9 relative), since
the window [first arrival, last finish] starts and ends with nothing queued or running (the
finite horizon adds no edge term). The time-average queue printed by `sim run` is the first
integral divided by the window.

Against the arrival rate of the workload (not the measured one), the same law holds only up to
the sampling error of a finite run; that comparison is Pollaczek-Khinchine's in test_queueing.py."""

from __future__ import annotations

import numpy as np
import pytest
from support.sim_fakes import FakeCost, sim_config

from infralab.metrics.run_metrics import summarize
from infralab.metrics.schema import SLOConfig
from infralab.random_streams import stream
from infralab.sim.cluster import simulate
from infralab.sim.config import ClusterConfig, CostConfig, EngineConfig, TransferConfig
from infralab.sim.cost import CostModel, StepWork
from infralab.sim.specs import LinkSpec, load_accelerator, load_model
from infralab.workload.request import Request

COST = CostModel(load_model("llama-3-8b"), load_accelerator("H100"), CostConfig())
ROUNDING = 1e-9


def poisson_requests(n: int, rate: float, prompt: int, output: int, seed: int) -> list[Request]:
    gaps = stream(seed, "test.counters").exponential(1.0 / rate, size=n)
    arrivals = np.cumsum(gaps) - gaps[0]
    return [Request(i, float(arrivals[i]), prompt, output) for i in range(n)]


def integral(summary, track: str, counter: str) -> float:
    """Time integral (counter x s) over the summary's window."""
    return summary.instances[track].counters[counter].mean * summary.duration_s


def test_md1_queue_obeys_littles_law_exactly():
    """M/D/1: one slot, one output token, so each request is admitted and finished within one step
    (sampled at step ends only, it would never count as running)."""
    prompt = 1024
    service = COST.step(StepWork.prefill(prompt)).total_s
    cfg = sim_config(engine=EngineConfig(max_num_seqs=1, prefix_cache=False))
    requests = poisson_requests(3000, 0.7 / service, prompt, 1, seed=3)
    record = simulate(cfg, requests, COST)
    summary = summarize(record, SLOConfig())
    waits = [r.first_scheduled_s - r.arrival_s for r in record.requests]
    in_service = [r.finish_s - r.first_scheduled_s for r in record.requests]
    track = "instance/instance-0"
    assert integral(summary, track, "waiting") == pytest.approx(sum(waits), rel=ROUNDING)
    assert integral(summary, track, "running") == pytest.approx(sum(in_service), rel=ROUNDING)
    blocks = -(-prompt // cfg.engine.block_size)
    assert integral(summary, track, "kv_used_blocks") == pytest.approx(blocks * sum(in_service), rel=ROUNDING)
    # L = lambda W with the measured rate (requests per second of the window).
    rate = len(requests) / summary.duration_s
    assert summary.instances[track].counters["waiting"].mean == pytest.approx(rate * np.mean(waits), rel=ROUNDING)
    assert summary.instances[track].counters["running"].mean == pytest.approx(
        len(requests) * service / summary.duration_s, rel=ROUNDING
    )
    assert max(waits) > 5 * service  # a real queue formed


def test_decode_runs_count_running_exactly():
    """Many decode steps per request (runs of quiet steps timed together): the running integral is
    still each request's time from its first scheduled step to its finish."""
    cost = FakeCost(10**6, per_decode_seq_s=1e-4)
    cfg = sim_config(engine=EngineConfig(max_num_seqs=8, prefix_cache=False))
    requests = poisson_requests(400, 300.0, 100, 50, seed=4)
    record = simulate(cfg, requests, cost)
    assert max(iv.args[5][1] for iv in record.intervals if iv.name == "batch") > 1  # quiet runs happened
    summary = summarize(record, SLOConfig())
    in_service = sum(r.finish_s - r.first_scheduled_s for r in record.requests)
    assert integral(summary, "instance/instance-0", "running") == pytest.approx(in_service, rel=ROUNDING)


def test_decode_instance_queue_counts_the_wait_for_blocks_kv_and_slot():
    """Disaggregated, KV sent after prefill: a decode instance queues a request from the end of its
    prefill (its reservation) until its first decode step, and that wait is queueing delay."""
    cost = FakeCost(10**6, transfer_bytes_per_token=1000)
    link = LinkSpec(name="slow", bandwidth=20e6, latency=1e-3)
    cfg = sim_config(
        engine=EngineConfig(max_num_seqs=2, prefix_cache=False),
        cluster=ClusterConfig(layout="disaggregated", router="round_robin",
                              transfer=TransferConfig(mode="after_prefill")),
    )
    requests = poisson_requests(300, 200.0, 200, 30, seed=5)
    record = simulate(cfg, requests, cost, link)
    summary = summarize(record, SLOConfig())
    decode_waits = [r.decode_scheduled_s - r.prefill_end_s for r in record.requests]
    assert integral(summary, "instance/decode-0", "waiting") == pytest.approx(sum(decode_waits), rel=ROUNDING)
    prefill_waits = sum(r.first_scheduled_s - r.arrival_s for r in record.requests)
    assert summary.latency.queueing_delay_s.mean == pytest.approx(
        (prefill_waits + sum(decode_waits)) / len(requests), rel=ROUNDING
    )
