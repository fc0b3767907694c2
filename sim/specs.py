"""Hardware and model specs: accelerators, links and models, as frozen dataclasses loaded from TOML.

The catalog ships in `sim/catalog/{accelerators,links,models}/*.toml` (each file cites its public
source); users add their own by passing a path instead of a name. Units: FLOP/s, bytes/s, bytes,
seconds.

A model is a stack of layers, each with full attention (grouped-query attention, or multi-head
latent attention when `kv_lora_rank > 0`) or linear attention (Kimi Delta Attention, KDA), followed
by a dense MLP (the first `first_k_dense_layers` layers, or every layer when `num_experts == 0`) or
a mixture of experts (routed experts plus optional shared experts). Everything derived here
(parameters, weight bytes, KV bytes per token, linear-attention state per sequence) follows from
those fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import StrictInt, field_validator
from pydantic.dataclasses import dataclass

from infralab.config_io import STRICT, load_toml, validate
from infralab.input_files import parse_toml
from infralab.errors import InputError
from infralab.field_types import MAX_TOKENS, Bool, RealNumber, int_bounds, number_bounds
from infralab.sim.config import looks_like_path
from infralab.work_formulas import KV_CACHE_DTYPES, kv_cache_bytes

# Strict, bounded fields (infralab.field_types); limits in docs/sim.md. Widths and counts of a
# model stay below 2**20 (every public model is far below), layers below 10,000.
Width: TypeAlias = Annotated[StrictInt, int_bounds(gt=0, le=1 << 20)]
OptionalWidth: TypeAlias = Annotated[StrictInt, int_bounds(ge=0, le=1 << 20)]  # 0 = the feature is absent
Layers: TypeAlias = Annotated[StrictInt, int_bounds(gt=0, le=10_000)]
FlopsPerSecond: TypeAlias = Annotated[RealNumber, number_bounds(ge=1.0, le=1e18)]
BytesPerSecond: TypeAlias = Annotated[RealNumber, number_bounds(ge=1.0, le=1e16)]
Bytes: TypeAlias = Annotated[RealNumber, number_bounds(ge=1.0, le=1e16)]

#: Bytes per element of each data type the specs and the cost model know. Names are the kernels'
#: (`infralab.work_formulas.KV_CACHE_DTYPES`): FP8 is "fp8e4m3" everywhere, never "fp8".
DTYPE_BYTES: Mapping[str, int] = MappingProxyType(
    {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8e4m3": 1, "int8": 1}
)

LayerType = Literal["full", "linear"]


# ---- accelerators and links ------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class AcceleratorSpec:
    """One accelerator: dense peak FLOP/s per dtype (no structured sparsity), HBM bandwidth
    (bytes/s), capacity (bytes: the datasheet's, and the figure the device reports). `calibration_device` is the device name calibration tables use
    for it (what torch reports, e.g. "NVIDIA H200")."""

    name: str
    peak_flops: dict[str, FlopsPerSecond] = dataclasses.field(hash=False)
    hbm_bandwidth: BytesPerSecond
    hbm_capacity: Bytes
    calibration_device: str
    # Bytes the device reports as its total (cudaMemGetInfo; vLLM's "total_gpu_memory"), a little
    # below the datasheet's figure; None: `hbm_capacity`. Engines size their KV cache from it.
    reported_memory: Bytes | None = None
    # What the roofline leaves out, measured on this accelerator (None: the cost model's defaults,
    # fitted on the A100; `RooflineExtrasConfig` overrides either): the least time of any kernel, and
    # of one layer's decode attention (seconds).
    kernel_launch_s: Annotated[RealNumber, number_bounds(ge=0.0, le=1.0)] | None = None
    # The fraction of `hbm_bandwidth` a GEMM streaming its weights reaches at decode (bytes / time
    # of decode-shaped GEMMs on this part); None: the cost model's default.
    memory_efficiency: Annotated[RealNumber, number_bounds(gt=0.0, le=1.0)] | None = None
    decode_attention_floor_s: Annotated[RealNumber, number_bounds(ge=0.0, le=1.0)] | None = None
    source: str = ""
    notes: str = ""

    @property
    def usable_memory(self) -> float:
        """Bytes an engine sizes memory from: `reported_memory`, else `hbm_capacity`."""
        return self.reported_memory if self.reported_memory is not None else self.hbm_capacity

    @field_validator("peak_flops")
    @classmethod
    def _known_dtypes(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(DTYPE_BYTES))
        if unknown:
            raise ValueError(f"unknown dtype(s) {unknown}; known: {sorted(DTYPE_BYTES)}")
        if not value:
            raise ValueError("at least one dtype")
        return value

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for `dtype`; InputError when this accelerator has no figure for it."""
        try:
            return self.peak_flops[dtype]
        except KeyError:
            raise InputError(
                f"accelerator {self.name}: peak_flops.{dtype}",
                f"no peak figure for dtype {dtype!r} (the device may not support it)",
                f"one of {sorted(self.peak_flops)}",
            ) from None


@dataclass(frozen=True, config=STRICT)
class CollectiveCurve:
    """One collective over one number of ranks as NCCL runs it on a link: seconds = `floor_s` +
    bytes moved per rank / `bus_bandwidth` (nccl-tests' bus-bandwidth convention: 2(w-1)/w x the
    message for an all-reduce, (w-1)/w x the whole buffer for an all-gather or reduce-scatter)."""

    floor_s: Annotated[RealNumber, number_bounds(ge=0.0, le=60.0)]
    bus_bandwidth: BytesPerSecond


@dataclass(frozen=True, config=STRICT)
class CustomAllReduceSpec:
    """An engine's own all-reduce for small messages over peer-to-peer loads (vLLM's
    csrc/custom_all_reduce.cuh, which SGLang adopted): one stage (every rank reads every peer's
    buffer) or two (reduce-scatter then all-gather), chosen by world size and size as that kernel
    chooses; each stage pays `stage_floor_s` (its launch and the flag barrier across ranks), bytes
    flow at the link's bandwidth x the collective efficiency. Used for messages under `max_bytes`
    on `world_sizes` ranks (vLLM: < 8 MiB on 2, 4, 6 or 8 fully connected GPUs), NCCL otherwise."""

    stage_floor_s: Annotated[RealNumber, number_bounds(ge=0.0, le=60.0)]
    max_bytes: Annotated[StrictInt, int_bounds(gt=0, le=1 << 40)] = 8 * 2**20
    world_sizes: tuple[Annotated[StrictInt, int_bounds(ge=2, le=1024)], ...] = (2, 4, 6, 8)
    source: str = ""


@dataclass(frozen=True, config=STRICT)
class LinkSpec:
    """A point-to-point link: `bandwidth` in bytes/s per direction, `latency` in seconds per
    message (the fixed cost a transfer or one collective step pays before bytes flow), and
    optionally measured collective curves."""

    name: str
    bandwidth: BytesPerSecond
    latency: Annotated[RealNumber, number_bounds(ge=0.0, le=60.0)]
    # Measured NCCL curves over this interconnect, by number of ranks ("2", "4", "8"): the
    # all-reduce's, and the all-gather's (also timing reduce-scatter and all-to-all, the other ring
    # collectives). A world size not in a table takes the nearest one's curve. Without a table the
    # cost model uses `bandwidth` x collective efficiency and `latency` per ring step.
    all_reduce: dict[str, CollectiveCurve] | None = dataclasses.field(default=None, hash=False)
    all_gather: dict[str, CollectiveCurve] | None = dataclasses.field(default=None, hash=False)
    custom_all_reduce: CustomAllReduceSpec | None = None
    source: str = ""
    notes: str = ""

    @field_validator("all_reduce", "all_gather")
    @classmethod
    def _world_sizes(cls, value: dict[str, CollectiveCurve] | None) -> dict[str, CollectiveCurve] | None:
        for key in value or {}:
            if not key.isdigit() or int(key) < 2:
                raise ValueError(f"table keys are numbers of ranks (2, 4, 8, ...), not {key!r}")
        return value


# ---- models ------------------------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class ModelSpec:
    """A decoder-only transformer, possibly MoE, possibly hybrid (full + linear attention layers).

    Full-attention layers are grouped-query attention (`num_heads` query heads, `num_kv_heads` KV
    heads of `head_dim`) unless `kv_lora_rank > 0`: then they are multi-head latent attention (MLA,
    DeepSeek-V2 style) whose KV cache per token and layer is the compressed latent
    (`kv_lora_rank + qk_rope_head_dim` elements) and whose heads use `qk_nope_head_dim +
    qk_rope_head_dim` for queries/keys and `v_head_dim` for values.

    Linear-attention layers are KDA (gated delta rule with per-channel decay): `linear_num_heads`
    heads with key = value head dim `linear_head_dim`; the recurrent state per sequence is
    heads x K x V, plus a short causal convolution (kernel `linear_conv_kernel`) on q, k and v.

    Sparse "indexed" attention (DeepSeek Sparse Attention's indexer, as GLM-5.3-Flash's
    "indexed_attention" layers run it), on when `index_topk > 0`, applies to every full-attention
    layer: an indexer of `index_n_heads` heads of `index_head_dim` scores the cached tokens, pooled
    in groups of `index_kpool` (one key per pool), for each query token, and attention then runs
    over the `index_topk` selected tokens only. The full latent KV is still cached (KV bytes per
    token unchanged). Cost terms: `sim/cost/attention.py`; docs/sim.md "Indexed (sparse) attention".

    `layer_types` has one entry per layer; an empty tuple means every layer is full attention.
    """

    name: str
    source: str  # citation of the public config the figures come from
    num_layers: Layers
    hidden_size: Width
    num_heads: Width
    num_kv_heads: Width
    head_dim: Width
    vocab_size: Annotated[StrictInt, int_bounds(gt=0, le=100_000_000)]
    intermediate_size: OptionalWidth  # dense MLP width (0 when no layer is dense)
    # Longest sequence (tokens) the model was trained for: its public config's
    # `max_position_embeddings` (or the context its card states). A prompt longer than it is an
    # input error; None (unknown) skips that check.
    context_length: Annotated[StrictInt, int_bounds(gt=0, le=MAX_TOKENS)] | None = None
    num_experts: OptionalWidth = 0  # routed experts per MoE layer; 0 = dense model
    experts_per_token: OptionalWidth = 0
    moe_intermediate_size: OptionalWidth = 0  # width of one routed (and one shared) expert
    num_shared_experts: OptionalWidth = 0
    first_k_dense_layers: Annotated[StrictInt, int_bounds(ge=0, le=10_000)] = 0  # leading layers with a dense MLP in an MoE model
    tie_word_embeddings: Bool = False
    layer_types: tuple[LayerType, ...] = ()
    # multi-head latent attention (0 = plain GQA)
    kv_lora_rank: OptionalWidth = 0
    q_lora_rank: OptionalWidth = 0  # 0 = queries projected directly from the hidden state
    qk_nope_head_dim: OptionalWidth = 0
    qk_rope_head_dim: OptionalWidth = 0
    v_head_dim: OptionalWidth = 0
    # linear attention (KDA)
    linear_num_heads: OptionalWidth = 0
    linear_head_dim: OptionalWidth = 0  # K = V head dim
    linear_conv_kernel: OptionalWidth = 0  # short-conv kernel size (0 = none)
    # sparse indexed attention (0 = off: every full layer attends its whole context)
    index_topk: OptionalWidth = 0  # tokens each query attends (a multiple of index_kpool)
    index_n_heads: OptionalWidth = 0
    index_head_dim: OptionalWidth = 0
    index_kpool: Annotated[StrictInt, int_bounds(ge=1, le=1 << 20)] = 1  # tokens per pooled indexer key (1 = no pooling)
    notes: str = ""

    def __post_init__(self) -> None:
        if not self.layer_types:
            object.__setattr__(self, "layer_types", ("full",) * self.num_layers)

    # -- layer counts --

    @property
    def num_full_attention_layers(self) -> int:
        return sum(1 for kind in self.layer_types if kind == "full")

    @property
    def num_linear_attention_layers(self) -> int:
        return sum(1 for kind in self.layer_types if kind == "linear")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_k_dense_layers if self.is_moe else 0

    @property
    def num_dense_mlp_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    # -- attention geometry --

    @property
    def is_indexed(self) -> bool:
        """Full-attention layers are sparse "indexed" attention (`index_topk > 0`)."""
        return self.index_topk > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width used by full attention (elements)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def attn_v_head_dim(self) -> int:
        """Per-head value width used by full attention (elements)."""
        return self.v_head_dim if self.is_mla else self.head_dim

    def kv_elements_per_token_per_layer(self, tp: int = 1) -> int:
        """Cached elements per token in one full-attention layer (K and V, or MLA's latent) on one
        of `tp` tensor-parallel ranks: KV heads are split across ranks and replicated when tp
        exceeds their number; MLA's latent is replicated on every rank."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * max(1, self.num_kv_heads // tp) * self.head_dim

    # -- parameters --

    def param_counts(self) -> dict[str, int]:
        """Parameters by group (counts, not bytes). Groups: embedding, lm_head, attention (full
        layers' projections and norms), linear_attention (KDA projections, conv, gates, norms),
        dense_mlp, moe_routed (all routed experts), moe_shared, router, norms (per-layer and final
        RMSNorm weights), indexer (the sparse-attention indexers of indexed layers; 0 otherwise)."""
        h, f, lin = self.hidden_size, self.num_full_attention_layers, self.num_linear_attention_layers
        counts = {
            "embedding": self.vocab_size * h,
            "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * h,
            "attention": f * self._full_attention_params(),
            "linear_attention": lin * self._linear_attention_params(),
            "dense_mlp": self.num_dense_mlp_layers * 3 * h * self.intermediate_size,
            "moe_routed": self.num_moe_layers * self.num_experts * 3 * h * self.moe_intermediate_size,
            "moe_shared": self.num_moe_layers * self.num_shared_experts * 3 * h * self.moe_intermediate_size,
            "router": self.num_moe_layers * self.num_experts * h,
            "norms": (2 * self.num_layers + 1) * h,
            "indexer": f * self._indexer_params(),
        }
        return counts

    def _indexer_params(self) -> int:
        """One layer's indexer (transformers' Glm5NextTextIndexer): query projection from the
        query latent (wq_b, or from the hidden state without q_lora_rank), key projection (wk) and
        its LayerNorm (weight and bias), per-head weights (weights_proj), and with pooling the
        pool's position embedding (index_kpool x head_dim) and gate (head_dim x hidden)."""
        if not self.is_indexed:
            return 0
        h, heads, d = self.hidden_size, self.index_n_heads, self.index_head_dim
        q_in = self.q_lora_rank or h
        pool = self.index_kpool * d + d * h if self.index_kpool > 1 else 0
        return q_in * heads * d + h * d + 2 * d + h * heads + pool

    def _full_attention_params(self) -> int:
        h, heads = self.hidden_size, self.num_heads
        if not self.is_mla:
            q_and_o = 2 * h * heads * self.head_dim
            return q_and_o + 2 * h * self.num_kv_heads * self.head_dim
        if self.q_lora_rank:
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * self.qk_head_dim
        else:
            q = h * heads * self.qk_head_dim
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank  # + its norm
        kv_b = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        o = heads * self.v_head_dim * h
        return q + kv_a + kv_b + o

    def _linear_attention_params(self) -> int:
        h, heads, d = self.hidden_size, self.linear_num_heads, self.linear_head_dim
        width = heads * d
        qkv = 3 * h * width
        conv = 3 * width * self.linear_conv_kernel
        gates = 2 * (h * d + d * width)  # decay (f) and output (g) gates, low-rank through d
        beta = h * heads
        o = width * h
        small = heads + width + d  # A_log, dt_bias, output norm
        return qkv + conv + gates + beta + o + small

    @property
    def num_params(self) -> int:
        return sum(self.param_counts().values())

    @property
    def active_params_per_token(self) -> int:
        """Parameters whose weights multiply each token: everything but the embedding table (a
        lookup) and the routed experts a token is not sent to (`experts_per_token` of
        `num_experts` are used)."""
        counts = self.param_counts()
        routed = counts.pop("moe_routed")
        counts.pop("embedding")
        active_routed = routed * self.experts_per_token // self.num_experts if self.is_moe else 0
        return sum(counts.values()) + active_routed

    def weight_bytes(self, dtype: str) -> int:
        """Bytes of all weights when linear layers are stored in `dtype`.

        For 8-bit dtypes (fp8e4m3, int8: W8A8) only the linear layers' matrices (projections, MLPs, experts)
        are 8-bit; embedding, LM head, norms, router, convolutions and gates stay in bf16, as
        common W8A8 checkpoints keep them.
        """
        width = _dtype_bytes(dtype, "weight dtype")
        counts = self.param_counts()
        if width >= 2:
            return int(self.num_params * width)
        quantized = counts["attention"] + counts["dense_mlp"] + counts["moe_routed"] + counts["moe_shared"]
        quantized += self.num_linear_attention_layers * self._linear_quantized_params()
        return int(quantized * width + (self.num_params - quantized) * DTYPE_BYTES["bf16"])

    def _linear_quantized_params(self) -> int:
        width = self.linear_num_heads * self.linear_head_dim
        return 3 * self.hidden_size * width + width * self.hidden_size  # q, k, v and o projections

    # -- caches --

    def kv_bytes_per_token(self, kv_dtype: str, tp: int = 1) -> int:
        """KV-cache bytes one token occupies over all full-attention layers, summed over `tp`
        tensor-parallel ranks (replicas included, see `kv_elements_per_token_per_layer`). The one
        definition: with tp = 1 it is the model's KV (what moves between instances); with the
        instance's tp, what its KV cache holds (`CostModel.kv_bytes_per_token`)."""
        return int(self.num_full_attention_layers * self.kv_layer_bytes(kv_dtype, tp) * tp)

    def kv_layer_bytes(self, kv_dtype: str, tp: int = 1) -> int:
        """Bytes one token occupies in one full-attention layer's cache on one of `tp` ranks. The
        kernels' formats (KV_CACHE_DTYPES) carry a float32 scale per (token, head) and cached
        tensor for the scaled ones (int8, fp8e4m3; `work_formulas.kv_cache_bytes`); MLA caches one
        tensor (the latent) with one "head"."""
        elements = self.kv_elements_per_token_per_layer(tp)
        if kv_dtype not in KV_CACHE_DTYPES:
            return int(elements * _dtype_bytes(kv_dtype, "KV dtype"))
        tensors, heads = (1, 1) if self.is_mla else (2, max(1, self.num_kv_heads // tp))
        return kv_cache_bytes(kv_dtype, tensors, heads, elements // (tensors * heads))

    def linear_state_bytes_per_seq(self, state_dtype: str = "fp32", conv_dtype: str = "bf16") -> int:
        """Recurrent-state bytes one sequence holds over all linear-attention layers: the KDA state
        (heads x K x V in `state_dtype`) plus the short-conv windows of q, k and v (the last
        `linear_conv_kernel - 1` inputs, in `conv_dtype`). Independent of sequence length."""
        heads, d = self.linear_num_heads, self.linear_head_dim
        state = heads * d * d * _dtype_bytes(state_dtype, "state dtype")
        conv = 3 * heads * d * max(self.linear_conv_kernel - 1, 0) * _dtype_bytes(conv_dtype, "conv dtype")
        return int(self.num_linear_attention_layers * (state + conv))


# ---- vision encoders ---------------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class VisionEncoderSpec:
    """A ViT image encoder (the encode stage of multimodal serving): `num_layers` pre-norm
    transformer blocks of width `hidden_size`, `num_heads` heads and an MLP of
    `intermediate_size`, over the patches of a square `image_size` image cut into `patch_size`
    patches. A projector (`projector_layers` linear layers of `hidden_size` x `out_hidden_size`,
    after merging `spatial_merge` x `spatial_merge` patches into one token) maps patches to the
    language model's embedding. Units: pixels, tokens, parameters, FLOPs."""

    name: str
    source: str
    num_layers: Layers
    hidden_size: Width
    num_heads: Width
    intermediate_size: Width
    patch_size: Width
    image_size: Width
    out_hidden_size: Width  # the language model's hidden size the projector maps to
    spatial_merge: Width = 1
    projector_layers: Annotated[StrictInt, int_bounds(ge=0, le=16)] = 2
    notes: str = ""

    @property
    def patches_per_image(self) -> int:
        """Patches the encoder runs over for one image: (image_size / patch_size)^2."""
        side = self.image_size // self.patch_size
        return side * side

    @property
    def tokens_per_image(self) -> int:
        """Embeddings one image adds to the prompt (after spatial merging)."""
        return self.patches_per_image // (self.spatial_merge * self.spatial_merge)

    @property
    def num_params(self) -> int:
        """Parameters: patch embedding (3 x patch^2 x hidden), per block the QKV and output
        projections and the MLP (4h^2 + 2 h f) plus norms, and the projector."""
        h, f = self.hidden_size, self.intermediate_size
        patch = 3 * self.patch_size * self.patch_size * h
        blocks = self.num_layers * (4 * h * h + 2 * h * f + 4 * h)
        merged = h * self.spatial_merge * self.spatial_merge
        projector = merged * self.out_hidden_size + max(self.projector_layers - 1, 0) * self.out_hidden_size ** 2
        return patch + blocks + projector

    def flops_per_image(self) -> float:
        """FLOPs to encode one image: 2 x parameters x patches for the matrix products, plus full
        (bidirectional) attention over the patches, 4 x patches^2 x hidden per layer."""
        p = self.patches_per_image
        return 2.0 * self.num_params * p + 4.0 * self.num_layers * p * p * self.hidden_size


def _dtype_bytes(dtype: str, what: str) -> float:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise InputError(what, f"unknown dtype {dtype!r}", f"one of {sorted(DTYPE_BYTES)}") from None


def _check_model(spec: ModelSpec, source: str) -> None:
    """Consistency checks that span fields; each names the field at fault."""

    def fail(field: str, problem: str, expected: str) -> None:
        raise InputError(f"{source}: {field}", problem, expected)

    if len(spec.layer_types) != spec.num_layers:
        fail("layer_types", f"{len(spec.layer_types)} entries for {spec.num_layers} layers", "one per layer")
    if not spec.is_mla and spec.num_heads % spec.num_kv_heads:
        fail("num_kv_heads", f"{spec.num_heads} heads not divisible by {spec.num_kv_heads}", "a divisor of num_heads")
    if spec.is_mla and not (spec.qk_nope_head_dim + spec.qk_rope_head_dim and spec.v_head_dim):
        fail("v_head_dim", "MLA (kv_lora_rank > 0) needs qk_nope/qk_rope/v head dims", "positive head dims")
    if spec.is_moe:
        if not 0 < spec.experts_per_token <= spec.num_experts:
            fail("experts_per_token", f"{spec.experts_per_token}", f"1..num_experts ({spec.num_experts})")
        if spec.moe_intermediate_size == 0:
            fail("moe_intermediate_size", "0 in an MoE model", "a positive width")
        if spec.first_k_dense_layers > spec.num_layers:
            fail("first_k_dense_layers", f"{spec.first_k_dense_layers}", f"at most num_layers ({spec.num_layers})")
    if spec.num_dense_mlp_layers and spec.intermediate_size == 0:
        fail("intermediate_size", "0 but some layers have a dense MLP", "a positive width")
    if spec.num_linear_attention_layers and not (spec.linear_num_heads and spec.linear_head_dim):
        fail("linear_num_heads", "linear-attention layers need heads and a head dim", "positive integers")
    if spec.is_indexed:
        if not (spec.index_n_heads and spec.index_head_dim):
            fail("index_n_heads", "an indexer (index_topk > 0) needs index_n_heads and index_head_dim",
                 "positive integers")
        if spec.index_topk % spec.index_kpool:
            fail("index_topk", f"{spec.index_topk} not a multiple of index_kpool ({spec.index_kpool})",
                 "a multiple of index_kpool (the indexer selects whole pools)")
        if not spec.num_full_attention_layers:
            fail("index_topk", "an indexer but no full-attention layers", "full-attention layers, or index_topk = 0")
    elif spec.index_n_heads or spec.index_head_dim or spec.index_kpool != 1:
        fail("index_topk", "indexer fields without index_topk", "index_topk > 0, or no indexer fields")


# ---- loading -----------------------------------------------------------------------------------

_KINDS = ("accelerators", "links", "models", "encoders")
_CATALOG_PACKAGE = "infralab.sim.catalog"


def _catalog_files(kind: str) -> dict[str, Any]:
    """Catalog entries of one kind: lower-cased name -> resource (names are matched case-blind)."""
    folder = resources.files(_CATALOG_PACKAGE).joinpath(kind)
    return {
        entry.name[: -len(".toml")].lower(): entry
        for entry in folder.iterdir()
        if entry.name.endswith(".toml")
    }


def catalog_names() -> dict[str, list[str]]:
    """Shipped spec names by kind: {"accelerators": [...], "links": [...], "models": [...]}."""
    names = {}
    for kind in _KINDS:
        folder = resources.files(_CATALOG_PACKAGE).joinpath(kind)
        names[kind] = sorted(e.name[: -len(".toml")] for e in folder.iterdir() if e.name.endswith(".toml"))
    return names


catalog = catalog_names  # short alias used by `infralab sim catalog`


def _read_spec(kind: str, name_or_path: str, base_dir: Path | None) -> tuple[dict[str, Any], str]:
    """The TOML table for a catalog name or a file path, and a label naming it in errors."""
    if looks_like_path(name_or_path):
        path = Path(name_or_path).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        return load_toml(path), str(path)
    files = _catalog_files(kind)
    entry = files.get(name_or_path.lower())
    if entry is None:
        raise InputError(
            f"{kind[:-1]} {name_or_path!r}",
            "unknown name",
            f"one of {', '.join(catalog_names()[kind])}, or a path to a TOML file",
        )
    label = f"catalog {kind}/{entry.name}"
    return parse_toml(entry.read_text(encoding="utf-8"), label, "a spec TOML"), label


def load_accelerator(name_or_path: str, base_dir: Path | None = None) -> AcceleratorSpec:
    """A catalog accelerator by name (case-blind, e.g. "H100") or a TOML file (relative paths
    resolve against `base_dir`)."""
    data, source = _read_spec("accelerators", name_or_path, base_dir)
    return validate(AcceleratorSpec, data, source)


def load_link(name_or_path: str, base_dir: Path | None = None) -> LinkSpec:
    """A catalog link by name (e.g. "nvlink4", "rdma-400g") or a TOML file."""
    data, source = _read_spec("links", name_or_path, base_dir)
    return validate(LinkSpec, data, source)


def load_encoder(name_or_path: str, base_dir: Path | None = None) -> VisionEncoderSpec:
    """A catalog vision encoder by name (e.g. "clip-vit-l-14-336") or a TOML file."""
    data, source = _read_spec("encoders", name_or_path, base_dir)
    spec = validate(VisionEncoderSpec, data, source)
    if spec.image_size % spec.patch_size or (spec.image_size // spec.patch_size) % spec.spatial_merge:
        raise InputError(f"{source}: image_size", f"{spec.image_size} px with {spec.patch_size} px patches "
                         f"merged {spec.spatial_merge} x {spec.spatial_merge}",
                         "a multiple of patch_size x spatial_merge")
    return spec


def load_model(name_or_path: str, base_dir: Path | None = None) -> ModelSpec:
    """A catalog model by name (e.g. "llama-3-8b") or a TOML file.

    Besides the ModelSpec fields, a file may give `full_attention_layers` (1-based layer numbers,
    as Hugging Face configs' `linear_attn_config.full_attn_layers` do) instead of `layer_types`:
    the listed layers are full attention, all others linear.
    """
    data, source = _read_spec("models", name_or_path, base_dir)
    data = _expand_full_attention_layers(dict(data), source)
    spec = validate(ModelSpec, data, source)
    _check_model(spec, source)
    return spec


def _expand_full_attention_layers(data: dict[str, Any], source: str) -> dict[str, Any]:
    if "full_attention_layers" not in data:
        return data
    where = f"{source}: full_attention_layers"
    if "layer_types" in data:
        raise InputError(where, "given together with layer_types", "one of the two")
    full = data.pop("full_attention_layers")
    layers = data.get("num_layers")
    if not isinstance(layers, int) or isinstance(layers, bool) or layers <= 0:
        raise InputError(f"{source}: num_layers", f"bad value {layers!r}", "a positive integer")
    if not isinstance(full, list) or not all(isinstance(i, int) and 1 <= i <= layers for i in full):
        raise InputError(where, f"bad value {full!r}", f"a list of layer numbers 1..{layers}")
    chosen = set(full)
    data["layer_types"] = tuple("full" if i + 1 in chosen else "linear" for i in range(layers))
    return data
