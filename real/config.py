"""The config of a real-engine run (`infralab real run` / `infralab real profile CONFIG.toml`).

The file is a simulation config (docs/sim.md): one file names the model, the workload and the
engine for both rungs, so that a simulation and a real run of it mean the same requests on the
same engine settings. The real side reads, with the shared schema (`infralab.workload.schema`,
`infralab.metrics.schema`), the tables it can act on:

- `model`: a catalog name (`small-llama-cpu`) or a path to a model TOML with the catalog's fields;
- `[workload]`: any workload the simulator reads (trace or synthetic), replayed open loop; the
  closed loop (`max_concurrency`) is not implemented by the load generator and is refused;
- `[engine]`: the mirror's names for the engine's knobs (`scheduler = "hf_fifo" | "hf_prefill_first"`,
  `max_batched_tokens`, `max_num_seqs`, `block_size`, `num_blocks`, `safety_margin`,
  `prefix_cache = false`); the token budget, request cap and cache size are required (the
  simulator's defaults for them are vLLM's for an accelerator, which mean nothing for this engine);
- `[run]`, `[slo]`, `[metrics]`: as in the simulator;
- `[real]`: what only a real run has (device, torch threads, dtype, warm-up, fingerprint,
  timeout) and `[real.profile]`, the grid of `infralab real profile`.

The simulator's own tables (`[hardware]`, `[cost]`, `[cluster]`) and engine fields that only it
reads (`gpu_memory_utilization`, `prefix_block_tokens`, `preemption`) are not read: the run's
summary lists them (`not_read`). A `[cluster]` of anything but one colocated instance is refused:
the real engine is one instance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic.dataclasses import dataclass

from infralab import locations
from infralab.config_io import STRICT, dump_toml, load_toml, validate
from infralab.errors import InputError
from infralab.field_types import MAX_TOKENS, Bool, Fraction, Int, PositiveSeconds, Tokens
from infralab.metrics.schema import MetricsConfig, RunConfig, SLOConfig, check_percentiles
from infralab.overrides import apply_overrides, blame_override, set_flags
from infralab.real.engine import EngineSettings
from infralab.real.model_shape import is_model_path
from infralab.workload.schema import WorkloadSpec, check_workload

SIM_ONLY_TABLES = ("hardware", "cost", "cluster")
SIM_ONLY_ENGINE_FIELDS = ("gpu_memory_utilization", "prefix_block_tokens", "preemption")
ENGINE_SCHEDULERS = {"hf_fifo": "fifo", "hf_prefill_first": "prefill_first"}
"""The simulator's names of the engine's schedulers -> the engine's own (`scheduler_type`)."""


@dataclass(frozen=True, config=STRICT)
class RealEngineConfig:
    """The `[engine]` table as the real engine reads it (the simulator's names; tokens, blocks)."""

    scheduler: Literal["hf_fifo", "hf_prefill_first"]
    max_batched_tokens: Tokens  # the token budget per step
    max_num_seqs: Int(gt=0, le=1_000_000)  # the request cap per step (the engine caps it at the budget)
    num_blocks: Int(gt=0, le=MAX_TOKENS)  # the KV cache, in blocks of block_size tokens
    block_size: Int(gt=0, le=65536) = 16  # the simulator's default, so that one file means one cache
    safety_margin: Fraction | None = None  # None: the scheduler's own (hf_fifo 0.15, hf_prefill_first 0.0)
    prefix_cache: Bool = True  # must be written false: the engine runs without block sharing


@dataclass(frozen=True, config=STRICT)
class ProfileGridConfig:
    """`[real.profile]`: the step shapes `infralab real profile` times. An unset axis spans the
    run's steps: powers of two from 1 up to the bound the engine settings and the workload put on
    it (the bounds the simulator's step-table check requires), the bound included."""

    q_tokens: tuple[Tokens, ...] | None = None
    kv_tokens: tuple[Tokens, ...] | None = None
    seqs: tuple[Int(gt=0, le=1_000_000), ...] | None = None
    repeats: Int(gt=0, le=1000) = 3


@dataclass(frozen=True, config=STRICT)
class RealSettingsConfig:
    """`[real]`: what only a real run has. `threads`: torch intra-op threads (1 is steadier on a
    shared 2-core machine, docs/fidelity.md). `warmup_requests`: untimed requests run to completion
    before the replay. `fingerprint_repeats`: timings of each reference step before and after.
    `timeout_s`: bound on the whole replay (seconds)."""

    device: Literal["cpu", "cuda"] = "cpu"
    threads: Int(gt=0, le=1024) = 1
    dtype: Literal["fp32", "bf16"] = "fp32"
    warmup_requests: Int(ge=0, le=1000) = 4
    fingerprint_repeats: Int(gt=0, le=1000) = 9
    timeout_s: PositiveSeconds = 600.0
    profile: ProfileGridConfig = ProfileGridConfig()


@dataclass(frozen=True, config=STRICT)
class RealRunConfig:
    model: str  # catalog name or a path to a model TOML
    workload: WorkloadSpec
    engine: RealEngineConfig
    real: RealSettingsConfig = RealSettingsConfig()
    run: RunConfig = RunConfig()
    slo: SLOConfig = SLOConfig()
    metrics: MetricsConfig = MetricsConfig()


@dataclasses.dataclass(frozen=True, slots=True)
class LoadedRealConfig:
    """A validated config with where it came from: `source` names it in errors, relative paths in
    it resolve against `base_dir`, `not_read` lists the simulator-only fields the file sets."""

    cfg: RealRunConfig
    source: str
    base_dir: Path
    not_read: tuple[str, ...]
    slo_set: bool = True  # whether the file has an [slo] table (else goodput is not printed)
    step_table: Path | None = None  # the mirror's `cost.step_table`, resolved: its provenance is checked


