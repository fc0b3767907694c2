"""The schema of a simulation config (`infralab sim run CONFIG.toml`): one frozen dataclass per
TOML table. Validation (types, ranges, unknown keys) is pydantic's; `load_config` turns a file into
a `SimConfig` and every error into one `InputError` naming the file and field.

Units: seconds, bytes, tokens, requests per second.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeAlias, TypeGuard

from pydantic import StrictInt, TypeAdapter
from pydantic.dataclasses import dataclass

from infralab import locations
from infralab.config_io import STRICT, dump_toml, load_toml, validate
from infralab.errors import InputError
from infralab.field_types import (
    MAX_INSTANCES,
    MAX_TOKENS,
    Bool,
    Fraction,
    RealNumber,
    Seconds,
    Tokens,
    int_bounds,
    number_bounds,
)
from infralab.locations import require_file
from infralab.metrics.schema import MetricsConfig, RunConfig, SLOConfig, check_percentiles
from infralab.overrides import apply_overrides, blame_override, set_flags
from infralab.sim.epd_schema import EmbeddingTransferConfig, PoolHardwareSet, check_epd_fields
from infralab.workload.schema import (
    FixedLength,
    LengthSpec,
    LogNormalLength,
    SyntheticWorkload,
    UniformLength,
    WorkloadSpec,
    check_workload,
)

# ---- hardware, model, costs ------------------------------------------------------------------


Degree: TypeAlias = Annotated[StrictInt, int_bounds(gt=0, le=1024)]  # a parallel degree (ranks)


@dataclass(frozen=True, config=STRICT)
class HardwareConfig:
    """One instance's accelerators and how the model is split over them. The GLM-class knobs
    (docs/sim.md, "GLM-class techniques") default to None: off, the instance as before."""

    # catalog name (e.g. "H100") or a path to a TOML file; None only for a run timed by a real
    # engine's cost.step_table (a CPU run has no accelerator the simulator could read)
    accelerator: str | None = None
    tp: Degree = 1  # tensor-parallel degree of one instance
    tp_link: str = "nvlink4"  # link used by TP collectives inside an instance
    # Parallel degree per layer class (None: tp). Linear-attention (KDA) heads and the LM head's
    # vocabulary are split over this many of the tp ranks (replicated over the rest).
    linear_tp: Degree | None = None
    lm_head_tp: Degree | None = None
    moe_ep: Degree | None = None  # expert parallelism of the MoE layers over the tp ranks (None: 1)
    # Attention data parallelism (TensorRT-LLM's enable_attention_dp, SGLang's --enable-dp-attention):
    # every layer but the routed experts runs data-parallel over the tp ranks, each rank whole heads
    # and the KV of its own sequences; the experts run expert-parallel (moe_ep = tp), reached by
    # all-to-all. Off: attention, projections and norms are split by tp.
    attention_dp: bool = False
    # Layer Split: groups of this many ranks each own the KV of a share of the full-attention layers
    # (the owner broadcasts a layer's KV to its group when the layer runs). None: 1, no split.
    layer_split: Degree | None = None
    pp: Degree | None = None  # pipeline stages (uneven allowed; None: 1); the instance has tp x pp ranks
    # How the stages are kept busy: "virtual_engines" (vLLM: pp schedulers, each with its own batch in
    # flight and 1/pp of the KV blocks, so pp batches pipeline across steps), or "micro_batches"
    # (GPipe: every step cut into `pp_micro_batches` micro-batches that fill the pipeline).
    pp_schedule: Literal["virtual_engines", "micro_batches"] = "virtual_engines"
    pp_micro_batches: Degree | None = None  # micro_batches schedule: micro-batches a step is cut into (None: 1)


@dataclass(frozen=True, config=STRICT)
class EfficiencyConfig:
    """Fractions of peak a well-tuned kernel reaches, per operator class."""

    gemm: Fraction = 0.7
    # 8-bit x 8-bit GEMMs (W8A8, FP8 or INT8) as a fraction of their (twice as high) peak; None: `gemm`.
    gemm_8bit: Fraction | None = None
    attention: Fraction = 0.5
    # Streaming reads/writes (weights, KV, linear-attention state); None: the accelerator's own
    # (`AcceleratorSpec.memory_efficiency`), else DEFAULT_MEMORY_EFFICIENCY.
    memory: Fraction | None = None
    collective: Fraction = 0.7


@dataclass(frozen=True, config=STRICT)
class HostOverheadConfig:
    """CPU-side costs of a step (scheduling, input preparation, sampling, output processing).

    `overlap` says how they meet the device's time: "sync" (vLLM v0, a step's host work runs
    before and after its kernels) adds them, step = device + host; "async" (vLLM v1's and
    SGLang's overlapped schedulers prepare step n+1 while step n runs) takes step =
    max(device, host) + `async_residue_s`, the part that cannot overlap (the hand-over of the
    sampled tokens). All default to 0: a run states its host costs; docs/sim.md gives figures
    fitted on vLLM v0 on A100 (Vidur's cpu_overheads profile) for a run to use."""

    per_step_s: Seconds = 0.0  # scheduler + launch per engine iteration
    per_request_s: Seconds = 0.0  # per sequence in a step's batch (input prep, sampling, outputs)
    per_output_token_s: Seconds = 0.0  # detokenisation / streaming per generated token
    overlap: Literal["sync", "async"] = "sync"
    async_residue_s: Seconds = 0.0  # async only: added to max(device, host) per step


DEFAULT_MEMORY_EFFICIENCY = 0.8  # an accelerator without its own measured fraction (sim/cost/geometry.py)
DEFAULT_KERNEL_LAUNCH_S = 5.0e-6  # Vidur's A100 profiles (benchmarks/vidur_calibration_check.py)
DEFAULT_DECODE_ATTENTION_FLOOR_S = 1.9e-5  # likewise, Vidur's A100 attention profile


@dataclass(frozen=True, config=STRICT)
class RooflineExtrasConfig:
    """What a plain roofline leaves out, used where no calibration row covers an operator.

    Defaults are fitted on Vidur's A100 profiles of Llama-2-7B/70B (mlp.csv, attention.csv) by
    `benchmarks/vidur_calibration_check.py`, and checked on Llama-3 and on H100 (docs/sim.md,
    "Calibration from Vidur's profiles")."""

    # The least time any one kernel takes; None: the accelerator's (`AcceleratorSpec.kernel_launch_s`),
    # else DEFAULT_KERNEL_LAUNCH_S (fitted on Vidur's A100 profiles).
    kernel_launch_s: Seconds | None = None
    small_ops: Bool = True  # count per-layer norms, RoPE, activation and residual adds
    # fraction of HBM bandwidth each per-layer elementwise kernel reaches on large inputs
    rms_norm_memory: Fraction = 0.34
    rope_memory: Fraction = 0.43
    activation_memory: Fraction = 0.49
    residual_add_memory: Fraction = 0.89
    # Least time of one layer's decode attention; None: the accelerator's, else the A100 fit's.
    decode_attention_floor_s: Seconds | None = None
    sampler: Bool = True  # count the sampler's pass over the logits
    # vLLM's fused_add_rms_norm: the residual add and the RMSNorm that follows it are one kernel
    # (reads x and the residual, writes both), as every current engine runs them.
    fused_add_norm: Bool = True
    # GEMMs near the roofline's ridge reach neither peak: time = (compute^p + memory^p)^(1/p) with
    # this p (None: max(compute, memory), the plain roofline). docs/sim.md, "Cost model".
    # Steps that run eagerly (any prefill; decode-only steps replay a CUDA graph) pay
    # `eager_launch_s` of idle device time per kernel launched: the launch latency a graph hides.
    # Decode-only steps replay a CUDA graph, whose kernels still start `graph_launch_s` apart.
    # The three fitted together (with efficiency.gemm_8bit, which stayed at gemm's 0.7) by
    # benchmarks/fit_step_constants.py on the 54 calibration decode, prefill and serving points of
    # experiments/fidelity_public (mean |log error| 0.31 -> 0.21; both launch gaps ended at their
    # grids' upper edges, 8 and 4 us); never on its evaluation points.
    ridge_sharpness: Annotated[RealNumber, number_bounds(ge=1.0, le=64.0)] | None = 2.0
    eager_launch_s: Seconds = 8e-6
    graph_launch_s: Seconds = 4e-6

    def memory_fraction(self, kernel: str) -> float:
        """The HBM fraction of a small-op kernel (`rms_norm`, `rope`, `silu_mul`, `residual_add`)."""
        return {"rms_norm": self.rms_norm_memory, "rope": self.rope_memory,
                "silu_mul": self.activation_memory, "residual_add": self.residual_add_memory}[kernel]


@dataclass(frozen=True, config=STRICT)
class CostConfig:
    # Weights and activations; "int8" is W8A8 (GEMMs at the INT8 rate), "fp8e4m3" W8A8 in FP8.
    dtype: Literal["bf16", "fp16", "fp8e4m3", "int8", "fp32"] = "bf16"
    kv_dtype: Literal["bf16", "fp16", "fp8e4m3", "int8", "fp32"] = "bf16"
    # KV-cache dtype per full-attention layer, in layer order (mixed INT8 / FP8 / BF16); None: kv_dtype
    # for all. Only the formats the KV kernels implement (infralab.work_formulas.KV_CACHE_DTYPES).
    kv_layer_dtypes: tuple[Literal["int8", "fp8e4m3", "bf16", "fp32"], ...] | None = None
    # The dtype attention's math runs in (full attention, MLA's absorbed decode, KDA's chunked
    # prefill): None, the activation dtype (bf16; fp16 or fp32 for such models). W8A8 (`dtype` int8 or
    # fp8e4m3) quantises GEMMs only; "fp8e4m3" here is FP8 attention (FlashAttention-3's FP8 path).
    attention_dtype: Literal["bf16", "fp16", "fp8e4m3", "fp32"] | None = None
    # The all-reduce of TP's hidden states: "custom", the engine's own one/two-stage kernel for small
    # messages where the link describes one (vLLM's and SGLang's default on NVLink; NCCL above its
    # size limit), or "nccl" for every message (`--disable-custom-all-reduce`). docs/sim.md.
    allreduce: Literal["nccl", "custom"] = "custom"
    # ReplaySSM ring length L for the KDA decode state (kernels/ops/kda_decode/replay_ssm.py); None: plain state.
    replay_ssm_ring: Annotated[StrictInt, int_bounds(gt=0, le=4096)] | None = None
    efficiency: EfficiencyConfig = EfficiencyConfig()
    extras: RooflineExtrasConfig = RooflineExtrasConfig()
    host: HostOverheadConfig = HostOverheadConfig()
    calibration: str | None = None  # CSV written by `infralab kernels bench` (docs/calibration.md)
    # A folder of Vidur's public GPU profiles (or any folder under it), e.g. "@data/profiles/vidur"
    vidur_profile: str | None = None
    # A real engine's step profile (`engine_step` / `engine_prepare` rows, docs/calibration.md):
    # each step is timed whole from it (`infralab.sim.step_table_cost`) instead of the roofline.
    step_table: str | None = None
    # The machine's step speed relative to when the step table was profiled (1.1 = 10 % slower):
    # every table time (forward and batch building) is multiplied by it. The fidelity study sets it
    # from the reference steps timed around a replay (real/fingerprint.py); 1.0: as profiled.
    step_table_speed: Annotated[RealNumber, number_bounds(gt=0.0, le=100.0)] = 1.0


# ---- engine and cluster ----------------------------------------------------------------------


# vLLM's defaults for an OpenAI-compatible server (`vllm serve`), from `EngineArgs.get_batch_defaults`
# in vllm/engine/arg_utils.py (v0.10-v0.11): on a GPU that reports >= 70 GiB and whose name does not
# contain "a100" (H100, H200, MI300X), max_num_seqs 1024 and max_num_batched_tokens 8192; on any other
# GPU, or when the device is unknown, 256 and 2048 (the A100 exception: a larger token budget lowered
# A100 throughput, vLLM PR #17885). vLLM then caps max_num_seqs at max_num_batched_tokens and
# max_num_batched_tokens at max_num_seqs x the model's context length.
VLLM_LARGE_GPU_BYTES = 70 * 2**30
VLLM_LARGE_GPU_DEFAULTS = (1024, 8192)  # (max_num_seqs, max_num_batched_tokens)
VLLM_OTHER_GPU_DEFAULTS = (256, 2048)


def vllm_batch_defaults(device_memory_bytes: float = 0.0, device_name: str = "") -> tuple[int, int]:
    """(max_num_seqs, max_batched_tokens) `vllm serve` starts from on a GPU that reports
    `device_memory_bytes` and is named `device_name` (torch's name); see VLLM_LARGE_GPU_DEFAULTS
    (the caps are applied by `EngineConfig.with_vllm_defaults`)."""
    large = device_memory_bytes >= VLLM_LARGE_GPU_BYTES and "a100" not in device_name.lower()
    return VLLM_LARGE_GPU_DEFAULTS if large else VLLM_OTHER_GPU_DEFAULTS


@dataclass(frozen=True, config=STRICT)
class EngineConfig:
    # Unset: vLLM's defaults for the run's accelerator (`vllm_batch_defaults`, `with_vllm_defaults`).
    max_num_seqs: Annotated[StrictInt, int_bounds(gt=0, le=1_000_000)] | None = None  # running sequences per instance
    max_batched_tokens: Tokens | None = None  # token budget per step (chunked prefill)
    block_size: Annotated[StrictInt, int_bounds(gt=0, le=65536)] = 16  # tokens per paged KV block
    gpu_memory_utilization: Fraction = 0.9  # of HBM, before weights are subtracted
    prefix_cache: Bool = True
    prefix_block_tokens: Annotated[StrictInt, int_bounds(gt=0, le=65536)] = 512  # granularity of prompt-prefix identity (Mooncake hash_ids)
    preemption: Literal["recompute"] = "recompute"
    # "fast": times runs of identical decode steps together; "reference": the plain per-step
    # scheduler it must match exactly (slower; for checking a new admission or preemption rule);
    # "hf_fifo", "hf_prefill_first": transformers' continuous-batching schedulers, mirrored
    # (`infralab.sim.engine.hf_scheduler`; colocated, no prefix cache).
    scheduler: Literal["fast", "reference", "hf_fifo", "hf_prefill_first"] = "fast"
    # hf_* only: the free fraction of KV blocks under which no new prompt joins the decodes
    # (unset: the mirrored scheduler's default, hf_fifo 0.15, hf_prefill_first 0.0).
    safety_margin: Fraction | None = None
    # The KV cache in blocks of block_size tokens, as the real engine's `num_blocks` (required with
    # cost.step_table, which has no memory model; otherwise unset: sized from device memory).
    num_blocks: Annotated[StrictInt, int_bounds(gt=0, le=MAX_TOKENS)] | None = None

    def policy_options(self) -> dict[str, Any]:
        """Keyword options of the scheduler policy beyond `Instance`'s common ones."""
        return {"safety_margin": self.safety_margin} if self.scheduler.startswith("hf_") else {}

    def with_vllm_defaults(self, device_memory_bytes: float = 0.0, device_name: str = "",
                           context_length: int | None = None) -> EngineConfig:
        """This config with unset batch limits filled in as vLLM fills them on that device, for a
        model of `context_length` tokens (an unknown device gets vLLM's defaults for one). Set
        limits stay; vLLM's caps apply to defaults only: a default token budget is at most
        max_num_seqs x context length, a default max_num_seqs at most the token budget."""
        if self.max_num_seqs is not None and self.max_batched_tokens is not None:
            return self
        default_seqs, default_tokens = vllm_batch_defaults(device_memory_bytes, device_name)
        seqs = self.max_num_seqs if self.max_num_seqs is not None else default_seqs
        tokens = self.max_batched_tokens
        if tokens is None:
            tokens = default_tokens if context_length is None else min(seqs * context_length, default_tokens)
        if self.max_num_seqs is None:
            seqs = min(seqs, tokens)
        return dataclasses.replace(self, max_num_seqs=seqs, max_batched_tokens=tokens)


@dataclass(frozen=True, config=STRICT)
class TransferConfig:
    """KV-cache transfer between prefill and decode pools (disaggregated layouts)."""

    link: str = "rdma-400g"  # catalog name or TOML path
    mode: Literal["layerwise", "after_prefill"] = "after_prefill"
    # "per_prefill_nic": one link per prefill instance (its egress NIC), shared by its flows;
    # "shared": one link for the whole cluster.
    topology: Literal["per_prefill_nic", "shared"] = "per_prefill_nic"
    layer_groups: Annotated[StrictInt, int_bounds(gt=0, le=1024)] = 4  # layerwise mode: KV sent in this many flows per prefill step
    # Who emits token 1 to the client: "decode" (its first step after the KV arrived, as vLLM's and
    # SGLang's P/D paths report it) or "prefill" (the end of prefill; TTFT then omits the transfer
    # and the decode admission).
    first_token: Literal["decode", "prefill"] = "decode"
    # Does a granted reservation for incoming KV hold a max_num_seqs slot until the KV arrives?
    # False: vLLM v1 (a request waiting for remote KV sits in the waiting queue with its blocks).
    reservation_takes_slot: Bool = False


@dataclass(frozen=True, config=STRICT)
class ClusterConfig:
    layout: Literal["colocated", "disaggregated", "epd"] = "colocated"
    instances: Annotated[StrictInt, int_bounds(gt=0, le=MAX_INSTANCES)] = 1  # colocated
    prefill_instances: Annotated[StrictInt, int_bounds(gt=0, le=MAX_INSTANCES)] = 1  # disaggregated
    decode_instances: Annotated[StrictInt, int_bounds(gt=0, le=MAX_INSTANCES)] = 1
    router: Literal["round_robin", "least_outstanding_tokens", "prefix_aware"] = "round_robin"
    decode_router: Literal["round_robin", "least_outstanding_tokens"] = "least_outstanding_tokens"
    transfer: TransferConfig = TransferConfig()
    # Layout "epd" (sim.encode_pool): an encode pool in front of the prefill pool, for image requests.
    encode_instances: Annotated[StrictInt, int_bounds(gt=0, le=MAX_INSTANCES)] = 1
    encode_router: Literal["round_robin", "least_outstanding_tokens"] = "least_outstanding_tokens"
    embedding_transfer: EmbeddingTransferConfig = EmbeddingTransferConfig()
    pool_hardware: PoolHardwareSet | None = None  # per-pool accelerator / tp / pp (sim.pool_hardware)


@dataclass(frozen=True, config=STRICT)
class SimConfig:
    model: str  # catalog name (e.g. "llama-3-8b") or a path to a TOML file
    workload: WorkloadSpec
    hardware: HardwareConfig = HardwareConfig()  # required, but for a run timed by cost.step_table
    run: RunConfig = RunConfig()
    cost: CostConfig = CostConfig()
    engine: EngineConfig = EngineConfig()
    cluster: ClusterConfig = ClusterConfig()
    slo: SLOConfig = SLOConfig()
    metrics: MetricsConfig = MetricsConfig()


# ---- loading ---------------------------------------------------------------------------------


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> tuple[SimConfig, Path]:
    """Read and validate a simulation config; returns it with the folder that relative paths in
    it (traces, model/accelerator/link TOMLs, calibration tables) resolve against.

    `overrides`: `dotted.key=value` assignments (`--set`, infralab.overrides) applied to the file's
    document before validation; relative paths they set resolve against the config's folder too.
    Every problem (syntax, unknown key, missing field, bad value, a field the layout does not
    read, inconsistent values, missing referenced file) raises one InputError naming the file and
    the dotted field.
    """
    path = Path(path)
    base_dir = path.resolve().parent
    try:
        return config_from_doc(config_doc(path, overrides), str(path), base_dir), base_dir
    except InputError as exc:
        raise blame_override(exc, str(path), set_flags(overrides)) from None


def config_doc(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The config file's document as written, with `overrides` applied (not yet validated)."""
    return apply_overrides(load_toml(path), overrides, source="--set")


REAL_ONLY_TABLES = ("real",)


def config_from_doc(doc: dict[str, Any], source: str, base_dir: Path) -> SimConfig:
    """Validate a parsed config document (`source` names it in errors; relative paths in it
    resolve against `base_dir`) and run the cross-field checks, the layout's fields included.
    The `[real]` table is the real engine's (`infralab real run` reads it: infralab.real.config),
    so that one file describes a run on both rungs; the simulator does not read it."""
    doc = {key: value for key, value in doc.items() if key not in REAL_ONLY_TABLES}
    cfg = validate(SimConfig, doc, source=source)
    check_layout_fields(doc, cfg, source)
    check_config(cfg, source=source, base_dir=base_dir)
    return cfg


# ---- fields of one layout --------------------------------------------------------------------

# The [cluster] fields that only one layout reads; written with the other layout they are errors
# (a value that is silently ignored is a hidden default).
LAYOUT_FIELDS: dict[str, tuple[str, ...]] = {
    "colocated": ("instances",),
    "disaggregated": ("prefill_instances", "decode_instances", "decode_router", "transfer"),
    "epd": ("encode_instances", "prefill_instances", "decode_instances", "encode_router", "decode_router", "transfer",
            "embedding_transfer"),
}
# [cluster.transfer] fields that only one transfer mode reads.
TRANSFER_MODE_FIELDS: dict[str, tuple[str, ...]] = {"layerwise": ("layer_groups",)}


def check_layout_fields(doc: dict[str, Any], cfg: SimConfig, source: str) -> None:
    """InputError naming the first field `doc` (the config as written) sets that its layout (or its
    transfer mode) does not read, e.g. `cluster.instances` in a disaggregated layout."""
    cluster = doc.get("cluster", {})
    layout = cfg.cluster.layout
    for name in _other_layouts_fields(layout):
        if name in cluster:
            readers = [repr(other) for other, fields in LAYOUT_FIELDS.items() if name in fields]
            verb = "reads" if len(readers) == 1 else "read"
            raise InputError(
                f"{source}: cluster.{name}",
                f"does not apply to layout = {layout!r} (only {' or '.join(readers)} {verb} it)",
                f"no cluster.{name} with this layout: {_layout_hint(layout)}",
            )
    transfer = cluster.get("transfer", {}) if "transfer" in LAYOUT_FIELDS[layout] else {}
    for mode, fields in TRANSFER_MODE_FIELDS.items():
        for name in fields if mode != cfg.cluster.transfer.mode else ():
            if name in transfer:
                raise InputError(
                    f"{source}: cluster.transfer.{name}",
                    f"does not apply to transfer mode = {cfg.cluster.transfer.mode!r} (only {mode!r} reads it)",
                    f"no cluster.transfer.{name} with this mode",
                )


def _other_layouts_fields(layout: str) -> list[str]:
    """The [cluster] fields other layouts read and `layout` does not, in LAYOUT_FIELDS order."""
    names = dict.fromkeys(name for fields in LAYOUT_FIELDS.values() for name in fields)
    return [name for name in names if name not in LAYOUT_FIELDS[layout]]


def _layout_hint(layout: str) -> str:
    return ", ".join(f"cluster.{name}" for name in LAYOUT_FIELDS[layout]) + " size and shape it"


def applicable_fields(cfg: SimConfig) -> dict[str, Any]:
    """The config as a plain document with only the fields its layout and transfer mode read
    (every default filled in; None for an unset optional field)."""
    doc: dict[str, Any] = TypeAdapter(SimConfig).dump_python(cfg)
    cluster = doc["cluster"]
    for name in _other_layouts_fields(cfg.cluster.layout):
        cluster.pop(name, None)
    if "transfer" in cluster:
        for mode, fields in TRANSFER_MODE_FIELDS.items():
            for name in fields if mode != cfg.cluster.transfer.mode else ():
                cluster["transfer"].pop(name, None)
    return doc


def layout_defaults(doc: dict[str, Any], cfg: SimConfig) -> list[str]:
    """The fields of the chosen layout that `doc` (the config as written) leaves to their
    defaults, as "cluster.transfer.mode = 'after_prefill'" (empty for a colocated layout, whose
    one field, `instances`, is plain)."""
    if cfg.cluster.layout == "colocated":
        return []
    written = doc.get("cluster", {})
    resolved = applicable_fields(cfg)["cluster"]
    out = []
    for name in LAYOUT_FIELDS[cfg.cluster.layout]:
        if isinstance(resolved[name], dict):
            inner = written.get(name, {})
            out += [f"cluster.{name}.{k} = {v!r}" for k, v in resolved[name].items()
                    if k not in inner and v is not None]
        elif name not in written:
            out.append(f"cluster.{name} = {resolved[name]!r}")
    return out


def layout_defaults_note(doc: dict[str, Any], cfg: SimConfig) -> str | None:
    """One line naming the layout's defaulted fields (`layout_defaults`), or None."""
    defaults = layout_defaults(doc, cfg)
    if not defaults:
        return None
    return (f"note: the {cfg.cluster.layout} layout uses defaults for fields the config does not set: "
            f"{', '.join(defaults)} (docs/sim.md, \"Layouts\")")


# ---- the resolved config -----------------------------------------------------------------------

RESOLVED_HEADER = """\
# The resolved config of this run: every field the simulator read, with defaults filled in and
# --set overrides applied; fields the layout does not read are left out, and so are unset optional
# fields. Relative paths of the original config are written as absolute paths (@data/ paths and
# catalog names stay as written). `infralab sim run` accepts this file as is and runs the same.
"""


def resolved_config_text(cfg: SimConfig, base_dir: Path | None = None) -> str:
    """`cfg` as TOML with every default filled in (RESOLVED_HEADER says what is left out);
    reading it back gives `cfg` (with relative paths made absolute against `base_dir`, when given)."""
    doc = applicable_fields(cfg)
    if base_dir is not None:
        _rebase_paths(doc, base_dir)
    return RESOLVED_HEADER + "\n" + dump_toml(doc)


def _rebase_paths(doc: dict[str, Any], base_dir: Path) -> None:
    """Relative file paths in `doc` made absolute against `base_dir` (in place)."""
    tables = [doc, doc["hardware"], doc["workload"], doc["cost"], doc["cluster"].get("transfer", {})]
    tables += [doc["workload"][k] for k in ("prompt", "output", "multimodal") if isinstance(doc["workload"].get(k), dict)]
    pools = doc["cluster"].get("pool_hardware") or {}
    tables += [doc["cluster"].get("embedding_transfer", {}), *(table for table in pools.values() if table)]
    for table in tables:
        for key in ("path", "model", "accelerator", "tp_link", "link", "calibration", "step_table", "encoder"):
            value = table.get(key)
            if looks_like_path(value) and not locations.is_data_path(value) and not Path(value).is_absolute():
                table[key] = str(resolve_path(value, base_dir))


def resolve_path(value: str, base_dir: Path) -> Path:
    """A path from a config: `@data/...` under the shared data folder, absolute as written, else
    relative against the config's folder (the rule of `infralab.locations`)."""
    return locations.resolve_path(value, base_dir)


def _require_folder(value: str, base_dir: Path, where: str, what: str) -> None:
    try:
        resolved = resolve_path(value, base_dir)
    except InputError as exc:  # an @data/ path with no shared data folder: blame the field too
        raise InputError(where, f"{value}: {exc.where} {exc.problem}", exc.expected) from None
    if not resolved.is_dir():
        raise InputError(
            where,
            f"folder not found: {value} (resolved to {resolved})",
            f"an existing {what} folder; relative paths resolve against the config's folder, @data/ paths against the shared data folder",
        )


# File suffixes that make a value a path even without a separator ("trace.jsonl", "h100.toml").
PATH_SUFFIXES = (".toml", ".csv", ".jsonl", ".json")


def looks_like_path(value: object) -> TypeGuard[str]:
    """Whether a config or knob value names a file rather than a catalog entry or a plain value:
    a string with a path separator or a file suffix (PATH_SUFFIXES). Catalog names ("H100",
    "llama-3-8b") never have either. The one definition of "is this a path"."""
    return isinstance(value, str) and ("/" in value or "\\" in value or value.endswith(PATH_SUFFIXES))


def check_config(cfg: SimConfig, source: str, base_dir: Path) -> None:
    """Checks that span fields (ranges, referenced files), beyond what each field's type says."""
    check_percentiles(cfg.metrics.percentiles, f"{source}: metrics.percentiles")
    workload = cfg.workload
    check_workload(workload, source, base_dir)
    if isinstance(workload, SyntheticWorkload):
        check_memory(workload, cfg.cluster, source)
    if cfg.cost.calibration is not None:
        require_file(cfg.cost.calibration, base_dir, f"{source}: cost.calibration", "calibration CSV")
    if cfg.cost.vidur_profile is not None:
        _require_folder(cfg.cost.vidur_profile, base_dir, f"{source}: cost.vidur_profile", "Vidur profile")
    if cfg.hardware.accelerator is None and cfg.cost.step_table is None:
        raise InputError(f"{source}: hardware.accelerator", "missing",
                         'a catalog name (e.g. "H100") or a path to an accelerator TOML (only a run timed by a '
                         "real engine's cost.step_table may leave it out)")
    check_engine_mirror(cfg, source, base_dir)
    def require_spec(value: str, where: str) -> None:
        if looks_like_path(value):
            require_file(value, base_dir, f"{source}: {where}", "spec TOML")

    check_epd_fields(cfg, source, require_spec)
    for where, value in (
        ("model", cfg.model),
        ("hardware.accelerator", cfg.hardware.accelerator),
        ("hardware.tp_link", cfg.hardware.tp_link),
        ("cluster.transfer.link", cfg.cluster.transfer.link),
    ):
        if looks_like_path(value):
            require_file(value, base_dir, f"{source}: {where}", "spec TOML")


def check_engine_mirror(cfg: SimConfig, source: str, base_dir: Path) -> None:
    """The fields that go with the real engine's mirror (hf_* schedulers) and its step table."""
    engine = cfg.engine
    mirror = engine.scheduler.startswith("hf_")
    if engine.safety_margin is not None and not mirror:
        raise InputError(f"{source}: engine.safety_margin", f"is read only by the hf_* schedulers, not {engine.scheduler!r}",
                         'engine.scheduler = "hf_fifo" or "hf_prefill_first", or no engine.safety_margin')
    if mirror and engine.prefix_cache:
        raise InputError(f"{source}: engine.prefix_cache", f"true with engine.scheduler = {engine.scheduler!r}",
                         "prefix_cache = false (the mirrored engine runs without block sharing)")
    if mirror and cfg.cluster.layout != "colocated":
        raise InputError(f"{source}: cluster.layout", f"{cfg.cluster.layout!r} with engine.scheduler = {engine.scheduler!r}",
                         'layout = "colocated" (the mirrored engine is one colocated instance type)')
    if cfg.cost.step_table_speed != 1.0 and cfg.cost.step_table is None:
        raise InputError(f"{source}: cost.step_table_speed", "is read only with cost.step_table",
                         "no cost.step_table_speed, or a cost.step_table whose times it scales")
    if engine.num_blocks is not None and cfg.cost.step_table is None:
        raise InputError(f"{source}: engine.num_blocks", "is read only with cost.step_table",
                         "no engine.num_blocks (the KV cache is sized from device memory), or a cost.step_table")
    if cfg.cost.step_table is not None:
        require_file(cfg.cost.step_table, base_dir, f"{source}: cost.step_table", "step-profile CSV")
        if engine.num_blocks is None:
            raise InputError(f"{source}: engine.num_blocks", "unset with cost.step_table (a step table has no memory model)",
                             "the real engine's KV cache in blocks of engine.block_size tokens, e.g. num_blocks = 64")
        if cfg.cost.calibration is not None or cfg.cost.vidur_profile is not None:
            raise InputError(f"{source}: cost.step_table", "set together with cost.calibration or cost.vidur_profile",
                             "one source of step times: a step table times whole steps, the others operators")


# A floor on the bytes a run holds per request (its record, its place in the queues) besides its
# token times, per generated token (one float64 timestamp) and per instance (engine state, KV
# block tables). A floor, so that only runs that cannot fit are refused: today's records take more
# (docs/sim.md measures 22-32 kB per trace request with the timeline kept).
REQUEST_BYTES = 1024
TOKEN_BYTES = 8
INSTANCE_BYTES = 1 << 20


def machine_memory_bytes() -> int:
    """Physical memory of this machine (bytes); a large figure when the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 50


def mean_length(spec: LengthSpec) -> float:
    """Expected tokens of a length distribution (0 for an empirical one: unknown before reading)."""
    if isinstance(spec, FixedLength):
        return float(spec.value)
    if isinstance(spec, UniformLength):
        return (spec.low + spec.high) / 2
    if isinstance(spec, LogNormalLength):
        clip = spec.max if spec.max is not None else MAX_TOKENS
        return min(spec.median * math.exp(min(spec.sigma, 10.0) ** 2 / 2), clip)
    return 0.0


def check_memory(workload: SyntheticWorkload, cluster: ClusterConfig, source: str) -> None:
    """Refuse a synthetic run whose records alone would need more memory than this machine has,
    before any request is drawn (estimate: REQUEST_BYTES per request, TOKEN_BYTES per generated
    token, INSTANCE_BYTES per instance)."""
    n = workload.num_requests
    instances = cluster.instances + cluster.prefill_instances + cluster.decode_instances
    need = n * (REQUEST_BYTES + TOKEN_BYTES * mean_length(workload.output)) + instances * INSTANCE_BYTES
    have = machine_memory_bytes()
    if need > have:
        raise InputError(
            f"{source}: workload.num_requests",
            f"{n} requests of ~{mean_length(workload.output):.0f} output tokens need about "
            f"{need / 1e9:.1f} GB of memory, more than this machine's {have / 1e9:.1f} GB",
            "fewer requests or shorter outputs",
        )
