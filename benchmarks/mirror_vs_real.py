"""The simulator's mirror of the real engine, timed from the engine's step profile, against a real
replay of the same requests: mean TTFT and TPOT, real vs simulated (issue 9; a check of the
pipeline end to end, not the fidelity study).

1. Builds the small random-weight Llama (`small-llama-cpu`, read from the shared catalog) on
   transformers' continuous-batching engine (FIFO, token budget 128, 32 blocks of 128 tokens, at
   most 64 sequences per step, one torch thread).
2. Profiles its step over a grid that spans every step this run can have (`real.profile`;
   `profile.csv`): the calibration data.
3. Replays 20 requests open-loop (Poisson at 1 req/s, prompts uniform in [32, 384], outputs in
   [8, 48], seed 0: `real_engine_smoke.workload`) after a warm-up: the evaluation data, disjoint
   from the profile (the profile's steps are synthetic; no replay step is used to calibrate).
4. Simulates the same requests, at the same arrival times, with `engine.scheduler = "hf_fifo"`
   and `[cost] step_table = profile.csv` (host time outside the profile's batch building: 0, not
   fitted on the replay it is compared with).

    .venv/bin/python benchmarks/mirror_vs_real.py --out results/mirror_vs_real [--requests 20] [--rate 1]

writes OUT/profile.csv, OUT/replay.json, OUT/summary.json and prints the comparison. On a shared,
loaded machine the step speed moves by tens of percent within minutes (docs/fidelity.md): the
fingerprint drift over the profile and over the replay is printed beside the errors, and one run
says nothing about the simulator's accuracy in general.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from real_engine_smoke import latency_summary, step_summary, workload

from infralab.real.engine import EngineSettings, RealEngine
from infralab.real.fingerprint import drift
from infralab.real.load_generator import ReplayRequest, replay, warm_up
from infralab.real.model_shape import SMALL
from infralab.real.profile import ProfileGrid, profile, write_profile
from infralab.results import atomic_output_dir, dump_json
from infralab.sim.calibration import load_calibration
from infralab.sim.cluster import simulate
from infralab.sim.config import config_from_doc
from infralab.sim.step_table_cost import run_step_table_cost
from infralab.workload.request import Request

SETTINGS = EngineSettings(scheduler="fifo", max_batch_tokens=128, num_blocks=32, page_size=128,
                          max_requests_per_batch=64, threads=1)
GRID = ProfileGrid(q_tokens=(1, 2, 4, 8, 16, 32, 64, 128), kv_tokens=(1, 16, 64, 256, 1024, 4096),
                   seqs=(1, 2, 4, 8, 16, 32), repeats=3)
"""From (1, 1, 1) to the token budget, the cache (4096 tokens) and more sequences than requests."""


def sim_config(profile_csv: Path, engine: RealEngine, host_per_step_s: float = 0.0) -> Any:
    """The mirror's config for `engine` (its resolved settings), timed from `profile_csv`, with
    `host_per_step_s` of host time per step beyond the profile's batch building."""
    resolved = engine.resolved()
    doc = {
        "model": SMALL.name,
        "hardware": {"accelerator": "H100"},  # required by the schema; a step table does not read it
        "workload": {"kind": "synthetic", "num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0},  # unused:
                     "prompt": {"kind": "fixed", "value": 1}, "output": {"kind": "fixed", "value": 1}},  # requests passed in
        "cost": {"dtype": SETTINGS.dtype, "step_table": str(profile_csv), "host": {"per_step_s": host_per_step_s}},
        "engine": {"scheduler": "hf_fifo", "max_batched_tokens": resolved["max_batch_tokens"],
                   "max_num_seqs": resolved["max_requests_per_batch"], "block_size": resolved["page_size"],
                   "num_blocks": resolved["num_blocks"], "safety_margin": resolved["safety_margin"],
                   "prefix_cache": False},
    }
    return config_from_doc(doc, "mirror_vs_real", profile_csv.parent)


