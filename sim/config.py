"""The schema of a simulation config (`infralab sim run CONFIG.toml`): one frozen dataclass per
TOML table. Validation (types, ranges, unknown keys) is pydantic's; `load_config` turns a file into
a `SimConfig` and every error into one `InputError` naming the file and field.

Units: seconds, bytes, tokens, requests per second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import Field
from pydantic.dataclasses import dataclass

from infralab import locations
from infralab.config_io import STRICT, load_toml, validate
from infralab.errors import InputError

PositiveInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]

# The trace formats the workload readers parse (infralab.sim.workloads.traces), named once here.
TraceFormat = Literal["mooncake", "azure", "vidur"]
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)


# ---- lengths and arrivals (synthetic workloads) ---------------------------------------------


@dataclass(frozen=True, config=STRICT)
class FixedLength:
    kind: Literal["fixed"]
    value: PositiveInt


@dataclass(frozen=True, config=STRICT)
class UniformLength:
    kind: Literal["uniform"]
    low: PositiveInt
    high: PositiveInt  # inclusive


@dataclass(frozen=True, config=STRICT)
class LogNormalLength:
    """Lengths whose log is normal; `median` in tokens, `sigma` the std-dev of the log."""

    kind: Literal["lognormal"]
    median: PositiveFloat
    sigma: NonNegFloat
    max: PositiveInt | None = None  # clip


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
    rate: PositiveFloat  # requests per second


@dataclass(frozen=True, config=STRICT)
class GammaArrivals:
    """Gamma inter-arrival times: mean 1/rate, coefficient of variation `cv` (cv=1 is Poisson)."""

    kind: Literal["gamma"]
    rate: PositiveFloat
    cv: PositiveFloat


ArrivalSpec = Annotated[Union[PoissonArrivals, GammaArrivals], Field(discriminator="kind")]


# ---- workloads -------------------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class TraceWorkload:
    """Requests read from a trace file."""

    kind: Literal["trace"]
    path: str  # relative paths resolve against the config file's folder
    format: TraceFormat
    rate_scale: PositiveFloat = 1.0  # >1 compresses inter-arrival times (more load)
    start_s: NonNegFloat = 0.0  # time window, seconds from the trace's first request
    end_s: PositiveFloat | None = None
    max_requests: PositiveInt | None = None  # truncation after windowing
    max_prompt_tokens: PositiveInt | None = None  # clip prompts (e.g. to the model's context)


@dataclass(frozen=True, config=STRICT)
class SyntheticWorkload:
    kind: Literal["synthetic"]
    num_requests: PositiveInt
    arrival: ArrivalSpec
    prompt: LengthSpec
    output: LengthSpec


WorkloadSpec = Annotated[Union[TraceWorkload, SyntheticWorkload], Field(discriminator="kind")]


# ---- hardware, model, costs ------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class HardwareConfig:
    accelerator: str  # catalog name (e.g. "H100") or a path to a TOML file
    tp: PositiveInt = 1  # tensor-parallel degree of one instance
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

    per_step_s: NonNegFloat = 0.0  # scheduler + launch per engine iteration
    per_request_s: NonNegFloat = 0.0  # per sequence in a step's batch (input prep, sampling)
    per_output_token_s: NonNegFloat = 0.0  # detokenisation / streaming per generated token


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
    max_num_seqs: PositiveInt = 256  # running sequences per instance
    max_batched_tokens: PositiveInt = 8192  # token budget per step (chunked prefill)
    block_size: PositiveInt = 16  # tokens per paged KV block
    gpu_memory_utilization: Fraction = 0.9  # of HBM, before weights are subtracted
    prefix_cache: bool = True
    prefix_block_tokens: PositiveInt = 512  # granularity of prompt-prefix identity (Mooncake hash_ids)
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
    layer_groups: PositiveInt = 4  # layerwise mode: KV sent in this many flows per prefill step


@dataclass(frozen=True, config=STRICT)
class ClusterConfig:
    layout: Literal["colocated", "disaggregated"] = "colocated"
    instances: PositiveInt = 1  # colocated
    prefill_instances: PositiveInt = 1  # disaggregated
    decode_instances: PositiveInt = 1
    router: Literal["round_robin", "least_outstanding_tokens", "prefix_aware"] = "round_robin"
    decode_router: Literal["round_robin", "least_outstanding_tokens"] = "least_outstanding_tokens"
    transfer: TransferConfig = TransferConfig()


@dataclass(frozen=True, config=STRICT)
class SLOConfig:
    ttft_s: PositiveFloat = 2.0
    tpot_s: PositiveFloat = 0.1


@dataclass(frozen=True, config=STRICT)
class RunConfig:
    name: str = "run"
    seed: NonNegInt = 0


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
