"""The schema of a `[workload]` table: one frozen dataclass per table, shared by the simulator
(`infralab sim run`) and the real engine's load generator (`infralab real run`), which read the
same table. Validation (types, ranges, unknown keys) is pydantic's; `check_workload` adds the
checks that span fields.

Units: seconds, tokens, requests per second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, TypeAlias, Union, get_args

from pydantic import Field, StrictInt
from pydantic.dataclasses import dataclass

from infralab.config_io import STRICT
from infralab.errors import InputError
from infralab.field_types import (
    MAX_RATE,
    MAX_RATE_SCALE,
    MAX_REQUESTS,
    MAX_SPAN_S,
    MAX_TOKENS,
    MIN_RATE,
    MIN_RATE_SCALE,
    PositiveSeconds,
    RealNumber,
    Tokens,
    int_bounds,
    number_bounds,
)
from infralab.locations import require_file

# Every field is strict and bounded (infralab.field_types; the limits are listed in docs/sim.md).
Rate: TypeAlias = Annotated[RealNumber, number_bounds(ge=MIN_RATE, le=MAX_RATE)]  # requests per second
SpanSeconds: TypeAlias = Annotated[RealNumber, number_bounds(ge=0.0, le=MAX_SPAN_S)]

# The trace formats the workload readers parse (infralab.workload.traces), named once here.
TraceFormat = Literal["mooncake", "azure", "vidur", "csv"]
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
    median: Annotated[RealNumber, number_bounds(ge=1.0, le=MAX_TOKENS)]
    sigma: Annotated[RealNumber, number_bounds(ge=0.0, le=10.0)]  # exp(10) already spans four orders of magnitude
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
    cv: Annotated[RealNumber, number_bounds(ge=1e-3, le=100.0)]


ArrivalSpec = Annotated[Union[PoissonArrivals, GammaArrivals], Field(discriminator="kind")]


# ---- workloads -------------------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class MultimodalConfig:
    """`[workload.multimodal]`: which requests carry images, how many, and the encoder that turns
    them into prompt tokens (infralab.workload.multimodal; the simulator costs the encoder)."""

    image_share: Annotated[RealNumber, number_bounds(ge=0.0, le=1.0)]  # fraction of requests with images
    images_per_request: Annotated[StrictInt, int_bounds(ge=1, le=1024)] = 1
    encoder: str = "clip-vit-l-14-336"  # catalog encoder or a TOML path
    tokens_per_image: Tokens | None = None  # None: the encoder's tokens_per_image

    def image_tokens(self, encoder_tokens_per_image: int) -> int:
        """Prompt tokens one image request's images add."""
        per_image = self.tokens_per_image if self.tokens_per_image is not None else encoder_tokens_per_image
        return self.images_per_request * per_image


@dataclass(frozen=True, config=STRICT)
class TraceWorkload:
    """Requests read from a trace file."""

    kind: Literal["trace"]
    path: str  # relative paths resolve against the config file's folder
    format: TraceFormat
    rate_scale: Annotated[RealNumber, number_bounds(ge=MIN_RATE_SCALE, le=MAX_RATE_SCALE)] = 1.0  # >1 compresses inter-arrival times (more load)
    start_s: SpanSeconds = 0.0  # time window, seconds from the trace's first request
    end_s: PositiveSeconds | None = None
    max_requests: Annotated[StrictInt, int_bounds(gt=0, le=MAX_REQUESTS)] | None = None  # truncation after windowing
    max_prompt_tokens: Tokens | None = None  # clip prompts (e.g. to the model's context)
    # Closed loop: at most this many requests in flight (infralab.sim.concurrency_gate); None: open loop.
    max_concurrency: Annotated[StrictInt, int_bounds(gt=0, le=MAX_REQUESTS)] | None = None
    multimodal: MultimodalConfig | None = None  # a share of requests with images


@dataclass(frozen=True, config=STRICT)
class SyntheticWorkload:
    kind: Literal["synthetic"]
    num_requests: Annotated[StrictInt, int_bounds(gt=0, le=MAX_REQUESTS)]
    arrival: ArrivalSpec
    prompt: LengthSpec
    output: LengthSpec
    max_concurrency: Annotated[StrictInt, int_bounds(gt=0, le=MAX_REQUESTS)] | None = None  # closed loop, as in TraceWorkload
    multimodal: MultimodalConfig | None = None  # as in TraceWorkload


WorkloadSpec = Annotated[Union[TraceWorkload, SyntheticWorkload], Field(discriminator="kind")]


def check_workload(workload: WorkloadSpec, source: str, base_dir: Path) -> None:
    """Checks that span fields of a workload (ranges, referenced trace files), beyond what each
    field's type says; relative paths resolve against `base_dir`."""
    lengths = []
    if isinstance(workload, SyntheticWorkload):
        lengths = [("workload.prompt", workload.prompt), ("workload.output", workload.output)]
    for where, spec in lengths:
        if isinstance(spec, UniformLength) and spec.high < spec.low:
            raise InputError(f"{source}: {where}.high", f"{spec.high} < low {spec.low}", "high >= low")
        if isinstance(spec, EmpiricalLength):
            require_file(spec.path, base_dir, f"{source}: {where}.path", f"{spec.format} trace")
    if isinstance(workload, TraceWorkload):
        if workload.end_s is not None and workload.end_s <= workload.start_s:
            raise InputError(
                f"{source}: workload.end_s",
                f"{workload.end_s} <= start_s {workload.start_s}",
                "end_s > start_s (seconds from the trace's first request)",
            )
        require_file(workload.path, base_dir, f"{source}: workload.path", f"{workload.format} trace")
