"""What every validator returns, and the interface the ladder calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from infralab.agent.findings import Finding
from infralab.agent.hypothesis import Hypothesis


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


class Validator(Protocol):
    name: str

    def unavailable(self, hyp: Hypothesis) -> str | None:
        """Why this validator cannot run here (None: it can)."""
        ...

    def measure(self, hyp: Hypothesis, workdir: Path | None) -> Measurement:
        """Measure every arm of `hyp`; write raw files under `workdir` when it is given."""
        ...


def sample_keys(hyp: Hypothesis) -> list[tuple[int, int]]:
    """(seed, repetition) pairs in the order every validator reports samples."""
    return [(seed, rep) for seed in hyp.seeds for rep in range(hyp.repetitions)]
