"""Prefill/decode disaggregation: KV transfer timing against closed forms (real CostModel, one
lone request or two equal ones), where the KV and the request go, and who emits the first token."""

from __future__ import annotations

import pytest
from support.sim_fakes import sim_config

from infralab.sim.cluster import simulate
from infralab.sim.config import ClusterConfig, CostConfig, HardwareConfig, SimConfig, TransferConfig
from infralab.sim.cost import CostModel, StepWork
from infralab.sim.specs import LinkSpec, load_accelerator, load_link, load_model
from infralab.workload.request import Request

COST = CostModel(load_model("llama-3-8b"), load_accelerator("H100"), CostConfig())
LINK = LinkSpec(name="test-rdma", bandwidth=50e9, latency=20e-6)


def config(mode: str = "after_prefill", topology: str = "per_prefill_nic", prefill: int = 1, decode: int = 1,
           groups: int = 4, first_token: str = "prefill", **overrides) -> SimConfig:
    return sim_config(
        cluster=ClusterConfig(
            layout="disaggregated",
            prefill_instances=prefill,
            decode_instances=decode,
            router="round_robin",
            transfer=TransferConfig(mode=mode, topology=topology, layer_groups=groups, first_token=first_token),
        ),
        **overrides,
    )


def test_after_prefill_decode_starts_when_the_kv_has_crossed_the_link():
    prompt, output = 3000, 4
    record = simulate(config(), [Request(0, 0.0, prompt, output)], COST, LINK)
    rec = record.requests[0]
    prefill_end = COST.step(StepWork.prefill(prompt)).total_s
    assert rec.first_token_s == rec.prefill_end_s == prefill_end  # first_token = "prefill"
    assert rec.kv_transfer_start_s == prefill_end
    nbytes = COST.kv_transfer_bytes(prompt)
    assert rec.kv_transfer_end_s == pytest.approx(prefill_end + LINK.latency + nbytes / LINK.bandwidth, rel=1e-12)
    # The first decode step starts at the arrival of the KV.
    decode_start = rec.kv_transfer_end_s
    assert rec.decode_scheduled_s == decode_start
    assert rec.token_times_s[1] == decode_start + COST.step(StepWork.decode(1, prompt + 1)).total_s
    assert (rec.prefill_instance, rec.decode_instance) == ("prefill-0", "decode-0")
    assert len(rec.token_times_s) == output
    transfers = [iv for iv in record.intervals if iv.track == "link/nic-prefill-0"]
    assert len(transfers) == 1 and dict(transfers[0].args)["bytes"] == nbytes


def test_layerwise_overlaps_prefill_and_finishes_no_later():
    prompt, output = 3000, 4
    after = simulate(config("after_prefill"), [Request(0, 0.0, prompt, output)], COST, LINK).requests[0]
    layer = simulate(config("layerwise", groups=4), [Request(0, 0.0, prompt, output)], COST, LINK).requests[0]
    prefill_s = COST.step(StepWork.prefill(prompt)).total_s
    assert layer.first_token_s == after.first_token_s == prefill_s
    # The first of 4 groups leaves a quarter into the prefill step.
    assert layer.kv_transfer_start_s == pytest.approx(prefill_s / 4, rel=1e-12)
    assert layer.kv_transfer_end_s <= after.kv_transfer_end_s
    assert layer.finish_s <= after.finish_s
    # Here each group's bytes cross faster than a quarter step, so only the last one is exposed.
    last_group = LINK.latency + COST.kv_transfer_bytes(prompt) / 4 / LINK.bandwidth
    assert layer.kv_transfer_end_s == pytest.approx(prefill_s + last_group, rel=1e-9)


@pytest.mark.parametrize("topology, share", [("per_prefill_nic", 1), ("shared", 2)])
def test_two_equal_transfers_share_a_shared_link(topology: str, share: int):
    prompt = 2000
    requests = [Request(0, 0.0, prompt, 2), Request(1, 0.0, prompt, 2)]
    record = simulate(config(topology=topology, prefill=2, decode=2), requests, COST, LINK)
    nbytes = COST.kv_transfer_bytes(prompt)
    for rec in record.requests:
        took = rec.kv_transfer_end_s - rec.kv_transfer_start_s
        assert took == pytest.approx(LINK.latency + share * nbytes / LINK.bandwidth, rel=1e-9)
    assert {r.prefill_instance for r in record.requests} == {"prefill-0", "prefill-1"}


