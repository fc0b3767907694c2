"""What every validator declares and returns, and the interface the ladder calls.

A validator *declares* what it can measure (`Declaration`, one per kind of hypothesis it answers):
the knobs an arm may set (with their allowed values), the metrics it measures, and the `[setup]`
table it reads. What a hypothesis file may say is derived from the declarations of the validators
it names (`infralab.agent.hypothesis`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from infralab.agent.findings import Finding
from infralab.agent.hypothesis import Hypothesis, Locator

if TYPE_CHECKING:
    from infralab.agent.sim_pool import Execution


@dataclass(frozen=True)
class Measurement:
    """One validator's answer: per arm, one metrics mapping per repetition (seed x repetition,
    in the same order for every arm), local findings, and study-specific extras for reports.

    `varies`: whether repeating the measurement can give different numbers (timings, real
    threads); deterministic validators (numerics, work counts, the simulator) need no repetitions.
    """

    validator: str
    samples: dict[str, list[dict[str, Any]]]
    findings: tuple[Finding, ...]
    varies: bool
    extras: dict[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # written under the work folder, relative to it
    notes: tuple[str, ...] = ()  # what was (not) measured and why, e.g. "no GPU: times not measured"


@dataclass(frozen=True)
class KnobSpec:
    """What one knob may be: a value of `type`, one of `values` when given, and one of
    `choices(knobs)` when given: allowed values computed from the arm's other knobs (a kernel's
    variants depend on the kernel), None when they cannot be computed here."""

    type: type
    values: tuple[Any, ...] | None = None
    choices: Callable[[Mapping[str, Any]], tuple[Any, ...] | None] | None = None
    describe: str = ""  # the expected form, for errors, e.g. "a shape such as B=64;H=32"

    def allowed(self, knobs: Mapping[str, Any]) -> tuple[Any, ...] | None:
        if self.values is not None:
            return self.values
        return self.choices(knobs) if self.choices is not None else None


@dataclass(frozen=True)
class Declaration:
    """What a validator measures for one kind of hypothesis.

    `knobs` None: the knobs are not a fixed list (a cluster's dotted config paths) and `check`
    validates them. `check(hyp, setup, where)` validates the setup's references (files, scenarios)
    and raises InputError through `where` (a `hypothesis.Locator`) with the file's line."""

    kind: str
    metrics: tuple[str, ...]
    knobs: Mapping[str, KnobSpec] | None
    setup: type
    required: tuple[str, ...] = ()
    check: Callable[[Hypothesis, Any, Locator], None] | None = None
    mappings: tuple[str, ...] = ()  # the metrics whose values map a key to a number (`m['key']` in acceptance)
    # The declaration depends on the hypothesis's setup (a study's hook declares knobs, metrics and
    # setup): `resolve(setup, base_dir, where)` returns the concrete one (agent/validators/hook.py).
    resolve: Callable[[Mapping[str, Any], Path, Locator], Declaration] | None = None


class Validator(Protocol):
    """A rung of the ladder. `name`: as hypothesis files write it; `rung`: its place on the
    ladder, cheapest first (`agent/validators/registry.py` orders the discovered ones by it)."""

    name: str
    rung: int

    def declarations(self) -> tuple[Declaration, ...]:
        """What this validator can measure, one declaration per kind of hypothesis."""
        ...

    def unavailable(self, hyp: Hypothesis) -> str | None:
        """Why this validator cannot run here (None: it can)."""
        ...

    def measure(self, hyp: Hypothesis, workdir: Path | None, execution: Execution) -> Measurement:
        """Measure every arm of `hyp`; write raw files under `workdir` when it is given.
        `execution`: where simulation jobs run (`infralab test --backend`); only the simulator's
        cluster runs use it, the other validators measure on this machine."""
        ...


def sample_keys(hyp: Hypothesis) -> list[tuple[int, int]]:
    """(seed, repetition) pairs in the order every validator reports samples."""
    return [(seed, rep) for seed in hyp.seeds for rep in range(hyp.repetitions)]
