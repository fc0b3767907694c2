"""The host model's part of the `sim` and `real` validators: hypotheses of kind `host-concurrency`
(Python threads, the GIL, device streams, a KV-transfer thread beside prefill).

Knobs: dispatch_combine_gil (held | released, required): whether the expert-parallel
dispatch/combine native calls hold the GIL; kv_descriptors (python | native, default: the
experiment's host profile): whether the transfer thread builds its per-page descriptors in its
Python loop (holding the GIL) or inside one native call that releases it. Metrics: degradation
(mapping scenario or schedule -> 1 - prefill throughput with KV transfer / without),
max_degradation, mean_degradation, kv_python_over_comm (mapping: fraction of dispatch/combine
covered by the transfer thread's Python), min_kv_python_over_comm, and, simulated only,
main_gil_wait_s (mapping, seconds).

The experiment (scenarios, schedules) and how it is run belong to the study: `setup.hook` names a
Python file, relative to the hypothesis file, that provides
    scenario_names(experiment: Path) -> list[str]      (InputError for a bad experiment file)
    measure_sim(hyp, setup, workdir) -> Measurement     (the simulator's host model)
    measure_real(hyp, setup, workdir) -> Measurement    (real threads on this machine)
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic.dataclasses import dataclass

from infralab.agent.hypothesis import Hypothesis
from infralab.agent.studies import load_hook
from infralab.agent.validators.base import Declaration, KnobSpec
from infralab.config_io import STRICT
from infralab.errors import InputError
from infralab.field_types import Int

KIND = "host-concurrency"
KNOBS = {"dispatch_combine_gil": KnobSpec(str, ("held", "released")),
         "kv_descriptors": KnobSpec(str, ("python", "native"))}
REQUIRED = ("dispatch_combine_gil",)
REAL_METRICS = ("degradation", "max_degradation", "mean_degradation", "kv_python_over_comm",
                "min_kv_python_over_comm")
SIM_METRICS = (*REAL_METRICS, "main_gil_wait_s")


@dataclass(frozen=True, config=STRICT)
class HostConcurrencySetup:
    experiment: str  # the host experiment file (scenarios, probe schedule), relative to the hypothesis file
    hook: str  # the study's Python file that measures it (see the module docstring)
    scenarios: tuple[str, ...] = ()  # subset of its scenarios (empty: all)
    probe_repeats: Int(gt=0, le=1000) | None = None  # override the experiment's [probe] repeats
    probe_granularities: tuple[Literal["per_layer", "after_prefill"], ...] = ()


def host_hook(hyp: Hypothesis, setup: HostConcurrencySetup) -> ModuleType:
    path = hyp.resolve(setup.hook)
    if not path.is_file():
        raise InputError(f"{hyp.source}: setup.hook", f"{path} is not a file", "a study hook .py file")
    return load_hook(path)


def check_host_setup(hyp: Hypothesis, setup: HostConcurrencySetup, where: Any) -> None:
    """The hook exists, the experiment file is valid and names the setup's scenarios."""
    try:
        hook = host_hook(hyp, setup)
    except InputError as exc:
        raise where.error("setup.hook", exc.problem, exc.expected) from None
    try:
        names = hook.scenario_names(hyp.resolve(setup.experiment))
    except InputError as exc:
        raise where.error("setup.experiment", f"{exc.where}: {exc.problem}", exc.expected) from None
    for name in setup.scenarios:
        if name not in names:
            raise where.error("setup.scenarios", f"unknown scenario {name!r}", f"one of {', '.join(names)}",
                              needle=name)


MAPPING_METRICS = ("degradation", "kv_python_over_comm", "main_gil_wait_s")


def declaration(metrics: tuple[str, ...]) -> Declaration:
    return Declaration(KIND, metrics, KNOBS, HostConcurrencySetup, required=REQUIRED, check=check_host_setup,
                       mappings=tuple(m for m in metrics if m in MAPPING_METRICS))


def measure(hyp: Hypothesis, setup: HostConcurrencySetup, workdir: Path | None, validator: str):
    """The hook's measurement for `validator` ("sim" or "real")."""
    return getattr(host_hook(hyp, setup), f"measure_{validator}")(hyp, setup, workdir)


__all__ = ["KIND", "HostConcurrencySetup", "check_host_setup", "declaration", "measure"]
