"""The schema of a simulation config (`infralab sim run CONFIG.toml`): one frozen dataclass per
TOML table. Validation (types, ranges, unknown keys) is pydantic's; `load_config` turns a file into
a `SimConfig` and every error into one `InputError` naming the file and field.

Units: seconds, bytes, tokens, requests per second.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import Field
from pydantic.dataclasses import dataclass

from infralab import locations
from infralab.config_io import STRICT, load_toml, validate
from infralab.errors import InputError
from infralab.field_types import (
    MAX_INSTANCES,
    MAX_RATE,
    MAX_REQUESTS,
    MAX_SPAN_S,
    MAX_TOKENS,
    MIN_RATE,
    Bool,
    Fraction,
    Int,
    Number,
    PositiveSeconds,
    Seconds,
    Tokens,
)

# Every field is strict and bounded (infralab.field_types; the limits are listed in docs/sim.md).
Rate = Number(ge=MIN_RATE, le=MAX_RATE)  # requests per second
SpanSeconds = Number(ge=0.0, le=MAX_SPAN_S)

# The trace formats the workload readers parse (infralab.sim.workloads.traces), named once here.
TraceFormat = Literal["mooncake", "azure", "vidur"]
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)


# ---- lengths and arrivals (synthetic workloads) ---------------------------------------------


@dataclass(frozen=True, config=STRICT)
class FixedLength:
    kind: Literal["fixed"]
    value: Tokens


@dataclass(frozen=True, config=STRICT)
class UniformLength:
    kind: Literal["uniform"]
    low: Tokens
    high: Tokens  # inclusive


@dataclass(frozen=True, config=STRICT)
class LogNormalLength:
    """Lengths whose log is normal; `median` in tokens, `sigma` the std-dev of the log."""

    kind: Literal["lognormal"]
    median: Number(ge=1.0, le=MAX_TOKENS)
    sigma: Number(ge=0.0, le=10.0)  # exp(10) already spans four orders of magnitude
    max: Tokens | None = None  # clip (without it, lengths are clipped to MAX_TOKENS)


@dataclass(frozen=True, config=STRICT)
class EmpiricalLength:
    """Lengths resampled from a trace column (`input` or `output`)."""

    kind: Literal["empirical"]
    path: str  # relative paths resolve against the config file's folder
    format: TraceFormat
    column: Literal["input", "output"]


LengthSpec = Annotated[
    Union[FixedLength, UniformLength, LogNormalLength, EmpiricalLength], Field(discriminator="kind")
]


@dataclass(frozen=True, config=STRICT)
class PoissonArrivals:
    kind: Literal["poisson"]
    rate: Rate  # requests per second


@dataclass(frozen=True, config=STRICT)
class GammaArrivals:
    """Gamma inter-arrival times: mean 1/rate, coefficient of variation `cv` (cv=1 is Poisson)."""

    kind: Literal["gamma"]
    rate: Rate
    cv: Number(ge=1e-3, le=100.0)


ArrivalSpec = Annotated[Union[PoissonArrivals, GammaArrivals], Field(discriminator="kind")]


# ---- workloads -------------------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class TraceWorkload:
    """Requests read from a trace file."""

    kind: Literal["trace"]
    path: str  # relative paths resolve against the config file's folder
    format: TraceFormat
    rate_scale: Number(ge=1e-6, le=1e6) = 1.0  # >1 compresses inter-arrival times (more load)
    start_s: SpanSeconds = 0.0  # time window, seconds from the trace's first request
    end_s: PositiveSeconds | None = None
    max_requests: Int(gt=0, le=MAX_REQUESTS) | None = None  # truncation after windowing
    max_prompt_tokens: Tokens | None = None  # clip prompts (e.g. to the model's context)


@dataclass(frozen=True, config=STRICT)
class SyntheticWorkload:
    kind: Literal["synthetic"]
    num_requests: Int(gt=0, le=MAX_REQUESTS)
    arrival: ArrivalSpec
    prompt: LengthSpec
    output: LengthSpec


WorkloadSpec = Annotated[Union[TraceWorkload, SyntheticWorkload], Field(discriminator="kind")]


# ---- hardware, model, costs ------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class HardwareConfig:
    accelerator: str  # catalog name (e.g. "H100") or a path to a TOML file
    tp: Int(gt=0, le=1024) = 1  # tensor-parallel degree of one instance
    tp_link: str = "nvlink4"  # link used by TP collectives inside an instance


@dataclass(frozen=True, config=STRICT)
class EfficiencyConfig:
    """Fractions of peak a well-tuned kernel reaches, per operator class."""

    gemm: Fraction = 0.7
    attention: Fraction = 0.5
    memory: Fraction = 0.8  # streaming reads/writes (weights, KV, linear-attention state)
    collective: Fraction = 0.7


@dataclass(frozen=True, config=STRICT)
class HostOverheadConfig:
    """CPU-side costs that add to device time on the critical path."""

    per_step_s: Seconds = 0.0  # scheduler + launch per engine iteration
    per_request_s: Seconds = 0.0  # per sequence in a step's batch (input prep, sampling)
    per_output_token_s: Seconds = 0.0  # detokenisation / streaming per generated token


@dataclass(frozen=True, config=STRICT)
class CostConfig:
    dtype: Literal["bf16", "fp16", "fp8", "fp32"] = "bf16"  # weights and activations
    kv_dtype: Literal["bf16", "fp16", "fp8", "int8", "fp32"] = "bf16"
    efficiency: EfficiencyConfig = EfficiencyConfig()
    host: HostOverheadConfig = HostOverheadConfig()
    calibration: str | None = None  # CSV written by `infralab kernels bench` (docs/calibration.md)


# ---- engine and cluster ----------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class EngineConfig:
    max_num_seqs: Int(gt=0, le=1_000_000) = 256  # running sequences per instance
    max_batched_tokens: Tokens = 8192  # token budget per step (chunked prefill)
    block_size: Int(gt=0, le=65536) = 16  # tokens per paged KV block
    gpu_memory_utilization: Fraction = 0.9  # of HBM, before weights are subtracted
    prefix_cache: Bool = True
    prefix_block_tokens: Int(gt=0, le=65536) = 512  # granularity of prompt-prefix identity (Mooncake hash_ids)
    preemption: Literal["recompute"] = "recompute"
    # "fast": times runs of identical decode steps together; "reference": the plain per-step
    # scheduler it must match exactly (slower; for checking a new admission or preemption rule).
    scheduler: Literal["fast", "reference"] = "fast"


@dataclass(frozen=True, config=STRICT)
class TransferConfig:
    """KV-cache transfer between prefill and decode pools (disaggregated layouts)."""

    link: str = "rdma-400g"  # catalog name or TOML path
    mode: Literal["layerwise", "after_prefill"] = "after_prefill"
    # "per_prefill_nic": one link per prefill instance (its egress NIC), shared by its flows;
    # "shared": one link for the whole cluster.
    topology: Literal["per_prefill_nic", "shared"] = "per_prefill_nic"
    layer_groups: Int(gt=0, le=1024) = 4  # layerwise mode: KV sent in this many flows per prefill step
    # Who emits token 1 to the client: "decode" (its first step after the KV arrived, as vLLM's and
    # SGLang's P/D paths report it) or "prefill" (the end of prefill; TTFT then omits the transfer
    # and the decode admission).
    first_token: Literal["decode", "prefill"] = "decode"
    # Does a granted reservation for incoming KV hold a max_num_seqs slot until the KV arrives?
    # False: vLLM v1 (a request waiting for remote KV sits in the waiting queue with its blocks).
    reservation_takes_slot: Bool = False


@dataclass(frozen=True, config=STRICT)
class ClusterConfig:
    layout: Literal["colocated", "disaggregated"] = "colocated"
    instances: Int(gt=0, le=MAX_INSTANCES) = 1  # colocated
    prefill_instances: Int(gt=0, le=MAX_INSTANCES) = 1  # disaggregated
    decode_instances: Int(gt=0, le=MAX_INSTANCES) = 1
    router: Literal["round_robin", "least_outstanding_tokens", "prefix_aware"] = "round_robin"
    decode_router: Literal["round_robin", "least_outstanding_tokens"] = "least_outstanding_tokens"
    transfer: TransferConfig = TransferConfig()


@dataclass(frozen=True, config=STRICT)
class SLOConfig:
    ttft_s: Number(gt=0.0, le=86400.0) = 2.0
    tpot_s: Number(gt=0.0, le=86400.0) = 0.1


@dataclass(frozen=True, config=STRICT)
class RunConfig:
    name: str = "run"
    seed: Int(ge=0, le=2**63 - 1) = 0


@dataclass(frozen=True, config=STRICT)
class SimConfig:
    model: str  # catalog name (e.g. "llama-3-8b") or a path to a TOML file
    hardware: HardwareConfig
    workload: WorkloadSpec
    run: RunConfig = RunConfig()
    cost: CostConfig = CostConfig()
    engine: EngineConfig = EngineConfig()
    cluster: ClusterConfig = ClusterConfig()
    slo: SLOConfig = SLOConfig()


# ---- loading ---------------------------------------------------------------------------------


def load_config(path: str | Path) -> tuple[SimConfig, Path]:
    """Read and validate a simulation config; returns it with the folder that relative paths in
    it (traces, model/accelerator/link TOMLs, calibration tables) resolve against.

    Every problem (syntax, unknown key, missing field, bad value, inconsistent values, missing
    referenced file) raises one InputError naming the file and the dotted field.
    """
    path = Path(path)
    cfg = validate(SimConfig, load_toml(path), source=str(path))
    base_dir = path.resolve().parent
    check_config(cfg, source=str(path), base_dir=base_dir)
    return cfg, base_dir


def resolve_path(value: str, base_dir: Path) -> Path:
    """A path from a config: `@data/...` under the shared data folder, absolute as written, else
    relative against the config's folder (the rule of `infralab.locations`)."""
    return locations.resolve_path(value, base_dir)