def simulated(profile_csv: Path, engine: RealEngine, requests: list[ReplayRequest], host_per_step_s: float = 0.0) -> Any:
    cfg = sim_config(profile_csv, engine, host_per_step_s)
    table = load_calibration(profile_csv)
    assert table is not None
    served = [Request(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in requests]
    return simulate(cfg, served, run_step_table_cost(table, cfg, served))


def host_per_step_s(profile_csv: Path, calibration: Any) -> float:
    """Host time per step outside the profile's batch building (scheduler, update, Python), fitted
    on a calibration replay: the mean over its steps of (step - forward - the table's prepare) (s)."""
    table = load_calibration(profile_csv)
    assert table is not None
    extra = []
    for step in calibration.steps:
        batch = step.batch
        shape = {"q_tokens": batch.q_tokens, "kv_tokens": batch.kv_tokens, "seqs": batch.seqs}
        extra.append(step.host_s - table.lookup("engine_prepare", SETTINGS.dtype, "cpu", shape, grid=True))
    return max(0.0, sum(extra) / len(extra))


def step_check(profile_csv: Path, real: Any) -> dict[str, dict[str, float]]:
    """The replay's own steps against the profile, per kind of step (decode-only, with prompt
    tokens): mean real forward and whole step vs the table's `engine_step` and `engine_step` +
    `engine_prepare` at each step's shape (s). Says where a latency error comes from."""
    table = load_calibration(profile_csv)
    assert table is not None
    sums: dict[str, list[float]] = {}
    for step in real.steps:
        batch = step.batch
        shape = {"q_tokens": batch.q_tokens, "kv_tokens": batch.kv_tokens, "seqs": batch.seqs}
        forward = table.lookup("engine_step", SETTINGS.dtype, "cpu", shape, grid=True)
        prepare = table.lookup("engine_prepare", SETTINGS.dtype, "cpu", shape, grid=True)
        row = sums.setdefault("decode" if batch.prefill_seqs == 0 else "with_prompt", [0.0] * 5)
        for i, value in enumerate((1.0, step.forward_s, forward, step.duration_s, forward + prepare)):
            row[i] += value
    return {kind: {"steps": n, "real_forward_s": f / n, "table_forward_s": tf / n, "real_step_s": d / n,
                   "table_step_s": ts / n} for kind, (n, f, tf, d, ts) in sums.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1.0, help="arrivals per second")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    requests = workload(args.requests, args.rate, args.seed)
    engine = RealEngine(SMALL, SETTINGS)
    with atomic_output_dir(args.out) as folder:
        profile_csv = folder / "profile.csv"
        measured = profile(engine, GRID)
        write_profile(engine, measured, profile_csv)
        with engine:
            warm_up(engine)
            # Calibration replay: another seed's requests, used only to fit the host time per step.
            calibration = replay(engine, workload(args.requests, args.rate, args.seed + 1), seed=args.seed + 1)
            real = replay(engine, requests, seed=args.seed)
        host_s = host_per_step_s(profile_csv, calibration)
        record = simulated(profile_csv, engine, requests)
        with_host = simulated(profile_csv, engine, requests, host_s)
        summary = {"engine": engine.resolved(), "model": SMALL.name, "requests": args.requests, "rate": args.rate,
                   "seed": args.seed, "calibration_seed": args.seed + 1, "real": latency_summary(real),
                   "sim": latency_summary(record), "sim_with_host": latency_summary(with_host),
                   "host_per_step_s": host_s, "real_steps": step_summary(real),
                   "step_check": step_check(profile_csv, real), "profile_points": len(measured.points),
                   "profile_drift": drift(measured.before, measured.after),
                   "calibration_drift": drift(calibration.before, calibration.after),
                   "replay_drift": drift(real.before, real.after)}
        dump_json(real.as_dict(), folder / "replay.json")
        dump_json(summary, folder / "summary.json")
    engine.close()
    _print(summary)
    return 0


def _print(summary: dict[str, Any]) -> None:
    print(f"| metric | real mean ms | sim mean ms | error | sim + host {summary['host_per_step_s'] * 1e3:.2f} ms/step "
          "| error |\n|---|---:|---:|---:|---:|---:|")
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        real, sim, host = (summary[key][name]["mean"] for key in ("real", "sim", "sim_with_host"))
        print(f"| {name} | {real * 1e3:.1f} | {sim * 1e3:.1f} | {sim / real - 1:+.1%} | {host * 1e3:.1f} "
              f"| {host / real - 1:+.1%} |")
    print("\n| steps | n | real forward ms | table forward ms | real step ms | table step ms |\n|---|---:|---:|---:|---:|---:|")
    for kind, row in summary["step_check"].items():
        print(f"| {kind} | {row['steps']:.0f} | {row['real_forward_s'] * 1e3:.2f} | {row['table_forward_s'] * 1e3:.2f} "
              f"| {row['real_step_s'] * 1e3:.2f} | {row['table_step_s'] * 1e3:.2f} |")
    steps = summary["real_steps"]
    print(f"\nreal: {steps['steps']} steps, mean forward {steps['mean_forward_s'] * 1e3:.1f} ms, host outside the "
          f"forward {steps['mean_host_s'] * 1e3:.2f} ms a step; fingerprint drift over the profile "
          f"{summary['profile_drift']:+.1%}, the calibration replay {summary['calibration_drift']:+.1%}, the replay "
          f"{summary['replay_drift']:+.1%}. "
          f"{summary['profile_points']} profile points. The machine is shared and loaded: one run, not a fidelity claim.",
          file=sys.stdout)


if __name__ == "__main__":
    raise SystemExit(main())
