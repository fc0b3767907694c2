"""How much faster does the shipped search run on more workers, locally and on Ray? (A benchmark,
not a test.)

Runs `infralab search experiments/search_pd_ratio.toml` (12 points) four times, each in a fresh
process as a user would: the local backend at 1 and 2 workers (--jobs) and the Ray backend at 1
and 2 workers (a local Ray cluster of that many CPUs, started and stopped by the command, so its
start-up is counted). Prints wall seconds of the whole command and the speed-up over local at 1
worker, and inside the command the seconds to start the Ray cluster, to sweep the points and to
stop the cluster; checks that every run wrote the same search.json and search.csv bytes; writes

    .venv/bin/python benchmarks/search_backends.py --out results/search_backends

results/search_backends/search_backends.json and search_backends.png. Wall times depend on the
machine and on what else runs on it; the machine's CPU count and load average are recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPACE = ROOT / "experiments" / "search_pd_ratio.toml"
RUNS = (("local", 1), ("local", 2), ("ray", 1), ("ray", 2))  # (backend, workers); the first is the reference


def run_search(backend: str, workers: int, out: Path) -> dict:
    """One search in a fresh process (this script with --one): the command's wall seconds, and
    inside it the seconds to start the local Ray cluster (0 locally), to sweep the points (load
    the SPACE file, run, write) and to stop the cluster."""
    command = [sys.executable, __file__, "--one", backend, str(workers), str(out)]
    start = time.perf_counter()
    child = subprocess.run(command, check=True, capture_output=True, text=True)
    phases = json.loads(child.stdout.strip().splitlines()[-1])
    return {"wall_s": round(time.perf_counter() - start, 2), **phases}


def measure_one(backend: str, workers: int, out: Path) -> dict:
    """The phases of one search in this process (see `run_search`)."""
    import contextlib

    from infralab.agent.ray_pool import ray_cluster
    from infralab.agent.search import run_search as search
    from infralab.agent.sim_pool import Execution

    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if backend == "ray":  # started here so that its start and stop are timed apart from the sweep
            stack.enter_context(ray_cluster(None, workers))
        t1 = time.perf_counter()
        search(SPACE, out, jobs=workers, progress=False, execution=Execution(backend))
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    return {"start_s": round(t1 - t0, 2), "sweep_s": round(t2 - t1, 2), "stop_s": round(t3 - t2, 2)}


def figure(rows: list[dict], path: Path) -> None:
    """Wall seconds per run as bars, labelled with the speed-up over local at 1 worker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    labels = [f"{r['backend']}\n{r['workers']} worker{'s' if r['workers'] > 1 else ''}" for r in rows]
    colors = ["#4f81bd" if r["backend"] == "local" else "#c0504d" for r in rows]
    bars = ax.bar(labels, [r["wall_s"] for r in rows], color=colors)
    for bar, r in zip(bars, rows):
        ax.annotate(f"{r['wall_s']:.1f} s\n{r['speedup']:.2f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_ylabel("wall seconds (whole command)")
    ax.set_title(f"infralab search {SPACE.name}: 12 points, {os.cpu_count()} CPUs")
    ax.margins(y=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/search_backends"), help="folder for JSON + PNG")
    parser.add_argument("--one", nargs=3, metavar=("BACKEND", "WORKERS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one[0], int(args.one[1]), Path(args.one[2]))))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    rows, outputs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for backend, workers in RUNS:
            out = Path(tmp) / f"{backend}-{workers}"
            phases = run_search(backend, workers, out)
            outputs.append(tuple((out / name).read_bytes() for name in ("search.json", "search.csv")))
            rows.append({"backend": backend, "workers": workers, **phases})
    for r in rows:
        r["speedup"] = round(rows[0]["wall_s"] / r["wall_s"], 2)
    identical = all(o == outputs[0] for o in outputs)
    print(f"{'backend':8} {'workers':>7} {'wall s':>7} {'speed-up':>9}   inside: {'start':>6} {'sweep':>6} {'stop':>6} s")
    for r in rows:
        print(f"{r['backend']:8} {r['workers']:>7} {r['wall_s']:>7.2f} {r['speedup']:>8.2f}x           "
              f"{r['start_s']:>6.2f} {r['sweep_s']:>6.2f} {r['stop_s']:>6.2f}")
    print(f"search.json and search.csv byte-identical across the runs: {identical}")
    print(f"{os.cpu_count()} CPUs, load average before the last run: {os.getloadavg()[0]:.2f}")
    doc = {"space": SPACE.name, "cpus": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2),
           "identical_outputs": identical, "runs": rows}
    (args.out / "search_backends.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    figure(rows, args.out / "search_backends.png")
    print(f"wrote {args.out / 'search_backends.json'} and {args.out / 'search_backends.png'}")
    if not identical:
        raise SystemExit("the backends wrote different results")


if __name__ == "__main__":
    main()
