"""How fast does each CPU of this machine run, moment to moment? (A benchmark, not a test.)

One process per CPU, each pinned to its CPU, times the same pure-Python loop back to back for
`--seconds`; the times are grouped into windows of `--window` seconds (median per window) and each
window is classed fast or slow against the CPU's fastest windows (slow: more than `--slow-ratio`
times the 10th percentile). Per CPU it prints the fast and slow speeds, the share of windows that
are slow, the lengths of the slow spells, and the steal time /proc/stat reported meanwhile; across
CPUs, the correlation of their window speeds and how often both were slow at once against what
independence would give. `--out DIR` also writes the windows (JSON) and a plot of speed over time.

    .venv/bin/python benchmarks/vcpu_speed.py [--seconds 60] [--window 0.1] [--out DIR]

Why: on the 2-vCPU VM these studies run on, the fidelity study's replays ran 10-25 % faster or
slower than the calibration minutes before, and the GIL probe's Python segments moved by 2x
between blocks of trials (docs/fidelity.md, docs/gil.md). This measures the machine's part of that
without the engine or the GIL in the way. Timing results describe this machine at that time only.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path

LOOP = 20_000  # iterations of the timed loop: about 1 ms on a fast spell here


def _loop() -> int:
    total = 0
    for i in range(LOOP):
        total += i * i
    return total


def _steal_ticks(cpu: int) -> int:
    with open("/proc/stat") as stat:
        for line in stat:
            fields = line.split()
            if fields[0] == f"cpu{cpu}":
                return int(fields[8])  # user nice system idle iowait irq softirq steal ...
    return 0


def sample(cpu: int, seconds: float, start_at: float, queue: mp.Queue) -> None:
    """Child: pinned to `cpu`, wait until `start_at` (time.time), then time `_loop` back to back
    for `seconds`; put (cpu, [(wall time, seconds per loop)], steal ticks) on `queue`."""
    os.sched_setaffinity(0, {cpu})
    while time.time() < start_at:
        time.sleep(0.001)
    steal = _steal_ticks(cpu)
    rows = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        _loop()
        rows.append((time.time(), time.perf_counter() - t0))
    queue.put((cpu, rows, _steal_ticks(cpu) - steal))


def windows(rows: list[tuple[float, float]], start: float, width: float, count: int) -> list[float | None]:
    """Median seconds per loop in each of `count` windows of `width` s from `start` (None: empty)."""
    bins: list[list[float]] = [[] for _ in range(count)]
    for at, took in rows:
        k = int((at - start) / width)
        if 0 <= k < count:
            bins[k].append(took)
    return [statistics.median(b) if b else None for b in bins]


def spells(slow: list[bool], width: float) -> list[float]:
    """Lengths (s) of the runs of consecutive slow windows."""
    out, run = [], 0
    for s in [*slow, False]:
        if s:
            run += 1
        elif run:
            out.append(run * width)
            run = 0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--window", type=float, default=0.1, help="window length, s")
    parser.add_argument("--slow-ratio", type=float, default=1.4, help="slow: this many times the fast speed's time")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    queue: mp.Queue = mp.Queue()
    start = time.time() + 0.5
    children = [mp.Process(target=sample, args=(cpu, args.seconds, start, queue)) for cpu in cpus]
    for child in children:
        child.start()
    results = sorted(queue.get() for _ in children)
    for child in children:
        child.join()
    count = int(args.seconds / args.window)
    series: dict[int, list[float | None]] = {}
    print(f"{len(cpus)} CPUs, {args.seconds:g} s, windows of {args.window:g} s; ms per loop of {LOOP:,} iterations")
    for cpu, rows, steal in results:
        w = windows(rows, start, args.window, count)
        series[cpu] = w
        known = sorted(x for x in w if x is not None)
        fast = known[len(known) // 10]
        slow = [x is not None and x > args.slow_ratio * fast for x in w]
        slow_times = [x for x in w if x is not None and x > args.slow_ratio * fast]
        runs = spells(slow, args.window)
        print(f"  cpu{cpu}: fast {fast * 1e3:.3f} ms, slow windows {sum(slow)} of {len(known)} "
              f"({sum(slow) / len(known):.0%}), slow median "
              f"{(statistics.median(slow_times) * 1e3 if slow_times else float('nan')):.3f} ms; slow spells "
              f"{len(runs)}, median {statistics.median(runs) if runs else 0:.2f} s, longest {max(runs, default=0):.2f} s; "
              f"steal {steal} ticks")
    if len(results) > 1:
        a, b = (series[cpu] for cpu, _, _ in results[:2])
        pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
        xs, ys = zip(*pairs)
        fa, fb = sorted(xs)[len(xs) // 10], sorted(ys)[len(ys) // 10]
        sa = [x > args.slow_ratio * fa for x in xs]
        sb = [y > args.slow_ratio * fb for y in ys]
        both = sum(p and q for p, q in zip(sa, sb)) / len(pairs)
        print(f"  correlation of the two CPUs' window times: {statistics.correlation(xs, ys):.2f}; both slow in "
              f"{both:.1%} of windows, {sum(sa) / len(pairs) * sum(sb) / len(pairs):.1%} if independent")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "vcpu_speed.json").write_text(json.dumps({"window_s": args.window, "start": start,
                                                              "ms_per_loop": {f"cpu{c}": [None if x is None else x * 1e3 for x in w]
                                                                              for c, w in series.items()}}))
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(10, 3))
        for cpu, w in series.items():
            ax.plot([k * args.window for k in range(count)], [None if x is None else x * 1e3 for x in w],
                    lw=0.8, label=f"cpu{cpu}")
        ax.set_xlabel("s")
        ax.set_ylabel(f"ms per {LOOP:,}-iteration loop")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.out / "vcpu_speed.png", dpi=120)
        print(f"wrote {args.out / 'vcpu_speed.json'} and vcpu_speed.png")


if __name__ == "__main__":
    main()
