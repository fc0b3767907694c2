"""One real-engine run from a config file (`infralab real run CONFIG.toml --out DIR`): the
workload replayed open loop on transformers' continuous-batching engine, written as the same run
folder as `infralab sim run`, computed by the same code (`infralab.metrics`).

The results folder holds:
- summary.json: `infralab.metrics.run_metrics.summarize` of the replay's records (as for a
  simulation), plus under "run" what ran and how it was observed: the engine and its resolved
  settings, the step-speed fingerprint before and after and its drift, the generator's latest
  submission, the contention seen meanwhile (`real.contention`: other processes' CPU share, slow
  steps, flagged or not), and `not_observed` / `not_read` (what the engine does not expose; the config's
  simulator-only fields);
- requests.csv: the same columns as a simulation's (`infralab.metrics.requests_csv`);
- trace.json: the observed steps as a Perfetto timeline (`infralab.metrics.timeline`):
  "batch" intervals on `instance/instance-0`, their phases on `engine/instance-0`;
- replay.json: the raw replay (every token time, submission times, every step's fields: what the
  fidelity study reads for ITL and step checks);
- config.toml: a byte copy of the input config; resolved_config.toml: the fields the real side
  read, defaults filled in.

Everything that can be refused is checked before the folder is entered and before the model is
built: the config, the model's memory on this machine (`real.machine`), every request against
the model's context and the engine's KV cache. A soft reset during the replay (the engine
preempted a request and dropped its token times) stops the run with one line; no folder is left
half-written (`infralab.results.atomic_output_dir`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from infralab.calibration_table import check_provenance, read_provenance
from infralab.errors import InputError
from infralab.metrics.requests_csv import write_requests_csv
from infralab.metrics.run_metrics import print_summary, summarize
from infralab.metrics.summary import RunSummary
from infralab.metrics.timeline import DEFAULT_MAX_EVENTS, SUMMARY_FACTS, save_trace
from infralab.real.config import LoadedRealConfig, engine_settings, load_real_config, resolved_config_text, with_seed
from infralab.real.engine import EngineSettings, RealEngine
from infralab.real.fingerprint import drift, midpoint
from infralab.real.load_generator import Replay, ReplayRequest, SoftResetError, check_replayable, replay, warm_up
from infralab.real.machine import check_fits_machine
from infralab.real.model_shape import ModelShape, model_shape
from infralab.real.run_record import NOT_OBSERVED, run_record
from infralab.results import atomic_output_dir, dump_json, pause_point
from infralab.workload import build_workload

RESOLVED_CONFIG = "resolved_config.toml"
TRACE_TAGS = {"generator": "infralab.real.run", "time_unit": "microseconds from the replay's start (time.perf_counter)"}


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedRealRun:
    """A real run's inputs, read and checked: what the engine is built from and what it replays."""

    loaded: LoadedRealConfig
    shape: ModelShape
    settings: EngineSettings
    requests: tuple[ReplayRequest, ...]
    table_provenance: dict[str, Any] | None = None  # of the config's `[cost] step_table`, checked against this run


