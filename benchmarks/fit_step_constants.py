"""Fit the step-time constants the public measurements expose, on calibration points only, and print
them (docs/calibration.md, "Public measurements"):

- `cost.extras.ridge_sharpness` p: GEMMs near the roofline's ridge, (compute^p + memory^p)^(1/p);
- `cost.efficiency.gemm_8bit`: 8-bit x 8-bit GEMMs' fraction of their peak;
- `cost.extras.eager_launch_s`: idle device time per kernel of a step run without a CUDA graph;
- `cost.extras.graph_launch_s`: the same within a CUDA graph's replay (decode-only steps).

    .venv/bin/python benchmarks/fit_step_constants.py [--rounds 2]

Data: the decode, prefill and serving points of experiments/fidelity_public/points.toml whose role
is "calibration" (the file's hash rule; evaluation points are never read here), simulated exactly
as the study simulates them (a point the simulator refuses is left out). Objective: the mean |log(simulated / measured)| over those points,
minimised by coordinate descent over a fixed grid per constant (the grids below, fixed before any
run). Prints each round's best and the final values to put in sim/config.py's defaults.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from infralab.agent.public_points.simulate import simulate
from infralab.agent.public_points.spec import NOT_MODELLED, load_points
from infralab.errors import InputError

POINTS = Path(__file__).resolve().parents[1] / "experiments" / "fidelity_public" / "points.toml"
GRIDS = {
    "cost.extras.ridge_sharpness": [64.0, 4.0, 2.0, 1.5, 1.25],  # 64: the plain max to within 1 %
    "cost.efficiency.gemm_8bit": [0.5, 0.6, 0.7],
    "cost.extras.eager_launch_s": [0.0, 2e-6, 4e-6, 6e-6, 8e-6, 12e-6],
    "cost.extras.graph_launch_s": [0.0, 1e-6, 2e-6, 3e-6, 4e-6],
}
START = {"cost.extras.ridge_sharpness": 64.0, "cost.efficiency.gemm_8bit": 0.7, "cost.extras.eager_launch_s": 0.0,
         "cost.extras.graph_launch_s": 0.0}
FAMILIES = ("decode", "prefill", "serving")


def overrides(values: dict[str, float | None]) -> list[str]:
    return [f"{key}={value}" for key, value in values.items() if value is not None]


def objective(points, values: dict[str, float | None]) -> float:
    sets = overrides(values)
    errors = []
    for p in points:
        try:
            errors.append(abs(math.log(simulate(p, sets).value / p.measured)))
        except InputError:  # a setting the simulator refuses (as the study shows it): not fitted on
            continue
    return sum(errors) / len(errors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    points = [p for p in load_points(POINTS)
              if p.role == "calibration" and p.family in FAMILIES and not NOT_MODELLED.intersection(p.includes)]
    print(f"{len(points)} calibration points ({', '.join(FAMILIES)})")
    best = dict(START)
    score = objective(points, best)
    print(f"start {best}: mean |log error| {score:.4f}")
    for round_ in range(args.rounds):
        for key, grid in GRIDS.items():
            for value in grid:
                trial = {**best, key: value}
                trial_score = objective(points, trial)
                if trial_score < score - 1e-9:
                    best, score = trial, trial_score
            print(f"round {round_ + 1}, {key}: {best[key]} -> {score:.4f}")
    print(f"\nfitted: {best}  (mean |log error| {score:.4f} on {len(points)} calibration points)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
