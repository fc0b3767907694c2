"""Does a GIL switch between two cores slow the Python that follows it? (A benchmark, not a test.)

In the probe's pinned layout (a core per thread) the main thread's first launch segments after the
GIL came back from the transfer thread ran at about half speed (89 and 78 us against 45 us,
docs/gil.md), which suggested a cost per cross-core GIL switch (cache lines of interpreter state
the other core's Python touched). This times main's next `--units` of `python_work` after three
kinds of switch, each against a paired control that differs only in the partner's part, with both
threads pinned to their own CPU (cross) or to one CPU (same):

- `partner ran`: the partner runs the transfer thread's Python (`--partner-units` descriptors)
  while main sleeps in a GIL-releasing call; control: main sleeps alone;
- `main waited`: the partner still holds the GIL when main's call returns (main waits for it),
  then releases it in a busy native call; control: the partner's Python ends before main returns;
- `partner back`: the partner's native call returns during main's timed Python and waits for the
  GIL there; control: the partner's native call outlasts main's Python.

    .venv/bin/python experiments/gil_kv_transfer/switch_probe.py [--trials 200] [--units 300]

prints per kind and layout the median of main's timed Python with the switch, without, and the
difference (us). Needs 2 usable cores. About 10 s here.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import threading
import time
from collections.abc import Callable

from infralab.kernels.host_probe.affinity import usable_cores
from infralab.kernels.host_probe.build import NativeLibs, load
from infralab.kernels.host_probe.micro import python_work

SLEEP_NS = 500_000  # main's GIL-releasing call
PARTNER_PYTHON_NS = 800_000  # outlasts main's call ("main waited")
SHORT_PYTHON_NS = 200_000  # ends within main's call (the controls)


class Partner:
    """A thread pinned to `cpu` that runs `job` each time it is released, then counts it done."""

    def __init__(self, cpu: int, job: Callable[[dict], None]) -> None:
        self.go = threading.Lock()
        self.go.acquire()
        self.state: dict = {"done": 0, "stop": False}
        self._job = job
        self._thread = threading.Thread(target=self._loop, args=(cpu,))
        self._thread.start()

    def _loop(self, cpu: int) -> None:
        os.sched_setaffinity(0, {cpu})
        while True:
            self.go.acquire()
            if self.state["stop"]:
                return
            self._job(self.state)
            self.state["done"] += 1

    def stop(self) -> None:
        self.state["stop"] = True
        self.go.release()
        self._thread.join()


def _python_for(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        python_work(50)


def trial_pairs(libs: NativeLibs, kind: str, cross: bool, trials: int, units: int, partner_units: int) -> tuple[list[int], list[int]]:
    """(with, without): main's `python_work(units)` in ns after each switch of `kind` and its control."""
    cpus = usable_cores()
    main_cpu, other_cpu = cpus[0], (cpus[1] if cross else cpus[0])
    stamps = (ctypes.c_uint64 * 2)()
    own = (ctypes.c_uint64 * 2)()
    sleep, spin = libs.releasing.infralab_sleep_ns, libs.releasing.infralab_spin_ns

    def job(state: dict) -> None:
        if kind == "partner ran":
            python_work(partner_units)
        elif kind == "main waited":
            _python_for(state["python_ns"])
            spin(1_500_000, own)
        else:  # partner back
            _python_for(PARTNER_PYTHON_NS)
            spin(state["spin_ns"], own)
            python_work(200)

    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {main_cpu})
    partner = Partner(other_cpu, job)
    clock = time.perf_counter_ns
    with_, without = [], []
    try:
        python_work(units)
        for _ in range(trials):
            for switched in (True, False):
                python_work(units)
                if kind == "partner ran" and not switched:
                    sleep(SLEEP_NS, stamps)
                    t0 = clock()
                    python_work(units)
                    without.append(clock() - t0)
                    continue
                partner.state["python_ns"] = PARTNER_PYTHON_NS if switched else SHORT_PYTHON_NS
                partner.state["spin_ns"] = 30_000 if switched else 1_500_000
                done = partner.state["done"]
                partner.go.release()
                sleep(SLEEP_NS, stamps)
                t0 = clock()
                python_work(units)
                (with_ if switched else without).append(clock() - t0)
                while partner.state["done"] == done:
                    sleep(100_000, stamps)
    finally:
        partner.stop()
        os.sched_setaffinity(0, before)
    return with_, without


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--units", type=int, default=300, help="main's timed python_work units")
    parser.add_argument("--partner-units", type=int, default=2000, help="the partner's descriptors")
    args = parser.parse_args()
    if len(usable_cores()) < 2:
        raise SystemExit("needs 2 usable cores (os.sched_getaffinity)")
    libs = load()
    print(f"main's python_work({args.units}) after a GIL switch, median of {args.trials} trials (us):")
    for kind in ("partner ran", "main waited", "partner back"):
        for cross in (True, False):
            with_, without = trial_pairs(libs, kind, cross, args.trials, args.units, args.partner_units)
            w, wo = statistics.median(with_) / 1e3, statistics.median(without) / 1e3
            print(f"  {kind:12} {'cross-core' if cross else 'same core ':10}  with {w:6.1f}  without {wo:6.1f}  "
                  f"difference {w - wo:+5.1f}  ({len(with_)} / {len(without)} trials)")


if __name__ == "__main__":
    main()
