"""How fast and how lean is the simulator? (A benchmark, not a test.)

Runs the two shipped examples over their full traces (Azure conversation, 19,366 requests;
Mooncake conversation, 12,031 requests) and over the first 25 % and 50 % of each, every run in a
fresh Python process so that peak memory is that run's alone. Per run it prints the wall time of
each phase (read inputs + simulate, summarise, write results), simulated requests per wall-second,
and the peak resident memory (ru_maxrss) next to the memory of the process before the run (after
imports), so that the growth with trace length can be read off.

    .venv/bin/python benchmarks/sim_speed.py --out results/sim_speed

writes results/sim_speed/sim_speed.json and sim_speed.png. Wall times depend on the machine; the
target on the 2-core CI machine is each full trace in under 15 s with memory growing linearly or
better.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = (
    ROOT / "experiments" / "sim" / "azure_conv_colocated.toml",
    ROOT / "experiments" / "sim" / "mooncake_conv_pd_rdma.toml",
)
FRACTIONS = (0.25, 0.5, 1.0)


def _rss_mb() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_one(config: Path, fraction: float) -> dict:
    """Run `config` on the first `fraction` of its trace in this process; return the figures."""
    from infralab.sim.run import run_facts, simulate_config, write_results
    from infralab.sim.config import load_config
    from infralab.sim.metrics import summarize
    from infralab.sim.timeline import DEFAULT_MAX_EVENTS
    from infralab.sim.workloads import build_workload

    cfg, base_dir = load_config(config)
    total = len(build_workload(cfg.workload, base_dir, cfg.run.seed))
    count = max(1, round(total * fraction))
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, max_requests=count))
    rss_before = _rss_mb()

    t0, cpu0 = time.perf_counter(), time.process_time()
    run = simulate_config(cfg, base_dir, source=str(config))
    t1, cpu1 = time.perf_counter(), time.process_time()
    summary = summarize(run, cfg.slo).with_run(run_facts(cfg, config))
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        write_results(Path(tmp), config, run, summary, max_trace_events=DEFAULT_MAX_EVENTS)
        trace_mb = (Path(tmp) / "trace.json").stat().st_size / 1e6
    t3, cpu3 = time.perf_counter(), time.process_time()
    return {
        "config": config.name,
        "fraction": fraction,
        "requests": len(run.requests),
        "completed": summary.requests.completed,
        "simulate_s": t1 - t0,
        "summarize_s": t2 - t1,
        "write_s": t3 - t2,
        "total_s": t3 - t0,
        # CPU seconds of this process: less sensitive than wall time to other jobs on the machine.
        "simulate_cpu_s": cpu1 - cpu0,
        "total_cpu_s": cpu3 - cpu0,
        "requests_per_wall_s": len(run.requests) / (t1 - t0),
        "rss_before_mb": rss_before,
        "peak_rss_mb": _rss_mb(),
        "intervals": len(run.intervals),
        "counters": len(run.counters),
        "trace_json_mb": trace_mb,
        "saturated": summary.saturation.saturated,
    }


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    for name in sorted({r["config"] for r in rows}):
        mine = sorted((r for r in rows if r["config"] == name), key=lambda r: r["requests"])
        n = [r["requests"] for r in mine]
        ax_t.plot(n, [r["total_s"] for r in mine], "o-", label=name)
        ax_m.plot(n, [r["peak_rss_mb"] - r["rss_before_mb"] for r in mine], "o-", label=name)
    ax_t.set(xlabel="requests simulated", ylabel="wall time (s)", title="simulate + summarise + write")
    ax_m.set(xlabel="requests simulated", ylabel="peak RSS growth (MB)", title="memory over the run")
    for ax in (ax_t, ax_m):
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x / 1000:g}k"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/sim_speed"), help="folder for JSON + PNG")
    parser.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # internal: child process
    parser.add_argument("--fraction", type=float, default=1.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure_one(args.one, args.fraction)))
        return 0

    rows = []
    for config in EXAMPLES:
        for fraction in args.fractions:
            child = subprocess.run(
                [sys.executable, __file__, "--one", str(config), "--fraction", str(fraction)],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(child.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(
                f"{row['config']:<28} {row['requests']:>6} req  simulate {row['simulate_s']:6.2f} s "
                f"(cpu {row['simulate_cpu_s']:6.2f} s)  total {row['total_s']:6.2f} s "
                f"(cpu {row['total_cpu_s']:6.2f} s)  {row['requests_per_wall_s']:6.0f} req/wall-s  "
                f"RSS {row['rss_before_mb']:6.0f} -> {row['peak_rss_mb']:6.0f} MB  "
                f"trace.json {row['trace_json_mb']:5.1f} MB",
                flush=True,
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sim_speed.json").write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
    _plot(rows, args.out / "sim_speed.png")
    print(f"wrote {args.out / 'sim_speed.json'} and {args.out / 'sim_speed.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
