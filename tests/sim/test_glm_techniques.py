"""The GLM-class techniques of the cost model (docs/sim.md, "GLM-class techniques"), each on a
hand-worked case: per-layer-class TP, EP, ReplaySSM, W8A8, KV dtypes per layer, Layer Split and
pipeline parallelism; bad combinations as InputErrors naming the field."""

from __future__ import annotations

import json
import math

import pytest

from infralab.config_io import validate
from infralab.errors import InputError
from infralab.sim import api
from infralab.sim.catalog_view import spec_figures
from infralab.sim.config import CostConfig, HardwareConfig, RooflineExtrasConfig
from infralab.sim.cost import CostModel, StepWork, pipeline_bubble_fraction, stage_layers
from infralab.sim.cost.collectives import collective_s
from infralab.sim.specs import load_accelerator, load_encoder, load_link, load_model
from infralab.work_formulas import replay_ssm_cycle_bytes, replay_ssm_cycle_flops

KIMI = load_model("kimi-linear-48b-a3b")
LLAMA8 = load_model("llama-3-8b")
H100 = load_accelerator("H100")
H200 = load_accelerator("H200")
ASCEND = load_accelerator("ascend-910b")
NVLINK = load_link("nvlink4")
HCCS = load_link("hccs")


def cost(model=KIMI, accel=H200, tp: int = 1, cfg: CostConfig = CostConfig(), link=NVLINK, **knobs) -> CostModel:
    hardware = HardwareConfig(accelerator=accel.name, tp=tp, **knobs)
    needs_link = tp > 1 or knobs.get("pp")
    return CostModel(model, accel, cfg, tp=tp, tp_link=link if needs_link else None, hardware=hardware)


# ---- hardware and model -------------------------------------------------------------------------


def test_the_accelerator_class_has_less_memory_and_bandwidth_than_an_h100():
    assert ASCEND.hbm_capacity < H100.hbm_capacity and ASCEND.hbm_bandwidth < H100.hbm_bandwidth
    assert ASCEND.peak("int8") == 2 * ASCEND.peak("bf16")
    with pytest.raises(InputError, match="fp8e4m3"):
        ASCEND.peak("fp8e4m3")  # no FP8 on this class: W8A8 runs in INT8
    assert HCCS.bandwidth < NVLINK.bandwidth


def test_the_hybrid_model_has_a_1m_token_window():
    assert KIMI.context_length == 2**20
    assert (KIMI.num_full_attention_layers, KIMI.num_linear_attention_layers) == (7, 20)