def test_one_token_requests_need_no_transfer():
    record = simulate(config(), [Request(0, 0.0, 500, 1)], COST, LINK)
    rec = record.requests[0]
    assert rec.finish_s == rec.first_token_s == COST.step(StepWork.prefill(500)).total_s
    assert rec.decode_instance == "" and rec.kv_transfer_start_s != rec.kv_transfer_start_s  # NaN


def test_prefill_instance_holds_kv_until_its_transfer_ends():
    prompt = 3000
    slow = LinkSpec(name="slow", bandwidth=1e9, latency=0.0)
    record = simulate(config(), [Request(0, 0.0, prompt, 3)], COST, slow)
    rec = record.requests[0]
    used = [(c.t_s, c.value) for c in record.counters if c.track == "instance/prefill-0" and c.name == "kv_used_blocks"]
    # Blocks are taken for the prompt and given back exactly when the transfer ends.
    assert max(v for _, v in used) == -(-prompt // 16)
    assert used[-1] == (rec.kv_transfer_end_s, 0)
    assert record.resources["instance/decode-0"]["role"] == "decode"


def test_decode_side_first_token_adds_exactly_the_transfer_and_the_decode_admission():
    """One request, worked by hand: colocated, its first token ends its prefill step. Disaggregated
    with the decode side emitting it (the default), the KV crosses the link after that step
    (latency + bytes / bandwidth, the decode instance idle so its blocks are granted at once), and
    the decode instance's first step computes the last prompt token again and emits token 1."""
    prompt, output = 3000, 4
    request = [Request(0, 0.0, prompt, output)]
    colocated = simulate(sim_config(), request, COST).requests[0]
    default = sim_config(cluster=ClusterConfig(layout="disaggregated", router="round_robin"))
    assert default.cluster.transfer.first_token == "decode"
    pd = simulate(default, request, COST, LINK).requests[0]

    prefill_s = COST.step(StepWork.prefill(prompt)).total_s
    transfer_s = LINK.latency + prompt * COST.kv_bytes_per_token() / LINK.bandwidth
    admission_s = COST.step(StepWork.prefill_chunk(1, prompt - 1, finishes=True)).total_s
    assert colocated.first_token_s - colocated.arrival_s == prefill_s
    assert pd.prefill_end_s == prefill_s and pd.kv_transfer_start_s == prefill_s
    assert pd.kv_transfer_end_s == pytest.approx(prefill_s + transfer_s, rel=1e-12)
    assert pd.decode_scheduled_s == pd.kv_transfer_end_s
    assert pd.first_token_s == pd.decode_scheduled_s + admission_s
    ttft_gap = (pd.first_token_s - pd.arrival_s) - (colocated.first_token_s - colocated.arrival_s)
    assert ttft_gap == pytest.approx(transfer_s + admission_s, rel=1e-12)
    # The client sees every token once; the decode side then decodes tokens 2.. from step to step.
    assert len(pd.token_times_s) == output and pd.token_times_s[0] == pd.first_token_s
    assert pd.token_times_s[1] == pd.first_token_s + COST.step(StepWork.decode(1, prompt + 1)).total_s
    assert pd.recomputed_tokens == 0
    # With the prefill-side stamp, TTFT is the colocated one.
    stamped = simulate(config(first_token="prefill"), request, COST, LINK).requests[0]
    assert stamped.first_token_s == colocated.first_token_s


def test_kv_moves_per_rank_over_one_nic_per_accelerator():
    """TP = 2 (GQA, 8 KV heads: each rank holds half the KV): each rank's half crosses its own NIC,
    so the transfer takes the time of half the bytes over one NIC."""
    cost = CostModel(
        load_model("llama-3-8b"), load_accelerator("H100"), CostConfig(), tp=2, tp_link=load_link("nvlink4")
    )
    prompt = 3000
    cfg = config(hardware=HardwareConfig(accelerator="H100", tp=2))
    record = simulate(cfg, [Request(0, 0.0, prompt, 2)], cost, LINK)
    rec = record.requests[0]
    per_rank = prompt * cost.kv_bytes_per_token() / 2
    assert cost.kv_bytes_per_token() == COST.kv_bytes_per_token()  # split, not replicated
    assert rec.kv_transfer_end_s - rec.kv_transfer_start_s == pytest.approx(
        LINK.latency + per_rank / LINK.bandwidth, rel=1e-12
    )
    assert record.resources["link/nic-prefill-0"]["lanes"] == 2
