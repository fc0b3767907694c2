"""The roofline cost model against hand-worked figures and invariants."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.errors import InputError
from infralab.sim.config import (DEFAULT_MEMORY_EFFICIENCY, CostConfig, EfficiencyConfig, HostOverheadConfig,
                                 RooflineExtrasConfig)
from infralab.sim.cost import OPS, CostModel, StepWork, decode_run_ends_stepwise
from infralab.sim.cost.geometry import memory_efficiency
from infralab.sim.specs import LinkSpec, load_accelerator, load_link, load_model

H100 = load_accelerator("H100")
H200 = load_accelerator("H200")
NVLINK = load_link("nvlink4")
LLAMA8 = load_model("llama-3-8b")
LLAMA70 = load_model("llama-3-70b")
MIXTRAL = load_model("mixtral-8x7b")
KIMI = load_model("kimi-linear-48b-a3b")
# The hand-worked figures below are the plain roofline's: the extras (launch floors, small
# operators, sampler, decode-attention floor) are off here and have their own tests.
PLAIN = RooflineExtrasConfig(kernel_launch_s=0.0, small_ops=False, decode_attention_floor_s=0.0, sampler=False,
                             ridge_sharpness=None, eager_launch_s=0.0, graph_launch_s=0.0)  # the plain roofline
CFG = CostConfig(extras=PLAIN)


def cost(model=LLAMA8, accel=H100, cfg=CFG, tp=1) -> CostModel:
    return CostModel(model, accel, cfg, tp=tp, tp_link=NVLINK if tp > 1 else None)


def test_step_work_prefill_counts_causal_pairs():
    w = StepWork.prefill(4, cached=10)
    assert (w.prefill_seqs, w.prefill_tokens, w.prefill_context_tokens, w.output_tokens) == (1, 4, 14, 1)
    assert w.prefill_attn_pairs == 4 * 10 + 4 * 5 // 2  # 40 + (1+2+3+4)
    both = w + StepWork.decode(3, 300)
    assert (both.tokens, both.output_tokens, both.decode_context_tokens) == (7, 4, 300)
    assert StepWork.prefill_chunk(8, 0, finishes=False).output_tokens == 0


def test_by_op_names_and_sum():
    c = cost(KIMI, H200, cfg=CostConfig(), tp=2).step(StepWork.prefill(300, 50) + StepWork.decode(5, 5000))
    assert set(c.by_op) == {*OPS, "launch_gaps"}  # a step with prefill runs eagerly: launch gaps (extras.eager_launch_s)
    assert c.device_s == pytest.approx(sum(c.by_op.values()))
    assert all(v > 0 for v in c.by_op.values())  # every operator is exercised by this model


def test_single_decode_is_weight_read_bound():
    """One decode token reads every weight but the embedding table (a gather) once."""
    c = cost().step(StepWork.decode(1, 1))
    read = LLAMA8.weight_bytes("bf16") - 2 * LLAMA8.param_counts()["embedding"]
    expected = read / (H100.hbm_bandwidth * memory_efficiency(CFG, H100))
    assert expected == pytest.approx(5.21e-3, rel=0.01)  # 15.0 GB at 0.86 x 3.35 TB/s (H100's own efficiency)
    assert c.device_s == pytest.approx(expected, rel=0.005)  # KV, activations: the rest


@pytest.mark.parametrize("model", [LLAMA8, MIXTRAL, KIMI], ids=lambda m: m.name)
def test_single_decode_reads_each_active_weight_once(model):
    """Cross-checks the operator list against the parameter count: one token reads exactly the
    active weights (routed experts: its top-k only), plus its KDA state in and out."""
    c = cost(model, H200).step(StepWork.decode(1, 1))
    read = 2 * model.active_params_per_token + 2 * model.linear_state_bytes_per_seq()
    assert c.device_s == pytest.approx(read / (4.8e12 * 0.8), rel=0.005)


def test_doubling_prefill_in_compute_bound_regime_doubles_time():
    model = cost()
    one = model.step(StepWork.prefill(2048) + StepWork.prefill(2048))
    two = model.step(sum([StepWork.prefill(2048)] * 4, StepWork()))
    assert two.by_op["dense_gemm"] == pytest.approx(2 * one.by_op["dense_gemm"], rel=1e-9)
    assert two.by_op["attention"] == pytest.approx(2 * one.by_op["attention"], rel=1e-9)
    assert 1.95 < two.device_s / one.device_s < 2.0


def test_dense_gemm_compute_time_by_hand():
    """8192 prefill tokens: 2 x 7.5e9 non-embedding weights x tokens at 70 % of 989.5 TFLOP/s."""
    c = cost().step(StepWork.prefill_chunk(8192))
    counts = LLAMA8.param_counts()
    gemm_params = counts["attention"] + counts["dense_mlp"]
    assert c.by_op["dense_gemm"] == pytest.approx(2 * gemm_params * 8192 / (989.5e12 * 0.7), rel=1e-9)


def test_tp_halves_gemm_time_and_adds_collectives():
    work = StepWork.prefill(4096)
    one, two = cost(tp=1).step(work), cost(tp=2).step(work)
    assert two.by_op["dense_gemm"] == pytest.approx(one.by_op["dense_gemm"] / 2, rel=1e-9)
    assert one.by_op["tp_collectives"] == 0
    payload = 4096 * 4096 * 2  # tokens x hidden x bf16: 32 MiB, above the custom all-reduce's 8 MiB
    # nvlink4 carries measured NCCL curves per number of GPUs (floor + bus bandwidth)
    curve = NVLINK.all_reduce["2"]
    all_reduce = curve.floor_s + 2 * (1 / 2) * payload / curve.bus_bandwidth
    ag = NVLINK.all_gather["8"]  # the nearest world size the link's all-gather table has
    gather = ag.floor_s + (1 / 2) * 1 * 128256 * 4 / ag.bus_bandwidth  # one row of FP32 logits
    assert two.by_op["tp_collectives"] == pytest.approx(2 * 32 * all_reduce + gather, rel=1e-9)


def test_decode_all_reduces_take_the_engines_custom_kernel_below_its_size_limit():
    """A decode step's all-reduce (batch x hidden x 2 bytes) is small: vLLM runs its own one-stage
    kernel on it, not NCCL; `cost.allreduce = "nccl"` (--disable-custom-all-reduce) gives NCCL's."""
    work = StepWork.decode(8, 8 * 1000)
    payload = 8 * LLAMA70.hidden_size * 2
    custom = CostModel(LLAMA70, H100, CFG, tp=4, tp_link=NVLINK).step(work).by_op["tp_collectives"]
    nccl_cfg = CostConfig(extras=CFG.extras, allreduce="nccl")
    nccl = CostModel(LLAMA70, H100, nccl_cfg, tp=4, tp_link=NVLINK).step(work).by_op["tp_collectives"]
    spec, curve = NVLINK.custom_all_reduce, NVLINK.all_reduce["4"]
    gather = 0.0  # the LM head is not vocabulary-parallel beyond tp here: its gather is in both
    one_stage = spec.stage_floor_s + 3 * payload / (NVLINK.bandwidth * CFG.efficiency.collective)
    nccl_one = curve.floor_s + 2 * (3 / 4) * payload / curve.bus_bandwidth
    assert custom - nccl == pytest.approx(2 * 80 * (one_stage - nccl_one) + gather, rel=1e-9)
    assert custom < 0.5 * nccl


