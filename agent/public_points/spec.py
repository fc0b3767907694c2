"""A file of public measurements: one `[[point]]` table per published figure, with its source and
the setting a simulation needs to reproduce it (experiments/fidelity_public/points.toml).

Every point carries its role, fixed before any constant was fitted and before any point was
simulated (`role`): a "calibration" point may be used to fit a constant of the cost model and is
never scored; an "evaluation" point is scored and never fitted on. The roles follow one rule,
`role_of` (a hash of the point's id: about a third calibration, blind to the figure and to any
error), and `load_points` refuses a file whose roles do not follow it, so no point can be moved
between the sets after its error is seen.

Units: seconds, bytes, tokens, tokens per second (the file converts every published figure to
these; `unit_note` keeps the original).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic.dataclasses import dataclass

from infralab.agent.public_points.engines import EngineProfileName
from infralab.config_io import STRICT, load_toml, validate
from infralab.errors import InputError
from infralab.field_types import MAX_REQUESTS, MAX_TOKENS, Int, Number

Family = Literal["decode", "prefill", "collective", "serving"]
FAMILIES: tuple[str, ...] = ("decode", "prefill", "collective", "serving")

# What each metric means and which family may use it (the simulated counterpart is
# `infralab.agent.public_points.simulate`).
METRICS: dict[str, tuple[str, ...]] = {
    "decode": ("tpot_s", "itl_s", "decode_step_s", "e2e_latency_s", "output_tokens_per_s"),
    "prefill": ("ttft_s", "prefill_s", "prefill_tokens_per_s"),
    "collective": ("time_s",),
    "serving": ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "mean_ttft_s", "mean_tpot_s",
                "median_ttft_s", "median_tpot_s", "mean_itl_s", "median_itl_s", "mean_e2e_s"),
}
# What a published figure may contain besides the work the simulator models. A point whose figure
# contains one of NOT_MODELLED is shown in the report but not scored (e.g. a first-token latency that
# includes the engine's cold start); the others are small against the figures they sit in and are
# scored, labelled.
NOT_MODELLED = frozenset({"cold_start", "warmup", "model_load"})
INCLUDES = NOT_MODELLED | {"host", "http", "tokenization", "detokenization", "queueing", "sampling"}
Collective = Literal["all_reduce", "custom_all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"]


@dataclass(frozen=True, config=STRICT)
class Point:
    """One published measurement and its setting."""

    id: str
    family: Family
    role: Literal["calibration", "evaluation"]
    source: str  # URL, or "github owner/repo @ commit : path"
    locator: str  # where in the source (table, row, line)
    evidence: str  # the row as printed, abbreviated
    engine: str  # engine and version, as the source states them
    hardware: str  # as the source states it
    metric: str
    measured: Number(gt=0.0, le=1e12)
    accelerator: str  # catalog name (sim/catalog/accelerators) or a TOML path
    engine_profile: EngineProfileName = "unstated"  # host time and engine settings (engines.py)
    settings: str = "unstated"
    unit_note: str = ""
    includes: tuple[str, ...] = ()
    note: str = ""
    model: str = ""  # catalog name or a TOML path (decode, prefill, serving)
    dtype: Literal["bf16", "fp16", "fp8e4m3", "int8"] = "bf16"
    kv_dtype: Literal["bf16", "fp16", "fp8e4m3", "int8"] | None = None  # None: as dtype (8-bit: bf16)
    tp: Int(gt=0, le=1024) = 1
    pp: Int(gt=0, le=1024) = 1
    link: str | None = None  # TP link; None: the accelerator's usual one (LINK_OF)
    attention_dp: bool = False  # the engine ran attention data-parallel, the experts over every rank (MoE)
    # decode / prefill: `batch` sequences of `input_tokens` prompt and `output_tokens` output tokens
    batch: Int(gt=0, le=MAX_REQUESTS) = 1
    input_tokens: Int(ge=0, le=MAX_TOKENS) = 0
    output_tokens: Int(ge=0, le=MAX_TOKENS) = 0
    # collective: one op of `message_bytes` per rank over `world` ranks
    collective: Collective | None = None
    world: Int(ge=0, le=1024) = 0
    message_bytes: Int(ge=0, le=2**40) = 0
    # serving: `num_prompts` requests at `request_rate` (None: all at once), at most `max_concurrency` in flight
    num_prompts: Int(ge=0, le=MAX_REQUESTS) = 0
    request_rate: Number(gt=0.0, le=1e9) | None = None
    max_concurrency: Int(gt=0, le=MAX_REQUESTS) | None = None
    dataset: str = "random"
    # engine limits the source states (None: the simulator's vLLM defaults)
    max_num_seqs: Int(gt=0, le=1_000_000) | None = None
    max_batched_tokens: Int(gt=0, le=MAX_TOKENS) | None = None
    # the engine's all-reduce for small messages; None: what the engine named in `engine` uses
    allreduce: Literal["nccl", "custom"] | None = None

    @property
    def scored(self) -> bool:
        """An evaluation point whose figure holds nothing the simulator leaves out."""
        return self.role == "evaluation" and not NOT_MODELLED.intersection(self.includes)


@dataclass(frozen=True, config=STRICT)
class PointsFile:
    point: tuple[Point, ...]


# The link a multi-GPU point runs its collectives on, by accelerator (their SXM boards' fabric).
LINK_OF = {"A100": "nvlink3", "H100": "nvlink4", "H200": "nvlink4", "MI300X": "infinity-fabric-mi300x", "L4": "pcie-gen4-x16",
           "ascend-910b": "hccs", "atlas-800i-a2": "hccs", "atlas-800i-a3": "hccs"}


CALIBRATION_SHARE = 3  # one point in CALIBRATION_SHARE (by id hash) is calibration


def role_of(point_id: str) -> str:
    """The role the pre-registered rule gives a point: 'calibration' when the first byte of the
    SHA-256 of its id is divisible by CALIBRATION_SHARE, else 'evaluation'."""
    first = hashlib.sha256(point_id.encode()).digest()[0]
    return "calibration" if first % CALIBRATION_SHARE == 0 else "evaluation"


def load_points(path: str | Path) -> list[Point]:
    """Read and check a points file; InputError names the file and the point's field."""
    source = str(path)
    points = list(validate(PointsFile, load_toml(path), source).point)
    seen: set[str] = set()
    for i, p in enumerate(points):
        where = f"{source}: point[{i}]"
        if p.id in seen:
            raise InputError(f"{where}.id", f"{p.id!r} appears twice", "a unique id per point")
        seen.add(p.id)
        if p.role != role_of(p.id):
            raise InputError(f"{where}.role", f"{p.role!r} for {p.id!r}",
                             f"{role_of(p.id)!r}: roles follow the pre-registered rule (role_of)")
        _check_point(p, where)
    return points


