"""Findings: local, evidenced observations that validators and checks return.

A finding says *where* (one kernel + shape + split, one thread + interval set, one request + phase,
one instance or link), *what* was observed there, the *evidence* (the numbers, what they were
compared with, the files that hold the raw data) and, once acceptance criteria have been judged, a
*verdict*. The verdict logic lives with the agent (`infralab.agent.findings`); these types are
shared so that every part reports findings of one shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

WhereKind = Literal["kernel", "thread", "request", "resource", "ladder"]

# Verdict of one criterion, of a finding, and of a whole test (see agent/ladder.py).
ACCEPTED, REJECTED, INCONCLUSIVE, UNMEASURED, PARTIAL = "accepted", "rejected", "inconclusive", "unmeasured", "partial"
NOT_JUDGED = "not-judged"  # a finding whose arm no criterion reads


@dataclass(frozen=True)
class Where:
    """The place a finding is about: a kind and its coordinates, e.g. kernel=matmul, split=row/4."""

    kind: WhereKind
    coords: tuple[tuple[str, Any], ...]

    @staticmethod
    def of(kind: WhereKind, **coords: Any) -> Where:
        return Where(kind, tuple((k, v) for k, v in coords.items() if v is not None))

    def text(self) -> str:
        return f"{self.kind}: " + ", ".join(f"{k}={_short(v)}" for k, v in self.coords)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **{k: _jsonable(v) for k, v in self.coords}}


@dataclass(frozen=True)
class Evidence:
    """What backs a finding: measured numbers (units in the key names: _s seconds, _bytes, ...),
    what they were compared with, and files (relative to the result folder) with the raw data."""

    numbers: Mapping[str, Any] = field(default_factory=dict)
    reference: str = ""
    files: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"numbers": {k: _jsonable(v) for k, v in self.numbers.items()}, "reference": self.reference,
                "files": list(self.files)}


@dataclass(frozen=True)
class Finding:
    """One local observation by one validator about one arm (baseline or variant)."""

    validator: str
    arm: str
    where: Where
    what: str
    evidence: Evidence
    verdict: str = NOT_JUDGED
    criteria: tuple[str, ...] = ()  # the acceptance expressions the verdict comes from

    def headline(self) -> str:
        return f"[{self.verdict}] {self.validator} / {self.arm} / {self.where.text()}: {self.what}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "validator": self.validator,
            "arm": self.arm,
            "where": self.where.to_dict(),
            "what": self.what,
            "evidence": self.evidence.to_dict(),
            "verdict": self.verdict,
            "criteria": list(self.criteria),
        }


def _short(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return str(value)


def _jsonable(value: object) -> object:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value
