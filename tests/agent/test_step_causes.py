"""agent/step_causes.py: the SLO that binds at capacity and the metric explain is asked about."""

from __future__ import annotations

from infralab.agent.step_causes import binding_constraint, explained_metric


def test_binding_constraint_and_the_metric_explained():
    rows = [{"config": "a", "rate_rps": 2.0, "meets": False, "why": "seed 0: p90 TTFT 2.3 s > 2 s"},
            {"config": "b", "rate_rps": 2.0, "meets": False, "why": "seed 0: saturated"}]
    why = binding_constraint(rows, "a", 2.0)
    assert why.startswith("seed 0: p90 TTFT") and binding_constraint(rows, "a", None) is None
    assert binding_constraint(rows, "a", 3.0) is None  # no probe failed at that rate
    assert explained_metric(why) == "ttft"
    assert explained_metric("seed 1: p90 TPOT 0.2 s > 0.1 s") == "tpot"
    assert explained_metric("seed 0: saturated") == "e2e" and explained_metric(None) == "e2e"