def _check_point(p: Point, where: str) -> None:
    if p.metric not in METRICS[p.family]:
        raise InputError(f"{where}.metric", f"{p.metric!r} for a {p.family} point", f"one of {METRICS[p.family]}")
    unknown = sorted(set(p.includes) - INCLUDES)
    if unknown:
        raise InputError(f"{where}.includes", f"unknown {unknown}", f"some of {sorted(INCLUDES)}")
    if p.family == "collective":
        _require(p.collective is not None, f"{where}.collective", "missing", "the collective measured")
        _require(p.world >= 2, f"{where}.world", f"{p.world}", "the number of ranks, >= 2")
        _require(p.message_bytes > 0, f"{where}.message_bytes", f"{p.message_bytes}", "a positive size in bytes")
        return
    _require(bool(p.model), f"{where}.model", "missing", "a model for a non-collective point")
    _require(p.input_tokens > 0, f"{where}.input_tokens", f"{p.input_tokens}", "a positive prompt length")
    if p.family == "serving":
        _require(p.num_prompts > 0, f"{where}.num_prompts", f"{p.num_prompts}", "the benchmark's request count")
        _require(p.output_tokens > 0, f"{where}.output_tokens", f"{p.output_tokens}", "a positive output length")
    elif p.family == "decode":
        _require(p.output_tokens >= 2, f"{where}.output_tokens", f"{p.output_tokens}",
                 ">= 2 output tokens for a decode point (a time per output token needs a second token)")


def _require(ok: bool, where: str, problem: str, expected: str) -> None:
    if not ok:
        raise InputError(where, problem, expected)
