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
from support.sim_scenarios import (
    LINK,
    PRESSURE_LINK,
    fake_cost,
    kv_pressure_configs,
    kv_pressure_requests,
    scenarios,
)

import infralab.sim.engine.instance as instance_module
from infralab.errors import InputError
from infralab.sim.cluster import simulate
from infralab.sim.config import CostConfig, EngineConfig, load_config
from infralab.sim.cost import CostModel
from infralab.sim.run import simulate_config
from infralab.sim.specs import load_accelerator, load_link, load_model


def with_scheduler(cfg, scheduler: str):
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, scheduler=scheduler))


def run(scenario, scheduler: str, cost=None, link=LINK):
    cfg, requests, capacity = scenario
    cost = cost or fake_cost(capacity)
    return simulate(with_scheduler(cfg, scheduler), requests, cost, link, check_invariants=True)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
        self._capacity = capacity_tokens
        self.step = cost.step
        self.decode_step_s = cost.decode_step_s
        self.decode_run_ends = cost.decode_run_ends
        self.kv_transfer_bytes = cost.kv_transfer_bytes
        self.kv_bytes_per_token = cost.kv_bytes_per_token
        self.linear_state_bytes_per_seq = cost.linear_state_bytes_per_seq

    def kv_capacity_tokens(self, gpu_memory_utilization: float, max_num_seqs: int = 0, max_batched_tokens: int = 0) -> int:
        return self._capacity


RDMA = load_link("rdma-400g")


@pytest.fixture(scope="module")
def real_cost() -> CostModel:
    return CostModel(load_model("kimi-linear-48b-a3b"), load_accelerator("H200"), CostConfig())


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_fast_scheduler_gives_the_reference_records_with_the_roofline_cost(real_cost, scenario):
    """Quiet runs time decode steps with `decode_step_s`, the reference with `step()`: the same sum."""
    # The real model's KV (and per-chunk recurrent state: tens of MB) needs a real NIC: over the
    # fake costs' 1 MB/s link one transfer takes minutes of virtual time, while a request thrashing
    # against the blocks it holds runs tens of thousands of steps.
    cost = _FixedCapacity(real_cost, scenario[2])
    reference = run(scenario, "reference", cost, RDMA)
    fast = run(scenario, "fast", cost, RDMA)
    assert repr(fast.requests) == repr(reference.requests)


CONFIG = """\
model = "llama-3-8b"

[hardware]
accelerator = "H100"

[engine]
scheduler = "{scheduler}"

[workload]
kind = "synthetic"
num_requests = 40

[workload.arrival]
kind = "poisson"
rate = 20.0

[workload.prompt]
kind = "uniform"
low = 10
high = 3000

[workload.output]
kind = "uniform"
low = 1
high = 300
"""


def test_a_config_picks_the_scheduler(tmp_path):
    records = {}
    for scheduler in ("fast", "reference"):
        path = tmp_path / f"{scheduler}.toml"
        path.write_text(CONFIG.format(scheduler=scheduler))
        cfg, base = load_config(path)
        assert cfg.engine.scheduler == scheduler
        records[scheduler] = simulate_config(cfg, base)
    steps = [dict(iv.args)["steps"] for iv in records["reference"].intervals if iv.name == "batch"]
    assert set(steps) == {1}  # one SimPy timeout per step
    assert max(dict(iv.args)["steps"] for iv in records["fast"].intervals if iv.name == "batch") > 1
    assert repr(records["fast"].requests) == repr(records["reference"].requests)
    assert EngineConfig().scheduler == "fast"


def test_an_unknown_scheduler_is_an_input_error(tmp_path):
    path = tmp_path / "cfg.toml"
    path.write_text(CONFIG.format(scheduler="fastest"))
    with pytest.raises(InputError) as info:
        load_config(path)
    assert "engine.scheduler" in str(info.value) and "reference" in str(info.value)


def test_fast_scheduler_gives_the_reference_records_under_kv_pressure():
    """A larger fixed case: hundreds of requests, prefix hits, preemptions, both layouts."""
    requests = kv_pressure_requests(200)
    for cfg in kv_pressure_configs():
        fast = simulate(cfg, requests, fake_cost(8000), PRESSURE_LINK)
        reference = simulate(with_scheduler(cfg, "reference"), requests, fake_cost(8000), PRESSURE_LINK)
        assert sum(r.preemptions for r in reference.requests) > 0
        assert sum(r.cached_tokens for r in reference.requests) > 0
        assert repr(fast.requests) == repr(reference.requests)