def load_real_config(path: str | Path, overrides: Sequence[str] = ()) -> LoadedRealConfig:
    """Read and validate a config for the real engine (`overrides`: `--set` assignments)."""
    path = Path(path)
    doc = apply_overrides(load_toml(path), overrides, source="--set")
    try:
        return real_config_from_doc(doc, str(path), path.resolve().parent)
    except InputError as exc:
        raise blame_override(exc, str(path), set_flags(overrides)) from None


def real_config_from_doc(doc: dict[str, Any], source: str, base_dir: Path) -> LoadedRealConfig:
    """Validate a parsed config document for the real engine (see the module docstring)."""
    _check_one_instance(doc.get("cluster"), source)
    read = {key: value for key, value in doc.items() if key not in SIM_ONLY_TABLES}
    not_read = [table for table in SIM_ONLY_TABLES if table in doc]
    engine = read.get("engine")
    if isinstance(engine, dict):
        not_read += [f"engine.{name}" for name in SIM_ONLY_ENGINE_FIELDS if name in engine]
        read["engine"] = {key: value for key, value in engine.items() if key not in SIM_ONLY_ENGINE_FIELDS}
    cfg = validate(RealRunConfig, read, source=source)
    check_real_config(cfg, source, base_dir)
    cost = doc.get("cost")
    table = cost.get("step_table") if isinstance(cost, dict) else None
    step_table = locations.resolve_path(table, base_dir) if isinstance(table, str) else None
    return LoadedRealConfig(cfg, source, base_dir, tuple(not_read), "slo" in doc, step_table)


def _check_one_instance(cluster: Any, source: str) -> None:
    if not isinstance(cluster, dict):
        return
    if cluster.get("layout", "colocated") != "colocated":
        raise InputError(f"{source}: cluster.layout", f"{cluster['layout']!r} for the real engine",
                         'layout = "colocated" (the real engine is one instance)')
    if cluster.get("instances", 1) != 1:
        raise InputError(f"{source}: cluster.instances", f"{cluster['instances']!r} for the real engine",
                         "instances = 1 (the real engine is one instance)")


def check_real_config(cfg: RealRunConfig, source: str, base_dir: Path) -> None:
    """Checks that span fields, beyond what each field's type says."""
    if cfg.workload.multimodal is not None:
        raise InputError(f"{source}: workload.multimodal", "set for the real engine",
                         "no [workload.multimodal] table: the real engine runs a text-only Llama and has no "
                         "vision encoder (simulate multimodal workloads with infralab sim run)")
    check_workload(cfg.workload, source, base_dir)
    check_percentiles(cfg.metrics.percentiles, f"{source}: metrics.percentiles")
    if cfg.engine.prefix_cache:
        raise InputError(f"{source}: engine.prefix_cache", "true (the default) for the real engine",
                         "prefix_cache = false (the engine runs without block sharing; the mirror requires the same)")
    if cfg.workload.max_concurrency is not None:
        raise InputError(f"{source}: workload.max_concurrency", "set for the real engine",
                         "no max_concurrency: the load generator replays open loop only")


def engine_settings(cfg: RealRunConfig) -> EngineSettings:
    """The engine's settings for this config (its knobs under the engine's own names)."""
    engine, real = cfg.engine, cfg.real
    return EngineSettings(
        scheduler=ENGINE_SCHEDULERS[engine.scheduler], max_batch_tokens=engine.max_batched_tokens,
        num_blocks=engine.num_blocks, page_size=engine.block_size, max_requests_per_batch=engine.max_num_seqs,
        safety_margin=engine.safety_margin, dtype=real.dtype, threads=real.threads, seed=cfg.run.seed,
        device=real.device)


RESOLVED_HEADER = """\
# The resolved config of this real-engine run: every field the real side read, with defaults
# filled in and --set overrides applied; unset optional fields are left out, and so are the
# simulator's own tables and fields (summary.json's run.not_read lists those the file set).
# Relative paths are written as absolute paths (@data/ paths and catalog names stay as written).
"""


def resolved_config_text(loaded: LoadedRealConfig) -> str:
    """The config that ran, as TOML, every default filled in (`infralab real run` reads it back)."""
    doc = dataclasses.asdict(loaded.cfg)
    _rebase_paths(doc, loaded.base_dir)
    return RESOLVED_HEADER + "\n" + dump_toml(doc)


def _rebase_paths(doc: dict[str, Any], base_dir: Path) -> None:
    """Relative file paths (a model TOML, the workload's traces) made absolute against `base_dir`
    (in place)."""
    model = doc["model"]
    if is_model_path(model) and not locations.is_data_path(model) and not Path(model).is_absolute():
        doc["model"] = str(locations.resolve_path(model, base_dir))
    workload = doc["workload"]
    tables = [workload] + [workload[k] for k in ("prompt", "output") if isinstance(workload.get(k), dict)]
    for table in tables:
        value = table.get("path")
        if isinstance(value, str) and not locations.is_data_path(value) and not Path(value).is_absolute():
            table["path"] = str(locations.resolve_path(value, base_dir))


def with_seed(loaded: LoadedRealConfig, seed: int | None) -> LoadedRealConfig:
    """`loaded` with `run.seed` replaced when `seed` is given."""
    if seed is None:
        return loaded
    cfg = dataclasses.replace(loaded.cfg, run=dataclasses.replace(loaded.cfg.run, seed=seed))
    return dataclasses.replace(loaded, cfg=cfg)