def test_collective_rules():
    """vLLM's stage rule, the nearest world size's curve, and the ring collectives' bytes."""
    from infralab.sim.cost.collectives import collective_s, curve_for, custom_stages

    assert custom_stages(2, 7 * 2**20) == (1, 7 * 2**20)  # two GPUs: always one stage
    assert custom_stages(4, 256 * 1024)[0] == 1 and custom_stages(4, 512 * 1024)[0] == 2
    assert custom_stages(8, 255 * 1024)[0] == 1 and custom_stages(8, 256 * 1024) == (2, 2 * 7 / 8 * 256 * 1024)
    table = NVLINK.all_reduce
    assert curve_for(table, 8) is table["8"] and curve_for(table, 16) is table["8"] and curve_for(table, 3) is table["4"]
    assert curve_for(None, 8) is None
    big = 64 * 2**20  # above the custom kernel's limit: NCCL whatever the knob
    assert collective_s(NVLINK, "all_reduce", 8, big, 0.7, "custom") == collective_s(NVLINK, "all_reduce", 8, big, 0.7, "nccl")
    ag = NVLINK.all_gather["8"]
    assert collective_s(NVLINK, "all_gather", 8, big) == pytest.approx(ag.floor_s + 7 / 8 * big / ag.bus_bandwidth)
    assert collective_s(NVLINK, "reduce_scatter", 8, big) == collective_s(NVLINK, "all_gather", 8, big)
    assert collective_s(NVLINK, "all_reduce", 1, big) == 0.0


