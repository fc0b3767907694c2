"""The engine's KV blocks, prefix cache, preemption and routers, on small hand-checked cases with a
tiny linear fake cost model (so that KV capacity can be made small): FakeCost's defaults, 1 ms per
step + 10 us per prefill token + 0.1 ms per decode sequence, 1000 bytes of KV per token."""

from __future__ import annotations

import pytest
from support.sim_fakes import FakeCost, sim_config

from infralab.errors import InputError
from infralab.sim.cluster import simulate
from infralab.sim.config import ClusterConfig, EngineConfig, SimConfig
from infralab.sim.engine.prefix_cache import PrefixCache
from infralab.workload.request import Request


def config(router: str = "round_robin", instances: int = 1, **engine: object) -> SimConfig:
    return sim_config(engine=EngineConfig(**engine), cluster=ClusterConfig(instances=instances, router=router))


def prefill_tokens_computed(record) -> int:
    return sum(dict(iv.args)["prefill_tokens"] for iv in record.intervals if iv.name == "batch")


def test_kv_pressure_preempts_and_recomputes():
    # 8 requests of 100 + 200 tokens, but only 1024 tokens of KV: they cannot all decode at once.
    requests = [Request(i, 0.0, 100, 200) for i in range(8)]
    record = simulate(config(block_size=16, prefix_cache=False), requests, FakeCost(1024), check_invariants=True)
    recs = record.requests
    assert sum(r.preemptions for r in recs) > 0
    for r in recs:
        assert len(r.token_times_s) == 200
        assert r.recomputed_tokens >= (100 if r.preemptions else 0)
        assert (r.recomputed_tokens > 0) == (r.preemptions > 0)
    # Prompt tokens computed = prompt - cached + recomputed, summed, against the engine's steps.
    assert prefill_tokens_computed(record) == sum(r.prompt_tokens - r.cached_tokens + r.recomputed_tokens for r in recs)
    used = [c.value for c in record.counters if c.name == "kv_used_blocks"]
    assert max(used) <= 1024 // 16 and min(used) >= 0
    # The first admitted request is never the victim while others run.
    assert recs[0].preemptions == 0


def test_request_that_can_never_fit_is_an_input_error():
    with pytest.raises(InputError) as err:
        simulate(config(block_size=16), [Request(0, 0.0, 10, 5), Request(7, 0.0, 1000, 100)], FakeCost(1024))
    message = str(err.value)
    assert "request 7" in message and "1000" in message and "64 blocks" in message


def test_no_kv_memory_at_all_is_an_input_error():
    with pytest.raises(InputError, match="gpu_memory_utilization"):
        simulate(config(), [Request(0, 0.0, 10, 5)], FakeCost(0))


def test_prefix_cache_serves_a_shared_prefix():
    # Both prompts share their first two 512-token blocks; the second arrives after the first ends.
    first = Request(0, 0.0, 1600, 2, (1, 2, 3))
    second = Request(1, 10.0, 1500, 2, (1, 2, 4))
    record = simulate(config(), [first, second], FakeCost(100_000), check_invariants=True)
    a, b = record.requests
    assert a.cached_tokens == 0 and b.cached_tokens == 1024
    b_prefill = [iv for iv in record.intervals if iv.start_s >= 10.0][0]
    assert dict(b_prefill.args)["prefill_tokens"] == 1500 - 1024
    assert prefill_tokens_computed(record) == 1600 + 1500 - 1024


def test_prefix_cache_always_computes_one_token():
    # The whole prompt is cached (two full blocks): the last block is computed again.
    record = simulate(
        config(), [Request(0, 0.0, 1024, 2, (1, 2)), Request(1, 5.0, 1024, 2, (1, 2))], FakeCost(100_000)
    )
    assert record.requests[1].cached_tokens == 512


def test_prefix_cache_disabled_serves_nothing():
    record = simulate(
        config(prefix_cache=False), [Request(0, 0.0, 1600, 2, (1, 2, 3)), Request(1, 5.0, 1600, 2, (1, 2, 3))],
        FakeCost(100_000),
    )
    assert [r.cached_tokens for r in record.requests] == [0, 0]