def prepare_real_run(loaded: LoadedRealConfig) -> PreparedRealRun:
    """The model, the engine settings and the requests of a config, every bad input refused here
    (before any folder or model exists): the model's memory on this machine, every request against
    the model's context and the engine's cache."""
    cfg, source = loaded.cfg, loaded.source
    shape = model_shape(cfg.model, loaded.base_dir, f"{source}: model")
    settings = engine_settings(cfg)
    check_fits_machine(shape, settings, f"{source}: model", device_where=f"{source}: real.device")
    provenance = None
    if loaded.step_table is not None and loaded.step_table.is_file():  # the mirror's table: profiled like this run?
        provenance = read_provenance(loaded.step_table)
        check_provenance(str(loaded.step_table), provenance,
                         {"model": shape.name, "dtype": settings.dtype, "device": settings.device,
                          "threads": settings.threads, "cache_tokens": settings.num_blocks * settings.page_size})
    table = _config_fields_of(source, lambda: build_workload(cfg.workload, loaded.base_dir, cfg.run.seed,
                                                             shape.context_length))
    requests = tuple(ReplayRequest(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in table)
    if not requests:
        raise InputError(f"{source}: workload", "holds no request", "at least one request to replay")
    check_replayable(requests, shape.context_length, settings.num_blocks * settings.page_size,
                     where=f"{source}: workload")
    return PreparedRealRun(loaded, shape, settings, requests, provenance)


def _config_fields_of(source: str, build: Any) -> Any:
    """`build()`, with errors that name only a config field ("workload.prompt") put under the config."""
    try:
        return build()
    except InputError as exc:
        if exc.where.startswith(source) or "/" in exc.where or exc.where.endswith((".jsonl", ".csv", ".json")):
            raise
        raise InputError(f"{source}: {exc.where}", exc.problem, exc.expected) from None


def replay_on_engine(prepared: PreparedRealRun) -> tuple[Replay, RealEngine]:
    """Build the engine, warm it up, replay the requests open loop; returns the replay and the
    (stopped) engine. A soft reset is an InputError naming the cache (more blocks replay it)."""
    cfg = prepared.loaded.cfg
    engine = RealEngine(prepared.shape, prepared.settings)
    try:
        with engine:
            if cfg.real.warmup_requests:
                warm_up(engine, requests=cfg.real.warmup_requests)
            result = replay(engine, prepared.requests, rate_scale=1.0, seed=cfg.run.seed,
                            timeout_s=cfg.real.timeout_s, fingerprint_repeats=cfg.real.fingerprint_repeats)
    except SoftResetError as exc:
        raise InputError(f"{prepared.loaded.source}: engine.num_blocks",
                         f"the engine ran out of KV blocks and preempted a request ({exc})",
                         "a cache that holds the requests in flight: more engine.num_blocks, or less load") from None
    finally:
        engine.close()
    return result, engine


def real_run_facts(prepared: PreparedRealRun, config_path: Path, result: Replay, engine: RealEngine) -> dict[str, Any]:
    """What ran and how it was observed, for summary.json's "run" and the trace's metadata."""
    import torch
    import transformers

    cfg = prepared.loaded.cfg
    return {
        "name": cfg.run.name,
        "seed": cfg.run.seed,
        "config": config_path.name,
        "model": cfg.model,
        "accelerator": prepared.settings.device,
        "tp": 1,
        "layout": "colocated",
        "rung": "real",
        "engine": f"transformers {transformers.__version__} continuous batching (torch {torch.__version__})",
        "engine_settings": engine.resolved(),
        "warmup_requests": cfg.real.warmup_requests,
        "replay_wall_s": result.wall_s,
        "max_submit_lag_s": result.max_submit_lag_s,
        "steps_observed": len(result.steps),
        "fingerprint_before": result.before.as_dict(),
        "fingerprint_after": result.after.as_dict(),
        "fingerprint_drift": drift(result.before, result.after),
        "speed_vs_step_table": speed_vs_table(prepared.table_provenance, result),
        "contention": None if result.contention is None else result.contention.as_dict(),
        "not_observed": list(NOT_OBSERVED),
        "not_read": list(prepared.loaded.not_read),
    }


def speed_vs_table(provenance: dict[str, Any] | None, result: Replay) -> float | None:
    """How much slower (+) or faster (-) the reference steps ran around this replay than around the
    profile of the config's `[cost] step_table` (its `provenance`; the mean of each side's before
    and after; None when the table records no fingerprint of the same steps): the machine's speed
    against the one the simulator's step times were measured at."""
    reference = (provenance or {}).get("fingerprint")
    steps = [[s.q_tokens, s.kv_tokens, s.seqs] for s in result.before.shapes]
    if not isinstance(reference, dict) or reference.get("steps") != steps:
        return None
    return sum(midpoint(result.before, result.after).forward_s) / sum(reference["forward_s"]) - 1.0


def real_run_summary(prepared: PreparedRealRun, config_path: Path, result: Replay,
                     engine: RealEngine) -> tuple[RunSummary, Any]:
    """The replay's summary (the shared `summarize`, with what ran) and its run record."""
    cfg = prepared.loaded.cfg
    blocks = engine.resolved()["num_blocks"]
    record = run_record(result, prepared.settings, blocks)
    summary = summarize(record, cfg.slo, cfg.metrics.percentiles)
    summary = summary.with_run(real_run_facts(prepared, config_path, result, engine))
    return summary.with_kv_cache(blocks, prepared.settings.page_size), record


def write_real_run_folder(folder: Path, prepared: PreparedRealRun, config_path: Path, result: Replay,
                          engine: RealEngine) -> RunSummary:
    """Write a replay's run folder (module docstring) into `folder`; returns the summary as written."""
    summary, record = real_run_summary(prepared, config_path, result, engine)
    pause_point("writing")
    (folder / "config.toml").write_bytes(config_path.read_bytes())
    (folder / RESOLVED_CONFIG).write_text(resolved_config_text(prepared.loaded), encoding="utf-8")
    write_requests_csv(record, folder / "requests.csv")
    meta = save_trace(record, folder / "trace.json", max_events=DEFAULT_MAX_EVENTS,
                      metadata={"run": summary.run, **TRACE_TAGS})
    summary = summary.with_timeline({key: meta[key] for key in SUMMARY_FACTS})
    dump_json(result.as_dict(), folder / "replay.json")
    dump_json(summary.to_json(), folder / "summary.json")
    return summary


def run_real_config_file(config_path: str | Path, out_dir: str | Path, overrides: Sequence[str] = (),
                         seed: int | None = None, stdout: TextIO | None = None) -> RunSummary:
    """Run the config at `config_path` on the real engine, write the results folder, print the
    summary table; returns the summary as written. Bad input raises InputError before any folder
    is created or model built."""
    config_path = Path(config_path)
    prepared = prepare_real_run(with_seed(load_real_config(config_path, overrides), seed))
    with atomic_output_dir(out_dir) as tmp:
        result, engine = replay_on_engine(prepared)
        summary = write_real_run_folder(tmp, prepared, config_path, result, engine)
    out = stdout or sys.stdout
    run = summary.run or {}
    print(f"real engine: {run['steps_observed']} steps observed, replay {run['replay_wall_s']:.2f} s, "
          f"fingerprint drift {run['fingerprint_drift']:+.1%}, latest submission "
          f"{run['max_submit_lag_s'] * 1e3:.1f} ms behind its arrival", file=out)
    if run.get("speed_vs_step_table") is not None:
        print(f"machine speed: the reference steps ran {run['speed_vs_step_table']:+.1%} against the profile of "
              f"{prepared.loaded.step_table.name} (a simulation with its times is off by about that much)", file=out)
    if result.contention is not None:
        print(f"contention: {result.contention.line()}", file=out)
    print_summary(summary, file=out, title="Real Engine Serving Benchmark Result", slo_set=prepared.loaded.slo_set)
    return summary
