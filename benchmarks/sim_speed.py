"""How fast and how lean is the simulator at scale? (A benchmark, not a test; issue 13.)

Every run is one `infralab sim run` subprocess, results written, so the figures are what a user
gets. Runs:
- the benchmark workload (`benchmarks/vidur_workload.py`: Poisson 1.5 req/s, Azure conversation
  lengths, seed 42) on Llama-3-70B, TP 4, A100, one colocated instance (max_batched_tokens 512,
  max_num_seqs 128), at each of `--sizes` requests (default 20k, 200k, 1M);
- the same workload scaled to 64 instances (arrival rate x64, 96 req/s, `--wide` requests, default
  1M) behind the least-outstanding-tokens router;
- the shipped Mooncake P/D example (experiments/sim/mooncake_conv_pd_rdma.toml, 12,031 requests,
  with its timeline);
- cold start: a 100-request workload; seconds from launching the command to the first simulated
  event (the start of the simulate phase).
Per run: wall time of each phase (read, simulate, summarise, write; `infralab sim run` writes them
to the file named by INFRALAB_SIM_PHASES_FILE), total wall time of the subprocess, its CPU seconds
(user + system, from wait4: on a machine shared with other jobs, wall time exceeds them by the wait
for a core), simulated requests per wall-second (requests / total wall), the child's peak RSS
(ru_maxrss from wait4) and the machine's 1-minute load average when the run started.

    .venv/bin/python benchmarks/sim_speed.py --out results/sim_speed [--timeline] [--sizes 20000 200000]
    .venv/bin/python benchmarks/sim_speed.py --profile --sizes 20000 --wide 0 --skip-mooncake --out DIR

With `--profile` every run's child runs under cProfile and DIR/profile-<label>.txt lists the top
functions by own time, each as seconds and microseconds per simulated request (the per-request cost
breakdown of docs/sim.md); profiled runs are slower, so their times are marked and not targets.
cProfile sees a compiled module's function only where Python calls it: for the breakdown inside the
engine, run with INFRALAB_PURE_PYTHON=1 (the modules as Python; sim/native.py). Every row says how
the simulator ran ("simulator": "compiled", or "python (...)" with the reason).

writes results/sim_speed/sim_speed.json, sim_speed.csv (one row per run) and sim_speed.png (wall
time and peak RSS against request count, log-log). The workload CSVs are generated into a temporary
folder, never committed. The scaled runs pass `--no-timeline` unless `--timeline` is given
(trace.json then keeps the first 150,000 events; without it the run keeps no per-step intervals). Targets on the 2-core machine:
200k <= 15 s and 600 MB, 1M <= 75 s and 1 GB, Mooncake P/D <= 4 s, 1M over 64 instances <= 180 s,
cold start <= 1 s.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vidur_workload import RATE_PER_S, config_text, write_workload  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MOONCAKE_PD = ROOT / "experiments" / "sim" / "mooncake_conv_pd_rdma.toml"
SIZES = (20_000, 200_000, 1_000_000)
WIDE_INSTANCES = 64
COLD_START_REQUESTS = 100


def run_one(label: str, config: Path, work: Path, timeline: bool, profile: Path | None = None) -> dict:
    """One `infralab sim run` of `config` in a child process; its phases, wall time and peak RSS.
    With `profile` (a file), the child runs under cProfile and writes its statistics there."""
    out = work / f"out-{label}"
    phases_file = work / f"phases-{label}.json"
    python = [sys.executable, "-m", "cProfile", "-o", str(profile)] if profile is not None else [sys.executable]
    cmd = [*python, "-m", "infralab", "sim", "run", str(config), "--out", str(out)]
    cmd.append("--timeline" if timeline else "--no-timeline")  # explicit: the default depends on the size
    env = {**os.environ, "INFRALAB_SIM_PHASES_FILE": str(phases_file)}
    load = os.getloadavg()[0]
    launched_unix_s, t0 = time.time(), time.perf_counter()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{child.stderr.read().decode()}")
    facts = json.loads(phases_file.read_text())
    summary = json.loads((out / "summary.json").read_text())
    return {
        "label": label,
        "requests": summary["requests"]["total"],
        "timeline": timeline,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "load_average_1min": load,
        "phases_s": facts["phases_s"],
        "cold_start_s": facts["simulate_started_unix_s"] - launched_unix_s,
        "requests_per_wall_s": summary["requests"]["total"] / wall,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # KiB on Linux
        "saturated": summary["saturation"]["saturated"],
        "profiled": profile is not None,
    }


PROFILE_TOP = 25


def write_profile(stats_file: Path, requests: int, path: Path) -> None:
    """The top functions of a cProfile run by own time: seconds, microseconds per simulated
    request, calls per request, and the cumulative seconds, as a text table."""
    import pstats

    stats = pstats.Stats(str(stats_file))
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:PROFILE_TOP]
    total = sum(own for (_, _, own, _, _) in stats.stats.values())
    lines = [f"cProfile of `infralab sim run`, {requests} requests: own time {total:.2f} s "
             f"({total / requests * 1e6:.1f} us per request); top {PROFILE_TOP} functions by own time",
             f"{'own s':>8} {'us/req':>8} {'calls/req':>9} {'cum s':>8}  function"]
    for (filename, line, name), (_, calls, own, cum, _) in rows:
        where = f"{Path(filename).name}:{line}({name})" if line else name
        lines.append(f"{own:8.2f} {own / requests * 1e6:8.1f} {calls / requests:9.2f} {cum:8.2f}  {where}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def simulator_mode() -> str:
    """How a child `infralab sim run` runs the simulator's hot modules (sim/native.py), under this
    process's environment; code from before the compiled build says so."""
    code = "import infralab.sim as s; print(getattr(s, 'NATIVE_MODE', 'python (no compiled build in this code)'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _vidur_config(work: Path, requests: int, instances: int = 1) -> Path:
    csv_path = write_workload(work / f"vidur-{requests}-x{instances}.csv", requests, RATE_PER_S * instances)
    config = work / f"vidur-{requests}-x{instances}.toml"
    config.write_text(config_text(csv_path, instances, name=f"vidur-bench-{requests}-x{instances}"))
    return config