def _require_file(value: str, base_dir: Path, where: str, what: str) -> None:
    try:
        resolved = resolve_path(value, base_dir)
    except InputError as exc:  # an @data/ path with no shared data folder: blame the field too
        raise InputError(where, f"{value}: {exc.where} {exc.problem}", exc.expected) from None
    if resolved.exists() and not resolved.is_file():
        what_it_is = "a folder" if resolved.is_dir() else "not a regular file (a device, pipe or socket)"
        raise InputError(where, f"{value} is {what_it_is}", f"a {what} file")
    if not resolved.is_file():
        raise InputError(
            where,
            f"file not found: {value} (resolved to {resolved})",
            f"an existing {what} file; relative paths resolve against the config's folder, @data/ paths against the shared data folder",
        )


# File suffixes that make a value a path even without a separator ("trace.jsonl", "h100.toml").
PATH_SUFFIXES = (".toml", ".csv", ".jsonl", ".json")


def looks_like_path(value: Any) -> bool:
    """Whether a config or knob value names a file rather than a catalog entry or a plain value:
    a string with a path separator or a file suffix (PATH_SUFFIXES). Catalog names ("H100",
    "llama-3-8b") never have either. The one definition of "is this a path"."""
    return isinstance(value, str) and ("/" in value or "\\" in value or value.endswith(PATH_SUFFIXES))


