"""The simulator-speed benchmark's workload (issue 13), written as a Vidur-format CSV.

Poisson arrivals at `rate` requests per second; (prompt, output) token pairs drawn uniformly with
replacement from the Azure LLM-inference conversation trace (columns `ContextTokens`,
`GeneratedTokens`, read in place from the shared data folder); output at least 1 token, the prompt
trimmed so that prompt + output <= `max_total_tokens` (4,096), and at least 1 token. Seed 42. The
same arguments always give byte-identical files.

    .venv/bin/python benchmarks/vidur_workload.py --requests 20000 --out /tmp/vidur_20k.csv

`write_workload` is what `benchmarks/sim_speed.py` calls; `config_text` gives the benchmark's run
config (Llama-3-70B, TP 4, A100, colocated, max_batched_tokens 512, max_num_seqs 128) for a CSV.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
AZURE_CONV = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
SEED = 42
RATE_PER_S = 1.5
MAX_TOTAL_TOKENS = 4096


def _azure_lengths(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(ContextTokens, GeneratedTokens) of every row of an Azure trace CSV."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    prompts = np.array([int(r["ContextTokens"]) for r in rows], dtype=np.int64)
    outputs = np.array([int(r["GeneratedTokens"]) for r in rows], dtype=np.int64)
    return prompts, outputs


def write_workload(
    out: Path,
    requests: int,
    rate_per_s: float = RATE_PER_S,
    seed: int = SEED,
    trace: Path = AZURE_CONV,
    max_total_tokens: int = MAX_TOTAL_TOKENS,
) -> Path:
    """Write `requests` rows (arrived_at in s, num_prefill_tokens, num_decode_tokens) to `out`."""
    prompts, outputs = _azure_lengths(trace)
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate_per_s, size=requests)
    arrivals = np.cumsum(gaps) - gaps[0]  # the first request arrives at 0 s
    pick = rng.integers(0, len(prompts), size=requests)
    output = np.clip(outputs[pick], 1, max_total_tokens - 1)
    prompt = np.clip(prompts[pick], 1, max_total_tokens - output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        handle.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
        handle.writelines(f"{t!r},{p},{o}\n" for t, p, o in zip(arrivals.tolist(), prompt.tolist(), output.tolist()))
    return out


def config_text(csv_path: Path, instances: int = 1, name: str = "vidur-bench") -> str:
    """The benchmark's run config for the workload at `csv_path` (TOML text)."""
    return f"""\
model = "llama-3-70b"

[run]
name = "{name}"
seed = 0

[hardware]
accelerator = "A100"
tp = 4

[workload]
kind = "trace"
path = "{csv_path}"
format = "vidur"

[engine]
max_num_seqs = 128
max_batched_tokens = 512
prefix_cache = false

[cluster]
layout = "colocated"
instances = {instances}
router = "least_outstanding_tokens"
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="CSV file to write")
    parser.add_argument("--rate", type=float, default=RATE_PER_S, help="arrivals per second")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    write_workload(args.out, args.requests, args.rate, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
