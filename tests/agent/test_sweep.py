"""`infralab sim sweep` and `infralab sim capacity`: the figures and their CSVs, statistics over
seeds, the bisection on synthetic monotone rules, the attainment rule, bad input, and progress
output that depends on whether stderr is a terminal."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.agent.capacity import Bisection, meets, run_capacity
from infralab.progress import progress
from infralab.agent.rate_grid import ATTAINMENT, RatePoint, parse_numbers
from infralab.agent.sweep import FIGURES, STATS_COLUMNS, run_sweep, spread
from infralab.cli import main
from infralab.errors import InputError

TINY = """
model = "llama-3-8b"

[run]
name = "{name}"

[hardware]
accelerator = "H100"

[workload]
kind = "synthetic"
num_requests = 24
arrival = {{ kind = "poisson", rate = 4.0 }}
prompt = {{ kind = "fixed", value = 256 }}
output = {{ kind = "fixed", value = 8 }}

[cluster]
instances = {instances}

[slo]
ttft_s = 2.0
tpot_s = 0.1
"""


def tiny_configs(folder: Path) -> list[Path]:
    paths = []
    for name, instances in (("one", 1), ("two", 2)):
        path = folder / f"{name}.toml"
        path.write_text(TINY.format(name=name, instances=instances))
        paths.append(path)
    return paths


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


# ---- the sweep's files ----------------------------------------------------------------------------


def test_sweep_writes_each_figure_with_its_csv(tmp_path):
    paths = tiny_configs(tmp_path)
    out = tmp_path / "sweep"
    doc = run_sweep(paths, rates=(8.0, 2.0), seeds=(0, 1), out=out, jobs=1, show_progress=False)
    for name, metrics in FIGURES.items():
        for suffix in (".png", ".pdf", ".csv"):
            assert (out / f"{name}{suffix}").stat().st_size > 0
        rows = read_csv(out / f"{name}.csv")
        assert tuple(rows[0]) == STATS_COLUMNS
        # one row per config x rate x metric, rates in increasing order, two seeds each
        assert [(r["config"], float(r["rate_rps"]), r["metric"]) for r in rows] == [
            (c, rate, m) for c in ("one", "two") for rate in (2.0, 8.0) for m in metrics]
        assert {r["seeds"] for r in rows} == {"2"}
    runs = read_csv(out / "runs.csv")
    assert len(runs) == 2 * 2 * 2
    # The CSV's mean is the mean of the runs' values.
    ttft = [float(r["ttft_p90_s"]) for r in runs if r["config"] == "two" and float(r["rate_rps"]) == 8.0]
    row = next(r for r in read_csv(out / "latency_vs_rate.csv")
               if r["config"] == "two" and float(r["rate_rps"]) == 8.0 and r["metric"] == "ttft_p90_s")
    assert float(row["mean"]) == pytest.approx(sum(ttft) / 2)
    assert float(row["min"]) == min(ttft) and float(row["max"]) == max(ttft)
    assert all(0.0 <= float(r[ATTAINMENT]) <= 1.0 for r in runs)
    assert json.loads((out / "sweep.json").read_text())["figures"].keys() == FIGURES.keys()
    assert doc["rates_rps"] == [2.0, 8.0]


def test_sweep_files_are_byte_identical_across_runs_and_workers(tmp_path):
    paths = tiny_configs(tmp_path)
    run_sweep(paths[:1], rates=(4.0,), seeds=(0, 1), out=tmp_path / "a", jobs=1, show_progress=False)
    run_sweep(paths[:1], rates=(4.0,), seeds=(0, 1), out=tmp_path / "b", jobs=2, show_progress=False)
    for name in ("runs.csv", "sweep.json", "latency_vs_rate.csv", "latency_vs_rate.png", "latency_vs_rate.pdf"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_a_trace_sweeps_at_rates_by_its_rate_scale(tmp_path):
    """A trace keeps its own arrival pattern; a rate of R req/s sets rate_scale = R / its own rate
    (requests after the first over its span)."""
    from infralab.agent.rate_grid import at_rate, load_rate_configs

    path = tmp_path / "trace.toml"
    rows = "".join(f"2023-11-16 18:15:{46 + 2 * i:02d}.0,10,2\n" for i in range(5))  # 5 requests over 8 s
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    path.write_text('model = "llama-3-8b"\n[hardware]\naccelerator = "H100"\n'
                    '[workload]\nkind = "trace"\npath = "t.csv"\nformat = "azure"\n')
    (config,) = load_rate_configs([path])
    assert config.trace_rate == pytest.approx(4 / 8) and config.own_rate == pytest.approx(0.5)
    assert at_rate(config, 2.0)["workload"]["rate_scale"] == pytest.approx(4.0)
    doc = run_sweep([path], rates=(0.5, 2.0), seeds=None, out=tmp_path / "o", show_progress=False)
    assert "rate_scale" in doc["rate_field"]
    assert (tmp_path / "o" / "runs.csv").read_text().count("\n") == 3  # header + one run per rate


def test_a_trace_of_one_request_has_no_rate(tmp_path):
    path = tmp_path / "trace.toml"
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,2\n")
    path.write_text('model = "llama-3-8b"\n[hardware]\naccelerator = "H100"\n'
                    '[workload]\nkind = "trace"\npath = "t.csv"\nformat = "azure"\n')
    with pytest.raises(InputError, match="no arrival rate"):
        run_sweep([path], rates=(1.0,), seeds=None, out=tmp_path / "o", show_progress=False)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("text", ["", "1,x", "0", "-2", "1,1", "nan"])
def test_bad_rate_lists_are_one_input_error(text):
    with pytest.raises(InputError, match="--rates"):
        parse_numbers(text, "--rates")


def test_spread_of_seed_values():
    assert spread([1.0, 3.0, None]) == {"seeds": 2, "mean": 2.0, "std": pytest.approx(2 ** 0.5), "min": 1.0, "max": 3.0}
    assert spread([None]) == {"seeds": 0, "mean": None, "std": None, "min": None, "max": None}
    assert spread([5.0])["std"] == 0.0


# ---- the bisection ---------------------------------------------------------------------------------


def bisect(threshold: float, start: float, tolerance: float) -> Bisection:
    b = Bisection(start, tolerance)
    while (rate := b.next_rate()) is not None:
        b.record(rate, rate <= threshold)
    return b


@settings(max_examples=200, deadline=None)
@given(threshold=st.floats(0.05, 5000.0), start=st.floats(0.2, 1000.0), tolerance=st.floats(0.001, 0.5))
def test_bisection_finds_a_monotone_threshold_within_tolerance(threshold, start, tolerance):
    # thresholds within 2**15 of the start either way: inside the MAX_EXPANSIONS doublings/halvings
    b = bisect(threshold, start, tolerance)
    assert b.bracketed
    assert b.low <= threshold < b.high
    assert b.high - b.low <= tolerance * b.high
    assert threshold - b.low <= tolerance * threshold / (1 - tolerance)


def test_bisection_on_a_known_threshold():
    b = bisect(13.7, start=4.0, tolerance=0.01)
    assert 13.7 * 0.99 <= b.low <= 13.7 < b.high
    assert [r for r, _ in b.probes[:3]] == [4.0, 8.0, 16.0]  # doubles until the rule fails


def test_bisection_without_a_bracket_stops():
    always = Bisection(1.0, 0.05)
    while (rate := always.next_rate()) is not None:
        always.record(rate, True)
    assert not always.bracketed and always.high is None and always.low == 2.0 ** 16


def test_bisection_stops_at_the_rate_fields_bounds():
    """Doubling or halving never probes a rate the config's rate field refuses: the bound itself is
    the last probe (before, the probe past it was an error naming workload.arrival.rate)."""
    up = Bisection(3e8, 0.05, 1e-6, 1e9)
    while (rate := up.next_rate()) is not None:
        up.record(rate, True)
    assert [r for r, _ in up.probes] == [3e8, 6e8, 1e9]
    down = Bisection(3e-6, 0.05, 1e-6, 1e9)
    while (rate := down.next_rate()) is not None:
        down.record(rate, False)
    assert [r for r, _ in down.probes] == [3e-6, 1.5e-6, 1e-6]


def point(seed: int, ttft: float | None, tpot: float | None, saturated: bool = False) -> RatePoint:
    return RatePoint("c", 1.0, seed, {"ttft_p90_s": ttft, "tpot_p90_s": tpot, "saturated": saturated})


def test_attainment_rule_needs_every_seed():
    assert meets([point(0, 1.0, 0.05), point(1, 1.9, 0.09)], "p90", 2.0, 0.1) == (True, "meets")
    ok, why = meets([point(0, 1.0, 0.05), point(1, 2.1, 0.05)], "p90", 2.0, 0.1)
    assert not ok and "seed 1" in why and "TTFT" in why
    assert not meets([point(0, 1.0, 0.2)], "p90", 2.0, 0.1)[0]
    assert not meets([point(0, 1.0, 0.05, saturated=True)], "p90", 2.0, 0.1)[0]
    assert not meets([point(0, None, 0.05)], "p90", 2.0, 0.1)[0]


def test_capacity_of_a_tiny_config_brackets_a_failing_rate(tmp_path):
    paths = tiny_configs(tmp_path)
    doc = run_capacity(paths[:1], seeds=(0,), tolerance=0.2, out=tmp_path / "cap", jobs=1, show_progress=False)
    (c,) = doc["configs"]
    assert c["bracketed"] and c["capacity_rps"] < c["fails_at_rps"] <= c["capacity_rps"] / 0.8
    assert c["capacity_rps_per_accelerator"] == c["capacity_rps"] / c["accelerators"]
    probes = read_csv(tmp_path / "cap" / "capacity_probes.csv")
    # the recorded probes agree with the search: the capacity met the rule, the failing rate did not
    by_rate = {float(p["rate_rps"]): p["meets"] for p in probes}
    assert by_rate[c["capacity_rps"]] == "True" and by_rate[c["fails_at_rps"]] == "False"


def test_capacity_and_sweep_commands(tmp_path, capsys):
    paths = tiny_configs(tmp_path)
    assert main(["sim", "capacity", str(paths[0]), "--seeds", "0", "--tolerance", "0.3", "--json",
                 "--no-progress", "--jobs", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "infralab.capacity/1" and doc["configs"][0]["capacity_rps"] > 0
    assert main(["sim", "capacity", str(paths[0]), "--tolerance", "1.5"]) == 2
    assert "--tolerance" in capsys.readouterr().err
    assert main(["sim", "sweep", str(paths[0]), "--rates", "2", "--out", str(tmp_path / "s"), "--no-progress"]) == 0
    assert "one (" in capsys.readouterr().out


# ---- progress ---------------------------------------------------------------------------------------


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_plain_lines_off_a_terminal():
    stream = io.StringIO()
    with progress(30, "sweep", "run", stream=stream) as tick:
        for _ in range(30):
            tick()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert lines[0] == "sweep: 10% (3/30 runs)" and lines[-1] == "sweep: 100% (30/30 runs)"
    assert len(lines) == 10


def test_progress_is_a_bar_on_a_terminal_and_nothing_when_disabled():
    terminal = FakeTerminal()
    with progress(5, "search", "config", stream=terminal) as tick:
        for _ in range(5):
            tick()
    assert "\r" in terminal.getvalue() and "5/5" in terminal.getvalue()
    quiet = io.StringIO()
    with progress(5, "search", "config", enabled=False, stream=quiet) as tick:
        tick()
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("start", [0.0, -1.0, float("nan")])
def test_a_bad_start_rate_is_one_input_error(tmp_path, start):
    with pytest.raises(InputError, match="--start"):
        run_capacity(tiny_configs(tmp_path)[:1], seeds=None, start=start, show_progress=False)
