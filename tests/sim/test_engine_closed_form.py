"""One request alone on an idle instance: its times are the cost model's step times, exactly.

Uses the real roofline CostModel (Llama-3-8B on an H100, with host overheads), so any extra or
missing work in the engine's StepWork shows up as a mismatch."""

from __future__ import annotations

from support.sim_fakes import sim_config

from infralab.sim.cluster import simulate
from infralab.sim.config import CostConfig, EngineConfig, HostOverheadConfig
from infralab.sim.cost import CostModel, StepWork
from infralab.sim.specs import load_accelerator, load_model
from infralab.workload.request import Request

HOST = HostOverheadConfig(per_step_s=2e-4, per_request_s=1e-5, per_output_token_s=3e-6)
COST = CostModel(load_model("llama-3-8b"), load_accelerator("H100"), CostConfig(host=HOST))


def run_one(prompt: int, output: int, **engine: object):
    record = simulate(sim_config(engine=EngineConfig(**engine)), [Request(0, 0.0, prompt, output)], COST)
    return record, record.requests[0]


def test_ttft_of_a_lone_request_is_one_prefill_step():
    _, rec = run_one(1000, 1)
    ttft = COST.step(StepWork.prefill(1000)).total_s
    assert rec.first_token_s - rec.arrival_s == ttft
    assert rec.first_scheduled_s == 0.0
    assert rec.finish_s == rec.first_token_s
    assert list(rec.token_times_s) == [ttft]


def test_e2e_of_a_lone_request_is_prefill_plus_each_decode_step():
    prompt, output = 700, 300  # 300 decode steps cross several KV blocks
    record, rec = run_one(prompt, output, block_size=16)
    t = COST.step(StepWork.prefill(prompt)).total_s
    expected = [t]
    for generated in range(1, output):
        # The step that emits token generated+1 feeds token `generated`: context prompt+generated.
        t = t + COST.step(StepWork.decode(1, prompt + generated)).total_s
        expected.append(t)
    assert rec.first_token_s == expected[0]
    assert list(rec.token_times_s) == expected
    assert rec.finish_s == expected[-1]
    assert record.end_s == expected[-1]
    assert rec.preemptions == 0 and rec.recomputed_tokens == 0 and rec.cached_tokens == 0


def test_chunked_prefill_of_a_long_prompt_is_the_sum_of_its_chunks():
    prompt, budget = 2500, 1024
    _, rec = run_one(prompt, 1, max_batched_tokens=budget)
    t = 0.0
    for done in range(0, prompt, budget):
        new = min(budget, prompt - done)
        t = t + COST.step(StepWork.prefill_chunk(new, done, finishes=done + new == prompt)).total_s
    assert rec.first_token_s == t


def test_batch_intervals_record_the_steps():
    record, rec = run_one(100, 5)
    batches = [iv for iv in record.intervals if iv.track == "instance/instance-0"]
    assert batches[0].start_s == 0.0 and batches[0].end_s == rec.first_token_s
    assert dict(batches[0].args)["prefill_tokens"] == 100
    assert sum(dict(iv.args)["steps"] for iv in batches) == 5
    assert sum(dict(iv.args)["output_tokens"] for iv in batches) == 5
    assert batches[-1].end_s == rec.finish_s
    resources = record.resources["instance/instance-0"]
    assert resources["role"] == "colocated"
    engine = EngineConfig().with_vllm_defaults(COST.accel.usable_memory, COST.accel.calibration_device)  # H100: 1024, 8192
    capacity = COST.kv_capacity_tokens(0.9, engine.max_num_seqs, max_batched_tokens=engine.max_batched_tokens)
    assert resources["kv_capacity_blocks"] == capacity // 16
