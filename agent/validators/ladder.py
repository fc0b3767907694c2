"""The validator ladder: run the cheapest validator that can decide a hypothesis, escalate only when
asked (`confirm`) or when the cheaper answer does not decide.

Rules (documented in docs/agent.md):
1. The hypothesis's allowed validators run in ladder order: kernel-check, microbench, sim, real.
   A validator that cannot run here (no compiler, no GPU work for it) is recorded as unavailable
   and skipped.
2. A rung *decides* when its combined verdict is accepted or rejected. Otherwise (inconclusive:
   a difference within run-to-run noise, see `infralab.agent.acceptance.NOISE_RULE`; unmeasured or
   partial: a metric this validator cannot measure) the next allowed rung runs.
3. With `confirm`, the first decision is confirmed by the next rung that can run; the final verdict
   is the highest decided rung's (the more real one), and a disagreement becomes a finding.
4. Without a decision anywhere, the final verdict is the best the rungs reached
   (partial > inconclusive > unmeasured).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infralab.agent.acceptance import NOISE_RULE, Judgement, judge
from infralab.agent.findings import (
    ACCEPTED,
    INCONCLUSIVE,
    PARTIAL,
    REJECTED,
    UNMEASURED,
    Evidence,
    Finding,
    Where,
    combine_verdicts,
    with_verdicts,
)
from infralab.agent.hypothesis import Hypothesis
from infralab.agent.sim_pool import Execution
from infralab.agent.validators.base import Measurement, Validator
from infralab.agent.validators.registry import validator_class

SCHEMA = "infralab.test/1"
DECIDED = (ACCEPTED, REJECTED)


def make_validator(name: str) -> Validator:
    return validator_class(name)()


@dataclass(frozen=True)
class Rung:
    """What one validator did: status ran | unavailable | not-needed, and if it ran, its verdict."""

    validator: str
    status: str
    reason: str = ""
    verdict: str | None = None
    judgements: tuple[Judgement, ...] = ()
    measurement: Measurement | None = None
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class TestResult:
    hypothesis: Hypothesis
    verdict: str
    decided_by: str | None
    rungs: tuple[Rung, ...]
    findings: tuple[Finding, ...]
    confirm: bool
    extra_findings: tuple[Finding, ...] = field(default_factory=tuple)

    def rung(self, name: str) -> Rung | None:
        return next((r for r in self.rungs if r.validator == name and r.status == "ran"), None)

    def to_dict(self) -> dict[str, Any]:
        return test_json(self)


def flat_samples(m: Measurement) -> list[Mapping[str, Any]]:
    """Per repetition i: {"arm.metric": value} over every arm (arms paired by index)."""
    n = min((len(s) for s in m.samples.values()), default=0)
    return [{f"{arm}.{k}": v for arm, s in m.samples.items() for k, v in s[i].items()} for i in range(n)]


def judge_all(hyp: Hypothesis, m: Measurement) -> tuple[Judgement, ...]:
    samples = flat_samples(m)
    return tuple(judge(c, samples, m.varies) for c in hyp.acceptance)


def run_test(
    hyp: Hypothesis, confirm: bool = False, workdir: Path | None = None, execution: Execution = Execution()
) -> TestResult:
    """Walk the ladder for `hyp` (rules in the module docstring); raw files go under
    `workdir/<validator>/` when `workdir` is given. `execution` says where simulation jobs run
    (`infralab test --backend`); every validator gets it, only the simulator's cluster runs use it."""
    rungs: list[Rung] = []
    first_decided: Rung | None = None
    done = False
    for name in hyp.validators:
        if done:
            rungs.append(Rung(name, "not-needed", f"decided by {first_decided.validator}" if first_decided else ""))
            continue
        validator = make_validator(name)
        reason = validator.unavailable(hyp)
        if reason:
            rungs.append(Rung(name, "unavailable", reason))
            continue
        sub = None
        if workdir is not None:
            sub = workdir / name
            sub.mkdir(parents=True, exist_ok=True)
        m = validator.measure(hyp, sub, execution)
        judgements = judge_all(hyp, m)
        verdict = combine_verdicts(j.verdict for j in judgements)
        crit = {j.criterion: (j.verdict, hyp.arms_read_by(c)) for j, c in zip(judgements, hyp.acceptance)}
        findings = tuple(with_verdicts(m.findings, crit))
        rung = Rung(name, "ran", _reason(verdict, judgements), verdict, judgements, m, findings)
        rungs.append(rung)
        if verdict in DECIDED:
            if first_decided is None:
                first_decided = rung
                done = not confirm
            else:
                done = True  # this rung confirmed (or contradicted) the first decision
    ran = [r for r in rungs if r.status == "ran"]
    decided = [r for r in ran if r.verdict in DECIDED]
    extra: list[Finding] = []
    if decided:
        final = decided[-1]
        assert final.verdict is not None  # a decided rung's verdict is one of DECIDED
        verdict = final.verdict
        if len(decided) > 1 and decided[0].verdict != final.verdict:
            extra.append(_disagreement(decided[0], final))
        if ran[-1] is not decided[0] and hyp.kind == "cluster":  # did the real engine see the predicted effect?
            from infralab.agent.real_agreement import agreement_findings

            extra += agreement_findings(decided[0], ran[-1], [arm.name for arm in hyp.arms], hyp.metrics)
    else:
        final = None
        order = (PARTIAL, INCONCLUSIVE, UNMEASURED)
        verdict = next((v for v in order if any(r.verdict == v for r in ran)), UNMEASURED)
    findings = tuple(f for r in ran for f in r.findings) + tuple(extra)
    return TestResult(hyp, verdict, final.validator if final else None, tuple(rungs), findings, confirm, tuple(extra))