def test_vision_encoder_by_hand():
    vit = load_encoder("clip-vit-l-14-336")
    assert vit.patches_per_image == (336 // 14) ** 2 == 576 == vit.tokens_per_image
    h, f = 1024, 4096
    params = 3 * 14 * 14 * h + 24 * (4 * h * h + 2 * h * f + 4 * h) + h * 2304 + 2304 * 2304
    assert vit.num_params == params
    assert vit.flops_per_image() == 2.0 * params * 576 + 4.0 * 24 * 576 * 576 * h


# ---- TP per layer class ---------------------------------------------------------------------------


def test_tp_t_for_linear_attention_divides_per_rank_state_by_t():
    replicated = cost(tp=4, linear_tp=1)
    split = cost(tp=4, linear_tp=4)
    assert replicated.linear_state_bytes_per_rank() == 4 * split.linear_state_bytes_per_rank()
    d = KIMI.linear_head_dim
    per_rank = 20 * (32 // 4 * d * d * 4 + 3 * (32 // 4) * d * 3 * 2)  # state (FP32) + conv windows (bf16)
    assert split.linear_state_bytes_per_rank() == per_rank
    # the default (linear_tp = tp) is the split
    assert cost(tp=4).linear_state_bytes_per_rank() == per_rank


def test_linear_tp_adds_its_all_reduce_and_lm_head_tp_its_gather():
    work = StepWork.decode(8, 8 * 1000)
    one = cost(tp=4, linear_tp=1).step(work).by_op
    four = cost(tp=4, linear_tp=4).step(work).by_op
    payload = 8 * KIMI.hidden_size * 2
    all_reduce = cost(tp=4).all_reduce_s(payload)  # over the 4 ranks
    assert four["tp_collectives"] - one["tp_collectives"] == pytest.approx(20 * all_reduce)
    assert four["linear_attention"] < one["linear_attention"]
    gathered = cost(tp=4, lm_head_tp=4).step(work).by_op
    local = cost(tp=4, lm_head_tp=1).step(work).by_op
    logits = 8 * KIMI.vocab_size * 4
    gather = collective_s(NVLINK, "all_gather", 4, logits)  # one all-gather of the FP32 logit shards
    assert gather > 0
    assert gathered["tp_collectives"] - local["tp_collectives"] == pytest.approx(gather)
    assert local["lm_head"] > gathered["lm_head"]


def test_expert_parallelism_adds_two_all_to_alls_per_moe_layer():
    tokens = 64
    by_op = cost(tp=4, moe_ep=4).step(StepWork.prefill(tokens)).by_op
    buffer = tokens / 4 * 8 * KIMI.hidden_size * 2  # each rank's routed copies (k = 8), bf16
    curve = NVLINK.all_gather["8"]  # all-to-all rides the ring collectives' curve (nearest world size)
    one_way = curve.floor_s + 3 / 4 * buffer / curve.bus_bandwidth
    assert one_way == collective_s(NVLINK, "alltoall", 4, buffer)
    assert by_op["ep_all_to_all"] == pytest.approx(26 * 2 * one_way)
    assert "ep_all_to_all" not in cost(tp=4).step(StepWork.prefill(tokens)).by_op


# ---- ReplaySSM ------------------------------------------------------------------------------------


def test_replay_ssm_state_is_a_checkpoint_plus_a_ring():
    ring = 8
    plain = cost(tp=1)
    replay = cost(tp=1, cfg=CostConfig(replay_ssm_ring=ring))
    d, conv = 128, 3 * 32 * 128 * 3 * 2
    assert plain.linear_state_bytes_per_rank() == 20 * (32 * d * d * 4 + conv)
    assert replay.linear_state_bytes_per_rank() == 20 * (32 * (d * d + ring * (2 * d + d)) * 4 + conv)


def test_replay_ssm_decode_uses_the_kernels_work_per_step():
    ring, seqs = 8, 16
    replay = cost(tp=1, cfg=CostConfig(replay_ssm_ring=ring))
    flops = replay_ssm_cycle_flops(seqs, 32, 128, 128, ring) / ring
    nbytes = replay_ssm_cycle_bytes(seqs, 32, 128, 128, ring) / ring + seqs * 2.0 * 3 * 32 * 128 * 3 * 2
    layer = max(flops / (H200.peak("fp32") * 0.5), nbytes / (H200.hbm_bandwidth * 0.8))
    assert replay.step(StepWork.decode(seqs, seqs * 100)).by_op["linear_attention"] == pytest.approx(20 * layer)
    # it writes the K x V state once per ring instead of every step: less traffic than plain decode
    plain_bytes = 2.0 * 32 * 128 * 128 * 4 * seqs
    assert replay_ssm_cycle_bytes(seqs, 32, 128, 128, ring) / ring < plain_bytes


# ---- W8A8 -----------------------------------------------------------------------------------------


def test_w8a8_halves_the_weight_bytes_of_the_linear_layers_and_frees_them_for_kv():
    bf16 = cost(model=LLAMA8, accel=H100)
    w8a8 = cost(model=LLAMA8, accel=H100, cfg=CostConfig(dtype="int8"))
    counts = LLAMA8.param_counts()
    quantised = counts["attention"] + counts["dense_mlp"]
    freed = bf16.weight_bytes() - w8a8.weight_bytes()
    assert freed == quantised  # 2 bytes -> 1 byte per quantised weight: the halved part
    a = bf16.memory_plan(0.9, 256, 8192)
    b = w8a8.memory_plan(0.9, 256, 8192)
    # free KV memory = utilisation x HBM x tp - weights - state - activations: grows by the freed bytes
    assert b.kv_bytes - a.kv_bytes == pytest.approx(freed, abs=1e-3)
    assert b.kv_tokens == int(b.kv_bytes // b.kv_bytes_per_token)
    assert b.kv_tokens - a.kv_tokens == pytest.approx(freed / a.kv_bytes_per_token, abs=1)


def test_w8a8_gemms_run_at_the_int8_rate():
    tokens = 8192  # compute-bound
    bf16 = cost(model=LLAMA8, accel=ASCEND).step(StepWork.prefill(tokens)).by_op["dense_gemm"]
    w8a8 = cost(model=LLAMA8, accel=ASCEND, cfg=CostConfig(dtype="int8")).step(StepWork.prefill(tokens)).by_op
    assert w8a8["dense_gemm"] == pytest.approx(bf16 / 2, rel=0.02)


@pytest.mark.parametrize("model", [KIMI, LLAMA8], ids=["mla+kda", "gqa"])
def test_w8a8_changes_gemm_time_and_weight_bytes_only(model):
    """W8A8 quantises GEMM weights and activations: attention (prefill, decode, MLA's absorbed
    form), KDA's recurrences and every other term keep their time; only the GEMMs and the LM head's
    neighbours move, and the weights shrink."""
    bf16 = cost(model=model, accel=ASCEND, tp=4, link=HCCS)
    w8a8 = cost(model=model, accel=ASCEND, tp=4, link=HCCS, cfg=CostConfig(dtype="int8"))
    for work in (StepWork.prefill(8192), StepWork.decode(64, 64 * 4096), StepWork.prefill(512) + StepWork.decode(8, 8 * 100_000)):
        a, b = bf16.step(work).by_op, w8a8.step(work).by_op
        for op in ("attention", "linear_attention", "tp_collectives", "small_ops", "sampler", "lm_head"):
            assert b[op] == a[op], op
        assert b["dense_gemm"] < a["dense_gemm"]
    assert w8a8.weight_bytes() < bf16.weight_bytes()
    assert w8a8.kv_bytes_per_token() == bf16.kv_bytes_per_token()


def test_fp8_attention_is_its_own_knob():
    work = StepWork.prefill(16384)  # attention compute-bound
    plain = cost(model=LLAMA8, accel=H100, cfg=CostConfig(dtype="fp8e4m3")).step(work).by_op["attention"]
    fp8 = cost(model=LLAMA8, accel=H100, cfg=CostConfig(dtype="fp8e4m3", attention_dtype="fp8e4m3")).step(work).by_op
    assert fp8["attention"] == pytest.approx(plain / 2, rel=0.05)  # the FP8 tensor-core rate is twice BF16's


# ---- KV-cache quantisation per layer group ---------------------------------------------------------


MIXED = ("bf16", "bf16", "int8", "int8", "fp8e4m3", "fp8e4m3", "int8")


def test_kv_dtype_per_layer_sets_capacity_and_transfer_bytes():
    mixed = cost(cfg=CostConfig(kv_layer_dtypes=MIXED))
    latent = 512 + 64
    per_token = 2 * latent * 2 + 5 * (latent + 4)  # bf16 layers; 8-bit latent + one float32 scale
    assert mixed.kv_bytes_per_token() == per_token
    assert mixed.kv_transfer_bytes(1000) == 1000 * per_token + mixed.linear_state_bytes_per_seq()
    bf16 = cost()
    assert bf16.kv_bytes_per_token() == 7 * latent * 2
    plan_bf16, plan_mixed = bf16.memory_plan(0.9, 64, 8192), mixed.memory_plan(0.9, 64, 8192)
    assert plan_mixed.kv_bytes == plan_bf16.kv_bytes
    assert plan_mixed.kv_tokens == int(plan_mixed.kv_bytes // per_token) > plan_bf16.kv_tokens


def test_quantised_kv_reads_fewer_bytes_and_pays_for_dequantisation():
    seqs, context = 64, 64 * 50_000
    bf16 = cost()._decode_coeffs
    int8 = cost(cfg=CostConfig(kv_layer_dtypes=("int8",) * 7))._decode_coeffs
    latent = 576
    assert int8[1] == pytest.approx(7 * (latent + 4) / (H200.hbm_bandwidth * 0.8))
    assert int8[1] < bf16[1]
    assert int8[0] - bf16[0] == pytest.approx(7 * latent / (H200.peak("bf16") * 0.5))  # a multiply per element
    assert cost(cfg=CostConfig(kv_layer_dtypes=("int8",) * 7)).step(StepWork.decode(seqs, context)).device_s < \
        cost().step(StepWork.decode(seqs, context)).device_s


def test_kv_dtype_per_layer_errors_name_the_field():
    with pytest.raises(InputError, match="cost.kv_layer_dtypes"):
        cost(cfg=CostConfig(kv_layer_dtypes=("int8",) * 6))
    with pytest.raises(InputError, match="kv_layer_dtypes"):  # no KV kernel stores fp16
        validate(CostConfig, {"kv_layer_dtypes": ["fp16"] * 7}, "test")
    with pytest.raises(InputError, match="dtype"):
        validate(CostConfig, {"kv_dtype": "fp8"}, "test")  # one vocabulary: fp8e4m3


# ---- Layer Split ----------------------------------------------------------------------------------


def test_layer_split_multiplies_full_attention_kv_capacity_by_the_group_size():
    # Llama-3-8B at tp 16: each of the 8 KV heads is held by 2 ranks; split 2 ways, each rank owns
    # the KV of 16 of the 32 layers instead of all 32.
    plain = cost(model=LLAMA8, accel=H100, tp=16)
    split = cost(model=LLAMA8, accel=H100, tp=16, layer_split=2)
    assert plain.kv_bytes_per_token() == 2 * split.kv_bytes_per_token()
    a, b = plain.memory_plan(0.9, 256, 8192), split.memory_plan(0.9, 256, 8192)
    assert b.kv_bytes == a.kv_bytes and b.kv_tokens == int(b.kv_bytes // b.kv_bytes_per_token)
    # Kimi's 7 MLA layers over groups of 4: contiguous blocks 2 + 2 + 2 + 1; linear state unchanged
    kimi = cost(tp=4, layer_split=4)
    assert kimi.kv_bytes_per_token() == 4 * 2 * 576 * 2
    assert kimi.linear_state_bytes_per_seq() == cost(tp=4).linear_state_bytes_per_seq()


def test_layer_split_broadcasts_each_layers_kv_when_it_runs():
    seqs, context = 4, 4 * 10_000
    by_op = cost(tp=4, layer_split=4).step(StepWork.decode(seqs, context)).by_op
    per_layer = context * 576 * 2 / (NVLINK.bandwidth * 0.7) + math.ceil(math.log2(4)) * NVLINK.latency
    compute = sum(t for name, t in by_op.items() if name != "kv_broadcast")
    assert compute == pytest.approx(cost(tp=4).step(StepWork.decode(seqs, context)).device_s)
    # the first layer's broadcast is exposed; each later one hides behind an F-th of the compute
    expected = per_layer + 6 * max(0.0, per_layer - compute / 7)
    assert by_op["kv_broadcast"] == pytest.approx(expected)
    assert per_layer <= by_op["kv_broadcast"] < 7 * per_layer


def test_layer_split_errors_name_the_field():
    with pytest.raises(InputError, match="hardware.layer_split"):  # GQA at tp 2: no KV replicas to share
        cost(model=LLAMA8, accel=H100, tp=2, layer_split=2)
    with pytest.raises(InputError, match="hardware.layer_split"):
        cost(tp=4, layer_split=3)


# ---- pipeline parallelism ---------------------------------------------------------------------------


def test_bubble_fraction_of_a_two_stage_pipeline():
    for m in (1, 2, 4, 8):
        assert pipeline_bubble_fraction(2, m) == pytest.approx(1 / (m + 1))
    assert stage_layers(27, 2) == (14, 13) and stage_layers(27, 27) == (1,) * 27


def test_a_pipelined_step_is_m_plus_p_minus_1_slots_of_the_slowest_stage():
    p, m, tokens = 2, 4, 4096
    no_gaps = CostConfig(extras=RooflineExtrasConfig(eager_launch_s=0.0))  # the schedule alone
    piped = cost(model=LLAMA8, accel=H100, cfg=no_gaps, pp=p, pp_schedule="micro_batches", pp_micro_batches=m)
    flat = cost(model=LLAMA8, accel=H100, cfg=no_gaps)
    whole = StepWork.prefill_chunk(tokens)
    # a micro-batch is 1/m of every count (a prompt's chunk: its tokens and its mean share of the pairs)
    micro = flat.step(StepWork(1, tokens // m, math.ceil(whole.prefill_attn_pairs / m), tokens // m)).by_op
    layers = sum(t for name, t in micro.items() if name not in ("lm_head", "sampler"))
    transfer = tokens // m * LLAMA8.hidden_size * 2 / NVLINK.bandwidth + NVLINK.latency
    slot = layers * 16 / 32 + micro["lm_head"] + micro["sampler"] + transfer
    step = piped.step(whole)
    assert step.device_s == pytest.approx((m + p - 1) * slot)
    busy = m * slot  # each stage works m of the m + p - 1 slots
    assert 1 - busy / step.device_s == pytest.approx(piped.pipeline_bubble())
    # the instance has tp x pp devices: twice the memory budget
    assert piped.memory_plan(0.9, 16, 4096).budget_bytes == 2 * flat.memory_plan(0.9, 16, 4096).budget_bytes


def test_pp_errors_name_the_field():
    cost(pp=27)  # one layer per stage is fine (uneven stages allowed)
    with pytest.raises(InputError, match="hardware.pp"):
        cost(pp=28)
    with pytest.raises(InputError, match="hardware.pp_micro_batches"):
        cost(pp_micro_batches=4)
    with pytest.raises(InputError, match='hardware.pp_micro_batches.*pp_schedule = "micro_batches"'):
        cost(pp=2, pp_micro_batches=4)  # virtual engines (the default) keep whole batches in flight


def test_virtual_engines_pipeline_whole_batches_across_steps():
    """vLLM's pipeline parallelism: pp schedulers, each a whole batch through every stage per step
    (one batch's latency: p slots of the slowest stage plus the hand-overs), their batches in flight
    at once on different stages, each with 1/pp of the KV blocks. At the same load, two stages on
    2 GPUs serve about twice what one GPU's engine does with a step as long."""
    piped = cost(model=LLAMA8, accel=H100, pp=2)
    assert piped.virtual_engines == 2
    work = StepWork.decode(8, 8 * 1000)
    latency = piped.step(work).device_s
    assert latency == pytest.approx(cost(model=LLAMA8, accel=H100, pp=2, pp_schedule="micro_batches").step(work).device_s)
    doc = {
        "model": "llama-3-8b",
        "hardware": {"accelerator": "H100", "tp": 1, "pp": 2},
        "engine": {"max_num_seqs": 16, "max_batched_tokens": 2048, "prefix_cache": False},
        "workload": {"kind": "synthetic", "num_requests": 64, "arrival": {"kind": "poisson", "rate": 1e9},
                     "prompt": {"kind": "fixed", "value": 256}, "output": {"kind": "fixed", "value": 64}},
    }
    ve = api.run(doc)
    gpipe = api.run({**doc, "hardware": {**doc["hardware"], "pp_schedule": "micro_batches"}})
    assert set(ve.summary.instances) == {"instance/instance-0.ve0", "instance/instance-0.ve1"}
    assert ve.summary.requests.completed == gpipe.summary.requests.completed == 64
    # two batches in flight: about twice the throughput of one batch at a time (the same step times)
    ratio = ve.metrics["output_throughput"] / gpipe.metrics["output_throughput"]
    assert 1.6 < ratio < 2.1


# ---- defaults, bad combinations, the catalog and a run ------------------------------------------------


def test_default_knobs_leave_every_step_as_before():
    work = StepWork.prefill(3000) + StepWork.decode(32, 32 * 2000)
    before = CostModel(KIMI, H200, CostConfig(), tp=4, tp_link=NVLINK)
    after = cost(tp=4)
    assert after.step(work) == before.step(work)
    assert after.decode_step_s(32, 64_000) == before.decode_step_s(32, 64_000)


@pytest.mark.parametrize("knobs, field", [
    (dict(linear_tp=2, model=LLAMA8, accel=H100, tp=4), "hardware.linear_tp"),
    (dict(linear_tp=3, tp=4), "hardware.linear_tp"),
    (dict(lm_head_tp=3, tp=4), "hardware.lm_head_tp"),
    (dict(moe_ep=2, model=LLAMA8, accel=H100, tp=2), "hardware.moe_ep"),
    (dict(moe_ep=3, tp=4), "hardware.moe_ep"),
])
def test_bad_degrees_name_the_field(knobs, field):
    with pytest.raises(InputError, match=field):
        cost(**knobs)


def test_replay_and_w8a8_errors_name_the_field():
    with pytest.raises(InputError, match="cost.replay_ssm_ring"):
        cost(model=LLAMA8, accel=H100, cfg=CostConfig(replay_ssm_ring=8))
    with pytest.raises(InputError, match="fp8e4m3"):
        cost(accel=ASCEND, cfg=CostConfig(dtype="fp8e4m3"))


def test_catalog_shows_the_derived_figures_of_the_techniques():
    figures = spec_figures("kimi-linear-48b-a3b", accelerator="ascend-910b", tp=4, dtype="int8",
                           linear_tp=4, layer_split=4, replay_ssm_ring=8, max_num_seqs=64, max_batched_tokens=8192)
    glm = figures["kv_capacity"]["techniques"]
    assert glm["layer_split"] == 4 and glm["kv_bytes_per_token"] == 4 * 2 * 576 * 2
    assert glm["linear_state_bytes_per_rank"] == cost(tp=4, cfg=CostConfig(replay_ssm_ring=8)).linear_state_bytes_per_rank()
    assert spec_figures("clip-vit-l-14-336")["tokens_per_image"] == 576


def test_a_run_with_every_technique_on():
    doc = {
        "model": "kimi-linear-48b-a3b",
        "hardware": {"accelerator": "ascend-910b", "tp": 8, "tp_link": "hccs", "linear_tp": 8, "lm_head_tp": 8,
                     "moe_ep": 8, "layer_split": 8, "pp": 2, "pp_schedule": "micro_batches", "pp_micro_batches": 2},
        "cost": {"dtype": "int8", "kv_layer_dtypes": list(MIXED), "replay_ssm_ring": 8},
        "engine": {"max_num_seqs": 32, "max_batched_tokens": 4096},
        "workload": {"kind": "synthetic", "num_requests": 12, "arrival": {"kind": "poisson", "rate": 4.0},
                     "prompt": {"kind": "fixed", "value": 2000}, "output": {"kind": "fixed", "value": 16}},
    }
    result = api.run(doc)
    assert result.summary.requests.completed == 12
    assert "layer_split = 8" in result.resolved_config
    # the same run without the knobs is a different deployment: the knobs reach the engine
    plain = api.run({**doc, "hardware": {"accelerator": "ascend-910b", "tp": 8, "tp_link": "hccs"},
                     "cost": {"dtype": "int8"}})
    assert plain.summary.latency != result.summary.latency


def test_w8a8_error_is_read_from_a_kernels_check_report(tmp_path):
    row = {"data": "normal", "m": 64, "n": 64, "k": 64, "kernel_vs_ref_bitwise": True,
           "max_rel_vs_exact": 1e-7, "rel_bound": 3 * 2.0**-24, "rel_fro_vs_fp32": 0.0123}
    report = tmp_path / "check.json"
    report.write_text(json.dumps({"device": "cpu", "summaries": {"w8a8": [row]}}))
    figures = spec_figures("llama-3-8b", dtype="int8", w8a8_check=report)
    assert figures["w8a8_numerics"]["normal"]["rel_fro_vs_fp32"] == 0.0123
    assert figures["weight_bytes"] < spec_figures("llama-3-8b")["weight_bytes"]
    report.write_text("{}")
    with pytest.raises(InputError, match="kernels check"):
        spec_figures("llama-3-8b", dtype="int8", w8a8_check=report)


def test_the_config_names_the_kernels_kv_formats():
    from typing import get_args, get_type_hints

    from infralab.work_formulas import KV_CACHE_DTYPES

    hint = get_type_hints(CostConfig)["kv_layer_dtypes"]
    literal = get_args(get_args(hint)[0])[0]  # tuple[Literal[...], ...] | None
    assert set(get_args(literal)) == set(KV_CACHE_DTYPES)


# ---- attention data parallelism -------------------------------------------------------------------

QWEN3 = load_model("qwen3-235b-a22b")


def test_attention_dp_is_one_rank_on_its_share_plus_the_experts_over_every_rank():
    """Each rank runs the attention, projections and norms of its share of the sequences on whole
    heads (a one-rank model's operators); the routed experts are the EP model's; no all-reduce,
    an all-to-all instead."""
    cfg = CostConfig(dtype="fp8e4m3", kv_dtype="fp8e4m3")
    dp = cost(QWEN3, H200, tp=8, cfg=cfg, attention_dp=True, moe_ep=8)
    one_rank = cost(QWEN3, H200, tp=1, cfg=cfg)
    ep = cost(QWEN3, H200, tp=8, cfg=cfg, moe_ep=8)
    work = StepWork.prefill(1000) + StepWork.decode(1000, 1000 * 1500)
    by_op = dp.step(work).by_op
    share = work.rank_share(8)
    assert (share.decode_seqs, share.prefill_seqs) == (125, 1)  # the busiest rank holds the one prompt
    mine = one_rank.step(share).by_op
    for op in ("dense_gemm", "attention", "lm_head", "small_ops", "sampler"):
        assert by_op[op] == mine[op], op
    assert by_op["moe_experts"] == ep.step(work).by_op["moe_experts"]
    assert by_op["ep_all_to_all"] == ep.step(work).by_op["ep_all_to_all"] > 0
    assert by_op["tp_collectives"] == 0.0


def test_attention_dp_keeps_one_copy_of_each_tokens_kv_and_every_rank_the_non_expert_weights():
    cfg = CostConfig(dtype="fp8e4m3", kv_dtype="fp8e4m3")
    tp = cost(QWEN3, H200, tp=8, cfg=cfg)
    dp = cost(QWEN3, H200, tp=8, cfg=cfg, attention_dp=True, moe_ep=8)
    # 4 KV heads on 8 ranks: TP holds each head twice; DP once, whole, on the sequence's rank
    assert tp.kv_bytes_per_token() == 2 * dp.kv_bytes_per_token() == 2 * QWEN3.kv_bytes_per_token("fp8e4m3")
    routed = QWEN3.param_counts()["moe_routed"]  # one byte each in FP8
    assert dp.weight_bytes() - tp.weight_bytes() == 7 * (tp.weight_bytes() - routed)


def test_a_step_share_over_one_rank_is_the_step_and_over_many_covers_it():
    work = StepWork.prefill_chunk(512, 100) + StepWork.prefill(300) + StepWork.decode(13, 13 * 700)
    assert work.rank_share(1) == work
    for ranks in (2, 3, 8, 64):
        share = work.rank_share(ranks)
        assert share.decode_seqs * ranks >= work.decode_seqs and share.prefill_seqs * ranks >= work.prefill_seqs
        assert share.prefill_tokens * ranks >= work.prefill_tokens and share.tokens <= work.tokens
        assert share.decode_context_tokens * ranks >= work.decode_context_tokens
        assert share.output_tokens <= work.output_tokens


@pytest.mark.parametrize("knobs, field", [
    (dict(model=QWEN3, tp=8, attention_dp=True), "hardware.moe_ep"),
    (dict(model=QWEN3, tp=8, attention_dp=True, moe_ep=4), "hardware.moe_ep"),
    (dict(model=LLAMA8, accel=H100, tp=2, attention_dp=True), "hardware.attention_dp"),
    (dict(model=QWEN3, tp=1, attention_dp=True), "hardware.attention_dp"),
    (dict(model=QWEN3, tp=8, attention_dp=True, moe_ep=8, lm_head_tp=4), "hardware.lm_head_tp"),
])
def test_attention_dp_errors_name_the_field(knobs, field):
    with pytest.raises(InputError, match=field):
        cost(**knobs)


@pytest.mark.parametrize("dtypes", [None, MIXED])
def test_layer_split_broadcast_is_the_per_layer_sum_in_layer_order(dtypes):
    """kv_broadcast_s sums runs of equal layers at once; the definition adds one term per layer."""
    c = cost(tp=8, layer_split=8, cfg=CostConfig(kv_layer_dtypes=dtypes))
    g, link = c._g, NVLINK
    rate = link.bandwidth * g.cfg.efficiency.collective
    hops = math.ceil(math.log2(g.layer_split))
    for tokens, compute in ((1, 0.0), (4096, 1e-3), (123_457, 2e-2), (10**6, 0.5)):
        per_layer = [tokens * nbytes / rate + hops * link.latency for nbytes in g.kv_layer_bytes]
        hidden = compute / g.full_layers
        assert c._collectives.kv_broadcast_s(tokens, compute) == per_layer[0] + sum(
            max(0.0, b - hidden) for b in per_layer[1:])
