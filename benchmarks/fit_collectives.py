"""Fit the collective curves of the catalog's links from calibration data only, and print them as the
TOML tables the link files carry (sim/catalog/links/*.toml; docs/calibration.md, "Collectives").

    .venv/bin/python benchmarks/fit_collectives.py

Data (calibration only; no evaluation point of experiments/fidelity_public is read):
- Vidur's NCCL all-reduce profiles of a DGX A100 and a DGX H100 (../shared/data/profiles/vidur/network,
  one node, 2/4/8 GPUs): per world size, the floor is the median time of messages <= 128 KiB.
- The calibration points of experiments/fidelity_public/points.toml (role "calibration", assigned by
  the file's hash rule before any fit): nccl-tests / rccl-tests rows, NCCL all-gather and
  reduce-scatter kernel times, and vLLM's custom all-reduce timings.

Rules, fixed before looking at any evaluation point:
- all_reduce, per (link, world size): floor from Vidur's small messages; bus bandwidth from the
  calibration point of the largest message on that link and world size (busbw = 2(w-1)/w x bytes /
  (time - floor)), else Vidur's median bus bandwidth of messages >= 32 MiB. A link without Vidur data
  (MI300X's Infinity Fabric) takes both from its calibration points (least squares on two or more).
- all_gather (also used for reduce_scatter and all-to-all): floor and bus bandwidth by least squares
  on the calibration all-gather / reduce-scatter points of that link and world size.
- custom all-reduce (vLLM's one-stage / two-stage kernel, csrc/custom_all_reduce.cuh): bytes at the
  link's per-direction bandwidth x the cost model's collective efficiency (0.7, EfficiencyConfig);
  one fitted constant, the floor each stage pays, by least squares on the link's calibration points.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from infralab import locations
from infralab.agent.public_points.spec import load_points
from infralab.sim.config import EfficiencyConfig
from infralab.sim.cost.collectives import custom_stages
from infralab.sim.specs import load_link
from infralab.vidur_profile import read_vidur_profile

POINTS = Path(__file__).resolve().parents[1] / "experiments" / "fidelity_public" / "points.toml"
VIDUR_NODE = {"nvlink3": "a100_dgx", "nvlink4": "h100_dgx"}
LINK_OF = {"A100": "nvlink3", "H100": "nvlink4", "H200": "nvlink4", "MI300X": "infinity-fabric-mi300x"}
SMALL, LARGE = 128 * 1024, 32 * 2**20


def vidur_all_reduce(node: str) -> dict[int, tuple[float, float]]:
    """World size -> (floor s, bus bandwidth B/s) from Vidur's profile of `node`."""
    root = locations.resolve_path("@data/profiles/vidur/network", Path.cwd()) / node
    rows = [r for r in read_vidur_profile(root) if r.kernel == "all_reduce"]
    out = {}
    for w in sorted({r.shape_dict["W"] for r in rows}):
        mine = [r for r in rows if r.shape_dict["W"] == w]
        floor = statistics.median(r.median_s for r in mine if 2 * r.shape_dict["N"] <= SMALL)
        bus = statistics.median(2 * (w - 1) / w * 2 * r.shape_dict["N"] / r.median_s
                                for r in mine if 2 * r.shape_dict["N"] >= LARGE)
        out[w] = (floor, bus)
    return out


def least_squares(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(floor s, bandwidth B/s) of time = floor + moved / bandwidth over (moved bytes, s) pairs."""
    moved, seconds = np.array([m for m, _ in points]), np.array([s for _, s in points])
    slope, floor = np.polyfit(moved, seconds, 1)
    return float(floor), float(1.0 / slope)


def main() -> int:
    calibration = [p for p in load_points(POINTS) if p.family == "collective" and p.role == "calibration"]
    efficiency = EfficiencyConfig().collective
    for link_name in sorted(set(LINK_OF.values())):
        link = load_link(link_name)
        mine = [p for p in calibration if LINK_OF.get(p.accelerator) == link_name]
        print(f"\n# ---- {link_name}: {len(mine)} calibration points")
        vidur = vidur_all_reduce(VIDUR_NODE[link_name]) if link_name in VIDUR_NODE else {}
        worlds = sorted(set(vidur) | {p.world for p in mine if p.collective == "all_reduce"})
        for w in worlds:
            rows = sorted((p for p in mine if p.collective == "all_reduce" and p.world == w), key=lambda p: p.message_bytes)
            if w in vidur:
                floor, bus = vidur[w]
                how = "floor and bus bandwidth: Vidur"
                if rows:
                    big = rows[-1]
                    bus = 2 * (w - 1) / w * big.message_bytes / (big.measured - floor)
                    how = f"floor: Vidur; bus bandwidth: {big.id}"
            else:
                floor, bus = least_squares([(2 * (w - 1) / w * p.message_bytes, p.measured) for p in rows])
                how = "least squares on " + ", ".join(p.id for p in rows)
            print(f"[all_reduce.{w}]  # {how}\nfloor_s = {floor:.3g}\nbus_bandwidth = {bus:.3g}")
        for w in sorted({p.world for p in mine if p.collective in ("all_gather", "reduce_scatter")}):
            rows = [p for p in mine if p.collective in ("all_gather", "reduce_scatter") and p.world == w]
            floor, bus = least_squares([((w - 1) / w * p.message_bytes, p.measured) for p in rows])
            print(f"[all_gather.{w}]  # least squares on {', '.join(p.id for p in rows)}\n"
                  f"floor_s = {floor:.3g}\nbus_bandwidth = {bus:.3g}")
        custom = [p for p in mine if p.collective == "custom_all_reduce"]
        if custom:
            rate = link.bandwidth * efficiency
            # time = stages x floor + moved / rate: the floor per stage is a one-parameter least squares
            stages, moved = zip(*(custom_stages(p.world, p.message_bytes) for p in custom))
            residual = np.array([p.measured - m / rate for p, m in zip(custom, moved)])
            floor = float(np.dot(stages, residual) / np.dot(stages, stages))
            print(f"[custom_all_reduce]  # stage floor: least squares on {', '.join(p.id for p in custom)}\n"
                  f"stage_floor_s = {floor:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
