"""The engine's step time over a grid of batch shapes, as calibration-table rows.

For each point (q_tokens, kv_tokens, seqs) of the grid that the engine can run, a synthetic step of
that shape (`real.synthetic_step`: the engine's own batch building and forward) is timed `repeats`
times; each timing pass goes over the whole grid in order, so a drift of the machine's speed during
the profile spreads over every point instead of landing on the last ones. Two rows per point, in
the format of docs/calibration.md (`infralab.calibration_table`), shape keys `q_tokens;kv_tokens;seqs`
(`kv_tokens` = the keys the step attends over: past tokens read from the cache plus its own new
ones; see `StepShape`):

- kernel `engine_step`: the median of `_generation_step` (forward, logits, greedy sampling);
- kernel `engine_prepare`: the median of `prepare_batch_tensors` (host: building the batch tensors
  and the attention mask).

Variant = the attention implementation, dtype = the model's, device = the engine's (`cpu`, or `cuda`). `flops` and `bytes`
are `real.step_work`'s static counts; the rates are derived from them; CPU peaks are unknown, so
`roofline_fraction` is 0 (as for the kernels' cpu rows). What a step spends in the scheduler and in
`update_batch` is not in these rows: replays record it per step (`real.step_trace`).
"""

from __future__ import annotations

import itertools
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers

from infralab.calibration_table import CalibrationRow, Shape, provenance_line
from infralab.kernels.calibration import write_table
from infralab.real.engine import RealEngine
from infralab.real.fingerprint import Fingerprint, drift, fingerprint, midpoint
from infralab.real.step_shape import StepShape
from infralab.real.step_work import step_bytes, step_flops
from infralab.real.synthetic_step import StepTiming, fits, time_step

STEP_KERNEL = "engine_step"
PREPARE_KERNEL = "engine_prepare"
ITEMSIZE = {"fp32": 4, "bf16": 2}


@dataclass(frozen=True, slots=True)
class ProfileGrid:
    """The step shapes to time (every combination that the engine can run) and how often."""

    q_tokens: tuple[int, ...]
    kv_tokens: tuple[int, ...]
    seqs: tuple[int, ...]
    repeats: int = 5

    def points(self, engine: RealEngine) -> list[StepShape]:
        """The combinations `engine` can run, in (q, kv, seqs) order."""
        shapes = (StepShape(q, kv, s) for q, kv, s in itertools.product(self.q_tokens, self.kv_tokens, self.seqs))
        return [shape for shape in shapes if fits(engine, shape) is None]


FULL_GRID = ProfileGrid(q_tokens=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                        kv_tokens=(1, 8, 64, 256, 1024, 4096, 8192), seqs=(1, 2, 4, 8, 16, 32, 64), repeats=5)
"""For the small model: decode batches (q = seqs) up to 64 sequences, prefill chunks up to the
default token budget, keys up to half of its KV cache."""

QUICK_GRID = ProfileGrid(q_tokens=(1, 8, 64), kv_tokens=(64, 512), seqs=(1, 8), repeats=3)


@dataclass(frozen=True, slots=True)
class Profile:
    """Measured medians per grid point, with the fingerprints taken before and after."""

    points: tuple[StepShape, ...]
    medians: tuple[StepTiming, ...]
    before: Fingerprint
    after: Fingerprint
    repeats: int


def profile(engine: RealEngine, grid: ProfileGrid, tick: Callable[[], None] = lambda: None) -> Profile:
    """Time every runnable point of `grid` on `engine` (its loop quiet or stopped); `tick` is called
    after each of the (repeats + 1) x points steps (a progress bar)."""
    points = grid.points(engine)
    if not points:
        raise ValueError("no point of the grid fits this engine")
    before = fingerprint(engine)
    timings: list[list[StepTiming]] = [[] for _ in points]
    with engine.quiet():
        for point in points:  # one untimed pass: first calls of a shape allocate
            time_step(engine, point)
            tick()
        for _ in range(grid.repeats):
            for point, column in zip(points, timings):
                column.append(time_step(engine, point))
                tick()
    after = fingerprint(engine)
    medians = tuple(StepTiming(statistics.median(t.prepare_s for t in column),
                               statistics.median(t.forward_s for t in column)) for column in timings)
    return Profile(tuple(points), medians, before, after, grid.repeats)