def _reason(verdict: str, judgements: tuple[Judgement, ...]) -> str:
    if verdict in DECIDED:
        return "decided"
    bad = [j for j in judgements if j.verdict in (INCONCLUSIVE, UNMEASURED)]
    parts = []
    for j in bad:
        if j.verdict == UNMEASURED:
            parts.append(f"{j.criterion!r}: not measured here ({j.unmeasured})")
        elif j.undefined is not None:
            parts.append(f"{j.criterion!r}: undefined on these measurements ({j.undefined})")
        else:
            close = [c for c in j.comparisons if c.outcome is None]
            detail = "; ".join(
                f"{c.text}: delta {c.delta:.3g} vs noise {('unknown' if c.noise_std is None else f'{c.noise_std:.3g}')}"
                for c in close)
            parts.append(f"{j.criterion!r}: within noise ({detail})")
    return "escalate: " + " | ".join(parts)


def _disagreement(first: Rung, final: Rung) -> Finding:
    assert final.verdict is not None  # both rungs decided (run_test)
    return Finding(
        validator=final.validator, arm="(all)",
        where=Where.of("ladder", cheaper=first.validator, confirming=final.validator),
        what=f"{first.validator} said {first.verdict}, {final.validator} says {final.verdict}: the rungs disagree; "
             f"the final verdict is the more real rung's ({final.validator}); compare the two rungs' findings "
             f"(model inputs vs measured run, and the real run's spread)",
        evidence=Evidence(numbers={}, reference="the criteria judged on each rung (see rungs)"),
        verdict=final.verdict,
    )


# ---- JSON (schema infralab.test/1, docs/agent.md) ------------------------------------------------


def _mean_of(values: list[Any]) -> Any:
    if values and isinstance(values[0], dict):
        keys = values[0].keys()
        return {k: _mean_of([v[k] for v in values]) for k in keys}
    nums = [float(v) for v in values]
    return sum(nums) / len(nums) if nums else None


def _std_of(values: list[Any]) -> Any:
    if values and isinstance(values[0], dict):
        return {k: _std_of([v[k] for v in values]) for k in values[0].keys()}
    nums = [float(v) for v in values]
    if len(nums) < 2:
        return 0.0
    mean = sum(nums) / len(nums)
    return (sum((x - mean) ** 2 for x in nums) / (len(nums) - 1)) ** 0.5


def arm_stats(samples: list[dict[str, Any]]) -> dict[str, Any]:
    keys = sorted({k for s in samples for k in s})
    mean = {k: _mean_of([s[k] for s in samples if k in s]) for k in keys}
    std = {k: _std_of([s[k] for s in samples if k in s]) for k in keys}
    return {"mean": mean, "std": std, "samples": len(samples)}


def _finite(obj: Any) -> Any:
    """JSON has no NaN/inf: they become None."""
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def test_json(result: TestResult) -> dict[str, Any]:
    hyp = result.hypothesis
    rungs = []
    for r in result.rungs:
        entry: dict[str, Any] = {"validator": r.validator, "status": r.status, "reason": r.reason, "verdict": r.verdict}
        if r.measurement is not None:
            m = r.measurement
            entry["varies"] = m.varies
            entry["notes"] = list(m.notes)
            entry["files"] = [f"{r.validator}/{f}" for f in m.files]
            entry["criteria"] = [j_to_dict(j) for j in r.judgements]
            entry["arms"] = {arm: arm_stats(s) for arm, s in m.samples.items()}
        rungs.append(entry)
    final = result.rung(result.decided_by) if result.decided_by else None
    source = final or next((r for r in reversed(result.rungs) if r.status == "ran"), None)
    out = {
        "schema": SCHEMA,
        "hypothesis": {
            "name": hyp.name, "file": hyp.source, "claim": hyp.claim, "kind": hyp.kind,
            "metrics": list(hyp.metrics), "validators": list(hyp.validators),
            "acceptance": [c.text for c in hyp.acceptance], "seeds": list(hyp.seeds),
            "repetitions": hyp.repetitions,
            "arms": [{"name": a.name, "knobs": a.config, "parent": a.parent,
                      "change": None if a.change is None else {a.change[0]: a.change[1]}} for a in hyp.arms],
        },
        "verdict": result.verdict,
        "decided_by": result.decided_by,
        "confirm": result.confirm,
        "noise_rule": NOISE_RULE,
        "criteria": [j_to_dict(j) for j in source.judgements] if source else [],
        "rungs": rungs,
        "findings": [f.to_dict() for f in result.findings],
        "command": test_command(hyp, result.confirm),
    }
    finite: dict[str, Any] = _finite(out)
    return finite


def j_to_dict(j: Judgement) -> dict[str, Any]:
    entry = {"expr": j.criterion, "verdict": j.verdict, "unmeasured": j.unmeasured,
             "comparisons": [c.to_dict() for c in j.comparisons]}
    if j.undefined is not None:  # only then, so results of well-defined criteria keep their bytes
        entry["undefined"] = j.undefined
    return entry


def test_command(hyp: Hypothesis, confirm: bool, as_json: bool = True) -> str:
    """The command line that reruns `hyp` exactly: the file, --confirm, and every flag that changes
    numbers (--quick, each --set in order; seeds live in the file or a --set), shell-quoted."""
    import shlex

    words = ["infralab", "test", hyp.source]
    words += ["--confirm"] if confirm else []
    words += ["--quick"] if hyp.quick else []
    for assignment in hyp.overrides:
        words += ["--set", assignment]
    words += ["--json"] if as_json else []
    return " ".join(shlex.quote(w) for w in words)
