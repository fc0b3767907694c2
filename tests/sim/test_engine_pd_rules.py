"""Engine and transfer rules of issue 10: no admission in a step that preempted (vLLM v1); a
resumed request hits its own cached prompt blocks; a hybrid model's prefix-cache entries keep a
recurrent-state snapshot (memory charged in KV blocks); its recurrent state crosses the link once
per request; a granted reservation holds a sequence slot only when configured to."""

from __future__ import annotations

import math

import pytest
from support.sim_fakes import FakeCost, sim_config

from infralab.sim.cluster import simulate
from infralab.sim.config import ClusterConfig, EngineConfig, TransferConfig
from infralab.sim.engine.kv_blocks import state_snapshot_blocks
from infralab.sim.engine.reference_scheduler import ReferenceScheduler
from infralab.sim.engine.request_state import Seq
from infralab.sim.engine.scheduler import Scheduler
from infralab.sim.records import RequestRecord
from infralab.sim.specs import LinkSpec
from infralab.sim.workloads.request import Request

LINK = LinkSpec(name="test", bandwidth=1e9, latency=1e-4)


def seq_of(request: Request) -> Seq:
    rec = RequestRecord(request.id, request.arrival_s, request.prompt_tokens, request.output_tokens)
    return Seq(request, rec, decodes_here=True)


@pytest.mark.parametrize("policy", [Scheduler, ReferenceScheduler])
def test_a_step_that_preempted_admits_nothing(policy):
    """Two decoding requests outgrow 5 blocks; the later one is preempted to make room, and its
    freed blocks would fit its own first chunk again (4 tokens of budget), but it waits a step."""
    sched = policy(max_num_seqs=2, max_batched_tokens=6, block_size=4, capacity_blocks=5,
                   prefix_cache=False, prefix_block_tokens=4)
    for i, prompt in enumerate((4, 4)):
        sched.add_waiting(seq_of(Request(i, 0.0, prompt, 40)))
    t, preempting_steps, admitted_right_after = 0.0, [], []
    for _ in range(40):
        waiting_before = {s.id for s in sched.waiting}
        before = sched.preemptions
        plan = sched.plan(t)
        if plan is None:
            break
        admitted = {s.id for s, _ in plan.chunks} & waiting_before
        if sched.preemptions > before:
            preempting_steps.append(plan.step_no)
            preempted_now = {s.id for s in sched.waiting} - waiting_before
            assert not {s.id for s, _ in plan.chunks} & (waiting_before | preempted_now)
        elif admitted and preempting_steps and preempting_steps[-1] == plan.step_no - 1:
            admitted_right_after.append(plan.step_no)
        t += 0.01
        sched.finish(plan, [t])
    # Its blocks fit at once: it is admitted again in the very next step.
    assert preempting_steps and admitted_right_after


def test_a_resumed_request_hits_its_own_cached_prompt_blocks():
    """Preempted while decoding, a request's prompt blocks stay in the prefix cache (unpinned);
    resumed, it computes only what is not there."""
    cfg = sim_config(engine=EngineConfig(max_num_seqs=2, max_batched_tokens=256, block_size=4,
                                         prefix_block_tokens=8))
    # 14 blocks: the two requests (8 blocks each at their longest) collide, and the later one's
    # decode blocks are enough for the earlier one's growth, so its prompt entries are not evicted.
    cost = FakeCost(14 * 4)
    requests = [Request(0, 0.0, 16, 14, (1, 2)), Request(1, 0.0, 16, 14, (3, 4))]
    record = simulate(cfg, requests, cost, check_invariants=True)
    first, resumed = record.requests
    assert first.preemptions == 0 and resumed.preemptions == 1
    assert resumed.cached_tokens == 16  # the whole prompt: only generated tokens are computed again


def test_hybrid_prefix_cache_keeps_state_snapshots_and_hits_end_at_one():
    """KV 1000 B/token, 16-token blocks (16 kB): a 40 kB recurrent state takes 3 blocks. Entries of
    32 tokens take 2 blocks, so a snapshot is kept every ceil(3 / 2) = 2 entries, and a hit ends at
    the last snapshot it reaches."""
    assert state_snapshot_blocks(40_000, 1000, 16) == 3
    assert state_snapshot_blocks(0, 1000, 16) == 0 and state_snapshot_blocks(40_000, 0, 16) == 0
    cfg = sim_config(engine=EngineConfig(block_size=16, prefix_block_tokens=32))
    requests = [Request(0, 0.0, 100, 2, (11, 12, 13)), Request(1, 1.0, 100, 2, (11, 12, 13))]
    cached, hits = {}, {}
    for state in (0, 40_000):
        record = simulate(cfg, requests, FakeCost(10**5, state_bytes_per_seq=state))
        cached[state] = max(c.value for c in record.counters if c.name == "kv_cached_blocks")
        hits[state] = record.requests[1].cached_tokens
    # Three entries; with state, the second (index 1) keeps a snapshot.
    assert cached == {0: 3 * 2, 40_000: 3 * 2 + 3}
    assert hits == {0: 96, 40_000: 64}


@pytest.mark.parametrize("mode", ["layerwise", "after_prefill"])
def test_recurrent_state_crosses_the_link_once(mode):
    prompt, chunk, per_token, state = 300, 100, 1000, 50_000
    cfg = sim_config(
        engine=EngineConfig(max_batched_tokens=chunk, prefix_cache=False),
        cluster=ClusterConfig(layout="disaggregated", transfer=TransferConfig(mode=mode, layer_groups=2)),
    )
    cost = FakeCost(10**6, transfer_bytes_per_token=per_token, state_bytes_per_seq=state)
    record = simulate(cfg, [Request(0, 0.0, prompt, 3)], cost, LINK)
    sent = sum(dict(iv.args)["bytes"] for iv in record.intervals if iv.track.startswith("link/"))
    assert sent == prompt * per_token + state


@pytest.mark.parametrize("takes_slot", [False, True])
def test_a_reservation_holds_a_slot_only_when_configured(takes_slot):
    """One decode slot, two requests prefilled at once on two prefill instances. vLLM's rule (the
    default): both reservations are granted while the slot is free, so both transfers start at
    once; holding a slot, the second waits until the first request has finished."""
    cfg = sim_config(
        engine=EngineConfig(max_num_seqs=1, prefix_cache=False),
        cluster=ClusterConfig(layout="disaggregated", prefill_instances=2, router="round_robin",
                              transfer=TransferConfig(reservation_takes_slot=takes_slot)),
    )
    requests = [Request(0, 0.0, 500, 20), Request(1, 0.0, 500, 20)]
    first, second = simulate(cfg, requests, FakeCost(10**6), LINK, check_invariants=True).requests
    assert first.kv_transfer_start_s == first.prefill_end_s
    if takes_slot:
        assert second.kv_transfer_start_s == first.finish_s
    else:
        assert second.kv_transfer_start_s == second.prefill_end_s
        assert second.decode_scheduled_s == first.finish_s  # it still waits for the slot to run
    assert not math.isnan(second.first_token_s)