def calibration_rows(engine: RealEngine, result: Profile) -> list[CalibrationRow]:
    """Two rows per point (`engine_step`, then `engine_prepare`), in grid order."""
    rows = []
    itemsize = ITEMSIZE[engine.settings.dtype]
    for point, median in zip(result.points, result.medians):
        shape: Shape = (("q_tokens", point.q_tokens), ("kv_tokens", point.kv_tokens), ("seqs", point.seqs))
        flops = step_flops(engine.shape, point.q_tokens, point.past_tokens, point.seqs)
        moved = step_bytes(engine.shape, point.q_tokens, point.past_tokens, itemsize)
        for kernel, seconds in ((STEP_KERNEL, median.forward_s), (PREPARE_KERNEL, median.prepare_s)):
            work = (flops, moved) if kernel == STEP_KERNEL else (0, 0)  # batch building is not counted
            rows.append(CalibrationRow(
                kernel=kernel, variant=engine.settings.attention, shape=shape, dtype=engine.settings.dtype,
                device=engine.settings.device, median_s=seconds, bytes=work[1], flops=work[0],
                achieved_gbps=work[1] / seconds / 1e9, achieved_tflops=work[0] / seconds / 1e12))
    return rows


def provenance(engine: RealEngine) -> dict[str, object]:
    """What a step table's times depend on besides the step's shape: the model, the engine's cache
    (its attention mask spans it), dtype, device, torch threads and the versions. `infralab sim
    run` and `infralab real run` compare a table's against their own (one line where they differ)."""
    resolved = engine.resolved()
    return {"model": engine.shape.name, "dtype": engine.settings.dtype, "device": engine.settings.device,
            "threads": engine.settings.threads, "cache_tokens": resolved["num_blocks"] * resolved["page_size"],
            "transformers": transformers.__version__, "torch": torch.__version__, "machine": platform.machine()}


def engine_comments(engine: RealEngine, measured: Profile | None = None) -> list[str]:
    """The comment lines that say which engine a table's times are of (its provenance line first;
    with `measured`, a timed profile, the provenance also holds its reference steps' speed: the
    mean of the fingerprints before and after, which a later run compares its own with)."""
    facts = provenance(engine)
    if measured is not None:
        facts["fingerprint"] = {"steps": [[s.q_tokens, s.kv_tokens, s.seqs] for s in measured.before.shapes],
                                "forward_s": list(midpoint(measured.before, measured.after).forward_s)}
    return [provenance_line(facts), f"model {engine.shape.name}: {engine.shape}",
            f"engine: {engine.resolved()}",
            f"transformers {transformers.__version__}, torch {torch.__version__}, {platform.machine()}, "
            f"{engine.settings.threads} torch threads{_gpu_name(engine)}"]


def _gpu_name(engine: RealEngine) -> str:
    """`, on NVIDIA H200` for a CUDA engine (the rows' device column says only `cuda`)."""
    return f", on {torch.cuda.get_device_name()}" if engine.settings.device == "cuda" else ""


def comments(engine: RealEngine, result: Profile) -> list[str]:
    """The comment lines that say what the table measured and where."""
    return [
        "infralab real-engine step profile (docs/fidelity.md): one row pair per (q_tokens, kv_tokens, seqs)",
        *engine_comments(engine, result),
        f"median of {result.repeats} synthetic steps per point, passes interleaved over the grid",
        f"fingerprint before {[round(t, 6) for t in result.before.forward_s]} s, "
        f"after {[round(t, 6) for t in result.after.forward_s]} s (drift {drift(result.before, result.after):+.1%})",
    ]


def write_profile(engine: RealEngine, result: Profile, path: str | Path) -> Path:
    """Write the profile as a calibration table at `path`, atomically."""
    return write_table(calibration_rows(engine, result), path, comments(engine, result))