def check_config(cfg: SimConfig, source: str, base_dir: Path) -> None:
    """Checks that span fields (ranges, referenced files), beyond what each field's type says."""
    lengths = []
    workload = cfg.workload
    if isinstance(workload, SyntheticWorkload):
        lengths = [("workload.prompt", workload.prompt), ("workload.output", workload.output)]
    for where, spec in lengths:
        if isinstance(spec, UniformLength) and spec.high < spec.low:
            raise InputError(f"{source}: {where}.high", f"{spec.high} < low {spec.low}", "high >= low")
        if isinstance(spec, EmpiricalLength):
            _require_file(spec.path, base_dir, f"{source}: {where}.path", f"{spec.format} trace")
    if isinstance(workload, TraceWorkload):
        if workload.end_s is not None and workload.end_s <= workload.start_s:
            raise InputError(
                f"{source}: workload.end_s",
                f"{workload.end_s} <= start_s {workload.start_s}",
                "end_s > start_s (seconds from the trace's first request)",
            )
        _require_file(workload.path, base_dir, f"{source}: workload.path", f"{workload.format} trace")
    if isinstance(workload, SyntheticWorkload):
        check_memory(workload, cfg.cluster, source)
    if cfg.cost.calibration is not None:
        _require_file(cfg.cost.calibration, base_dir, f"{source}: cost.calibration", "calibration CSV")
    for where, value in (
        ("model", cfg.model),
        ("hardware.accelerator", cfg.hardware.accelerator),
        ("hardware.tp_link", cfg.hardware.tp_link),
        ("cluster.transfer.link", cfg.cluster.transfer.link),
    ):
        if looks_like_path(value):
            _require_file(value, base_dir, f"{source}: {where}", "spec TOML")


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