def test_a_link_without_a_measured_curve_uses_its_nominal_bandwidth_and_latency():
    link = LinkSpec(name="plain", bandwidth=400e9, latency=2e-6)
    c = CostModel(LLAMA8, H100, CFG, tp=4, tp_link=link).step(StepWork.prefill(1000))
    payload = 1000 * 4096 * 2
    all_reduce = 2 * (3 / 4) * payload / (400e9 * 0.7) + 2 * 3 * 2e-6
    gather = (3 / 4) * 128256 * 4 / (400e9 * 0.7) + 3 * 2e-6
    assert c.by_op["tp_collectives"] == pytest.approx(2 * 32 * all_reduce + gather, rel=1e-9)


def test_host_overheads_add_to_device_time():
    host = HostOverheadConfig(per_step_s=1e-3, per_request_s=1e-4, per_output_token_s=1e-5)
    model = cost(cfg=CostConfig(extras=PLAIN, host=host))
    work = StepWork.prefill_chunk(100, 0, finishes=True) + StepWork.decode(7, 700)
    c = model.step(work)
    assert c.host_s == pytest.approx(1e-3 + 1e-4 * 8 + 1e-5 * 8)
    assert c.total_s == pytest.approx(c.device_s + c.host_s)


def test_empty_step_costs_only_the_per_step_overhead():
    c = cost(cfg=CostConfig(extras=PLAIN, host=HostOverheadConfig(per_step_s=2e-3))).step(StepWork())
    assert c.device_s == 0 and c.total_s == pytest.approx(2e-3)


def test_efficiency_scales_compute_bound_time():
    work = StepWork.prefill_chunk(8192)
    fast = cost(cfg=CostConfig(extras=PLAIN, efficiency=EfficiencyConfig(gemm=0.8))).step(work)
    slow = cost(cfg=CostConfig(extras=PLAIN, efficiency=EfficiencyConfig(gemm=0.4))).step(work)
    assert slow.by_op["dense_gemm"] == pytest.approx(2 * fast.by_op["dense_gemm"])


def test_decode_attention_reads_the_kv_cache():
    """Large-context decode attention is memory-bound: KV bytes / (bw x eff)."""
    c = cost().step(StepWork.decode(8, 8 * 100_000))
    kv = 8 * 100_000 * LLAMA8.kv_bytes_per_token("bf16")
    assert c.by_op["attention"] == pytest.approx(kv / (3.35e12 * H100.memory_efficiency), rel=0.01)


def test_kda_decode_reads_and_writes_the_state():
    c = cost(KIMI, H200).step(StepWork.decode(16, 16 * 1000))
    state = 16 * 2 * KIMI.linear_state_bytes_per_seq()  # read and write
    assert c.by_op["linear_attention"] == pytest.approx(state / (4.8e12 * 0.8), rel=0.02)
    # no dependence on context length: the state is fixed-size
    longer = cost(KIMI, H200).step(StepWork.decode(16, 16 * 100_000))
    assert longer.by_op["linear_attention"] == c.by_op["linear_attention"]


def test_moe_expected_experts_touched():
    model = cost(MIXTRAL, H200, tp=2)
    assert model.expected_experts_touched(1) == pytest.approx(2)
    assert model.expected_experts_touched(2) == pytest.approx(8 * (1 - 0.75**2))
    assert model.expected_experts_touched(10_000) == pytest.approx(8)


