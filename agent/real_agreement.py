"""Whether a more real rung agrees with a cheaper one in direction and size, per arm and metric.

`infralab test --confirm` runs a hypothesis on two rungs (e.g. the simulator, then the real
engine). Beyond the two verdicts, the question is whether the effect the cheap rung predicted is
the effect measured: for each variant arm and each of the hypothesis's metrics that both rungs
measured as numbers, the effect is mean(variant) - mean(baseline) over the rung's samples. Agreement
in direction: both effects have the same sign (or both are 0). Size: the real effect over the
predicted one (1.0 = the same size). One ladder finding per variant arm, numbers in its evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from infralab.agent.findings import Evidence, Finding, Where


def _mean(samples: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    values = [s.get(metric) for s in samples]
    if not values or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        return None
    mean = sum(float(v) for v in values) / len(values)
    return mean if math.isfinite(mean) else None


def effects(samples: Mapping[str, Sequence[Mapping[str, Any]]], arm: str, metrics: Sequence[str]) -> dict[str, float]:
    """mean(arm) - mean(baseline) per metric both measured as numbers."""
    out = {}
    for metric in metrics:
        variant, base = _mean(samples.get(arm, ()), metric), _mean(samples.get("baseline", ()), metric)
        if variant is not None and base is not None:
            out[metric] = variant - base
    return out


def agreement_findings(cheap: Any, real: Any, arms: Sequence[str], metrics: Sequence[str]) -> list[Finding]:
    """One finding per variant arm comparing the effects measured by rung `cheap` and rung `real`
    (ladder `Rung`s that ran, with a measurement)."""
    out = []
    for arm in arms:
        if arm == "baseline":
            continue
        predicted = effects(cheap.measurement.samples, arm, metrics)
        measured = effects(real.measurement.samples, arm, metrics)
        shared = [m for m in metrics if m in predicted and m in measured]
        if not shared:
            continue
        numbers: dict[str, Any] = {}
        parts = []
        for metric in shared:
            p, r = predicted[metric], measured[metric]
            same = (p > 0) == (r > 0) and (p < 0) == (r < 0)
            ratio = r / p if p != 0 else None
            numbers.update({f"{metric}.{cheap.validator}_effect": p, f"{metric}.{real.validator}_effect": r,
                            f"{metric}.same_direction": same, f"{metric}.size_ratio": ratio})
            size = "" if ratio is None else f", {ratio:.2f}x the predicted size"
            parts.append(f"{metric} {p:+.3g} vs {r:+.3g} ({'same direction' if same else 'OPPOSITE direction'}{size})")
        out.append(Finding(
            validator=real.validator, arm=arm,
            where=Where.of("ladder", cheaper=cheap.validator, confirming=real.validator),
            what=f"effect of {arm} vs baseline, {cheap.validator} predicted vs {real.validator} measured: " + "; ".join(parts),
            evidence=Evidence(numbers=numbers, reference=f"mean over each rung's samples; the baseline arm of the same rung"),
        ))
    return out
