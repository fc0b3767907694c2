"""The fidelity study's error and spread arithmetic, on hand-made numbers (agent/fidelity/compare.py)."""

import math

import pytest

from infralab.agent.fidelity.compare import METRICS, STATS, Comparison, compare, target_for


def test_error_spread_and_range_of_one_statistic():
    c = Comparison(real=(0.100, 0.110, 0.090), sim=0.104, target=0.05)
    assert c.real_mean == pytest.approx(0.100)
    assert c.real_std == pytest.approx(0.010)  # sample standard deviation (n - 1)
    assert c.spread == pytest.approx(0.10)
    assert c.error == pytest.approx(0.04)
    assert c.in_range
    # The real runs spread 10 %, more than the 5 % target: only the range is claimed.
    assert not c.target_applies and c.verdict == "in range" and not c.fails


def test_the_target_is_the_claim_where_the_real_spread_is_below_it():
    tight = (0.100, 0.101, 0.099)
    assert Comparison(tight, 0.104, 0.05).verdict == "met"
    missed = Comparison(tight, 0.106, 0.05)
    assert missed.target_applies and missed.verdict == "missed" and missed.fails
    assert Comparison(tight, 0.094, 0.05).error == pytest.approx(-0.06)


def test_without_a_target_a_value_outside_the_real_range_fails():
    c = Comparison(real=(0.2, 0.3), sim=0.35, target=None)
    assert not c.target_applies and not c.in_range and c.verdict == "out of range" and c.fails
    assert Comparison(real=(0.2, 0.3), sim=0.2, target=None).verdict == "in range"  # ends included


def test_targets_by_statistic_and_load():
    assert target_for("mean", 0.6) == 0.05 and target_for("p90", 0.3) == 0.10
    assert target_for("p50", 0.3) is None
    assert target_for("mean", 0.85) is None  # the targets hold below 85 % of capacity


def test_a_zero_real_mean_gives_an_infinite_error_not_a_crash():
    c = Comparison(real=(0.0, 0.0), sim=0.1, target=0.05)
    assert math.isinf(c.error) and math.isinf(c.spread) and c.verdict == "out of range"


def test_compare_builds_every_metric_statistic_from_the_runs():
    def stats(scale: float) -> dict:
        return {m: {s: scale * (i + 1) * (j + 1) for j, s in enumerate(STATS)} for i, m in enumerate(METRICS)}

    runs = [stats(1.0), stats(1.2)]
    result = compare(runs, stats(1.1), load=0.6)
    assert set(result) == set(METRICS) and all(set(v) == set(STATS) for v in result.values())
    ttft_p90 = result["ttft"]["p90"]
    assert ttft_p90.real == (3.0, pytest.approx(3.6)) and ttft_p90.sim == pytest.approx(3.3)
    assert ttft_p90.target == 0.10 and ttft_p90.error == pytest.approx(0.0)
    assert result["e2e"]["p50"].target is None
    with pytest.raises(ValueError):
        compare([], stats(1.0), load=0.6)


def _case_with_steps(prefill: float, decode: float, differing: int = 0) -> dict:
    run = {"error": None, "steps_vs_profile": {"prefill_step": prefill, "decode_step": decode, "step": decode},
           "schedule": {"differing": differing}}
    return {"runs": [run, dict(run)]}


def test_a_failure_is_put_on_step_time_only_when_the_steps_speed_explains_its_sign() -> None:
    from infralab.agent.fidelity.report import failure_cause
    slow = _case_with_steps(prefill=0.12, decode=0.01)
    # real prompt steps 12 % slower than charged, the mirror's TTFT low: step time
    assert "step time (the machine" in failure_cause(slow, "ttft", -0.1)
    assert "+12.0%" in failure_cause(slow, "ttft", -0.1) and "2 of 2 runs" in failure_cause(slow, "ttft", -0.1)
    # the mirror's TTFT high although the real steps were slower: not step time
    assert "not step time" in failure_cause(slow, "ttft", +0.1)
    # decode-only steps within 2 %: not offered as the cause of a TPOT error
    assert "not step time" in failure_cause(slow, "tpot", -0.1)
    assert "1 of 2" in failure_cause({"runs": [*_case_with_steps(0.1, 0.1)["runs"][:1],
                                               *_case_with_steps(0.1, 0.1, differing=3)["runs"][:1]]}, "e2e", -0.1)
    assert failure_cause({"runs": [{"error": None, "steps_vs_profile": {"prefill_step": None}, "schedule": None}]},
                         "ttft", -0.1).startswith("no step of that kind")
