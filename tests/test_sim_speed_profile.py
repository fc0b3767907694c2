"""benchmarks/sim_speed.py --profile: a cProfile statistics file becomes the per-request table
(own seconds, microseconds and calls per simulated request), largest own time first."""

from __future__ import annotations

import cProfile
from pathlib import Path

from support.scripts import load_benchmark


def _busy(n: int) -> int:
    return sum(i * i for i in range(n))


def test_the_profile_table_is_per_simulated_request(tmp_path: Path) -> None:
    speed = load_benchmark("sim_speed")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(4):
        _busy(20_000)
    profiler.disable()
    stats = tmp_path / "run.prof"
    profiler.dump_stats(stats)
    table = tmp_path / "profile.txt"
    speed.write_profile(stats, requests=2, path=table)
    lines = table.read_text().splitlines()
    assert lines[0].startswith("cProfile of `infralab sim run`, 2 requests") and "us per request" in lines[0]
    rows = [line.split() for line in lines[2:]]
    busy = next(r for r in rows if r[-1].endswith("(_busy)"))
    assert float(busy[2]) == 2.0  # 4 calls over 2 requests
    # us per request = own seconds / requests (own is printed to 0.01 s: 2,500 us per request at most apart)
    assert abs(float(busy[1]) - float(busy[0]) / 2 * 1e6) <= 2_600
    owns = [float(r[0]) for r in rows]
    assert owns == sorted(owns, reverse=True) and len(rows) <= speed.PROFILE_TOP
