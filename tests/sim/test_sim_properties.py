"""Invariants of whole runs over random small clusters and workloads (hypothesis): every request
completes exactly once, token counts are conserved, KV blocks stay within [0, capacity], time never
goes backwards, and the same input gives the same record. Every run also recounts each instance's
aggregates after every step (`check_invariants`), and the engine asserts its block accounting."""

from __future__ import annotations

import math
from collections import defaultdict

from hypothesis import HealthCheck, event, given, settings
from support.sim_scenarios import (
    LINK,
    PRESSURE_LINK,
    fake_cost,
    kv_pressure_configs,
    kv_pressure_requests,
    scenarios,
)

import infralab.sim.engine.instance as instance_module
from infralab.sim.cluster import simulate


def run(scenario):
    cfg, requests, capacity = scenario
    return simulate(cfg, requests, fake_cost(capacity), LINK, check_invariants=True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_runs_keep_their_invariants(scenario):
    cfg, requests, capacity = scenario
    record = run(scenario)
    event(f"preemptions: {'yes' if any(r.preemptions for r in record.requests) else 'no'}")
    event(f"prefix hits: {'yes' if any(r.cached_tokens for r in record.requests) else 'no'}")
    # Every request once, finished, with exactly its output tokens at non-decreasing times.
    assert [r.id for r in record.requests] == [r.id for r in requests]
    for req, rec in zip(requests, record.requests):
        assert not math.isnan(rec.finish_s)
        times = list(rec.token_times_s)
        assert len(times) == req.output_tokens
        assert times == sorted(times)
        assert rec.arrival_s - 1e-12 <= rec.first_scheduled_s <= rec.first_token_s == times[0]
        assert rec.finish_s == times[-1] <= record.end_s
        # A whole prompt can be a hit only when recomputing after a preemption (generated tokens
        # are still to compute then).
        assert 0 <= rec.cached_tokens < req.prompt_tokens or (rec.cached_tokens == req.prompt_tokens and rec.preemptions)
        assert rec.recomputed_tokens >= 0
        if cfg.cluster.layout == "disaggregated" and req.output_tokens > 1:
            assert rec.prefill_end_s <= rec.kv_transfer_end_s <= rec.decode_scheduled_s
            if cfg.cluster.transfer.first_token == "prefill":
                assert rec.first_token_s == rec.prefill_end_s and rec.decode_scheduled_s < times[1]
            else:  # the decode instance's first step emits it
                assert rec.decode_scheduled_s < rec.first_token_s
            assert rec.kv_transfer_start_s <= rec.kv_transfer_end_s
            assert rec.decode_instance.startswith("decode-")
    # Prompt tokens computed by the steps = prompt - cached + recomputed, over all requests, plus,
    # when the decode side emits the first token, the last prompt token computed there again (and
    # the prefill side's token, which no client sees).
    handed_over = 0
    if cfg.cluster.layout == "disaggregated" and cfg.cluster.transfer.first_token == "decode":
        handed_over = sum(1 for r in requests if r.output_tokens > 1)
    computed = sum(dict(iv.args)["prefill_tokens"] for iv in record.intervals if iv.name == "batch")
    expected = sum(r.prompt_tokens - r.cached_tokens + r.recomputed_tokens for r in record.requests)
    assert computed == expected + handed_over
    # Steps on one instance never overlap or go back in time; decode output is conserved.
    last_end = defaultdict(float)
    for iv in record.intervals:
        assert iv.start_s <= iv.end_s
        if iv.name == "batch":
            assert iv.start_s >= last_end[iv.track]
            last_end[iv.track] = iv.end_s
    emitted = sum(dict(iv.args)["output_tokens"] for iv in record.intervals if iv.name == "batch")
    assert emitted == sum(r.output_tokens for r in requests) + handed_over
    # KV blocks within [0, capacity]; counters in time order per track.
    blocks = capacity // cfg.engine.block_size
    last_t = defaultdict(float)
    for c in record.counters:
        assert c.t_s >= last_t[(c.track, c.name)]
        last_t[(c.track, c.name)] = c.t_s
        if c.name in ("kv_used_blocks", "kv_cached_blocks"):
            assert 0 <= c.value <= blocks
        if c.name in ("waiting", "running"):
            assert c.value >= 0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_same_input_gives_the_same_record(scenario):
    assert repr(run(scenario)) == repr(run(scenario))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_runs_of_quiet_steps_change_no_request(scenario):
    """Timing identical decode-only steps together (the engine's speed-up) gives every request
    exactly the times that single steps give."""
    together = run(scenario)
    saved = instance_module.MAX_QUIET_STEPS
    instance_module.MAX_QUIET_STEPS = 1
    try:
        single = run(scenario)
    finally:
        instance_module.MAX_QUIET_STEPS = saved
    assert repr(together.requests) == repr(single.requests)
    assert together.end_s == single.end_s


def test_runs_of_quiet_steps_change_no_request_under_kv_pressure():
    """A larger fixed case: hundreds of requests, prefix hits, preemptions, both layouts."""
    requests = kv_pressure_requests(300)
    for cfg in kv_pressure_configs():
        together = simulate(cfg, requests, fake_cost(8000), PRESSURE_LINK)
        assert sum(r.preemptions for r in together.requests) > 0
        assert sum(r.cached_tokens for r in together.requests) > 0
        saved = instance_module.MAX_QUIET_STEPS
        instance_module.MAX_QUIET_STEPS = 1
        try:
            single = simulate(cfg, requests, fake_cost(8000), PRESSURE_LINK)
        finally:
            instance_module.MAX_QUIET_STEPS = saved
        assert repr(together.requests) == repr(single.requests)
