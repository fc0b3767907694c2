"""Maps the top-level folders `sim/`, `kernels/`, `agent/` and `real/` to the packages `infralab.sim`,
`infralab.kernels`, `infralab.agent` and `infralab.real`, and ships `experiments/` (the studies, TOML and study hooks)
as the package data `infralab.experiments`; everything else lives in pyproject.toml."""
from setuptools import find_packages, setup

PARTS = ("sim", "kernels", "agent", "real")
# The shared layer's sub-packages (infralab/metrics, infralab/workload) are found under infralab/ itself.
packages = ["infralab", "infralab.experiments"]
packages += [f"infralab.{p}" for p in find_packages(where="infralab")]
packages += [f"infralab.{p}" for p in find_packages(include=[f"{part}*" for part in PARTS])]
setup(
    packages=packages,
    package_dir={"infralab": "infralab", "infralab.experiments": "experiments",
                 **{f"infralab.{part}": part for part in PARTS}},
)