def test_moe_single_token_reads_its_experts_only():
    model = cost(MIXTRAL, H200, tp=2)
    c = model.step(StepWork.decode(1, 100))
    per_rank = 32 * 2 * 3 * 4096 * (14336 // 2) * 2  # layers x top-2 x expert bytes / tp
    assert c.by_op["moe_experts"] == pytest.approx(per_rank / (4.8e12 * 0.8), rel=0.01)


GIB = 2**30


def test_kv_capacity_by_hand():
    """Memory as vLLM sizes it: reported memory x utilisation - weights - non-torch - activations."""
    budget = 0.9 * 79.22 * GIB  # H100's reported memory (not the datasheet's 80 GB)
    tokens = cost().kv_capacity_tokens(0.9)
    assert tokens == int((budget - LLAMA8.weight_bytes("bf16") - 0.35 * GIB) // 131072)
    with pytest.raises(InputError) as info:
        cost(load_model("llama-3-70b")).kv_capacity_tokens(0.9)
    assert "do not fit" in str(info.value) and "tp" in str(info.value)
    assert cost(load_model("llama-3-70b"), tp=2).kv_capacity_tokens(0.9) > 0


def test_memory_plan_worked_example_llama3_8b_on_h100():
    """Llama-3-8B, one H100, utilisation 0.9, 256 seqs, 8192 batched tokens, by hand:
    budget 0.9 x 79.22 GiB = 71.298 GiB; weights 16,060,522,496 B = 14.957 GiB; non-torch 0.35 GiB;
    activations 8192 x (3 x 14336 + 4 x 4096) x 2 B + 256 x 128256 x 4 B x 2 = 1.150 GiB;
    KV 54.84 GiB at 128 KiB per token = 449,2xx tokens. vLLM logs 54.62-54.93 GiB for this case."""
    plan = cost().memory_plan(0.9, max_num_seqs=256, max_batched_tokens=8192)
    activation = 8192 * (3 * 14336 + 4 * 4096) * 2 + 256 * 128256 * 4 * 2
    assert plan.activation_peak_bytes == activation
    assert activation / GIB == pytest.approx(1.150, abs=1e-3)
    kv = 0.9 * 79.22 * GIB - 16_060_522_496 - 0.35 * GIB - activation
    assert plan.kv_bytes == pytest.approx(kv)
    assert kv / GIB == pytest.approx(54.84, abs=0.01)
    assert plan.kv_tokens == int(kv // 131072) and plan.kv_blocks(16) == plan.kv_tokens // 16
    assert 54.62 <= plan.kv_bytes / GIB <= 54.93 + 0.02  # within vLLM's logged range (+ rounding)


def test_tensor_parallel_adds_nccl_memory_per_gpu():
    one, two = cost(tp=1).memory_plan(0.9), cost(tp=2).memory_plan(0.9)
    assert one.non_torch_bytes == pytest.approx(0.35 * GIB)
    assert two.non_torch_bytes == pytest.approx(2 * (0.35 + 1.79) * GIB)


def test_kv_capacity_sets_aside_a_linear_state_slot_per_running_sequence():
    model = cost(KIMI, H200)
    free = 0.9 * H200.usable_memory - KIMI.weight_bytes("bf16") - 0.35 * GIB
    assert model.kv_capacity_tokens(0.9) == int(free // 8064)
    assert model.kv_capacity_tokens(0.9, max_num_seqs=256) == int(
        (free - 256 * 43_417_600 - model.activation_peak_bytes(256, 0)) // 8064
    )
    assert cost().kv_capacity_tokens(0.9, max_num_seqs=256) == int(
        (0.9 * 79.22 * GIB - LLAMA8.weight_bytes("bf16") - 0.35 * GIB - 256 * 128256 * 8) // 131072
    )  # no linear layers: only the sampler's logits
    with pytest.raises(InputError, match="linear-state slots"):
        model.kv_capacity_tokens(0.9, max_num_seqs=10_000)


def test_kv_bytes_per_instance_count_replicas():
    assert cost(tp=8).kv_bytes_per_token() == 131072  # 8 KV heads over 8 ranks: no replica
    assert cost(tp=16).kv_bytes_per_token() == 2 * 131072  # each of 16 ranks keeps one KV head
    assert cost(KIMI, H200, tp=2).kv_bytes_per_token() == 2 * 8064  # MLA latent on both ranks


def test_kv_transfer_bytes_include_linear_state():
    model = cost(KIMI, H200)
    assert model.kv_transfer_bytes(1000) == 1000 * 8064 + 43_417_600
    assert model.linear_state_bytes_per_seq() == 43_417_600
    assert cost().kv_transfer_bytes(10) == 10 * 131072


def test_bad_parallelism_and_dtype():
    with pytest.raises(InputError, match="tp"):
        cost(tp=3)
    with pytest.raises(InputError, match="tp_link"):
        CostModel(LLAMA8, H100, CFG, tp=2)
    with pytest.raises(InputError, match="fp8"):
        CostModel(LLAMA8, load_accelerator("A100"), CostConfig(dtype="fp8e4m3"))


def test_step_is_deterministic_with_caches():
    model = cost(KIMI, H200)
    work = StepWork.prefill(512) + StepWork.decode(3, 3000)
    assert model.step(work) == model.step(work) == cost(KIMI, H200).step(work)


works = st.builds(
    lambda new, cached, seqs, ctx: StepWork.prefill_chunk(new, cached) + StepWork.decode(seqs, seqs * ctx),
    st.integers(0, 4096),
    st.integers(0, 8192),
    st.integers(0, 64),
    st.integers(1, 20_000),
)


@settings(max_examples=60, deadline=None)
@given(base=works, extra=works, model=st.sampled_from([LLAMA8, MIXTRAL, KIMI]), tp=st.sampled_from([1, 2]))
def test_more_work_never_takes_less_time(base, extra, model, tp):
    cm = cost(model, H200, tp=tp)
    before, after = cm.step(base), cm.step(base + extra)
    for op in OPS:
        assert after.by_op[op] >= before.by_op[op] - 1e-15, op
    assert after.total_s >= before.total_s


@settings(max_examples=40, deadline=None)
@given(seqs=st.integers(1, 128), ctx=st.integers(1, 50_000), more=st.integers(1, 50_000))
def test_decode_time_grows_with_context(seqs, ctx, more):
    cm = cost()
    assert cm.step(StepWork.decode(seqs, seqs * (ctx + more))).device_s >= cm.step(
        StepWork.decode(seqs, seqs * ctx)
    ).device_s


HOSTED = CostConfig(host=HostOverheadConfig(per_step_s=9e-4, per_request_s=2e-5, per_output_token_s=1e-6))


@settings(max_examples=60, deadline=None)
@given(
    seqs=st.integers(1, 256),
    ctx=st.integers(1, 100_000),
    model=st.sampled_from([LLAMA8, MIXTRAL, KIMI]),
    tp=st.sampled_from([1, 2]),
    warm=st.booleans(),
)
def test_decode_fast_path_is_bit_identical_to_step(seqs, ctx, model, tp, warm):
    cm = CostModel(model, H200, HOSTED, tp=tp, tp_link=NVLINK if tp > 1 else None)
    if warm:  # the fast path reads the per-size caches that step() fills; both states must agree
        cm.step(StepWork.decode(seqs, seqs))
    assert cm.decode_step_s(seqs, seqs * ctx) == cm.step(StepWork.decode(seqs, seqs * ctx)).total_s


def test_near_the_ridge_a_gemm_reaches_neither_peak():
    """ridge_sharpness p blends compute and memory time: p = 1 is their sum, none their max; far
    from the ridge (a decode batch of 1) the blend is the max to within a percent."""
    def gemm(tokens: int, p: float | None) -> float:
        extras = dataclasses.replace(PLAIN, ridge_sharpness=p)
        return CostModel(LLAMA8, H100, CostConfig(extras=extras)).gemm_call_s("mlp_down", tokens)

    ridge = round(989.5e12 * 0.7 / (3.35e12 * 0.8))  # tokens where compute = memory time (~258)
    plain, summed = gemm(ridge, None), gemm(ridge, 1.0)
    assert summed == pytest.approx(2 * plain, rel=0.05)
    assert plain < gemm(ridge, 1.25) < summed
    assert gemm(1, 1.25) == pytest.approx(gemm(1, None), rel=0.01)


def test_an_eager_step_pays_a_launch_gap_per_kernel_and_a_graphed_decode_its_own():
    extras = dataclasses.replace(RooflineExtrasConfig(), eager_launch_s=5e-6, graph_launch_s=1e-6)
    model = CostModel(LLAMA8, H100, CostConfig(extras=extras))
    prefill = model.step(StepWork.prefill(512))
    # 4 dense GEMM classes x 32 layers, 32 attention kernels, 2 fused add+norms + RoPE + SiLU-and-mul
    # per layer, the LM head and the sampler
    assert model.kernel_launches(StepWork.prefill(512)) == 4 * 32 + 32 + 4 * 32 + 2
    assert prefill.by_op["launch_gaps"] == pytest.approx(290 * 5e-6)
    decode = model.step(StepWork.decode(8, 8000))  # a CUDA graph's replay
    assert decode.by_op["launch_gaps"] == pytest.approx(290 * 1e-6)
    assert model.decode_step_s(8, 8000) == decode.total_s
    assert model.decode_run_ends(8, 8000, 0.0, 50, 1e9) == decode_run_ends_stepwise(model.decode_step_s, 8, 8000, 0.0, 50, 1e9)
    no_graph_gaps = CostModel(LLAMA8, H100, CostConfig(extras=dataclasses.replace(extras, graph_launch_s=0.0)))
    assert "launch_gaps" not in no_graph_gaps.step(StepWork.decode(8, 8000)).by_op


def test_the_fused_add_norm_reads_and_writes_both_tensors_in_one_kernel():
    """Fused: one kernel per add+norm moving 4 T x h elements (x and the residual in, both out);
    apart: a norm (2 T h) and an add (3 T h), two launches."""
    tokens, h, layers = 64, LLAMA8.hidden_size, LLAMA8.num_layers
    fused = CostModel(LLAMA8, H100, CostConfig())
    apart = CostModel(LLAMA8, H100, CostConfig(extras=dataclasses.replace(RooflineExtrasConfig(), fused_add_norm=False)))
    extras = RooflineExtrasConfig()
    launch = H100.kernel_launch_s  # the H100's own floor (its catalog file)
    norm = max(4 * tokens * h * 2 / (3.35e12 * extras.rms_norm_memory), launch)
    rest = fused.step(StepWork.prefill(tokens)).by_op["small_ops"] - 2 * layers * norm
    apart_norms = 2 * layers * (max(2 * tokens * h * 2 / (3.35e12 * extras.rms_norm_memory), launch)
                                + max(3 * tokens * h * 2 / (3.35e12 * extras.residual_add_memory), launch))
    assert apart.step(StepWork.prefill(tokens)).by_op["small_ops"] == pytest.approx(rest + apart_norms, rel=1e-9)
    assert apart.kernel_launches(StepWork.prefill(tokens)) - fused.kernel_launches(StepWork.prefill(tokens)) == 2 * layers


def test_8bit_gemms_have_their_own_efficiency():
    work = StepWork.prefill(8192)
    base = CostModel(LLAMA8, H100, CostConfig(dtype="fp8e4m3", extras=PLAIN)).step(work).by_op["dense_gemm"]
    eff = dataclasses.replace(CostConfig().efficiency, gemm_8bit=0.35)
    slow = CostModel(LLAMA8, H100, CostConfig(dtype="fp8e4m3", extras=PLAIN, efficiency=eff)).step(work).by_op
    assert slow["dense_gemm"] == pytest.approx(2 * base, rel=1e-9)


def test_memory_efficiency_is_the_accelerators_unless_the_config_sets_one():
    """Streaming rate per part (AcceleratorSpec.memory_efficiency, from its own profiles), a config's
    `efficiency.memory` over it, the default for a part that has none."""
    a100, l4 = load_accelerator("A100"), load_accelerator("L4")
    assert memory_efficiency(CFG, H100) == H100.memory_efficiency == 0.86
    assert memory_efficiency(CFG, a100) == a100.memory_efficiency == 0.76
    assert l4.memory_efficiency is None and memory_efficiency(CFG, l4) == DEFAULT_MEMORY_EFFICIENCY
    pinned = dataclasses.replace(CFG, efficiency=dataclasses.replace(CFG.efficiency, memory=0.5))
    assert memory_efficiency(pinned, H100) == 0.5
    one = CostModel(LLAMA8, H100, CFG).step(StepWork.decode(1, 1)).device_s
    half = CostModel(LLAMA8, H100, pinned).step(StepWork.decode(1, 1)).device_s
    assert half == pytest.approx(one * 0.86 / 0.5, rel=0.02)  # weight streaming dominates one decode token
