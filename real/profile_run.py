"""The engine's step profile for a config (`infralab real profile CONFIG.toml --out DIR`): the
calibration table a simulation of the same config reads as `[cost] step_table`.

The grid (`[real.profile]`, `ProfileGridConfig`) spans by default every step the config's run can
have, as the simulator's step-table check requires (`infralab.sim.step_table_cost`): query tokens
1 .. the token budget, keys 1 .. min(the KV cache, the workload's tokens), sequences 1 ..
min(the request cap, the token budget, the workload's requests), each axis in powers of two with
its bound included. The profile's synthetic steps are its calibration data; the replays it will be
compared with are other data (docs/fidelity.md).

The folder holds step_table.csv (the calibration table, docs/calibration.md), profile.json (the
grid, the points the engine ran, the fingerprints before and after and their drift), config.toml
and resolved_config.toml. Bad input (config, memory, workload) stops it before anything is built.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from infralab.errors import InputError
from infralab.progress import progress
from infralab.real.config import ProfileGridConfig, load_real_config, resolved_config_text
from infralab.real.engine import EngineSettings, RealEngine
from infralab.real.fingerprint import drift
from infralab.real.profile import ProfileGrid, profile, write_profile
from infralab.real.run import RESOLVED_CONFIG, PreparedRealRun, prepare_real_run
from infralab.results import atomic_output_dir, dump_json

STEP_TABLE = "step_table.csv"


def powers_up_to(bound: int) -> tuple[int, ...]:
    """1, 2, 4, ... below `bound`, then `bound` itself (tokens or sequences, >= 1)."""
    values = []
    value = 1
    while value < bound:
        values.append(value)
        value *= 2
    return (*values, bound)


def step_bounds(settings: EngineSettings, requests: Sequence) -> tuple[int, int, int]:
    """The most query tokens, keys and sequences a step of this run can have (the simulator's
    step-table check asks the profile to span exactly these)."""
    cache_tokens = settings.num_blocks * settings.page_size
    tokens = sum(r.prompt_tokens + r.output_tokens - 1 for r in requests)
    seqs = min(settings.max_requests_per_batch, settings.max_batch_tokens, len(requests))
    return settings.max_batch_tokens, min(cache_tokens, tokens), seqs


def profile_grid(grid: ProfileGridConfig, prepared: PreparedRealRun, also: Sequence[PreparedRealRun] = ()) -> ProfileGrid:
    """The grid to time: the config's axes, unset ones spanning the steps of its run and of the
    runs in `also` (other configs of the same engine)."""
    bounds = [step_bounds(p.settings, p.requests) for p in (prepared, *also)]
    q_bound, kv_bound, seq_bound = (max(b[i] for b in bounds) for i in range(3))
    return ProfileGrid(q_tokens=grid.q_tokens or powers_up_to(q_bound),
                       kv_tokens=grid.kv_tokens or powers_up_to(kv_bound),
                       seqs=grid.seqs or powers_up_to(seq_bound), repeats=grid.repeats)


def same_engine(prepared: PreparedRealRun, other: PreparedRealRun) -> None:
    """InputError naming `other`'s config and the first field where its model or engine settings
    differ from `prepared`'s (the run seed aside: it only seeds the random weights)."""
    if other.shape != prepared.shape:
        raise InputError(f"{other.loaded.source}: model", f"{other.shape.name!r} is not {prepared.shape.name!r}",
                         f"the model of {prepared.loaded.source} (one step table is one engine's)")
    mine, theirs = dataclasses.asdict(prepared.settings), dataclasses.asdict(other.settings)
    for field, value in theirs.items():
        if field != "seed" and value != mine[field]:
            raise InputError(f"{other.loaded.source}: engine settings ({field})", f"{value!r}, not {mine[field]!r}",
                             f"the engine settings of {prepared.loaded.source} (one step table is one engine's)")


def profile_config_file(config_path: str | Path, out_dir: str | Path, overrides: Sequence[str] = (),
                        stdout: TextIO | None = None, show_progress: bool = True,
                        also: Sequence[str | Path] = ()) -> Path:
    """Profile the engine of the config at `config_path` over its grid, spanning also the runs of
    the configs in `also` (the same model and engine); write the folder; returns the step table's
    final path. Progress goes to stderr (`infralab.progress`: a bar on a terminal, a line per 10 %
    elsewhere)."""
    config_path = Path(config_path)
    prepared = prepare_real_run(load_real_config(config_path, overrides))
    others = [prepare_real_run(load_real_config(Path(path), overrides)) for path in also]
    for other in others:
        same_engine(prepared, other)
    grid = profile_grid(prepared.loaded.cfg.real.profile, prepared, others)
    with atomic_output_dir(out_dir) as tmp:
        engine = RealEngine(prepared.shape, prepared.settings)
        try:
            points = len(grid.points(engine))
            if not points:
                raise InputError(f"{prepared.loaded.source}: real.profile", "no point of the grid fits this engine",
                                 "q_tokens <= the token budget, seqs <= q_tokens <= kv_tokens, within the KV cache")
            with progress(points * (grid.repeats + 1), f"real profile ({points} step shapes x {grid.repeats + 1})",
                          "step", enabled=show_progress) as tick:
                measured = profile(engine, grid, tick)
            write_profile(engine, measured, tmp / STEP_TABLE)
            facts = {
                "grid": {"q_tokens": list(grid.q_tokens), "kv_tokens": list(grid.kv_tokens),
                         "seqs": list(grid.seqs), "repeats": grid.repeats},
                "points": [[p.q_tokens, p.kv_tokens, p.seqs] for p in measured.points],
                "engine_settings": engine.resolved(),
                "model": prepared.loaded.cfg.model,
                "also_spans": [str(path) for path in also],
                "fingerprint_before": measured.before.as_dict(),
                "fingerprint_after": measured.after.as_dict(),
                "fingerprint_drift": drift(measured.before, measured.after),
            }
        finally:
            engine.close()
        dump_json(facts, tmp / "profile.json")
        (tmp / "config.toml").write_bytes(config_path.read_bytes())
        (tmp / RESOLVED_CONFIG).write_text(resolved_config_text(prepared.loaded), encoding="utf-8")
    table = Path(out_dir) / STEP_TABLE
    print(f"wrote {table}: {len(measured.points)} step shapes x {grid.repeats} timings, fingerprint drift "
          f"{facts['fingerprint_drift']:+.1%}; simulate with [cost] step_table = \"{table}\" and "
          f"dtype = \"{prepared.settings.dtype}\"", file=stdout or sys.stdout)
    return table
