"""What every operator family of the cost model reads: one instance's parallel degrees, its rates
(peak and effective FLOP/s, bytes/s) and the per-rank shapes of its layers, built once from the
model, the accelerator, the cost config and the hardware config (`Geometry.of`), with the checks
of bad combinations (one InputError naming the field).

Precision per operator: GEMMs (dense, MoE experts, LM head) run at the peak of the weights'
dtype (W8A8 = INT8 or FP8 GEMMs, 8-bit x 8-bit); attention (prefill, decode, MLA's absorbed form)
and KDA's chunked prefill run at the activations' dtype (`attention_dtype`), whatever the weights or
the KV cache are stored in; KDA's decode recurrence on the FP32 units.

Rates: each operator's time is a roofline, max(flops / (peak FLOP/s x efficiency), bytes / (HBM
bytes/s x memory efficiency)), for one TP rank (ranks run in lockstep); `Geometry.roofline`.

Efficiency defaults (`EfficiencyConfig`) and their basis: gemm 0.7 (large BF16 cuBLAS GEMMs on
H100 reach ~650-750 of 989 dense TFLOP/s); attention 0.5 (FlashAttention-2 reaches ~50-70 % of peak
on A100 and ~35-50 % on H100, FlashAttention-3 ~75 % on H100); memory per accelerator where its own
profiles measure it (`AcceleratorSpec.memory_efficiency`: decode-shaped GEMMs in Vidur's A100 and
H100 profiles, benchmarks/vidur_calibration_check.py), else 0.8 (streaming kernels reach ~80-90 %
of HBM peak); collective 0.7 (NCCL all-reduce bus bandwidth over NVLink typically reaches
~70-80 % of the per-direction link rate for large messages; small ones are latency-bound, which the
latency term covers).

Assumptions (stated, not hidden): KV heads are replicated when tp exceeds their number, and MLA's
latent KV is replicated on every rank.

Units: seconds, bytes, FLOPs, tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from infralab.errors import InputError
from infralab.sim.config import (DEFAULT_DECODE_ATTENTION_FLOOR_S, DEFAULT_KERNEL_LAUNCH_S, DEFAULT_MEMORY_EFFICIENCY,
                                 CostConfig, HardwareConfig)
from infralab.sim.specs import DTYPE_BYTES, AcceleratorSpec, LinkSpec, ModelSpec
from infralab.work_formulas import replay_ssm_state_bytes

LOGITS_BYTES = 4  # logits are produced and gathered in FP32


@dataclass(frozen=True, slots=True)
class Geometry:
    """One instance as the operator families see it (one rank's share unless a name says so)."""

    model: ModelSpec
    accel: AcceleratorSpec
    cfg: CostConfig
    tp: int
    tp_link: LinkSpec | None
    # parallel degree per layer class and the other layer-class knobs (1 or 0: off)
    linear_tp: int
    lm_head_tp: int
    moe_ep: int
    attention_dp: bool  # every layer but the routed experts data-parallel over the tp ranks
    layer_split: int
    pp: int
    micro_batches: int
    virtual_engines: int  # schedulers with a batch in flight each (vLLM's pipeline parallelism)
    replay_ring: int
    # Per-class collectives differ from "two all-reduces over tp per layer" only when these do.
    plain_collectives: bool
    plain: bool  # no knob on: the step is the plain sum of OPS
    # widths (bytes per element) and rates
    weight_width: int
    act_width: int
    lm_width: int
    peak: float  # the GEMMs' dtype (weights x activations: 8-bit x 8-bit under W8A8)
    gemm_rate: float
    attn_peak: float  # attention's compute dtype (`attention_dtype`)
    lm_peak: float  # the LM head's dtype (bf16 in 8-bit checkpoints)
    attn_rate: float
    state_peak: float
    state_rate: float
    mem_rate: float
    launch: float  # the least time of a kernel: the config's, else the accelerator's, else the A100 fit's
    decode_attention_floor_s: float  # likewise, one layer's decode attention
    # full attention, per rank
    heads: int
    qk_dim: int
    v_dim: int
    kv_heads: int
    kv_dim: int
    decode_qk_dim: int
    decode_v_dim: int
    full_layers: int
    kv_dtypes: tuple[str, ...]
    kv_layer_bytes: tuple[int, ...]
    kv_bytes_layer: float
    # linear attention (KDA), per rank
    linear_layers: int
    lin_heads: int
    lin_state_bytes: float
    lin_conv_bytes: int
    lin_io_elems: int

    @staticmethod
    def of(model: ModelSpec, accel: AcceleratorSpec, cfg: CostConfig, tp: int = 1, tp_link: LinkSpec | None = None,
           hardware: HardwareConfig | None = None) -> Geometry:
        """The geometry of `model` on `tp` x `accel` (InputError for a bad combination of knobs)."""
        # Parallel degree per layer class and the other layer-class knobs (None: off, see HardwareConfig).
        hw = hardware if hardware is not None else HardwareConfig(accelerator=accel.name)
        linear_tp = hw.linear_tp or tp
        lm_head_tp = hw.lm_head_tp or tp
        moe_ep = hw.moe_ep or 1
        layer_split = hw.layer_split or 1
        pp = hw.pp or 1
        micro_batches = hw.pp_micro_batches or 1
        replay_ring = cfg.replay_ssm_ring or 0
        attention_dp = hw.attention_dp
        plain_collectives = linear_tp == tp and moe_ep == 1 and not attention_dp
        plain = (plain_collectives and lm_head_tp == tp and layer_split == 1
                 and pp == 1 and not replay_ring and cfg.kv_layer_dtypes is None)
        _check_parallelism(model, tp, linear_tp, pp, tp_link)
        _check_layer_class_knobs(model, cfg, tp, linear_tp, lm_head_tp, moe_ep, layer_split, pp, micro_batches,
                                 replay_ring, hw.pp_schedule)
        if attention_dp:
            _check_attention_dp(model, tp, linear_tp, lm_head_tp, moe_ep, layer_split, pp)
        eff = cfg.efficiency
        weight_width = DTYPE_BYTES[cfg.dtype]
        act_width = 4 if cfg.dtype == "fp32" else 2  # 8-bit models still pass bf16 activations
        # 8-bit checkpoints keep the LM head in bf16 (as ModelSpec.weight_bytes assumes).
        lm_width = DTYPE_BYTES[cfg.dtype] if weight_width >= 2 else DTYPE_BYTES["bf16"]
        peak = accel.peak(cfg.dtype)
        attn_peak = accel.peak(attention_dtype(cfg))
        lm_peak = peak if weight_width >= 2 else accel.peak("bf16")
        # KDA decode recurrences run on FP32 cores; only models with KDA layers need that figure.
        state_peak = accel.peak("fp32") if model.num_linear_attention_layers else 0.0
        m = model
        heads = m.num_heads // tp
        qk_dim, v_dim = m.qk_head_dim, m.attn_v_head_dim
        if m.is_mla:  # the compressed latent, replicated on every rank
            kv_heads = 1
            kv_dim = m.kv_lora_rank + m.qk_rope_head_dim
            # absorbed decode: scores over the whole latent, values over its non-RoPE part
            decode_qk_dim, decode_v_dim = kv_dim, m.kv_lora_rank
        else:
            kv_heads = max(1, m.num_kv_heads // tp)
            kv_dim = m.head_dim
            decode_qk_dim = decode_v_dim = m.head_dim
        full_layers = m.num_full_attention_layers
        # KV dtype of each full-attention layer, and its bytes per token on one rank
        kv_dtypes = cfg.kv_layer_dtypes or (cfg.kv_dtype,) * full_layers
        kv_layer_bytes = tuple(m.kv_layer_bytes(dtype, tp) for dtype in kv_dtypes)
        # per token, layer, rank (the mean over layers when their dtypes differ)
        kv_bytes_layer: float
        if cfg.kv_layer_dtypes is None:
            kv_bytes_layer = float(m.kv_layer_bytes(cfg.kv_dtype, tp))
        else:
            kv_bytes_layer = sum(kv_layer_bytes) / max(1, full_layers)
        lin_heads = m.linear_num_heads // linear_tp
        d = m.linear_head_dim
        if replay_ring:  # ReplaySSM: a checkpoint plus a ring of L updates (per seq, layer, rank)
            lin_state_bytes = replay_ssm_state_bytes(lin_heads, d, d, replay_ring)
        else:
            lin_state_bytes = lin_heads * d * d * DTYPE_BYTES["fp32"]  # per seq, layer, rank
        return Geometry(
            model=model, accel=accel, cfg=cfg, tp=tp, tp_link=tp_link,
            linear_tp=linear_tp, lm_head_tp=lm_head_tp, moe_ep=moe_ep, attention_dp=attention_dp,
            layer_split=layer_split, pp=pp,
            micro_batches=micro_batches, replay_ring=replay_ring,
            virtual_engines=pp if hw.pp_schedule == "virtual_engines" else 1,
            plain_collectives=plain_collectives, plain=plain,
            weight_width=weight_width, act_width=act_width, lm_width=lm_width,
            peak=peak, gemm_rate=peak * _gemm_efficiency(cfg), attn_peak=attn_peak, attn_rate=attn_peak * eff.attention,
            lm_peak=lm_peak,
            state_peak=state_peak, state_rate=state_peak * eff.attention,
            mem_rate=accel.hbm_bandwidth * memory_efficiency(cfg, accel), launch=_first(cfg.extras.kernel_launch_s, accel.kernel_launch_s,
                                                                      DEFAULT_KERNEL_LAUNCH_S),
            decode_attention_floor_s=_first(cfg.extras.decode_attention_floor_s, accel.decode_attention_floor_s,
                                            DEFAULT_DECODE_ATTENTION_FLOOR_S),
            heads=heads, qk_dim=qk_dim, v_dim=v_dim, kv_heads=kv_heads, kv_dim=kv_dim,
            decode_qk_dim=decode_qk_dim, decode_v_dim=decode_v_dim, full_layers=full_layers,
            kv_dtypes=kv_dtypes, kv_layer_bytes=kv_layer_bytes, kv_bytes_layer=kv_bytes_layer,
            linear_layers=m.num_linear_attention_layers, lin_heads=lin_heads, lin_state_bytes=lin_state_bytes,
            lin_conv_bytes=3 * lin_heads * d * max(m.linear_conv_kernel - 1, 0) * DTYPE_BYTES["bf16"],
            lin_io_elems=lin_heads * 5 * d,  # q, k, v, gate in; output out (per token)
        )

    def roofline(self, flops: float, nbytes: float, rate: float) -> float:
        """Seconds of `flops` at `rate` or `nbytes` at the effective HBM rate, whichever is longer."""
        return max(flops / rate, nbytes / self.mem_rate)

    def gemm_roofline(self, flops: float, nbytes: float, rate: float, byte_rate: float | None = None) -> float:
        """A GEMM's seconds: the roofline, blended near its ridge when `extras.ridge_sharpness` = p
        is set: (compute^p + memory^p)^(1/p), which is the roofline's max far from the ridge and
        up to 2^(1/p) x it at the ridge, where a kernel streams its weights and keeps its tensor
        cores busy at once and reaches neither peak. `byte_rate`: the memory rate (default the
        effective HBM rate)."""
        compute, memory = flops / rate, nbytes / (self.mem_rate if byte_rate is None else byte_rate)
        p = self.cfg.extras.ridge_sharpness
        if p is None:
            return max(compute, memory)
        blended: float = (compute**p + memory**p) ** (1.0 / p)
        return blended


def _first(*values: float | None) -> float:
    """The first value that is not None."""
    return next(v for v in values if v is not None)


def memory_efficiency(cfg: CostConfig, accel: AcceleratorSpec) -> float:
    """The fraction of HBM bandwidth streaming kernels reach: `efficiency.memory` when a config sets
    it, else the accelerator's measured one, else the default."""
    return _first(cfg.efficiency.memory, accel.memory_efficiency, DEFAULT_MEMORY_EFFICIENCY)


def _gemm_efficiency(cfg: CostConfig) -> float:
    """The GEMMs' fraction of their peak: `gemm_8bit` for 8-bit x 8-bit (W8A8) GEMMs when set."""
    eff = cfg.efficiency
    if DTYPE_BYTES[cfg.dtype] == 1 and eff.gemm_8bit is not None:
        return eff.gemm_8bit
    return eff.gemm


def attention_dtype(cfg: CostConfig) -> str:
    """The dtype attention's math runs in: `cfg.attention_dtype`, else the activations' (bf16 for
    bf16 and 8-bit models, fp16 and fp32 for those). Quantising weights (W8A8) or the KV cache
    changes the bytes attention reads, never this rate."""
    if cfg.attention_dtype is not None:
        return cfg.attention_dtype
    return cfg.dtype if cfg.dtype in ("fp16", "fp32") else "bf16"


def _check_parallelism(m: ModelSpec, tp: int, linear_tp: int, pp: int, tp_link: LinkSpec | None) -> None:
    if tp < 1:
        raise InputError("hardware.tp", f"bad value {tp}", "a positive integer")
    if m.num_heads % tp:
        raise InputError("hardware.tp", f"{tp} does not divide {m.num_heads} attention heads", "a divisor")
    if not m.is_mla and m.num_kv_heads % tp and tp % m.num_kv_heads:
        raise InputError(
            "hardware.tp", f"{tp} and {m.num_kv_heads} KV heads", "a divisor or multiple of the KV heads"
        )
    if m.num_linear_attention_layers and m.linear_num_heads % linear_tp:
        field = "hardware.tp" if linear_tp == tp else "hardware.linear_tp"
        raise InputError(field, f"{linear_tp} does not divide {m.linear_num_heads} KDA heads", "a divisor")
    if (tp > 1 or pp > 1) and tp_link is None:
        raise InputError("hardware.tp_link", "tp > 1 or pp > 1 needs a link for its collectives", "a link spec")


def _check_attention_dp(m: ModelSpec, tp: int, linear_tp: int, lm_head_tp: int, moe_ep: int, layer_split: int,
                        pp: int) -> None:
    """`hardware.attention_dp` needs a MoE model on tp > 1 ranks whose experts are spread over all of
    them (moe_ep = tp), and no other layer-class split (one InputError naming the field)."""
    if tp < 2:
        raise InputError("hardware.attention_dp", "true with tp = 1", "tp > 1 (the ranks the attention is spread over)")
    if not m.is_moe:
        raise InputError("hardware.attention_dp", f"{m.name} has no MoE layers",
                         "a MoE model (its experts run expert-parallel beside the data-parallel attention)")
    if moe_ep != tp:
        raise InputError("hardware.moe_ep", f"{moe_ep} with attention_dp on {tp} ranks",
                         f"moe_ep = {tp}: the experts spread over every rank of the data-parallel attention")
    for field, value, off in (("linear_tp", linear_tp, tp), ("lm_head_tp", lm_head_tp, tp),
                              ("layer_split", layer_split, 1), ("pp", pp, 1)):
        if value != off:
            raise InputError(f"hardware.{field}", f"{value} with attention_dp",
                             f"unset: attention_dp runs every non-expert layer whole on each rank")


def _check_layer_class_knobs(m: ModelSpec, cfg: CostConfig, tp: int, linear_tp: int, lm_head_tp: int, moe_ep: int,
                             layer_split: int, pp: int, micro_batches: int, replay_ring: int,
                             pp_schedule: str = "virtual_engines") -> None:
    """Bad combinations of the per-layer-class degrees, Layer Split, pp, ReplaySSM and the KV
    dtypes per layer: one InputError naming the field."""

    def require(ok: object, field: str, problem: str, expected: str) -> None:
        if not ok:
            raise InputError(field, problem, expected)

    def divides_tp(value: int, field: str) -> None:
        require(tp % value == 0, f"hardware.{field}", f"{value} does not divide tp = {tp}", "a divisor of hardware.tp")

    if linear_tp != tp:
        require(m.num_linear_attention_layers, "hardware.linear_tp", f"{m.name} has no linear-attention layers",
                "no linear_tp for this model")
        divides_tp(linear_tp, "linear_tp")
    if lm_head_tp != tp:
        divides_tp(lm_head_tp, "lm_head_tp")
    if moe_ep != 1:
        require(m.is_moe, "hardware.moe_ep", f"{m.name} has no MoE layers", "no moe_ep for a dense model")
        divides_tp(moe_ep, "moe_ep")
        require(m.num_experts % moe_ep == 0, "hardware.moe_ep",
                f"{moe_ep} does not divide {m.num_experts} experts", "a divisor of the experts")
    if layer_split != 1:
        require(m.num_full_attention_layers, "hardware.layer_split", f"{m.name} has no full-attention layers (linear "
                "state is not KV)", "no layer_split for this model")
        divides_tp(layer_split, "layer_split")
        replicas = tp if m.is_mla else max(1, tp // m.num_kv_heads)
        require(replicas % layer_split == 0, "hardware.layer_split",
                f"each KV element of {m.name} is held by {replicas} of the {tp} ranks; Layer Split shares "
                f"those replicas", f"a divisor of {replicas}")
    require(pp <= m.num_layers, "hardware.pp", f"{pp} stages for {m.num_layers} layers",
            f"at most {m.num_layers} (uneven stages are allowed)")
    require(micro_batches == 1 or pp > 1, "hardware.pp_micro_batches",
            f"{micro_batches} micro-batches without pipeline stages (pp = 1)", "pp > 1, or no micro-batches")
    require(micro_batches == 1 or pp_schedule == "micro_batches", "hardware.pp_micro_batches",
            f"{micro_batches} micro-batches with pp_schedule = {pp_schedule!r}",
            'hardware.pp_schedule = "micro_batches" (virtual engines keep one whole batch each in flight)')
    require(not replay_ring or m.num_linear_attention_layers, "cost.replay_ssm_ring",
            f"{m.name} has no linear-attention (KDA) layers", "no replay_ssm_ring for this model")
    layer_dtypes = cfg.kv_layer_dtypes
    if layer_dtypes is not None:
        full = m.num_full_attention_layers
        require(len(layer_dtypes) == full, "cost.kv_layer_dtypes",
                f"{len(layer_dtypes)} entries for {full} full-attention layers", "one KV dtype per full-attention layer")
