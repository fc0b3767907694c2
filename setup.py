"""Maps the top-level folders `sim/`, `kernels/` and `agent/` to the packages `infralab.sim`,
`infralab.kernels` and `infralab.agent`; everything else lives in pyproject.toml."""
from setuptools import find_packages, setup

PARTS = ("sim", "kernels", "agent")
packages = ["infralab"] + [f"infralab.{p}" for p in find_packages(include=[f"{part}*" for part in PARTS])]
setup(
    packages=packages,
    package_dir={"infralab": "infralab", **{f"infralab.{part}": part for part in PARTS}},
)
