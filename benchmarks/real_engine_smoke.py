"""A first look at the real engine on this machine (issue 9; preliminary, not the fidelity study).

Builds the small random-weight Llama (`infralab.real.model_shape.SMALL`: 4 layers, hidden 256,
vocabulary 32000, fp32) on transformers' continuous-batching engine (FIFO scheduler, token budget
256, 64 blocks of 256 tokens, at most 64 sequences per step), then
1. profiles its step over a few batch shapes (`real.profile`; `profile.csv` in the calibration
   table format: `engine_step` = forward + logits + sampling, `engine_prepare` = batch building);
2. replays a short open-loop workload (default 20 requests, Poisson arrivals at 1 req/s, prompts
   uniform in [32, 384] tokens, outputs uniform in [8, 48] tokens, seed 0) after a warm-up, and
   reports the TTFT / TPOT / E2E it measured and the step-speed fingerprint around the replay.

    .venv/bin/python benchmarks/real_engine_smoke.py --out results/real_smoke [--requests 20] [--rate 1]

writes OUT/profile.csv, OUT/replay.json (every request's token times and every engine step) and
OUT/summary.json, and prints both tables. Torch runs one intra-op thread by default: on a 2-core
machine shared with other work, two threads made the same step several times slower and far
noisier.
TTFT = first token - arrival, TPOT = (finish - first token) / (output - 1), E2E = finish - arrival,
all from the engine's own token stamps (computed here until the shared metrics module exists).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

from infralab.real.engine import EngineSettings, RealEngine
from infralab.real.fingerprint import drift
from infralab.real.load_generator import Replay, ReplayRequest, replay, warm_up
from infralab.real.model_shape import SMALL
from infralab.real.profile import ProfileGrid, calibration_rows, profile, write_profile
from infralab.results import atomic_output_dir, dump_json

SMOKE_GRID = ProfileGrid(q_tokens=(1, 4, 16, 64, 256), kv_tokens=(256, 1024, 4096), seqs=(1, 4, 16), repeats=5)


def workload(requests: int, rate: float, seed: int) -> list[ReplayRequest]:
    """Poisson arrivals at `rate` req/s (the first at 0), uniform prompt and output lengths."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, size=requests)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    prompts = rng.integers(32, 385, size=requests)
    outputs = rng.integers(8, 49, size=requests)
    return [ReplayRequest(i, float(arrivals[i]), int(prompts[i]), int(outputs[i])) for i in range(requests)]


def latency_summary(result: Replay) -> dict[str, dict[str, float]]:
    """Mean, p50 and p90 of TTFT, TPOT and E2E (seconds)."""
    ttft = [r.first_token_s - r.arrival_s for r in result.requests]
    e2e = [r.finish_s - r.arrival_s for r in result.requests]
    tpot = [(r.finish_s - r.first_token_s) / (r.output_tokens - 1) for r in result.requests if r.output_tokens > 1]
    return {name: {"mean": statistics.fmean(values), "p50": _quantile(values, 0.5), "p90": _quantile(values, 0.9)}
            for name, values in (("ttft_s", ttft), ("tpot_s", tpot), ("e2e_s", e2e))}


def _quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(values), q))


def step_summary(result: Replay) -> dict[str, float]:
    steps = result.steps
    return {"steps": len(steps), "mean_forward_s": statistics.fmean(s.forward_s for s in steps),
            "mean_host_s": statistics.fmean(s.host_s for s in steps),
            "host_fraction": sum(s.host_s for s in steps) / sum(s.duration_s for s in steps),
            "mean_seqs": statistics.fmean(s.batch.seqs for s in steps),
            "busy_fraction": sum(s.duration_s for s in steps) / result.wall_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1.0, help="arrivals per second")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    engine = RealEngine(SMALL, EngineSettings(threads=args.threads))
    with atomic_output_dir(args.out) as folder:
        measured = profile(engine, SMOKE_GRID)
        write_profile(engine, measured, folder / "profile.csv")
        with engine:
            warm_up(engine)
            result = replay(engine, workload(args.requests, args.rate, args.seed), seed=args.seed)
        summary = {"engine": engine.resolved(), "model": SMALL.name, "requests": args.requests, "rate": args.rate,
                   "seed": args.seed, "latency": latency_summary(result), "steps": step_summary(result),
                   "max_submit_lag_s": result.max_submit_lag_s, "wall_s": result.wall_s,
                   "fingerprint_before": result.before.as_dict(), "fingerprint_after": result.after.as_dict(),
                   "fingerprint_drift": drift(result.before, result.after),
                   "profile_fingerprint_drift": drift(measured.before, measured.after)}
        dump_json(result.as_dict(), folder / "replay.json")
        dump_json(summary, folder / "summary.json")
    engine.close()
    _print_profile(calibration_rows(engine, measured))
    _print_summary(summary)
    return 0


def _print_profile(rows: list) -> None:
    forward = {r.shape_text: r.median_s for r in rows if r.kernel == "engine_step"}
    prepare = {r.shape_text: r.median_s for r in rows if r.kernel == "engine_prepare"}
    print("| q_tokens | kv_tokens | seqs | forward ms | prepare ms |\n|---:|---:|---:|---:|---:|")
    for shape_text, seconds in forward.items():
        dims = dict(part.split("=") for part in shape_text.split(";"))
        print(f"| {dims['q_tokens']} | {dims['kv_tokens']} | {dims['seqs']} | {seconds * 1e3:.2f} "
              f"| {prepare[shape_text] * 1e3:.2f} |")


def _print_summary(summary: dict) -> None:
    print("\n| metric | mean ms | p50 ms | p90 ms |\n|---|---:|---:|---:|")
    for name, stats in summary["latency"].items():
        print(f"| {name} | {stats['mean'] * 1e3:.1f} | {stats['p50'] * 1e3:.1f} | {stats['p90'] * 1e3:.1f} |")
    steps = summary["steps"]
    print(f"\n{steps['steps']} steps, mean forward {steps['mean_forward_s'] * 1e3:.1f} ms, mean host "
          f"{steps['mean_host_s'] * 1e3:.2f} ms ({steps['host_fraction']:.1%} of step time), mean "
          f"{steps['mean_seqs']:.1f} sequences, engine busy {steps['busy_fraction']:.0%} of {summary['wall_s']:.1f} s; "
          f"fingerprint drift over the replay {summary['fingerprint_drift']:+.1%}, over the profile "
          f"{summary['profile_fingerprint_drift']:+.1%}; latest submission {summary['max_submit_lag_s'] * 1e3:.1f} ms")


if __name__ == "__main__":
    raise SystemExit(main())
