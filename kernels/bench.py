"""`infralab kernels bench`: time every kernel variant over a shape grid and write a calibration table.

One row per (kernel, variant, shape, dtype, device), format in docs/calibration.md. On a GPU each
case is timed with `triton.testing.do_bench` (median of repeated launches, L2 flushed between them);
on the CPU the torch reference of the case is timed with a median-of-N wall-clock timer and the
device is labelled `cpu` (Triton's interpreter is a correctness tool, not a timer). Every row carries
the variant's static work counts, so the KDA tuning story (v1 -> v2 fewer divisions, v2 -> v3 no
repeated prologue) is visible where nothing can be timed.

Runs without the `infralab` CLI hub too (the GPU script uses this, since the hub imports every part):

    python -m infralab.kernels.bench --grid small --out table.csv
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from infralab.errors import InputError
from infralab.kernels.bench_cases import GRIDS, KERNELS, BenchCase, ShapeGrid, cases_for, prepare
from infralab.kernels.calibration import CalibrationRow, DevicePeaks, WorkCounts, make_row, write_table
from infralab.kernels.interpreter import kernel_device
from infralab.results import check_new_file

Timer = Callable[[Callable[[], object]], float]
"""Takes a zero-argument callable, returns the median seconds of one call."""

CPU_TIME_BUDGET_S = 0.15
"""Wall time the CPU timer spends per case (after one warm-up call)."""

CPU_THREADS = 1
"""Torch threads while timing CPU references (see `run_bench`)."""


# ---- flags ---------------------------------------------------------------------------------------


def parse_kernels(text: str | None) -> tuple[str, ...]:
    """`--kernels a,b` -> the selected kernel names in table order (None or "all": every kernel)."""
    if text is None or text.strip() == "all":
        return KERNELS
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in KERNELS]
    if unknown or not names:
        problem = f"unknown kernel {unknown[0]!r}" if unknown else "names no kernel"
        raise InputError("--kernels", problem, f"a comma-separated list of {', '.join(KERNELS)} (or 'all')")
    return tuple(kernel for kernel in KERNELS if kernel in names)


def parse_grid(text: str) -> ShapeGrid:
    """`--grid small|full` -> the shape grid."""
    if text not in GRIDS:
        raise InputError("--grid", f"unknown grid {text!r}", f"one of {', '.join(GRIDS)}")
    return GRIDS[text]


# ---- device and timers ---------------------------------------------------------------------------


def device_label(device: str) -> str:
    """The table's `device` column: "cpu", or the GPU's name as torch reports it."""
    if device == "cpu":
        return "cpu"
    import torch

    return torch.cuda.get_device_name()


def cpu_timer(budget_s: float = CPU_TIME_BUDGET_S, min_repeats: int = 3, max_repeats: int = 25) -> Timer:
    """Median-of-N wall-clock timer: one warm-up call, then N calls with N chosen to fill `budget_s`."""

    def measure(fn: Callable[[], object]) -> float:
        start = time.perf_counter()
        fn()
        first = max(time.perf_counter() - start, 1e-9)
        repeats = min(max_repeats, max(min_repeats, int(budget_s / first)))
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return max(statistics.median(samples), 1e-9)

    return measure


def gpu_timer(warmup_ms: int = 25, rep_ms: int = 100) -> Timer:
    """`triton.testing.do_bench`, median mode (it flushes L2 between calls and times with CUDA events)."""
    from triton.testing import do_bench

    def measure(fn: Callable[[], object]) -> float:
        return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") * 1e-3

    return measure


# ---- work counts ---------------------------------------------------------------------------------


def work_for(case: BenchCase) -> WorkCounts:
    """Static work of one call of `case`, from its op's registered counts (a ReplaySSM row covers a
    whole ring cycle, `steps` = L; `make_row` divides it per decode step)."""
    from infralab.kernels.registry import work_counts

    return work_counts(case.kernel, case.variant, case.dims(), case.dtype)


# ---- the benchmark -------------------------------------------------------------------------------


def all_cases(kernels: Sequence[str], grid: ShapeGrid, on_gpu: bool) -> list[BenchCase]:
    """Every case of the selected kernels, in table order, without duplicates (a torch baseline
    shape can be asked for by two kernels)."""
    seen: set[tuple] = set()
    out = []
    for kernel in kernels:
        for case in cases_for(kernel, grid, on_gpu):
            key = (case.kernel, case.variant, case.dtype, case.shape)
            if key not in seen:
                seen.add(key)
                out.append(case)
    return out


def run_bench(
    kernels: Sequence[str],
    grid: ShapeGrid,
    device: str = "cpu",
    timer: Timer | None = None,
    peaks: DevicePeaks | None = None,
    progress: bool = True,
    seed: int = 0,
) -> list[CalibrationRow]:
    """Time every case of `kernels` in `grid` on `device` ("cpu" or "cuda") and return the rows.

    On "cpu", cases that share a torch reference (e.g. KDA v1/v2/v3) share one timing. `peaks` are
    the device's datasheet peaks for the roofline fraction (None: fraction 0)."""
    import torch
    from tqdm import tqdm

    on_gpu = device != "cpu"
    timer = timer or (gpu_timer() if on_gpu else cpu_timer())
    label = device_label(device)
    cases = all_cases(kernels, grid, on_gpu)
    shared: dict[tuple, float] = {}
    rows = []
    threads = torch.get_num_threads()
    if not on_gpu:
        # One thread: on a shared or busy machine multi-threaded torch ops stall on each other and
        # the medians swing by integer factors; single-threaded references time reproducibly.
        torch.set_num_threads(CPU_THREADS)
    try:
        for case in tqdm(cases, desc="kernels bench", unit="case", file=sys.stderr, disable=not progress):
            key = (case.reference, case.shape, case.dtype)
            median_s = shared.get(key) if not on_gpu and case.reference else None
            if median_s is None:
                median_s = _measure(case, device, timer, seed)
                shared[key] = median_s
            rows.append(make_row(case.kernel, case.variant, case.shape, case.dtype, label, median_s,
                                 work_for(case), peaks, case.compute))
    finally:
        torch.set_num_threads(threads)
    return rows