def _print(row: dict) -> None:
    p = row["phases_s"]
    print(
        f"{row['label']:<16} {row['requests']:>8} req  wall {row['wall_s']:7.2f} s  "
        f"cpu {row['cpu_s']:7.2f} s  "
        f"(read {p['read']:.2f}, simulate {p['simulate']:.2f}, summarise {p['summarise']:.2f}, "
        f"write {p['write']:.2f})  {row['requests_per_wall_s']:8.0f} req/s  peak RSS {row['peak_rss_mb']:6.0f} MB  "
        f"cold start {row['cold_start_s']:.2f} s  load {row['load_average_1min']:.1f}",
        flush=True,
    )


CSV_COLUMNS = (
    "label", "requests", "timeline", "wall_s", "cpu_s", "read_s", "simulate_s", "summarise_s", "write_s",
    "requests_per_wall_s", "peak_rss_mb", "cold_start_s", "load_average_1min", "saturated", "profiled",
    "simulator",
)


def _write_csv(rows: list[dict], path: Path) -> None:
    """One line per run: the JSON's fields, phases flattened (seconds, MB)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            flat = {k: v for k, v in row.items() if k != "phases_s"}
            flat |= {f"{phase}_s": seconds for phase, seconds in row["phases_s"].items()}
            writer.writerow(flat)


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scaled = sorted((r for r in rows if r["label"].startswith("vidur-")), key=lambda r: r["requests"])
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    n = [r["requests"] for r in scaled]
    ax_t.loglog(n, [r["wall_s"] for r in scaled], "o-", label="1 instance")
    ax_m.loglog(n, [r["peak_rss_mb"] for r in scaled], "o-", label="1 instance")
    for r in rows:
        if not r["label"].startswith("vidur-"):
            ax_t.loglog([r["requests"]], [r["wall_s"]], "s", label=r["label"])
            ax_m.loglog([r["requests"]], [r["peak_rss_mb"]], "s", label=r["label"])
    ax_t.set(xlabel="requests simulated", ylabel="wall time (s)", title="infralab sim run, results written")
    ax_m.set(xlabel="requests simulated", ylabel="peak RSS (MB)", title="memory")
    for ax in (ax_t, ax_m):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/sim_speed"), help="folder for JSON + PNG")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES), help="requests, one instance")
    parser.add_argument("--wide", type=int, default=1_000_000, help="requests over 64 instances (0: skip)")
    parser.add_argument("--timeline", action="store_true", help="scaled runs write trace.json too")
    parser.add_argument("--skip-mooncake", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="run each child under cProfile; write profile-<label>.txt (times then are not targets)")
    args = parser.parse_args()

    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    mode = simulator_mode()
    print(f"simulator: {mode}", flush=True)
    with tempfile.TemporaryDirectory(prefix="sim_speed-") as tmp:
        work = Path(tmp)

        def run(label: str, config: Path, timeline: bool) -> None:
            stats = work / f"{label}.prof" if args.profile else None
            rows.append(run_one(label, config, work, timeline, stats) | {"simulator": mode})
            _print(rows[-1])
            if stats is not None:
                write_profile(stats, rows[-1]["requests"], args.out / f"profile-{label}.txt")

        run("cold-start", _vidur_config(work, COLD_START_REQUESTS), timeline=False)
        if not args.skip_mooncake:
            run("mooncake-pd", MOONCAKE_PD, timeline=True)
        for size in args.sizes:
            run(f"vidur-{size}", _vidur_config(work, size), args.timeline)
        if args.wide:
            run(f"wide-{args.wide}-x{WIDE_INSTANCES}", _vidur_config(work, args.wide, WIDE_INSTANCES), args.timeline)
    (args.out / "sim_speed.json").write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
    _write_csv(rows, args.out / "sim_speed.csv")
    _plot(rows, args.out / "sim_speed.png")
    print(f"wrote {args.out / 'sim_speed.json'}, sim_speed.csv and sim_speed.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
