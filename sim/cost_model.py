"""How long one engine step takes: a roofline over the step's operators, per tensor-parallel rank,
plus explicit host overheads. A calibration table, where it has rows, replaces the roofline.

For each operator, time = max(flops / (peak FLOP/s x efficiency), bytes / (HBM bytes/s x memory
efficiency)), computed for one TP rank (ranks run in lockstep). Operators (`StepCost.by_op`):

- ``dense_gemm``: every non-expert linear layer (attention and KDA projections, dense MLPs, shared
  experts, MoE router) over the step's tokens; weights read once per step.
- ``attention``: full-attention layers. Prefill: QK and PV flops over the causal query-key pairs
  (`prefill_attn_pairs`), KV of every prefill sequence's context read once, new KV written.
  Decode: each sequence reads its whole KV (memory-bound). MLA decodes in the absorbed form (queries
  attend the compressed latent, one "KV head" of `kv_lora_rank + qk_rope_head_dim`).
- ``linear_attention``: KDA layers. Decode reads and writes each sequence's K x V state (FP32) and
  conv window per step. Prefill runs the chunked algorithm (chunks of `KDA_CHUNK` tokens): about
  three state-sized products per token plus intra-chunk attention, on tensor cores, and one state
  per chunk written and read back.
- ``moe_experts``: routed experts. A batch of T tokens, each routed to k of E experts, touches
  E*(1-(1-k/E)^T) distinct experts in expectation (uniform routing); their weights are read once;
  flops are 2 x active expert parameters x tokens.
- ``lm_head``: only for the sequences that emit a token this step (`output_tokens`).
- ``tp_collectives``: two ring all-reduces of the hidden states per layer (after attention and after
  the MLP/experts), plus a gather of the logits. Per all-reduce: the link's measured curve when its
  spec has one (`all_reduce_floor_s` + 2(tp-1)/tp x bytes / `all_reduce_bus_bandwidth`, fitted on
  Vidur's NCCL profiles), else 2(tp-1)/tp x bytes / (link bytes/s x collective efficiency) +
  2(tp-1) x link latency. Zero when tp = 1.
- ``small_ops``: per layer two RMSNorms, RoPE (full-attention layers), the gated activation and
  two residual adds: elementwise traffic at the kernel's fraction of HBM bandwidth (`extras`), each kernel
  at least `extras.kernel_launch_s` (5-23 % of a layer in Vidur's profiles).
- ``sampler``: the pass over the logits of the tokens emitted (softmax and sampling read the FP32
  logits twice and write probabilities once), at least one kernel launch.

GLM-class knobs (`HardwareConfig`: linear_tp, lm_head_tp, moe_ep, layer_split, pp,
pp_micro_batches; `CostConfig`: replay_ssm_ring, kv_layer_dtypes, dtype "int8" for W8A8; all off
by default, docs/sim.md "GLM-class techniques") change the operators above and add `EXTRA_OPS` to
`StepCost.by_op`: ``kv_broadcast`` (Layer Split), ``ep_all_to_all`` (expert parallelism),
``pp_transfer`` (pipeline stages; with pp every operator is the pipelined step's).

What a plain roofline misses (`RooflineExtrasConfig`, defaults fitted on Vidur's profiles): every
kernel takes at least `kernel_launch_s` (a GEMM class of `count` per step at least count x that);
decode attention takes at least `decode_attention_floor_s` per layer (few sequences leave most of
the GPU idle); the small operators and the sampler above.

Assumptions (stated, not hidden): operators run back to back on one stream (no overlap of compute,
memory and communication); collectives are not overlapped with compute; embedding gathers are not
counted; MoE routing is uniform and experts are split across TP ranks (no expert parallelism);
KV heads are replicated when tp exceeds their number, and MLA's latent KV is replicated on every
rank. Host and device: `HostOverheadConfig.overlap` ("sync": total_s = device_s + host_s;
"async": total_s = max(device_s, host_s) + async_residue_s).

Efficiency defaults (`EfficiencyConfig`) and their basis: gemm 0.7 (large BF16 cuBLAS GEMMs on
H100 reach ~650-750 of 989 dense TFLOP/s); attention 0.5 (FlashAttention-2 reaches ~50-70 % of peak
on A100 and ~35-50 % on H100, FlashAttention-3 ~75 % on H100); memory 0.8 (streaming kernels reach
~80-90 % of HBM peak); collective 0.7 (NCCL all-reduce bus bandwidth over NVLink typically reaches
~70-80 % of the per-direction link rate for large messages; small ones are latency-bound, which the
latency term covers).

Units: seconds, bytes, FLOPs, tokens.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from infralab.errors import InputError
from infralab.sim.calibration import CalibrationRow, CalibrationTable, scale, shape_key
from infralab.sim.config import CostConfig, HardwareConfig
from infralab.sim.cost.work import EXTRA_OPS, OPS, StepCost, StepWork
from infralab.sim.specs import DTYPE_BYTES, AcceleratorSpec, LinkSpec, ModelSpec
from infralab.work_formulas import (
    KV_CACHE_DTYPES,
    KV_SCALED,
    kv_dequant_flops,
    replay_ssm_cycle_bytes,
    replay_ssm_cycle_flops,
    replay_ssm_state_bytes,
)

KDA_CHUNK = 64  # tokens per chunk of the chunked KDA prefill (flash-linear-attention's default)
KDA_DECODE_FLOPS_PER_STATE_ELEMENT = 8  # decay, k.S, rank-1 update (3), q.S, per K x V element
LOGITS_BYTES = 4  # logits are produced and gathered in FP32
GIB = 2**30
# Memory outside torch's allocator per GPU (CUDA context, cuBLAS workspaces), as vLLM's profiler
# reports it: "non_torch_memory takes 0.35GiB" (vLLM V1, Llama-3.1-8B on one 80 GB GPU, a public
# log); tensor parallelism adds NCCL's buffers: 1.79 GiB at TP 1 vs 3.58 GiB at TP 2 in vLLM PR
# #10511's sanity check (Llama-3-8B on H100), i.e. +1.79 GiB per GPU.
NON_TORCH_BYTES_PER_GPU = 0.35 * GIB
TP_NON_TORCH_BYTES_PER_GPU = 1.79 * GIB
SMALL_OP_KERNELS = ("rms_norm", "residual_add", "rope", "silu_mul")  # calibration kernels of small_ops
SAMPLER_LOGIT_PASSES = 3  # softmax reads the logits, sampling reads them again and writes probabilities

# Calibration tables and the cost config use one dtype vocabulary (infralab.work_formulas).
_TABLE_DTYPE = {name: name for name in DTYPE_BYTES}
W8A8_DTYPES = ("int8", "fp8e4m3")  # weight dtypes whose GEMMs run 8-bit x 8-bit (W8A8)


def pipeline_bubble_fraction(stages: int, micro_batches: int) -> float:
    """Fraction of a pipelined step each stage idles (GPipe's bubble): (p - 1) / (m + p - 1) for
    p stages and m micro-batches of equal stage time."""
    return (stages - 1) / (micro_batches + stages - 1)


def stage_layers(num_layers: int, stages: int) -> tuple[int, ...]:
    """Layers per pipeline stage: as even as possible, the first `num_layers % stages` stages one
    layer more (27 layers in 2 stages: 14 + 13)."""
    base, extra = divmod(num_layers, stages)
    return tuple(base + (1 if i < extra else 0) for i in range(stages))
# BF16 and FP16 run at the same tensor-core and memory rate on A100/H100/H200 (datasheets): rows
# of one stand in for the other (Vidur profiles in FP16, most runs are BF16).
_SAME_RATE = {"bf16": ("bf16", "fp16"), "fp16": ("fp16", "bf16")}


def _table_dtypes(dtype: str) -> tuple[str, ...]:
    """Table dtypes whose rows time `dtype` (a cost-config dtype), preferred first."""
    return _SAME_RATE.get(dtype, (_TABLE_DTYPE[dtype],))


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """An instance's device memory as an engine sizes it (bytes, whole instance; `CostModel.memory_plan`)."""

    budget_bytes: float  # reported device memory x tp x gpu_memory_utilization
    weight_bytes: float
    non_torch_bytes: float  # CUDA context, NCCL buffers: memory torch's allocator does not see
    activation_peak_bytes: float  # the largest step's activations
    state_bytes: float  # linear-attention state slots (hybrid models)
    kv_bytes: float  # what is left for the paged KV cache
    kv_bytes_per_token: int
    kv_tokens: int

    def kv_blocks(self, block_size: int) -> int:
        """Whole KV blocks of `block_size` tokens."""
        return self.kv_tokens // block_size

    def to_json(self, block_size: int) -> dict[str, float | int]:
        return {
            "kv_blocks": self.kv_blocks(block_size),
            "kv_tokens": self.kv_tokens,
            "block_size": block_size,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "budget_bytes": self.budget_bytes,
            "weight_bytes": self.weight_bytes,
            "non_torch_bytes": self.non_torch_bytes,
            "activation_peak_bytes": self.activation_peak_bytes,
            "state_bytes": self.state_bytes,
            "kv_bytes": self.kv_bytes,
        }


@dataclass(frozen=True, slots=True)
class _Gemm:
    """A class of identical GEMMs on one rank: C[M, n] = A[M, k] @ W[k, n], `count` per step."""

    name: str
    n: int
    k: int
    count: int


class CostModel:
    """Per-step cost of one serving instance (a model on `tp` accelerators)."""

    def __init__(
        self,
        model: ModelSpec,
        accel: AcceleratorSpec,
        cfg: CostConfig,
        tp: int = 1,
        tp_link: LinkSpec | None = None,
        calibration: CalibrationTable | None = None,
        hardware: HardwareConfig | None = None,
    ) -> None:
        self.model, self.accel, self.cfg, self.tp, self.tp_link = model, accel, cfg, tp, tp_link
        self.calibration = calibration
        # Parallel degree per layer class and the other GLM-class knobs (None: off, see HardwareConfig).
        hw = hardware if hardware is not None else HardwareConfig(accelerator=accel.name)
        self.linear_tp = hw.linear_tp or tp
        self.lm_head_tp = hw.lm_head_tp or tp
        self.moe_ep = hw.moe_ep or 1
        self.layer_split = hw.layer_split or 1
        self.pp = hw.pp or 1
        self.micro_batches = hw.pp_micro_batches or 1
        self.replay_ring = cfg.replay_ssm_ring or 0
        # Per-class collectives differ from "two all-reduces over tp per layer" only when these do.
        self._plain_collectives = self.linear_tp == tp and self.moe_ep == 1
        self._plain = (self._plain_collectives and self.lm_head_tp == tp and self.layer_split == 1
                       and self.pp == 1 and not self.replay_ring and cfg.kv_layer_dtypes is None)
        self._check_parallelism()
        self._check_glm_knobs()
        eff = cfg.efficiency
        self._weight_width = DTYPE_BYTES[cfg.dtype]
        self._act_width = 4 if cfg.dtype == "fp32" else 2  # 8-bit models still pass bf16 activations
        # 8-bit checkpoints keep the LM head in bf16 (as ModelSpec.weight_bytes assumes).
        self._lm_width = DTYPE_BYTES[cfg.dtype] if self._weight_width >= 2 else DTYPE_BYTES["bf16"]
        self._peak = accel.peak(cfg.dtype)
        self._gemm_rate = self._peak * eff.gemm
        self._attn_rate = self._peak * eff.attention
        # KDA decode recurrences run on FP32 cores; only models with KDA layers need that figure.
        self._state_peak = accel.peak("fp32") if model.num_linear_attention_layers else 0.0
        self._state_rate = self._state_peak * eff.attention
        self._mem_rate = accel.hbm_bandwidth * eff.memory
        extras = cfg.extras
        self._launch = extras.kernel_launch_s
        self._small_rates = {k: accel.hbm_bandwidth * extras.memory_fraction(k) for k in SMALL_OP_KERNELS}
        self._geometry()
        self._decode_floor = self._full_layers * extras.decode_attention_floor_s  # all full layers
        self._decode_coeffs = self._decode_attention_coeffs()
        self._dense_gemms = self._build_dense_gemms()
        self._dense_cache: dict[int, float] = {}
        self._moe_cache: dict[int, float] = {}
        self._lm_cache: dict[int, tuple[float, float]] = {}  # (lm_head, sampler) by output tokens
        self._small_cache: dict[int, float] = {}
        self._collective_cache: dict[tuple[int, int], float] = {}  # (tokens, output tokens) -> s
        self._decode_host_cache: dict[int, float] = {}  # decode-only steps: host seconds by seqs
        self._decode_run_terms: dict[int, tuple[float, ...] | None] = {}  # decode_run_ends, by seqs
        self._calibrated = _Calibration(self) if calibration is not None else None

    # -- set-up --

    def _check_parallelism(self) -> None:
        m, tp = self.model, self.tp
        if tp < 1:
            raise InputError("hardware.tp", f"bad value {tp}", "a positive integer")
        if m.num_heads % tp:
            raise InputError("hardware.tp", f"{tp} does not divide {m.num_heads} attention heads", "a divisor")
        if not m.is_mla and m.num_kv_heads % tp and tp % m.num_kv_heads:
            raise InputError(
                "hardware.tp", f"{tp} and {m.num_kv_heads} KV heads", "a divisor or multiple of the KV heads"
            )
        if m.num_linear_attention_layers and m.linear_num_heads % self.linear_tp:
            field = "hardware.tp" if self.linear_tp == tp else "hardware.linear_tp"
            raise InputError(field, f"{self.linear_tp} does not divide {m.linear_num_heads} KDA heads", "a divisor")
        if (tp > 1 or self.pp > 1) and self.tp_link is None:
            raise InputError("hardware.tp_link", "tp > 1 or pp > 1 needs a link for its collectives", "a link spec")

    def _check_glm_knobs(self) -> None:
        """Bad combinations of the per-layer-class degrees, Layer Split, pp, ReplaySSM and the KV
        dtypes per layer: one InputError naming the field."""
        m, tp = self.model, self.tp

        def require(ok: object, field: str, problem: str, expected: str) -> None:
            if not ok:
                raise InputError(field, problem, expected)

        def divides_tp(value: int, field: str) -> None:
            require(tp % value == 0, f"hardware.{field}", f"{value} does not divide tp = {tp}", "a divisor of hardware.tp")

        if self.linear_tp != tp:
            require(m.num_linear_attention_layers, "hardware.linear_tp", f"{m.name} has no linear-attention layers",
                    "no linear_tp for this model")
            divides_tp(self.linear_tp, "linear_tp")
        if self.lm_head_tp != tp:
            divides_tp(self.lm_head_tp, "lm_head_tp")
        if self.moe_ep != 1:
            require(m.is_moe, "hardware.moe_ep", f"{m.name} has no MoE layers", "no moe_ep for a dense model")
            divides_tp(self.moe_ep, "moe_ep")
            require(m.num_experts % self.moe_ep == 0, "hardware.moe_ep",
                    f"{self.moe_ep} does not divide {m.num_experts} experts", "a divisor of the experts")
        if self.layer_split != 1:
            require(m.num_full_attention_layers, "hardware.layer_split", f"{m.name} has no full-attention layers (linear "
                    "state is not KV)", "no layer_split for this model")
            divides_tp(self.layer_split, "layer_split")
            replicas = tp if m.is_mla else max(1, tp // m.num_kv_heads)
            require(replicas % self.layer_split == 0, "hardware.layer_split",
                    f"each KV element of {m.name} is held by {replicas} of the {tp} ranks; Layer Split shares "
                    f"those replicas", f"a divisor of {replicas}")
        require(self.pp <= m.num_layers, "hardware.pp", f"{self.pp} stages for {m.num_layers} layers",
                f"at most {m.num_layers} (uneven stages are allowed)")
        require(self.micro_batches == 1 or self.pp > 1, "hardware.pp_micro_batches",
                f"{self.micro_batches} micro-batches without pipeline stages (pp = 1)", "pp > 1, or no micro-batches")
        require(not self.replay_ring or m.num_linear_attention_layers, "cost.replay_ssm_ring",
                f"{m.name} has no linear-attention (KDA) layers", "no replay_ssm_ring for this model")
        layer_dtypes = self.cfg.kv_layer_dtypes
        if layer_dtypes is not None:
            full = m.num_full_attention_layers
            require(len(layer_dtypes) == full, "cost.kv_layer_dtypes",
                    f"{len(layer_dtypes)} entries for {full} full-attention layers", "one KV dtype per full-attention layer")

    def _geometry(self) -> None:
        m, tp = self.model, self.tp
        self._heads = m.num_heads // tp
        self._qk_dim, self._v_dim = m.qk_head_dim, m.attn_v_head_dim
        if m.is_mla:  # the compressed latent, replicated on every rank
            self._kv_heads = 1
            self._kv_dim = m.kv_lora_rank + m.qk_rope_head_dim
            # absorbed decode: scores over the whole latent, values over its non-RoPE part
            self._decode_qk_dim, self._decode_v_dim = self._kv_dim, m.kv_lora_rank
        else:
            self._kv_heads = max(1, m.num_kv_heads // tp)
            self._kv_dim = m.head_dim
            self._decode_qk_dim = self._decode_v_dim = m.head_dim
        self._full_layers = m.num_full_attention_layers
        # KV dtype of each full-attention layer, and its bytes per token on one rank
        self._kv_dtypes = self.cfg.kv_layer_dtypes or (self.cfg.kv_dtype,) * self._full_layers
        self._kv_layer_bytes = tuple(m.kv_layer_bytes(dtype, tp) for dtype in self._kv_dtypes)
        # per token, layer, rank (the mean over layers when their dtypes differ)
        if self.cfg.kv_layer_dtypes is None:
            self._kv_bytes_layer = m.kv_layer_bytes(self.cfg.kv_dtype, tp)
        else:
            self._kv_bytes_layer = sum(self._kv_layer_bytes) / max(1, self._full_layers)
        self._linear_layers = m.num_linear_attention_layers
        self._lin_heads = m.linear_num_heads // self.linear_tp
        d = m.linear_head_dim
        if self.replay_ring:  # ReplaySSM: a checkpoint plus a ring of L updates (per seq, layer, rank)
            self._lin_state_bytes = replay_ssm_state_bytes(self._lin_heads, d, d, self.replay_ring)
        else:
            self._lin_state_bytes = self._lin_heads * d * d * DTYPE_BYTES["fp32"]  # per seq, layer, rank
        self._lin_conv_bytes = 3 * self._lin_heads * d * max(m.linear_conv_kernel - 1, 0) * DTYPE_BYTES["bf16"]
        self._lin_io_elems = self._lin_heads * 5 * d  # q, k, v, gate in; output out (per token)

    def _build_dense_gemms(self) -> list[_Gemm]:
        """Every non-expert GEMM class with its per-rank N and K (column-parallel layers split N,
        row-parallel ones split K, small ones are replicated)."""
        m, tp, h = self.model, self.tp, self.model.hidden_size
        gemms: list[_Gemm] = []

        def add(name: str, n: int, k: int, count: int) -> None:
            if count and n and k:
                gemms.append(_Gemm(name, n, k, count))

        full, heads = self._full_layers, self._heads
        if m.is_mla:
            if m.q_lora_rank:
                add("q_a", m.q_lora_rank, h, full)
                add("q_b", heads * m.qk_head_dim, m.q_lora_rank, full)
            else:
                add("q", heads * m.qk_head_dim, h, full)
            add("kv_a", m.kv_lora_rank + m.qk_rope_head_dim, h, full)
            add("kv_b", heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, full)
            add("attn_o", h, heads * m.v_head_dim, full)
        else:
            add("qkv", (heads + 2 * self._kv_heads) * m.head_dim, h, full)
            add("attn_o", h, heads * m.head_dim, full)
        lin, lheads, d = self._linear_layers, self._lin_heads, m.linear_head_dim
        add("kda_qkv", 3 * lheads * d, h, lin)
        add("kda_gate_a", d, h, 2 * lin)  # decay and output gates: low rank, replicated
        add("kda_gate_b", lheads * d, d, 2 * lin)
        add("kda_beta", lheads, h, lin)
        add("kda_o", h, lheads * d, lin)
        add("mlp_gate_up", 2 * m.intermediate_size // tp, h, m.num_dense_mlp_layers)
        add("mlp_down", h, m.intermediate_size // tp, m.num_dense_mlp_layers)
        shared = m.num_shared_experts * m.moe_intermediate_size // tp
        add("shared_gate_up", 2 * shared, h, m.num_moe_layers)
        add("shared_down", h, shared, m.num_moe_layers)
        add("router", m.num_experts, h, m.num_moe_layers)
        return gemms

    # -- public queries --

    @property
    def calibrated_ops(self) -> frozenset[str]:
        """Operators (names of `StepCost.by_op`) whose time comes, at least in part, from the
        calibration table: dense_gemm, moe_experts and lm_head from `matmul` (`w8a8_matmul` for W8A8)
        rows; attention from `paged_decode_attention` (decode) and `prefill_attention` (prefill);
        linear_attention (decode) from `kda_decode`; small_ops from `rms_norm`, `residual_add`,
        `rope`, `silu_mul`; tp_collectives (the all-reduces) from `all_reduce`. KDA prefill and
        the sampler always use the roofline."""
        return self._calibrated.ops if self._calibrated is not None else frozenset()

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token takes on the whole instance (all TP ranks, replicas included).

        With Layer Split (`layer_split` = g), the F full-attention layers are cut into g contiguous,
        balanced blocks, one per rank of each group (as vllm-ascend's KVPP assigns owners), so a
        rank holds only its block's KV: the instance's bytes per token are tp x the bytes of the
        fullest rank (ceil(F / g) of the F layers when their dtypes agree)."""
        if self.layer_split == 1 and self.cfg.kv_layer_dtypes is None:
            return self.model.kv_bytes_per_token(self.cfg.kv_dtype, self.tp)
        per_rank, start = 0, 0
        for size in stage_layers(self._full_layers, self.layer_split):
            per_rank = max(per_rank, sum(self._kv_layer_bytes[start:start + size]))
            start += size
        return int(per_rank * self.tp)

    def model_kv_bytes_per_token(self) -> int:
        """One copy of a token's KV over all full-attention layers, in their dtypes (bytes): what
        moves between instances."""
        if self.cfg.kv_layer_dtypes is None:
            return self.model.kv_bytes_per_token(self.cfg.kv_dtype)
        return sum(self.model.kv_layer_bytes(dtype) for dtype in self._kv_dtypes)

    def linear_state_bytes_per_seq(self) -> int:
        """Linear-attention state bytes one sequence holds on the whole instance: each rank holds
        the state of its `linear_num_heads / linear_tp` heads (split over `linear_tp` ranks,
        replicated over the other tp / linear_tp), as plain K x V FP32 states or, with ReplaySSM,
        a checkpoint plus a ring of `replay_ssm_ring` updates (`work_formulas.replay_ssm_state_bytes`)."""
        return int(self._linear_layers * (self._lin_state_bytes + self._lin_conv_bytes) * self.tp)

    def kv_transfer_bytes(self, tokens: int) -> int:
        """Bytes to move one sequence's cache of `tokens` tokens to another instance: its KV (one
        copy, without TP replicas) plus its linear-attention state."""
        return int(tokens * self.model_kv_bytes_per_token() + self.linear_state_bytes_per_seq())

    def weight_bytes(self) -> int:
        """Bytes of the model's weights in the configured dtype (whole instance)."""
        return self.model.weight_bytes(self.cfg.dtype)

    def linear_state_bytes_per_rank(self) -> int:
        """Linear-attention state bytes one sequence holds on one rank (all KDA layers)."""
        return int(self._linear_layers * (self._lin_state_bytes + self._lin_conv_bytes))

    @property
    def devices(self) -> int:
        """Accelerators of one instance: tp x pp."""
        return self.tp * self.pp

    def pipeline_bubble(self) -> float:
        """The bubble fraction of this instance's pipeline (0 without pp)."""
        return pipeline_bubble_fraction(self.pp, self.micro_batches)

    def activation_peak_bytes(self, max_num_seqs: int, max_batched_tokens: int) -> float:
        """Peak bytes of activations of the largest step, whole instance: what vLLM's profiler
        measures by running a dummy step of `max_batched_tokens` tokens and sampling
        `max_num_seqs` rows. Per rank: the MLP's gate/up output and activation (3 x its width
        per rank) and four hidden-state-sized buffers (residual, normed input, attention
        output, QKV), per token, plus FP32 logits and probabilities of `max_num_seqs` rows over
        the whole vocabulary. (Llama-3-8B, 8192 tokens, 256 seqs: 1.15 GiB; vLLM logs 1.19-1.26.)"""
        m = self.model
        width = max(m.intermediate_size if m.num_dense_mlp_layers else 0,
                    (m.experts_per_token + m.num_shared_experts) * m.moe_intermediate_size if m.is_moe else 0)
        per_token = (3 * width // self.tp + 4 * m.hidden_size) * self._act_width
        logits = max_num_seqs * m.vocab_size * LOGITS_BYTES * 2
        return float(self.tp * (max_batched_tokens * per_token + logits))

    def memory_plan(self, gpu_memory_utilization: float, max_num_seqs: int = 0, max_batched_tokens: int = 0) -> MemoryPlan:
        """How much KV cache fits, as vLLM sizes it (all figures for the whole instance):
        reported device memory x tp x pp x `gpu_memory_utilization` - weights - non-torch memory -
        the activation peak of the largest step - linear-attention state slots.

        Hybrid models keep a fixed-size linear-attention state per running sequence; like vLLM's
        state cache for hybrid models, one slot per possible running sequence (`max_num_seqs`) is
        set aside before the paged KV pool is sized. InputError when nothing is left."""
        budget = gpu_memory_utilization * self.accel.usable_memory * self.tp * self.pp
        non_torch = self.tp * self.pp * (NON_TORCH_BYTES_PER_GPU + (TP_NON_TORCH_BYTES_PER_GPU if self.devices > 1 else 0.0))
        activation = self.activation_peak_bytes(max_num_seqs, max_batched_tokens)
        state = max_num_seqs * self.linear_state_bytes_per_seq()
        free = budget - self.weight_bytes() - non_torch - activation - state
        if free <= 0:
            slots = f", {max_num_seqs} linear-state slots ({state / 1e9:.1f} GB)" if state else ""
            raise InputError(
                "hardware",
                f"{self.model.name} weights ({self.weight_bytes() / 1e9:.1f} GB in {self.cfg.dtype}){slots}, "
                f"non-torch memory ({non_torch / 1e9:.1f} GB) and activations ({activation / 1e9:.1f} GB) do not fit in "
                f"{gpu_memory_utilization} x {self.accel.usable_memory / 1e9:.1f} GB x tp={self.tp}"
                f"{f' x pp={self.pp}' if self.pp > 1 else ''} of {self.accel.name}",
                "a larger tp, a larger accelerator, a smaller dtype, fewer engine.max_num_seqs "
                "or max_batched_tokens, or a higher gpu_memory_utilization",
            )
        per_token = self.kv_bytes_per_token()
        tokens = 2**62 if per_token == 0 else int(free // per_token)  # no full attention: KV never limits
        return MemoryPlan(budget, float(self.weight_bytes()), non_torch, activation, float(state), free, per_token, tokens)

    def kv_capacity_tokens(self, gpu_memory_utilization: float, max_num_seqs: int = 0, max_batched_tokens: int = 0) -> int:
        """Tokens of KV cache that fit one instance (`memory_plan`)."""
        return self.memory_plan(gpu_memory_utilization, max_num_seqs, max_batched_tokens).kv_tokens

    # -- one operator call (per layer, one rank): what a profile measures, for checks against it --

    def gemm_call_s(self, name: str, tokens: int) -> float:
        """Seconds of one call of the dense GEMM class `name` (e.g. "qkv", "attn_o", "mlp_gate_up",
        "mlp_down") over `tokens` tokens on one rank, as `dense_gemm` counts it."""
        g = next((g for g in self._dense_gemms if g.name == name), None)
        if g is None:
            raise InputError("gemm", f"unknown GEMM class {name!r}", f"one of {[g.name for g in self._dense_gemms]}")
        one = _Gemm(g.name, g.n, g.k, 1)
        measured = self._calibrated.gemm(g.n, g.k, tokens) if self._calibrated else None
        if measured is None:
            return self._gemm_roofline(one, tokens)
        return max(measured, self._gemm_ideal(one, tokens))

    def small_op_call_s(self, kernel: str, tokens: int) -> float:
        """Seconds of one call of the small kernel `kernel` (SMALL_OP_KERNELS) over `tokens`."""
        for name, shape, elements, _ in self._small_op_kernels(tokens):
            if name == kernel and (kernel != "silu_mul" or not self.model.num_moe_layers):
                return self._small_op_s(kernel, shape, elements)
        raise InputError("small op", f"{kernel!r} is not a small op of {self.model.name}", f"one of {SMALL_OP_KERNELS}")

    def decode_attention_layer_s(self, seqs: int, context_per_seq: int) -> float:
        """Seconds of one layer's decode attention: `seqs` sequences of `context_per_seq` tokens."""
        return self._attention_time(StepWork.decode(seqs, seqs * context_per_seq)) / self._full_layers

    def prefill_attention_layer_s(self, new: int, cached: int = 0) -> float:
        """Seconds of one layer's prefill attention of one chunk of `new` tokens after `cached`."""
        return self._prefill_attention_time(StepWork.prefill_chunk(new, cached)) / self._full_layers

    def all_reduce_s(self, payload_bytes: float) -> float:
        """Seconds of one all-reduce of `payload_bytes` over the instance's TP ranks (0 at tp 1)."""
        if self.tp == 1:
            return 0.0
        measured = self._calibrated.all_reduce(self.tp, payload_bytes) if self._calibrated else None
        return measured if measured is not None else self._all_reduce(payload_bytes)

    # -- the step --

    def step(self, work: StepWork) -> StepCost:
        """Seconds of one engine step doing `work` (device time per rank + host overheads).

        With the GLM-class knobs on, `by_op` has the EXTRA_OPS that apply (Layer Split's KV
        broadcast, EP's all-to-all, pipeline stage transfers) and, with pp > 1, every operator is
        the pipelined step's: (m + p - 1) slots of the slowest stage's micro-batch (`_pipelined`)."""
        if self._plain:
            ops = self._op_times(work)
            device = sum(ops)
            by_op = dict(zip(OPS, ops))
        else:
            by_op = self._pipelined(work) if self.pp > 1 else self._glm_op_times(work)
            device = sum(by_op.values())
        host = self._host_s(work)
        return StepCost(device_s=device, host_s=host, total_s=self._with_host(device, host), by_op=by_op)

    def _glm_op_times(self, work: StepWork) -> dict[str, float]:
        """Seconds (one rank) of each operator of OPS, plus the EXTRA_OPS the knobs add."""
        by_op = dict(zip(OPS, self._op_times(work)))
        if self.layer_split > 1:
            by_op["kv_broadcast"] = self._kv_broadcast_time(work, sum(by_op.values()))
        if self.moe_ep > 1:
            by_op["ep_all_to_all"] = self._ep_all_to_all_time(work.tokens)
        return by_op

    def _pipelined(self, work: StepWork) -> dict[str, float]:
        """A step over `pp` stages in `micro_batches` micro-batches (GPipe schedule): m + p - 1
        slots, each the slowest stage's time on one micro-batch (its share of the layers' operators,
        the LM head and sampler counted on it too: an upper bound, the last stage carries them) plus
        the activation hand-over to the next stage. Each stage idles p - 1 of the slots: the bubble
        fraction (p - 1) / (m + p - 1) (`pipeline_bubble_fraction`)."""
        m = self.micro_batches
        micro = _micro_batch(work, m)
        ops = self._glm_op_times(micro)
        share = max(stage_layers(self.model.num_layers, self.pp)) / self.model.num_layers
        slots = m + self.pp - 1
        out = {name: slots * (t if name in ("lm_head", "sampler") else share * t) for name, t in ops.items()}
        out["pp_transfer"] = slots * self.stage_transfer_s(micro.tokens)
        return out

    def stage_transfer_s(self, tokens: int) -> float:
        """Seconds to hand `tokens` tokens' hidden states from one pipeline stage to the next over
        the instance's link (point to point: bytes / link bandwidth + one message latency)."""
        if tokens == 0 or self.pp == 1:
            return 0.0
        link = self.tp_link
        assert link is not None  # checked in __init__
        return tokens * self.model.hidden_size * self._act_width / link.bandwidth + link.latency

    def _kv_broadcast_time(self, work: StepWork, compute_s: float) -> float:
        """Layer Split: before a full-attention layer runs, its owner broadcasts that layer's KV of
        the step's context (decode sequences' context, prefill chunks' cached + new tokens) to the
        other `layer_split - 1` ranks of its group: per layer, bytes / (link bytes/s x collective
        efficiency) + ceil(log2 g) message latencies (a pipelined tree broadcast). As in
        vllm-ascend's KVPP (two scratch buffers, one layer prefetched ahead), layer l's broadcast
        overlaps the compute since the previous full-attention layer (an F-th of the step's other
        operators, `compute_s`); the first layer's is exposed. Returns the exposed seconds."""
        tokens = work.decode_context_tokens + work.prefill_context_tokens
        if tokens == 0:
            return 0.0
        link = self.tp_link
        assert link is not None
        rate = link.bandwidth * self.cfg.efficiency.collective
        hops = math.ceil(math.log2(self.layer_split))
        per_layer = [tokens * nbytes / rate + hops * link.latency for nbytes in self._kv_layer_bytes]
        hidden = compute_s / self._full_layers
        return per_layer[0] + sum(max(0.0, b - hidden) for b in per_layer[1:])

    def _ep_all_to_all_time(self, tokens: int) -> float:
        """Expert parallelism: per MoE layer a dispatch and a combine all-to-all over the `moe_ep`
        ranks. Each rank starts from its 1/ep share of the step's tokens (data-parallel attention
        style) and sends the (ep - 1)/ep of its routed copies (k per token) that go to other ranks:
        bytes / (link bytes/s x collective efficiency) + (ep - 1) message latencies, each way."""
        if tokens == 0:
            return 0.0
        m, ep, link = self.model, self.moe_ep, self.tp_link
        assert link is not None
        moved = tokens / ep * m.experts_per_token * m.hidden_size * self._act_width * (ep - 1) / ep
        one_way = moved / (link.bandwidth * self.cfg.efficiency.collective) + (ep - 1) * link.latency
        return m.num_moe_layers * 2 * one_way

    def decode_step_s(self, seqs: int, context_tokens: int) -> float:
        """Seconds of a decode-only step: `step(StepWork.decode(seqs, context_tokens)).total_s`.

        The engine's hot path (runs of identical decode steps) calls this millions of times on a
        long trace; it skips building the per-op mapping and the StepCost. The same sum of the same
        terms as `step`, so the result is bit-identical."""
        work = StepWork.decode(seqs, context_tokens)
        if not self._plain:
            return self.step(work).total_s
        host = self._decode_host_cache.get(seqs)
        if host is None:
            host = self._decode_host_cache[seqs] = self._host_s(work)
        return self._with_host(sum(self._op_times(work)), host)

    def _with_host(self, device: float, host: float) -> float:
        """A step's seconds from its device and host seconds (`HostOverheadConfig.overlap`)."""
        if self.cfg.host.overlap == "async":
            return max(device, host) + self.cfg.host.async_residue_s
        return device + host

    # -- fast path: runs of decode-only steps (kept apart: exact by construction, see the test) --

    def decode_run_ends(
        self, seqs: int, context_tokens: int, start_s: float, steps: int, horizon_s: float
    ) -> list[float]:
        """End times (s) of back-to-back decode-only steps of `seqs` sequences from `start_s`: step i
        (from 0) has `context_tokens + i * seqs` context tokens and ends at the previous end +
        `decode_step_s(seqs, that context)`. At most `steps` ends; none after the first at or after
        `horizon_s`. Bit for bit `decode_run_ends_stepwise` (tests/sim/test_decode_run_ends.py).

        Within a run only the roofline's decode attention depends on the context, so the other
        terms are evaluated once per batch size and the same sum is redone per step with the new
        attention term. A calibrated attention term, or terms for which the shortcut does not give
        `decode_step_s` exactly (`_decode_run_terms_of`), take the step-by-step path."""
        terms = self._decode_run_terms.get(seqs, ())
        if terms == ():
            terms = self._decode_run_terms[seqs] = self._decode_run_terms_of(seqs, context_tokens)
        if terms is None:
            return decode_run_ends_stepwise(self.decode_step_s, seqs, context_tokens, start_s, steps, horizon_s)
        # `_decode_run_step_s` inlined (the hot loop of a long trace): the same expressions in the
        # same order, so the same bits.
        dense, linear, moe, lm, collective, small, sampler, host = terms
        c_flops, c_bytes, c_seq = self._decode_coeffs
        floor = self._decode_floor
        per_seq = seqs * c_seq
        overlap = self.cfg.host.overlap == "async"
        residue = self.cfg.host.async_residue_s
        ends: list[float] = []
        append = ends.append
        t, context = start_s, context_tokens
        for _ in range(steps):
            attention = max(context * c_flops, context * c_bytes + per_seq, floor)
            device = sum((dense, attention, linear, moe, lm, collective, small, sampler))
            t = t + (max(device, host) + residue if overlap else device + host)
            append(t)
            if t >= horizon_s:
                break
            context += seqs
        return ends

    def _decode_run_terms_of(self, seqs: int, context_tokens: int) -> tuple[float, ...] | None:
        """The context-independent terms of a decode step of `seqs` sequences (dense, linear
        attention, MoE, LM head, collectives, small ops, sampler, host; s), or None when the
        shortcut does not apply: calibrated decode attention, or (a guard against cost terms the shortcut does not know) a
        result other than `decode_step_s`'s at two probe contexts."""
        if not self._plain or self._full_layers == 0 or (
            self._calibrated is not None and self._calibrated.decode_covered
        ):
            return None  # technique knobs (decode_step_s goes through step()) or calibrated attention
        self.decode_step_s(seqs, context_tokens)  # fills the host-time memo
        dense, _, linear, moe, lm, collective, small, sampler = self._op_times(StepWork.decode(seqs, context_tokens))
        terms = (dense, linear, moe, lm, collective, small, sampler, self._decode_host_cache[seqs])
        for probe in (context_tokens, context_tokens + 1021 * seqs):
            if self._decode_run_step_s(terms, seqs, probe) != self.decode_step_s(seqs, probe):
                return None
        return terms

    def _decode_run_step_s(self, terms: tuple[float, ...], seqs: int, context: int) -> float:
        """`decode_step_s(seqs, context)` from the terms of `_decode_run_terms_of`: the roofline's
        decode attention as `_attention_time` computes it (0.0 + x == x for x > 0), then the same
        sum in the same order."""
        dense, linear, moe, lm, collective, small, sampler, host = terms
        c_flops, c_bytes, c_seq = self._decode_coeffs
        attention = max(context * c_flops, context * c_bytes + seqs * c_seq, self._decode_floor)
        return self._with_host(sum((dense, attention, linear, moe, lm, collective, small, sampler)), host)

    def _op_times(self, work: StepWork) -> tuple[float, float, float, float, float, float, float, float]:
        """Seconds (one rank) of each operator of OPS, in that order: the one place that says
        what a step's device time is made of. Terms that depend only on token counts are memoised."""
        tokens = work.prefill_tokens + work.decode_seqs
        dense = self._dense_cache.get(tokens)
        if dense is None:
            dense = self._dense_cache[tokens] = self._dense_gemm_time(tokens)
        moe = self._moe_cache.get(tokens)
        if moe is None:
            moe = self._moe_cache[tokens] = self._moe_time(tokens)
        outputs = work.output_tokens
        lm = self._lm_cache.get(outputs)
        if lm is None:
            lm = self._lm_cache[outputs] = (self._lm_head_time(outputs), self._sampler_time(outputs))
        small = self._small_cache.get(tokens)
        if small is None:
            small = self._small_cache[tokens] = self._small_ops_time(tokens)
        collective = self._collective_cache.get((tokens, outputs))
        if collective is None:
            collective = self._collective_cache[tokens, outputs] = self._collective_time(tokens, outputs)
        return (
            dense,
            self._attention_time(work),
            self._linear_attention_time(work),
            moe,
            lm[0],
            collective,
            small,
            lm[1],
        )

    def _host_s(self, work: StepWork) -> float:
        """Host overheads of a step (s): per step, per scheduled sequence, per output token."""
        host = self.cfg.host
        return (
            host.per_step_s
            + host.per_request_s * (work.prefill_seqs + work.decode_seqs)
            + host.per_output_token_s * work.output_tokens
        )

    # -- operators (seconds per step, one rank) --

    def _roofline(self, flops: float, nbytes: float, rate: float) -> float:
        return max(flops / rate, nbytes / self._mem_rate)

    def _gemm_work(self, g: _Gemm, m: int) -> tuple[float, float]:
        """(flops, bytes) of the GEMM class `g` over `m` tokens: weights read once, activations
        read and written once."""
        flops = 2.0 * m * g.n * g.k * g.count
        nbytes = g.count * (g.n * g.k * self._weight_width + m * (g.n + g.k) * self._act_width)
        return flops, nbytes

    def _gemm_roofline(self, g: _Gemm, m: int) -> float:
        """The class's GEMMs at the roofline, each at least one kernel launch."""
        return max(self._roofline(*self._gemm_work(g, m), self._gemm_rate), g.count * self._launch)

    def _gemm_ideal(self, g: _Gemm, m: int) -> float:
        """The same GEMMs at 100 % of peak: the floor no measurement can beat."""
        flops, nbytes = self._gemm_work(g, m)
        return max(flops / self._peak, nbytes / self.accel.hbm_bandwidth)

    def _dense_gemm_time(self, tokens: int) -> float:
        if tokens == 0:
            return 0.0
        total = 0.0
        for g in self._dense_gemms:
            measured = self._calibrated.gemm(g.n, g.k, tokens) if self._calibrated else None
            if measured is None:
                total += self._gemm_roofline(g, tokens)
            else:
                total += max(measured * g.count, self._gemm_ideal(g, tokens))
        return total

    def expected_experts_touched(self, tokens: int) -> float:
        """Distinct routed experts a batch of `tokens` touches per layer, in expectation, when
        each token picks k of E experts uniformly: E * (1 - (1 - k/E)^tokens)."""
        e, k = self.model.num_experts, self.model.experts_per_token
        if e == 0 or tokens == 0:
            return 0.0
        return e * (1.0 - (1.0 - k / e) ** tokens)

    def _moe_time(self, tokens: int) -> float:
        m = self.model
        if not m.is_moe or tokens == 0:
            return 0.0
        touched, routed, width = self._moe_shape(tokens)
        h = m.hidden_size
        if self._calibrated is not None:
            per_expert = max(1, round(routed / touched))
            up = self._calibrated.gemm(2 * width, h, per_expert)
            down = self._calibrated.gemm(h, width, per_expert)
            if up is not None and down is not None:
                ideal = self._moe_layer(tokens, self._peak, self.accel.hbm_bandwidth)
                return m.num_moe_layers * max(touched * (up + down), ideal)
        # grouped expert GEMMs: up and down, at least a launch each
        layer = max(self._moe_layer(tokens, self._gemm_rate, self._mem_rate), 2 * self._launch)
        return m.num_moe_layers * layer

    def _moe_shape(self, tokens: int) -> tuple[float, float, int]:
        """(experts touched, routed token copies, expert width) on one rank per MoE layer. Without
        EP every rank holds a 1/tp slice of every expert; with `moe_ep` = e a rank holds E/e whole
        experts, each split over tp/e ranks, and gets 1/e of the routed copies (uniform routing)."""
        m = self.model
        touched = self.expected_experts_touched(tokens)
        if self.moe_ep == 1:
            return touched, tokens * m.experts_per_token, m.moe_intermediate_size // self.tp
        ep = self.moe_ep
        return touched / ep, tokens * m.experts_per_token / ep, m.moe_intermediate_size // (self.tp // ep)

    def _moe_layer(self, tokens: int, flop_rate: float, byte_rate: float) -> float:
        m = self.model
        touched, routed, width = self._moe_shape(tokens)
        h = m.hidden_size
        flops = 2.0 * routed * 3 * h * width
        nbytes = touched * 3 * h * width * self._weight_width + routed * (2 * h + 3 * width) * self._act_width
        return max(flops / flop_rate, nbytes / byte_rate)

    def _lm_head_time(self, rows: int) -> float:
        if rows == 0:
            return 0.0
        vocab, h = self.model.vocab_size // self.lm_head_tp, self.model.hidden_size
        measured = self._calibrated.gemm(vocab, h, rows) if self._calibrated else None
        flops = 2.0 * rows * vocab * h
        nbytes = vocab * h * self._lm_width + rows * (h * self._act_width + vocab * LOGITS_BYTES)
        if measured is not None:
            return max(measured, flops / self._peak, nbytes / self.accel.hbm_bandwidth)
        return max(self._roofline(flops, nbytes, self._gemm_rate), self._launch)

    def _sampler_time(self, rows: int) -> float:
        """The sampler's passes over the FP32 logits of `rows` emitted tokens (whole vocabulary:
        the logits are gathered before sampling), at least one launch."""
        if rows == 0 or not self.cfg.extras.sampler:
            return 0.0
        nbytes = rows * self.model.vocab_size * LOGITS_BYTES * SAMPLER_LOGIT_PASSES
        return max(nbytes / self._mem_rate, self._launch)

    def _small_ops_time(self, tokens: int) -> float:
        """Per-layer elementwise kernels over `tokens` (see the module docstring), all layers."""
        if tokens == 0 or not self.cfg.extras.small_ops:
            return 0.0
        return sum(count * self._small_op_s(kernel, shape, elements)
                   for kernel, shape, elements, count in self._small_op_kernels(tokens))

    def _small_op_s(self, kernel: str, shape: dict[str, int], elements: float) -> float:
        """One call of a small kernel: a calibrated row where a table has one, else its traffic
        (`elements` read + written) at the kernel's fraction of HBM bandwidth, at least one launch."""
        measured = self._calibrated.small_op(kernel, shape) if self._calibrated else None
        if measured is not None:
            return measured
        return max(elements * self._act_width / self._small_rates[kernel], self._launch)

    def _small_op_kernels(self, tokens: int) -> list[tuple[str, dict[str, int], float, int]]:
        """(kernel, shape on one rank, elements read + written, calls per step) of each small op."""
        m, h, t = self.model, self.model.hidden_size, tokens
        layers = m.num_layers
        ops: list[tuple[str, dict[str, int], float, int]] = [
            ("rms_norm", {"T": t, "D": h}, 2.0 * t * h, 2 * layers),
            ("residual_add", {"T": t, "D": h}, 3.0 * t * h, 2 * layers),
        ]
        if self._full_layers:
            shape = {"T": t, "H": self._heads, "HKV": self._kv_heads, "D": self._qk_dim}
            elements = 2.0 * t * (self._heads + self._kv_heads) * self._qk_dim
            ops.append(("rope", shape, elements, self._full_layers))
        if m.num_dense_mlp_layers:
            width = m.intermediate_size // self.tp
            ops.append(("silu_mul", {"T": t, "D": width}, 3.0 * t * width, m.num_dense_mlp_layers))
        if m.num_moe_layers:  # every routed (and shared) expert's activation, one grouped kernel
            width = m.moe_intermediate_size // self.tp
            rows = t * (m.experts_per_token + m.num_shared_experts)
            ops.append(("silu_mul", {"T": rows, "D": width}, 3.0 * rows * width, m.num_moe_layers))
        return ops

    def _attention_time(self, work: StepWork) -> float:
        if self._full_layers == 0:
            return 0.0
        total = 0.0
        if work.prefill_tokens:
            total += self._prefill_attention_time(work)
        if work.decode_seqs:
            seqs, context = work.decode_seqs, work.decode_context_tokens
            if self._calibrated is not None and self._calibrated.decode_covered:
                total += self._calibrated_decode_attention(seqs, context)
            else:  # the roofline with per-token coefficients folded in (hot path)
                c = self._decode_coeffs
                total += max(context * c[0], context * c[1] + seqs * c[2], self._decode_floor)
        return total

    def _prefill_attention_time(self, work: StepWork) -> float:
        """All full layers' prefill attention. A table's `prefill_attention` rows time one
        sequence's chunk; a step with several prefill chunks is timed as that many chunks of
        their mean size (new tokens and context)."""
        flops, nbytes = self._prefill_attention_work(work)
        seqs = work.prefill_seqs
        measured = None
        if self._calibrated is not None and seqs:
            new = max(1, round(work.prefill_tokens / seqs))
            measured = self._calibrated.prefill_attention(new, max(new, round(work.prefill_context_tokens / seqs)))
        if measured is not None:
            ideal = max(flops / self._peak, nbytes / self.accel.hbm_bandwidth)
            return self._full_layers * max(seqs * measured, ideal)
        return self._full_layers * max(self._roofline(flops, nbytes, self._attn_rate), self._launch)

    def _prefill_attention_work(self, work: StepWork) -> tuple[float, float]:
        """(flops, bytes) of one full-attention layer's prefill attention on one rank."""
        heads = self._heads
        flops = 2.0 * heads * work.prefill_attn_pairs * (self._qk_dim + self._v_dim)
        nbytes = (
            (work.prefill_context_tokens + work.prefill_tokens) * self._kv_bytes_layer
            + work.prefill_tokens * heads * (self._qk_dim + self._v_dim) * self._act_width
        )
        return flops, nbytes

    def _decode_attention_work(self, seqs: int, context: int) -> tuple[float, float]:
        """(flops, bytes) of one full-attention layer's decode attention on one rank: every
        sequence's KV read once; its query in, output out and new KV written."""
        flops, per_context, per_seq = self._decode_attention_terms()
        return flops * context, per_context * context + per_seq * seqs

    def _decode_attention_terms(self) -> tuple[float, float, float]:
        """Flops per context token, bytes per context token, bytes per sequence (one layer)."""
        heads, qk, v = self._heads, self._decode_qk_dim, self._decode_v_dim
        per_seq = heads * (qk + v) * self._act_width + self._kv_bytes_layer
        return 2.0 * heads * (qk + v), float(self._kv_bytes_layer), float(per_seq)

    def _decode_attention_coeffs(self) -> tuple[float, float, float]:
        """Seconds (all full layers) per context token of compute, per context token of memory
        traffic and per sequence of memory traffic: decode attention = max(c0*ctx, c1*ctx + c2*seqs).

        With scaled KV formats (int8, fp8e4m3) each cached element is dequantised once (a multiply
        by its scale, `work_formulas.kv_dequant_flops`), and with a dtype per layer each layer reads
        its own bytes. MLA has no paged-attention kernel here (the kernel is GQA-only): its
        quantised-latent cost is modelled the same way, labelled "modelled" in docs/sim.md."""
        if self.cfg.kv_layer_dtypes is None and not KV_SCALED.get(self.cfg.kv_dtype, False):
            flops, per_context, per_seq = self._decode_attention_terms()
            layers = self._full_layers
            return (
                layers * flops / self._attn_rate,
                layers * per_context / self._mem_rate,
                layers * per_seq / self._mem_rate,
            )
        flops, _, _ = self._decode_attention_terms()
        qo = self._heads * (self._decode_qk_dim + self._decode_v_dim) * self._act_width
        elements = self.model.kv_elements_per_token_per_layer(self.tp)
        dequant = sum(kv_dequant_flops(dtype, elements) if dtype in KV_CACHE_DTYPES else 0 for dtype in self._kv_dtypes)
        kv_bytes = float(sum(self._kv_layer_bytes))
        return (
            (self._full_layers * flops + dequant) / self._attn_rate,
            kv_bytes / self._mem_rate,
            (self._full_layers * qo + kv_bytes) / self._mem_rate,
        )

    def _calibrated_decode_attention(self, seqs: int, context: int) -> float:
        flops, nbytes = self._decode_attention_work(seqs, context)
        measured = self._calibrated.decode_attention(seqs, context) if self._calibrated else None
        if measured is None:
            return max(self._full_layers * self._roofline(flops, nbytes, self._attn_rate), self._decode_floor)
        ideal = max(flops / self._peak, nbytes / self.accel.hbm_bandwidth)
        return self._full_layers * max(measured, ideal)

    def _linear_attention_time(self, work: StepWork) -> float:
        if self._linear_layers == 0:
            return 0.0
        total = 0.0
        d, heads, width = self.model.linear_head_dim, self._lin_heads, self._act_width
        per_seq_state = 2.0 * (self._lin_state_bytes + self._lin_conv_bytes)  # read and write
        if work.prefill_tokens:
            t = work.prefill_tokens
            # three state-sized products per token, plus intra-chunk scores and values 2*C*(K+V)
            flops = t * heads * (6.0 * d * d + 2.0 * KDA_CHUNK * (d + d))
            chunk_states = 2.0 * t / KDA_CHUNK * self._lin_state_bytes  # written, then read back
            nbytes = work.prefill_seqs * per_seq_state + chunk_states + t * self._lin_io_elems * width
            total += self._linear_layers * self._roofline(flops, nbytes, self._attn_rate)
        if work.decode_seqs and self.replay_ring:
            total += self._linear_layers * self._replay_decode_layer_s(work.decode_seqs)
        elif work.decode_seqs:
            b = work.decode_seqs
            flops = b * heads * KDA_DECODE_FLOPS_PER_STATE_ELEMENT * d * d
            nbytes = b * (per_seq_state + self._lin_io_elems * width)
            measured = self._calibrated.kda_decode(b) if self._calibrated else None
            if measured is not None:
                ideal = max(flops / self._state_peak, nbytes / self.accel.hbm_bandwidth)
                total += self._linear_layers * max(measured, ideal)
            else:
                total += self._linear_layers * max(flops / self._state_rate, nbytes / self._mem_rate)
        return total

    def _replay_decode_layer_s(self, seqs: int) -> float:
        """One KDA layer's decode step with ReplaySSM on one rank: the kernel's ring cycle of
        `replay_ssm_ring` steps (`work_formulas.replay_ssm_cycle_bytes` / `_flops`), divided by
        its steps, plus the conv windows read and written, on the FP32 units. Calibration rows of
        the plain kernel do not time it (the roofline is used)."""
        d, heads, ring = self.model.linear_head_dim, self._lin_heads, self.replay_ring
        flops = replay_ssm_cycle_flops(seqs, heads, d, d, ring) / ring
        nbytes = replay_ssm_cycle_bytes(seqs, heads, d, d, ring) / ring + seqs * 2.0 * self._lin_conv_bytes
        return max(flops / self._state_rate, nbytes / self._mem_rate)

    def _all_reduce(self, payload: float, ranks: int | None = None) -> float:
        """Seconds of one ring all-reduce of `payload` bytes over `ranks` (default tp) ranks of the
        TP link (module docstring)."""
        tp, link = (self.tp if ranks is None else ranks), self.tp_link
        assert link is not None
        moved = 2.0 * (tp - 1) / tp * payload
        if link.all_reduce_bus_bandwidth is not None:
            floor = link.all_reduce_floor_s if link.all_reduce_floor_s is not None else 2 * (tp - 1) * link.latency
            return floor + moved / link.all_reduce_bus_bandwidth
        return moved / (link.bandwidth * self.cfg.efficiency.collective) + 2 * (tp - 1) * link.latency

    def _collective_time(self, tokens: int, output_tokens: int) -> float:
        tp = self.tp
        if tp == 1 or (tokens == 0 and output_tokens == 0):
            return 0.0
        link = self.tp_link
        assert link is not None  # checked in __init__
        rate = link.bandwidth * self.cfg.efficiency.collective
        total = 0.0
        if tokens and self._plain_collectives:
            payload = tokens * self.model.hidden_size * self._act_width
            measured = self._calibrated.all_reduce(tp, payload) if self._calibrated else None
            total += 2 * self.model.num_layers * (measured if measured is not None else self._all_reduce(payload))
        elif tokens:
            total += self._class_all_reduces(tokens * self.model.hidden_size * self._act_width)
        head = self.lm_head_tp
        if output_tokens and head > 1:  # vocab-parallel LM head: gather the logit shards
            payload = output_tokens * self.model.vocab_size * LOGITS_BYTES
            total += (head - 1) / head * payload / rate + (head - 1) * link.latency
        return total

    def _class_all_reduces(self, payload: float) -> float:
        """All-reduces of one step with a parallel degree per layer class: after full attention
        over tp ranks, after linear attention over `linear_tp` (none when 1), after a dense MLP over
        tp, after an MoE layer over the tp / moe_ep ranks that split each expert (none when 1; EP's
        all-to-all is `ep_all_to_all`)."""
        m = self.model

        def all_reduce(ranks: int) -> float:
            if ranks == 1:
                return 0.0
            measured = self._calibrated.all_reduce(ranks, payload) if self._calibrated else None
            return measured if measured is not None else self._all_reduce(payload, ranks)

        return (self._full_layers * all_reduce(self.tp) + self._linear_layers * all_reduce(self.linear_tp)
                + m.num_dense_mlp_layers * all_reduce(self.tp)
                + m.num_moe_layers * all_reduce(self.tp // self.moe_ep))


def _micro_batch(work: StepWork, micro_batches: int) -> StepWork:
    """One of `micro_batches` equal micro-batches of `work` (every count divided, rounded up)."""
    counts = (getattr(work, f.name) for f in dataclasses.fields(work))
    return StepWork(*(math.ceil(count / micro_batches) for count in counts))


def decode_run_ends_stepwise(
    decode_step_s: Callable[[int, int], float], seqs: int, context_tokens: int, start_s: float, steps: int,
    horizon_s: float,
) -> list[float]:
    """`CostModel.decode_run_ends` one `decode_step_s` call per step: its definition, and what any
    cost model may use (s)."""
    ends: list[float] = []
    t, context = start_s, context_tokens
    for _ in range(steps):
        t = t + decode_step_s(seqs, context)
        ends.append(t)
        if t >= horizon_s:
            break
        context += seqs
    return ends


def _bucket(value: float) -> float:
    """`value` rounded to the nearest power of 2^(1/4) (steps of ~19 %): the granularity at which
    the nearest calibration row is chosen and memoised."""
    return 2.0 ** (round(4.0 * math.log2(max(value, 1.0))) / 4.0)


class _CalibratedKernel:
    """One kernel family of a table, bound to the first of `dtypes` it has rows for on the device.

    Exact shapes are looked up directly; otherwise the nearest rows are chosen once per shape
    bucket and the query's own shape is scaled at their rate (results are exact per shape, while
    the search runs once per bucket). Results are memoised per shape (the memo is cleared when it
    reaches `MEMO_LIMIT` entries, to bound memory over long runs)."""

    MEMO_LIMIT = 1 << 16

    def __init__(self, table: CalibrationTable, kernel: str, dtypes: tuple[str, ...], device: str,
                 peaks: tuple[float, float]) -> None:
        self.table, self.kernel, self.device, self.peaks = table, kernel, device, peaks
        self.dtype = next((d for d in dtypes if table.covers(kernel, d, device)), None)
        self._nearest: dict[tuple[tuple[str, float], ...], list[CalibrationRow]] = {}
        self._memo: dict[tuple[int, ...], float | None] = {}

    @property
    def active(self) -> bool:
        return self.dtype is not None

    def time(self, shape: dict[str, int]) -> float | None:
        """Seconds of one call at `shape` (callers name the fields in a fixed order), or None."""
        if self.dtype is None:
            return None
        memo_key = tuple(shape.values())
        if memo_key in self._memo:
            return self._memo[memo_key]
        result = self._measure(shape)
        if len(self._memo) >= self.MEMO_LIMIT:
            self._memo.clear()
        self._memo[memo_key] = result
        return result

    def _measure(self, shape: dict[str, int]) -> float | None:
        assert self.dtype is not None
        key = shape_key(shape)
        measured = self.table.exact(self.kernel, self.dtype, self.device, key)
        if measured is not None:
            return measured
        measured = self.table.along_line(self.kernel, self.dtype, self.device, shape, self.peaks)
        if measured is not None:
            return measured
        bucket = tuple((name, _bucket(value)) for name, value in key)
        rows = self._nearest.get(bucket)
        if rows is None:
            rows = self._nearest[bucket] = self.table.nearest(self.kernel, self.dtype, self.device, dict(bucket))
        if not rows:
            return None
        return min(scale(row, shape, self.peaks) for row in rows)


class _Calibration:
    """The calibration table as the cost model uses it: which kernel stands for which operator."""

    def __init__(self, cost: CostModel) -> None:
        table, accel, cfg = cost.calibration, cost.accel, cost.cfg
        assert table is not None
        device, bw = accel.calibration_device, accel.hbm_bandwidth
        self._cost = cost
        peaks = (cost._peak, bw)
        if cfg.dtype in W8A8_DTYPES:
            # W8A8 tables may be INT8 or FP8 (the same tensor-core rate on Hopper): one stands in for the other.
            others = tuple(d for d in W8A8_DTYPES if d != cfg.dtype)
            self._matmul = _CalibratedKernel(table, "w8a8_matmul", (cfg.dtype, *others), device, peaks)
        else:
            self._matmul = _CalibratedKernel(table, "matmul", _table_dtypes(cfg.dtype), device, peaks)
        kv_dtypes = (*_table_dtypes(cfg.kv_dtype), *_table_dtypes(cfg.dtype))
        self._attention = _CalibratedKernel(table, "paged_decode_attention", kv_dtypes, device, peaks)
        self._prefill = _CalibratedKernel(table, "prefill_attention", kv_dtypes, device, peaks)
        act_dtypes = _table_dtypes("fp32" if cfg.dtype == "fp32" else "bf16")
        self._small = {k: _CalibratedKernel(table, k, act_dtypes, device, peaks) for k in SMALL_OP_KERNELS}
        self._all_reduce = _CalibratedKernel(table, "all_reduce", act_dtypes, device, peaks)
        # The KDA decode kernel keeps its state and arithmetic in FP32.
        self._kda = _CalibratedKernel(table, "kda_decode", ("fp32", _TABLE_DTYPE[cfg.dtype]), device,
                                      (cost._state_peak, bw))
        ops = set()
        if self._matmul.active:
            ops |= {"dense_gemm", "lm_head"} | ({"moe_experts"} if cost.model.is_moe else set())
        self.decode_covered = self._attention.active and bool(cost._full_layers)
        if (self.decode_covered or self._prefill.active) and cost._full_layers:
            ops.add("attention")
        if any(kernel.active for kernel in self._small.values()) and cost.cfg.extras.small_ops:
            ops.add("small_ops")
        if self._all_reduce.active and cost.tp > 1:
            ops.add("tp_collectives")
        if self._kda.active and cost._linear_layers:
            ops.add("linear_attention")
        self.ops = frozenset(ops)

    def gemm(self, n: int, k: int, m: int) -> float | None:
        """Seconds of one C[m, n] = A[m, k] @ W[k, n]."""
        return self._matmul.time({"M": m, "N": n, "K": k})

    def decode_attention(self, seqs: int, context: int) -> float | None:
        """Seconds of one layer's decode attention over `seqs` sequences (mean context per seq)."""
        cost = self._cost
        shape = {
            "B": seqs,
            "H": cost._heads,
            "HKV": cost._kv_heads,
            "D": cost._kv_dim,
            "T": max(1, math.ceil(context / seqs)),
        }
        return self._attention.time(shape)

    def prefill_attention(self, new: int, context: int) -> float | None:
        """Seconds of one layer's prefill attention of one chunk of `new` tokens whose sequence
        holds `context` tokens after it (cached + new)."""
        cost = self._cost
        shape = {"Q": new, "T": context, "H": cost._heads, "HKV": cost._kv_heads, "D": cost._kv_dim}
        return self._prefill.time(shape)

    def small_op(self, kernel: str, shape: dict[str, int]) -> float | None:
        """Seconds of one call of a per-layer elementwise kernel (SMALL_OP_KERNELS)."""
        return self._small[kernel].time(shape)

    def all_reduce(self, ranks: int, payload_bytes: float) -> float | None:
        """Seconds of one all-reduce of `payload_bytes` over `ranks` ranks (rows count elements
        of 2 bytes)."""
        return self._all_reduce.time({"W": ranks, "N": max(1, round(payload_bytes / 2))})

    def kda_decode(self, seqs: int) -> float | None:
        """Seconds of one layer's KDA decode step over `seqs` sequences."""
        d = self._cost.model.linear_head_dim
        return self._kda.time({"B": seqs, "H": self._cost._lin_heads, "K": d, "V": d})