def _measure(case: BenchCase, device: str, timer: Timer, seed: int) -> float:
    fn = prepare(case, device, seed)
    calls = getattr(fn, "calls_per_run", 1)  # a ReplaySSM cycle runs several decode steps
    seconds = timer(fn) / calls
    del fn
    if device != "cpu":
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return seconds


# ---- output --------------------------------------------------------------------------------------


def default_out(grid: str, device: str) -> Path:
    """results/calibration-<grid>-<device>.csv, the device name made filename-safe."""
    slug = "".join(c if c.isalnum() else "-" for c in device.lower()).strip("-")
    return Path("results") / f"calibration-{grid}-{slug}.csv"


def header_comments(grid: str, device: str) -> list[str]:
    """Comment lines naming how the table was made (format: docs/calibration.md)."""
    import torch
    import triton

    how = ("triton.testing.do_bench median (L2 flushed); variant 'torch' rows time torch's own op"
           if device != "cpu" else
           "median-of-N wall clock, one torch thread, of the torch reference of each variant's math "
           "(not the Triton kernel)")
    return [
        "infralab calibration table (format: docs/calibration.md)",
        f"grid={grid} device={device} torch={torch.__version__} triton={triton.__version__}",
        f"timing: {how}",
    ]


def summary_lines(rows: Sequence[CalibrationRow]) -> list[str]:
    """A fixed-width text view of the rows for logs."""
    lines = [f"{'kernel':<23} {'variant':<7} {'dtype':<7} {'shape':<32} {'median_us':>11} "
             f"{'GB/s':>9} {'TFLOP/s':>9} {'roofline':>8} {'div':>10} {'transc':>10} {'repeated':>11}"]
    for r in rows:
        lines.append(f"{r.kernel:<23} {r.variant:<7} {r.dtype:<7} {r.shape_text:<32} {r.median_s * 1e6:>11.2f} "
                     f"{r.achieved_gbps:>9.1f} {r.achieved_tflops:>9.3f} {r.roofline_fraction:>8.1%} "
                     f"{r.divisions:>10} {r.transcendentals:>10} {r.repeated_elementwise:>11}")
    return lines


def bench_command(
    kernels_flag: str | None, grid_flag: str, out: str | None, progress: bool = True, force: bool = False
) -> int:
    """The `bench` subcommand: validate flags, run, write the table atomically, print a summary.

    An existing table at the output path is replaced only with `force` (checked before timing)."""
    kernels = parse_kernels(kernels_flag)
    grid = parse_grid(grid_flag)
    if out is not None and not out.endswith(".csv"):
        raise InputError("--out", f"got {out!r}", "a file path ending in .csv")
    device = kernel_device()
    label = device_label(device)
    target = check_new_file(out or default_out(grid.name, label), force)
    from infralab.kernels.device_peaks import peaks_for

    peaks = peaks_for(label) if device != "cpu" else None
    rows = run_bench(kernels, grid, device, peaks=peaks, progress=progress)
    path = write_table(rows, target, header_comments(grid.name, label))
    print("\n".join(summary_lines(rows)))
    print(f"wrote {len(rows)} rows to {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (`python -m infralab.kernels.bench`): the same flags as `infralab kernels bench`."""
    import argparse

    from infralab.cli import BENCH_ARGS, add_args
    from infralab.kernels.cli import bench

    parser = argparse.ArgumentParser(prog="python -m infralab.kernels.bench", description=__doc__.splitlines()[0])
    add_args(parser, BENCH_ARGS)
    args = parser.parse_args(argv)
    try:
        return bench(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
