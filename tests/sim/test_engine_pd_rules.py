"""Engine and transfer rules of issue 10: no admission in a step that preempted (vLLM v1); a
resumed request hits its own cached prompt blocks; a hybrid model's prefix-cache entries keep a
recurrent-state snapshot (memory charged in KV blocks); its recurrent state crosses the link once
per request; a granted reservation holds a sequence slot only when configured to; a slot that a
preemption frees in an otherwise empty step goes to a request whose KV has arrived (no livelock)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import simpy
from support.sim_fakes import FakeCost, sim_config
from support.sim_scenarios import LINK as SCENARIO_LINK
from support.sim_scenarios import fake_cost

import infralab.sim.engine.instance as instance_module

from infralab.metrics.records import RequestRecord
from infralab.sim.cluster import simulate
from infralab.sim.config import ClusterConfig, EngineConfig, TransferConfig
from infralab.sim.engine.kv_blocks import state_snapshot_blocks
from infralab.sim.engine.reference_scheduler import ReferenceScheduler
from infralab.sim.engine.request_state import Seq
from infralab.sim.engine.scheduler import Scheduler
from infralab.sim.specs import LinkSpec
from infralab.workload.request import Request

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


def delivered_with_first_token(request: Request) -> Seq:
    """A decode-instance request whose KV arrived with its first token (first_token = "prefill")."""
    seq = seq_of(request)
    seq.computed = seq.target = request.prompt_tokens
    seq.generated = 1
    seq.rec.first_token_s = request.arrival_s  # stamped by the prefill instance
    seq.rec.token_times_s.append(request.arrival_s)
    return seq


@pytest.mark.parametrize("policy", [Scheduler, ReferenceScheduler])
def test_a_slot_freed_by_preemption_starts_a_delivered_request(policy):
    """One slot, 73 blocks of 2 tokens. Both reservations are granted (41 + 31 blocks); A runs,
    outgrows the 1 free block and preempts itself. A step that would then be empty is an empty
    step of no time: planning starts again, and B (delivered, holding its blocks) takes the freed
    slot. Before, A was readmitted at once, and with B's blocks held it preempted itself again
    forever (a livelock: steps without end, found by test_scheduler_reference's hypothesis run)."""
    sched = policy(max_num_seqs=1, max_batched_tokens=42, block_size=2, capacity_blocks=73,
                   prefix_cache=False, prefix_block_tokens=2)
    env = simpy.Environment()
    a = delivered_with_first_token(Request(0, 0.0, 82, 18))
    b = delivered_with_first_token(Request(1, 0.0, 61, 8))
    for seq in (a, b):
        sched.add_reservation(seq, env.event())
    assert sched.plan(0.0) is None  # grants both; nothing has arrived yet
    sched.deliver(a)
    sched.deliver(b)
    t, b_started_after_preemption = 0.0, False
    for _ in range(1000):  # both need 17 + 7 decode steps and one recompute of A
        before = sched.preemptions
        plan = sched.plan(t)
        if plan is None:
            break
        if sched.preemptions > before:
            b_started_after_preemption |= b.id in sched.running
        t += 0.01
        sched.finish(plan, [t])
    assert plan is None and not (sched.running or sched.waiting or sched.ready)
    assert not math.isnan(a.rec.finish_s) and not math.isnan(b.rec.finish_s)
    assert a.rec.preemptions >= 1 and b_started_after_preemption
    assert b.rec.finish_s < a.rec.finish_s


def bounded(policy: type, max_plans: int = 20_000) -> type:
    """`policy` that fails instead of looping without end (a livelock advances virtual time)."""

    class Bounded:  # wraps rather than subclasses: the compiled policies take no Python subclass
        def __init__(self, **options):
            self._policy = policy(**options)
            self.plans = 0

        def plan(self, now: float):
            self.plans += 1
            assert self.plans <= max_plans, "the scheduler plans steps without end"
            return self._policy.plan(now)

        def __getattr__(self, name: str):
            return getattr(self._policy, name)

    return Bounded


def test_the_hypothesis_livelock_case_finishes_with_identical_records(monkeypatch):
    """The concrete case (shrunk) that looped forever: one prefill and one decode instance, one
    decode slot, the prefill-side first token, tight KV. Both schedulers finish, with identical
    records."""
    cfg = sim_config(
        engine=EngineConfig(max_num_seqs=1, max_batched_tokens=42, block_size=2, prefix_cache=False,
                            prefix_block_tokens=2),
        cluster=ClusterConfig(layout="disaggregated", prefill_instances=1, decode_instances=1,
                              transfer=TransferConfig(first_token="prefill")),
    )
    requests = [Request(8, 0.171, 82, 18), Request(10, 0.173, 61, 8)]
    records = {}
    for name, policy in (("fast", Scheduler), ("reference", ReferenceScheduler)):
        monkeypatch.setitem(instance_module.SCHEDULERS, name, bounded(policy))
        run_cfg = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, scheduler=name))
        records[name] = simulate(run_cfg, requests, fake_cost(146), SCENARIO_LINK, check_invariants=True)
    assert all(not math.isnan(r.finish_s) for r in records["fast"].requests)
    assert repr(records["fast"].requests) == repr(records["reference"].requests)