def test_prefix_cache_evicts_least_recently_released_first():
    cache = PrefixCache(block_tokens=512, entry_blocks=32)
    for h in (1, 2, 3):
        cache.insert_pinned(h)
    cache.unpin([1, 2])  # released deepest first: 2 then 1, so 2 is older
    cache.unpin([3])
    assert cache.blocks == 96 and cache.pinned_blocks == 0
    assert cache.evict(1) == 32
    assert 2 not in cache and 1 in cache and 3 in cache
    cache.pin([1])
    assert cache.evict(1000) == 32  # only 3 is unpinned
    assert 1 in cache and 3 not in cache
    assert cache.match((1, 5), max_entries=2) == 1


def test_prefix_aware_router_follows_the_cache():
    shared = (11, 12, 13)
    requests = [Request(0, 0.0, 1600, 2, shared), Request(1, 5.0, 1600, 2, shared), Request(2, 9.0, 1600, 2, shared)]
    aware = simulate(config("prefix_aware", instances=2), requests, FakeCost(100_000)).requests
    assert [r.prefill_instance for r in aware] == ["instance-0"] * 3
    assert [r.cached_tokens for r in aware] == [0, 1536, 1536]
    rr = simulate(config("round_robin", instances=2), requests, FakeCost(100_000)).requests
    assert [r.prefill_instance for r in rr] == ["instance-0", "instance-1", "instance-0"]
    assert [r.cached_tokens for r in rr] == [0, 0, 1536]


def test_least_outstanding_tokens_router_balances_work():
    # A long request occupies instance-0; the next two go where less work is queued.
    requests = [Request(0, 0.0, 5000, 500), Request(1, 0.001, 100, 10), Request(2, 0.002, 100, 10)]
    recs = simulate(config("least_outstanding_tokens", instances=2), requests, FakeCost(100_000)).requests
    assert [r.prefill_instance for r in recs] == ["instance-0", "instance-1", "instance-1"]
    assert recs[0].decode_instance == recs[0].prefill_instance


def test_max_num_seqs_limits_the_batch():
    requests = [Request(i, 0.0, 50, 20) for i in range(5)]
    record = simulate(config(max_num_seqs=2), requests, FakeCost(100_000), check_invariants=True)
    running = [c.value for c in record.counters if c.name == "running"]
    assert max(running) == 2
    assert max(dict(iv.args)["decode_seqs"] for iv in record.intervals) == 2


def test_duplicate_request_ids_are_an_input_error():
    with pytest.raises(InputError, match="request 3"):
        simulate(config(), [Request(3, 0.0, 10, 2), Request(3, 1.0, 10, 2)], FakeCost(1000))


def test_a_failed_allocation_evicts_nothing():
    from infralab.sim.engine.kv_blocks import BlockPool

    cache = PrefixCache(block_tokens=64, entry_blocks=4)
    pool = BlockPool(10, cache)
    cache.insert_pinned(1)
    cache.unpin([1])  # 4 evictable blocks, 6 free
    assert not pool.allocate(11)
    assert 1 in cache and pool.free == 6
    assert pool.allocate(8)  # evicts the entry to make room
    assert 1 not in cache and pool.free == 2 and pool.used == 8


def test_a_block_cached_meanwhile_is_shared_and_the_blocks_after_it_still_cached():
    # A and B prefill in the same step, so neither finds the shared blocks (1, 2) cached when it
    # starts. A caches them first; B then frees its copies, pins A's entries and still caches its
    # own block 4, so C later hits three blocks (1, 2, 4), not two.
    a = Request(0, 0.0, 1600, 2, (1, 2, 3))
    b = Request(1, 0.0, 1600, 2, (1, 2, 4))
    c = Request(2, 10.0, 2100, 2, (1, 2, 4, 5))
    record = simulate(config(max_batched_tokens=8192), [a, b, c], FakeCost(100_000), check_invariants=True)
    first_step = [iv for iv in record.intervals if iv.name == "batch"][0]
    assert dict(first_step.args)["prefill_tokens"] == 3200  # both prompts whole, no hit
    assert [r.cached_tokens for r in record.requests] == [0, 0, 1536]
