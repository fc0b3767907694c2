"""Killing `infralab sim run` at a named phase, and two runs into one --out at once.

The run under test is a subprocess paused deterministically by the testing hook
`INFRALAB_PAUSE_AT=<phase>` (infralab.results.pause_point): it writes its PID to a ready file and
waits for a signal. The test polls for the ready file (with a timeout), never sleeps to synchronise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infralab.cli import main
from infralab.results import MARKER, PAUSE_ENV, PAUSE_READY_ENV

pytest.importorskip("infralab.sim.cluster")

TINY = """\
model = "llama-3-8b"

[run]
name = "kill-test"
seed = {seed}

[hardware]
accelerator = "H100"

[workload]
kind = "synthetic"
num_requests = 6

[workload.arrival]
kind = "poisson"
rate = 4.0

[workload.prompt]
kind = "uniform"
low = 16
high = 64

[workload.output]
kind = "uniform"
low = 1
high = 4

[cluster]
layout = "colocated"
instances = 1
"""

READY_TIMEOUT_S = 120.0  # a generous bound for a cold interpreter start on a busy CI machine


def config(tmp_path: Path, seed: int = 1) -> Path:
    path = tmp_path / f"tiny-{seed}.toml"
    path.write_text(TINY.format(seed=seed))
    return path


def leftovers(out: Path) -> list[str]:
    """Hidden siblings of `out` a run makes while it works: temporaries, old results, the lock."""
    return sorted(p.name for p in out.parent.glob(f".{out.name}.*"))


def earlier_result(tmp_path: Path, out: Path) -> dict[str, bytes]:
    """Write a first result into `out` (in-process) and return its files' bytes."""
    assert main(["sim", "run", str(config(tmp_path, seed=1)), "--out", str(out)]) == 0
    return snapshot(out)


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


class Paused:
    """`infralab sim run` in a subprocess, stopped at `phase` (the ready file exists when it is)."""

    def __init__(self, tmp_path: Path, out: Path, phase: str, seed: int = 2) -> None:
        self.ready = tmp_path / f"ready-{phase}-{seed}"
        env = {**os.environ, PAUSE_ENV: phase, PAUSE_READY_ENV: str(self.ready)}
        command = [sys.executable, "-m", "infralab.cli", "sim", "run", str(config(tmp_path, seed)), "--out", str(out)]
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.wait_until_paused()

    def wait_until_paused(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (self.ready.exists() and self.ready.read_text().strip()):
            if self.proc.poll() is not None:
                pytest.fail(f"run ended before pausing: {self.proc.returncode} {self.proc.communicate()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail("run did not reach its pause point")
            time.sleep(0.02)  # polling interval for the ready file, not a synchronisation

    def kill(self, signum: int) -> tuple[int, str]:
        self.proc.send_signal(signum)
        _, err = self.proc.communicate(timeout=READY_TIMEOUT_S)
        return self.proc.returncode, err


EXPECTED_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}


@pytest.mark.parametrize("phase", ["simulating", "writing"])
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT])
def test_a_killed_run_keeps_the_earlier_result_and_the_next_run_cleans_up(tmp_path, phase, signum):
    out = tmp_path / "res"
    before = earlier_result(tmp_path, out)
    run = Paused(tmp_path, out, phase)
    if phase == "writing":  # the paused run has a half-written temporary folder
        (tmp,) = [p for p in out.parent.glob(f".{out.name}.tmp-*")]
        # (summary.json is written last, once trace.json says what the timeline holds)
        assert (tmp / "config.toml").exists() and not (tmp / "requests.csv").exists()
        assert not (tmp / "summary.json").exists()
    code, err = run.kill(signum)
    assert code == EXPECTED_EXIT[signum]
    assert snapshot(out) == before  # the earlier result, untouched
    if signum == signal.SIGINT:
        assert err.count("\n") == 1 and err.startswith("error: interrupted") and "Traceback" not in err
        assert leftovers(out) == []
    else:
        assert any(".tmp-" in name for name in leftovers(out))  # what a SIGKILL cannot clean
    # The next run into the same place removes the dead run's temporaries and replaces the result.
    assert main(["sim", "run", str(config(tmp_path, seed=3)), "--out", str(out)]) == 0
    assert leftovers(out) == []
    assert snapshot(out) != before and b"seed = 3" in (out / "config.toml").read_bytes()


def test_sigterm_while_writing_exits_143_with_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "res"
    code, err = Paused(tmp_path, out, "writing").kill(signal.SIGTERM)
    assert code == 143
    assert err.count("\n") == 1 and err.startswith("error: terminated")
    assert not out.exists() and leftovers(out) == []


def test_sigkill_of_a_first_run_leaves_no_result_folder(tmp_path):
    out = tmp_path / "res"
    code, _ = Paused(tmp_path, out, "writing").kill(signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert not out.exists()  # only hidden temporaries, never a partial result under the asked name


def test_sigkill_between_the_two_renames_restores_the_earlier_result(tmp_path):
    """Killed after the old result was renamed aside and before the new one was renamed in: the next
    run into the same place puts the old result back before it does anything else."""
    out = tmp_path / "res"
    before = earlier_result(tmp_path, out)
    code, _ = Paused(tmp_path, out, "replacing").kill(signal.SIGKILL)
    assert code == -signal.SIGKILL and not out.exists()
    nxt = Paused(tmp_path, out, "simulating", seed=4)  # the next run, stopped before it simulates
    assert snapshot(out) == before
    assert nxt.kill(signal.SIGINT)[0] == 130
    assert snapshot(out) == before and leftovers(out) == []


def test_sigint_between_the_two_renames_restores_the_earlier_result(tmp_path):
    out = tmp_path / "res"
    before = earlier_result(tmp_path, out)
    code, err = Paused(tmp_path, out, "replacing").kill(signal.SIGINT)
    assert code == 130 and err.count("\n") == 1
    assert snapshot(out) == before and leftovers(out) == []


def test_a_second_run_into_the_same_out_stops_with_one_line(tmp_path, capsys):
    out = tmp_path / "res"
    first = Paused(tmp_path, out, "simulating")
    assert main(["sim", "run", str(config(tmp_path, seed=5)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: --out {out}: another infralab run (PID {first.proc.pid}) is writing it")
    first.proc.send_signal(signal.SIGINT)
    assert first.proc.wait(timeout=READY_TIMEOUT_S) == 130
    assert not out.exists() and leftovers(out) == []
    # With the first run gone, the same command succeeds.
    assert main(["sim", "run", str(config(tmp_path, seed=5)), "--out", str(out)]) == 0
    assert (out / MARKER).is_file() and leftovers(out) == []
