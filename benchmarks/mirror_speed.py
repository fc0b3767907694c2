"""How fast is the fidelity study's mirror? Re-simulates a finished study's cases as the study does
(each case's mirror, then again at three step-table speeds, as `_follow_the_machine`,
`_follow_the_other_cases` and `_follow_the_calibration` do), several rounds in one process, and
prints the seconds per round and a digest of every simulated statistic (equal digests: equal
results). A benchmark, not a test (issue 28; docs/sim.md, "Issue 28's changes").

    .venv/bin/python benchmarks/mirror_speed.py results/fidelity [--rounds 5]

STUDY_DIR is the output folder of `infralab fidelity run` (its fidelity.json, profiles/ and
replays/); the first replay of each setting and shape's lowest load is the workload.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

from infralab.agent.fidelity.sim_side import latency_stats, simulate_mirror
from infralab.real.load_generator import ReplayRequest

SPEEDS = (None, 1.05, 0.95, 1.1)  # the mirror as charged, then at three speeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="an `infralab fidelity run` output folder")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    doc = json.loads((args.study / "fidelity.json").read_text())
    cases = []
    for setting in doc["settings"]:
        for shape, facts in setting["shapes"].items():
            mirror = json.loads(json.dumps(facts["mirror_config"]))
            mirror["cost"]["step_table"] = str(args.study / "profiles" / Path(mirror["cost"]["step_table"]).name)
            first = min((c for c in doc["cases"] if c["setting"] == setting["name"] and c["shape"] == shape),
                        key=lambda c: c["load"])
            replay = json.loads((args.study / first["runs"][0]["file"]).read_text())
            requests = [ReplayRequest(r["id"], r["arrival_s"], r["prompt_tokens"], r["output_tokens"])
                        for r in replay["requests"]]
            cases.append((mirror, requests))
    scratch = args.study / "mirror-speed"
    scratch.mkdir(exist_ok=True)
    digest, rounds = hashlib.sha256(), []
    for _ in range(args.rounds):
        started = time.perf_counter()
        for mirror, requests in cases:
            for speed in SPEEDS:
                run = mirror if speed is None else {**mirror, "cost": {**mirror["cost"], "step_table_speed": speed}}
                stats = latency_stats(simulate_mirror(run, requests, 1.0, scratch))
                digest.update(json.dumps(stats, sort_keys=True).encode())
        rounds.append(time.perf_counter() - started)
    print(f"{len(cases) * len(SPEEDS)} mirror simulations per round; seconds per round: "
          + ", ".join(f"{s:.3f}" for s in rounds) + f"; digest {digest.hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
