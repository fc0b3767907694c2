"""Why a replay's steps take longer than the same shapes timed alone: one engine, one decode shape,
timed in conditions that differ by one thing each (docs/gpu.md, docs/fidelity.md).

    python3 benchmarks/step_conditions.py [--device cuda --model llama-3-8b --dtype bf16] [--out DIR]

Conditions, each `--repeats` synthetic steps of B sequences decoding over P past tokens each (the
shape `real profile` times), forward seconds as the profile measures them:
- `alone`: on the main thread, the engine's loop not running (the profile's condition);
- `python thread`: the same while another thread runs pure Python (it wants the GIL all the time);
- `worker thread`: timed on a second thread while the main thread waits for it (the engine's loop
  runs on its own thread in a replay);
and a `replay`: B requests of P prompt tokens and `--output` tokens through the
engine's loop, the main thread waiting for results as the load generator does; the decode steps
with B sequences, forward seconds from the step trace (`real/step_trace.py`), and the host time
around them. `replay + polling` does the same while the main thread polls without blocking.
Prints one table and writes `step_conditions.json` into `--out`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_s": statistics.median(ordered), "p10_s": ordered[len(ordered) // 10],
            "p90_s": ordered[(9 * len(ordered)) // 10], "n": len(ordered)}


def _timed(engine, shape, repeats: int) -> list[float]:
    from infralab.real.synthetic_step import time_step

    time_step(engine, shape)  # warm
    return [time_step(engine, shape).forward_s for _ in range(repeats)]


def _with_python_thread(engine, shape, repeats: int) -> list[float]:
    stop = threading.Event()

    def spin() -> None:
        count = 0
        while not stop.is_set():
            count += 1

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        return _timed(engine, shape, repeats)
    finally:
        stop.set()
        spinner.join()


def _on_worker_thread(engine, shape, repeats: int) -> list[float]:
    out: list[float] = []
    worker = threading.Thread(target=lambda: out.extend(_timed(engine, shape, repeats)))
    worker.start()
    worker.join()
    return out


def _replay(engine, batch: int, past: int, output: int, polling: bool) -> dict[str, list[float]]:
    """B requests at once; the decode steps with B sequences: forward and host seconds."""
    origin = time.perf_counter()
    with engine:
        for i in range(batch):
            engine.submit(f"r{i}", [7] * past, output)
        done = 0
        while done < batch:
            result = engine.next_result(0.0 if polling else 1.0)
            done += result is not None
        steps = engine.trace.steps_since(origin)
    decode = [s for s in steps if s.batch.seqs == batch and not s.batch.prefill_seqs]
    return {"forward": [s.forward_s for s in decode],
            "host_before": [s.forward_start_s - s.start_s for s in decode],
            "host_after": [s.end_s - s.forward_end_s for s in decode]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="small-llama-cpu")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--past", type=int, default=96)
    parser.add_argument("--output", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--contended-repeats", type=int, default=5,
                        help="steps timed beside the pure-Python thread (each can take seconds; 0 leaves the row out)")
    parser.add_argument("--poll-output", type=int, default=6, help="output tokens of the polling replay (0 leaves it out)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from infralab.real.engine import EngineSettings, RealEngine
    from infralab.real.model_shape import catalog_shape
    from infralab.real.step_shape import StepShape

    settings = EngineSettings(max_batch_tokens=max(512, args.batch), num_blocks=64, page_size=256,
                              max_requests_per_batch=max(16, args.batch), dtype=args.dtype,
                              threads=args.threads, device=args.device)
    engine = RealEngine(catalog_shape(args.model), settings)
    # the mid-replay decode step: B sequences, each over past + output / 2 tokens, plus its new one
    shape = StepShape(q_tokens=args.batch, kv_tokens=args.batch * (args.past + args.output // 2 + 1), seqs=args.batch)
    rows: dict[str, dict[str, float]] = {}
    print(f"{args.model} on {args.device} ({args.dtype}), decode step of {args.batch} sequences, "
          f"{shape.kv_tokens} keys, forward seconds:", flush=True)

    def row(label: str, values: list[float]) -> None:
        rows[label] = summary = _summary(values)
        ratio = summary["median_s"] / rows["alone"]["median_s"]
        print(f"  {label:28s} median {summary['median_s'] * 1e3:9.3f} ms  p10 {summary['p10_s'] * 1e3:9.3f}  "
              f"p90 {summary['p90_s'] * 1e3:9.3f}  n={summary['n']:3d}  x{ratio:.2f} of alone", flush=True)

    with engine.quiet():
        rows["alone"] = _summary(_timed(engine, shape, args.repeats))
        row("alone", _timed(engine, shape, args.repeats))
        if args.contended_repeats > 0:  # on an H200 one such step took 35 s
            row("python thread", _with_python_thread(engine, shape, args.contended_repeats))
        row("worker thread", _on_worker_thread(engine, shape, args.repeats))
    for label, polling, output in (("replay", False, args.output), ("replay + polling", True, args.poll_output)):
        if output <= 0:
            continue
        replay = _replay(engine, args.batch, args.past, output, polling)
        row(label, replay["forward"])
        row(label + ": host before", replay["host_before"])
        row(label + ": host after", replay["host_after"])
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "step_conditions.json").write_text(json.dumps(
            {"model": args.model, "device": args.device, "dtype": args.dtype, "shape": [shape.q_tokens, shape.kv_tokens,
             shape.seqs], "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
