"""The fast scheduler against the reference one (the executable specification): on random small
clusters and workloads, with tight KV memory (preemptions) and shared prefixes (prefix-cache hits),
in colocated and disaggregated layouts, both give identical request records, bit for bit: arrival,
first scheduled step, every token time, KV transfer, finish, cached and recomputed tokens,
preemptions. With runs of quiet steps switched off, the whole run record (steps, counters) is
identical too."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, event, given, settings
from support.sim_scenarios import LINK, fake_cost, scenarios

import infralab.sim.engine.instance as instance_module
from infralab.sim.cluster import simulate
from infralab.sim.config import CostConfig, EngineConfig
from infralab.sim.cost_model import CostModel
from infralab.sim.engine.reference_scheduler import ReferenceScheduler
from infralab.sim.engine.scheduler import Scheduler
from infralab.sim.specs import load_accelerator, load_model


def with_scheduler(cfg, scheduler: str):
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, scheduler=scheduler))


def run(scenario, scheduler: str, cost=None):
    cfg, requests, capacity = scenario
    cost = cost or fake_cost(capacity)
    return simulate(with_scheduler(cfg, scheduler), requests, cost, LINK, check_invariants=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_scheduler_gives_the_reference_records(scenario):
    reference = run(scenario, "reference")
    fast = run(scenario, "fast")
    event(f"preemptions: {'yes' if any(r.preemptions for r in reference.requests) else 'no'}")
    event(f"prefix hits: {'yes' if any(r.cached_tokens for r in reference.requests) else 'no'}")
    assert repr(fast.requests) == repr(reference.requests)
    assert fast.end_s == reference.end_s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_single_fast_steps_give_the_reference_run(scenario):
    """One step at a time, the fast scheduler's steps, counters and transfers are the reference's."""
    reference = run(scenario, "reference")
    saved = instance_module.MAX_QUIET_STEPS
    instance_module.MAX_QUIET_STEPS = 1
    try:
        single = run(scenario, "fast")
    finally:
        instance_module.MAX_QUIET_STEPS = saved
    assert repr(single) == repr(reference)


class _FixedCapacity:
    """The real cost model with a small KV capacity (so that KV pressure happens)."""

    def __init__(self, cost: CostModel, capacity_tokens: int) -> None:
        self._cost = cost
        self._capacity = capacity_tokens
        self.step = cost.step
        self.decode_step_s = cost.decode_step_s
        self.kv_transfer_bytes = cost.kv_transfer_bytes

    def kv_capacity_tokens(self, gpu_memory_utilization: float, max_num_seqs: int = 0) -> int:
        return self._capacity


@pytest.fixture(scope="module")
def real_cost() -> CostModel:
    return CostModel(load_model("kimi-linear-48b-a3b"), load_accelerator("H200"), CostConfig())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_fast_scheduler_gives_the_reference_records_with_the_roofline_cost(real_cost, scenario):
    """Quiet runs time decode steps with `decode_step_s`, the reference with `step()`: the same sum."""
    cost = _FixedCapacity(real_cost, scenario[2])
    reference = run(scenario, "reference", cost)
    fast = run(scenario, "fast", cost)
    assert repr(fast.requests) == repr(reference.requests)


def test_the_config_option_picks_the_scheduler():
    assert EngineConfig().scheduler == "fast"
    assert instance_module.SCHEDULERS == {"fast": Scheduler, "reference": ReferenceScheduler}
