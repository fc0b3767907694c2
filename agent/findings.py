"""Findings: local, evidenced answers that the validators return.

A finding says *where* (one kernel + shape + split, one thread + interval set, one request + phase,
one instance or link), *what* was observed there, the *evidence* (the numbers, what they were
compared with, the files that hold the raw data) and, once the acceptance criteria have been
judged, a *verdict*: the verdicts of the criteria that read the metrics of the finding's arm.

A finding never says only "throughput dropped": it names the place that an optimiser would change
or look at next.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from infralab.findings import (  # the shared types; re-exported for the agent's modules
    ACCEPTED,
    INCONCLUSIVE,
    NOT_JUDGED,
    PARTIAL,
    REJECTED,
    UNMEASURED,
    Evidence,
    Finding,
    Where,
    WhereKind,
)

__all__ = ["ACCEPTED", "INCONCLUSIVE", "NOT_JUDGED", "PARTIAL", "REJECTED", "UNMEASURED", "Evidence", "Finding",
           "Where", "WhereKind", "combine_verdicts", "with_verdicts"]


def combine_verdicts(verdicts: Iterable[str]) -> str:
    """One verdict from several: any rejection rejects; then inconclusive; all accepted accepts;
    accepted mixed with unmeasured is partial; nothing measured is unmeasured."""
    found = set(verdicts)
    if not found:
        return UNMEASURED
    if REJECTED in found:
        return REJECTED
    if INCONCLUSIVE in found:
        return INCONCLUSIVE
    if found == {ACCEPTED}:
        return ACCEPTED
    if ACCEPTED in found or PARTIAL in found:
        return PARTIAL
    return UNMEASURED


def with_verdicts(findings: Iterable[Finding], criterion_verdicts: Mapping[str, tuple[str, frozenset[str]]]) -> list[Finding]:
    """Attach verdicts: a finding gets the combined verdict of the criteria that read its arm.

    `criterion_verdicts` maps criterion text -> (verdict, names of the arms it reads).
    """
    out = []
    for f in findings:
        texts = tuple(text for text, (_, arms) in criterion_verdicts.items() if f.arm in arms)
        if not texts:
            out.append(f)
            continue
        verdict = combine_verdicts(criterion_verdicts[t][0] for t in texts)
        out.append(dataclasses.replace(f, verdict=verdict, criteria=texts))
    return out
