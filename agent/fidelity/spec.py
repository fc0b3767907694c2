"""The fidelity study file (`experiments/fidelity/*.toml`), validated into frozen specs.

    [study]
    title = "..."
    model = "small-llama-cpu"     # a model of the catalog (or the real side's test shape), or a path
                                  # (relative to this file) to a model TOML or a transformers config.json
    scheduler = "fifo"            # the engine's scheduler; the mirror is hf_fifo / hf_prefill_first
    threads = 1                   # torch intra-op threads of the engine
    device = "cpu"                # or "cuda" (a GPU machine; run once on an H200: docs/gpu.md)
    dtype = "fp32"                # the model's weights: "fp32" or "bf16"
    loads = [0.3, 0.6, 0.85]      # arrival rate as a fraction of the capacity measured in the run
    repetitions = 3               # real runs per case (>= 2)
    seed = 0                      # the workloads' seed (the capacity run uses seed + 1)
    warmup_requests = 4

    [capacity]
    requests = 12                 # the capacity run's requests: as many as the KV cache holds at once,
                                  # kept in the engine by a closed loop going round them 3 times

    [profile]                     # the calibration grid (synthetic steps; real.profile)
    q_tokens = [1, 2, 4, ...]
    kv_tokens = [1, 16, ...]
    seqs = [1, 2, ...]
    repeats = 3

    [[setting]]                   # one engine setting per table (real.engine.EngineSettings)
    name = "budget64"
    max_batch_tokens = 64
    num_blocks = 64
    page_size = 256
    max_requests_per_batch = 32

    [[shape]]                     # one workload shape per table
    name = "chat"
    fixed = false                 # true: one case at the workload's own arrivals (a fixed case:
                                  # nothing rescaled; its load is reported against the capacity)
    [shape.workload]              # a [workload] table as the simulator reads it (docs/sim.md);
    kind = "synthetic"            # its arrival rate only sets the pattern: each load rescales it
    ...

    [quick]                       # `--quick` (and `reproduce --quick`): dotted keys that replace
    "study.loads" = [0.6]         # the same keys above before validation

Bad input is one InputError naming the file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from infralab.agent.fidelity.sim_side import WorkloadSpec
from infralab.config_io import STRICT, load_toml, validate
from infralab.errors import InputError
from infralab.field_types import Int, Number, PositiveInt
from infralab.overrides import set_path
from infralab.real.engine import EngineSettings
from infralab.real.model_shape import SHAPES, ModelShape, is_model_path, model_shape
from infralab.real.profile import ProfileGrid

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")]
Load = Number(gt=0.0, le=1.0)
Axis = Annotated[tuple[PositiveInt, ...], Field(min_length=1, max_length=64)]


@pydantic_dataclass(frozen=True, config=STRICT)
class StudyTable:
    title: str
    model: str
    loads: Annotated[tuple[Load, ...], Field(max_length=16)] = ()  # required unless every shape is fixed
    scheduler: Literal["fifo", "prefill_first"] = "fifo"
    threads: Int(ge=1, le=256) = 1
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: Literal["fp32", "bf16"] = "fp32"
    repetitions: Int(ge=2, le=100) = 3
    seed: Int(ge=0, le=2**31 - 2) = 0
    warmup_requests: Int(ge=1, le=64) = 4


@pydantic_dataclass(frozen=True, config=STRICT)
class CapacityTable:
    requests: Int(ge=2, le=10_000) = 12


@pydantic_dataclass(frozen=True, config=STRICT)
class ProfileTable:
    q_tokens: Axis
    kv_tokens: Axis
    seqs: Axis
    repeats: Int(ge=1, le=100) = 3


@pydantic_dataclass(frozen=True, config=STRICT)
class SettingTable:
    name: Name
    max_batch_tokens: Int(ge=1, le=1_000_000)
    num_blocks: Int(ge=1, le=1_000_000)
    page_size: Int(ge=1, le=1_000_000) = 256
    max_requests_per_batch: Int(ge=1, le=1_000_000) = 32
    safety_margin: Number(ge=0.0, le=1.0) | None = None


@pydantic_dataclass(frozen=True, config=STRICT)
class ShapeTable:
    name: Name
    workload: dict[str, Any]
    fixed: bool = False


@pydantic_dataclass(frozen=True, config=STRICT)
class StudyFile:
    study: StudyTable
    profile: ProfileTable
    setting: Annotated[tuple[SettingTable, ...], Field(min_length=1, max_length=16)]
    shape: Annotated[tuple[ShapeTable, ...], Field(min_length=1, max_length=16)]
    capacity: CapacityTable = CapacityTable()
    quick: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class Setting:
    name: str
    engine: EngineSettings


@dataclass(frozen=True)
class Shape:
    name: str
    workload: Any  # the simulator's WorkloadSpec (synthetic or trace)
    fixed: bool = False  # one case at the workload's own arrivals, not one per load level


@dataclass(frozen=True)
class FidelityStudy:
    """A validated study: what to run, where its relative paths resolve (`base_dir`), whether the
    `[quick]` table was applied."""

    title: str
    model: ModelShape
    scheduler: str
    loads: tuple[float, ...]
    repetitions: int
    seed: int
    warmup_requests: int
    capacity_requests: int
    grid: ProfileGrid
    settings: tuple[Setting, ...]
    shapes: tuple[Shape, ...]
    source: str
    base_dir: Path
    quick: bool


def load_study(path: str | Path, quick: bool = False) -> FidelityStudy:
    """Read and check a study file; with `quick`, its `[quick]` keys replace the same keys first."""
    path = Path(path)
    source = str(path)
    doc = load_toml(path)
    if quick:
        table = doc.get("quick", {})
        if not isinstance(table, dict):
            raise InputError(f"{source}: quick", "is not a table", "a [quick] table of dotted keys")
        for key, value in table.items():
            set_path(doc, key.split("."), value, f"{source}: quick.{key}")
    spec = validate(StudyFile, doc, source)
    if not spec.study.loads and not all(shape.fixed for shape in spec.shape):
        raise InputError(f"{source}: study.loads", "empty or missing",
                         "at least one load level (a fraction of the capacity) for the shapes that are not fixed")
    return FidelityStudy(
        title=spec.study.title, model=_model(spec.study.model, source, path.resolve().parent),
        scheduler=spec.study.scheduler,
        loads=spec.study.loads, repetitions=spec.study.repetitions, seed=spec.study.seed,
        warmup_requests=spec.study.warmup_requests, capacity_requests=spec.capacity.requests,
        grid=ProfileGrid(spec.profile.q_tokens, spec.profile.kv_tokens, spec.profile.seqs, spec.profile.repeats),
        settings=_settings(spec, source), shapes=_shapes(spec, source), source=source,
        base_dir=path.resolve().parent, quick=quick)


def _model(name: str, source: str, base_dir: Path) -> ModelShape:
    """A catalog name, a test shape, or a path (relative to the study file) to a model TOML or a
    transformers config.json (`real.model_shape.model_shape`)."""
    where = f"{source}: study.model"
    try:
        return model_shape(name, base_dir, where)
    except InputError as exc:
        if is_model_path(name):  # the file's own error names it and its field
            raise
        raise InputError(where, f"{name!r}: {exc.problem}",
                         f"a model of the catalog, one of {', '.join(SHAPES)}, or a path to a model TOML or "
                         "a transformers config.json") from None

def _settings(spec: StudyFile, source: str) -> tuple[Setting, ...]:
    _unique([s.name for s in spec.setting], f"{source}: setting", "name")
    threads = spec.study.threads
    return tuple(Setting(s.name, EngineSettings(
        scheduler=spec.study.scheduler, max_batch_tokens=s.max_batch_tokens, num_blocks=s.num_blocks,
        page_size=s.page_size, max_requests_per_batch=s.max_requests_per_batch, safety_margin=s.safety_margin,
        threads=threads, seed=spec.study.seed, device=spec.study.device, dtype=spec.study.dtype))
        for s in spec.setting)


def _shapes(spec: StudyFile, source: str) -> tuple[Shape, ...]:
    _unique([s.name for s in spec.shape], f"{source}: shape", "name")
    shapes = []
    for i, table in enumerate(spec.shape):
        workload = validate(WorkloadSpec, table.workload, source, prefix=f"shape[{i}].workload")
        if workload.max_concurrency is not None:
            raise InputError(f"{source}: shape[{i}].workload.max_concurrency", "is set",
                             "unset: the load generator replays open loop")
        shapes.append(Shape(table.name, workload, table.fixed))
    return tuple(shapes)


def _unique(names: list[str], where: str, field: str) -> None:
    for i, name in enumerate(names):
        if name in names[:i]:
            raise InputError(f"{where}[{i}].{field}", f"repeats {name!r}", "a name used once")
