"""Acceptance criteria: the safe parser, evaluation, and judging repeated measurements with the noise rule."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.agent.acceptance import NOISE_FACTOR, evaluate, judge, parse_criterion
from infralab.errors import InputError


def test_parse_collects_dotted_metric_names_not_functions():
    c = parse_criterion("max(a.x, b.x) / base.x >= 0.95 and not a.saturated")
    assert c.names == {"a.x", "b.x", "base.x", "a.saturated"}


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "a.x if a.y else 1", "[a.x]", "lambda: 1",
                                  "a.x ** 2"])
def test_forbidden_constructs_are_input_errors(text):
    with pytest.raises(InputError, match="acceptance"):
        parse_criterion(text, "acceptance")


def test_syntax_error_names_the_expression():
    with pytest.raises(InputError, match=r"cannot parse 'a\.x >='"):
        parse_criterion("a.x >=", "acceptance")


def test_evaluate_subscript_and_missing_metric():
    c = parse_criterion("m.degradation['s1'] <= 0.05", mappings=frozenset({"m.degradation"}))
    assert evaluate(c, {"m.degradation": {"s1": 0.01}}) is True
    with pytest.raises(KeyError, match="m.degradation"):
        evaluate(c, {})


def test_deterministic_samples_decide():
    c = parse_criterion("v.t < b.t")
    j = judge(c, [{"v.t": 1.0, "b.t": 2.0}], varies=False)
    assert j.verdict == "accepted" and j.comparisons[0].noise_std == 0.0


def test_varying_validator_needs_two_repetitions():
    c = parse_criterion("v.t < b.t")
    j = judge(c, [{"v.t": 1.0, "b.t": 2.0}], varies=True)
    assert j.verdict == "inconclusive" and j.comparisons[0].noise_std is None


def test_difference_within_two_sigma_is_inconclusive_and_clear_difference_decides():
    noisy = [{"v.t": 1.0, "b.t": 1.1}, {"v.t": 1.2, "b.t": 0.9}, {"v.t": 0.9, "b.t": 1.2}]
    assert judge(parse_criterion("v.t < b.t"), noisy, varies=True).verdict == "inconclusive"
    clear = [{"v.t": 1.0, "b.t": 2.0}, {"v.t": 1.1, "b.t": 2.1}, {"v.t": 0.9, "b.t": 1.9}]
    j = judge(parse_criterion("v.t < b.t"), clear, varies=True)
    assert j.verdict == "accepted"
    assert j.comparisons[0].delta == pytest.approx(-1.0)
    assert j.comparisons[0].noise_std == pytest.approx(0.1)


def test_kleene_logic_a_decided_false_wins_over_noise():
    noisy = [{"a.x": 1.0, "b.x": 1.1, "c.x": 5.0}, {"a.x": 1.2, "b.x": 0.9, "c.x": 5.0}]
    assert judge(parse_criterion("a.x < b.x and c.x < 1"), noisy, varies=True).verdict == "rejected"
    assert judge(parse_criterion("a.x < b.x or c.x > 1"), noisy, varies=True).verdict == "accepted"
    assert judge(parse_criterion("a.x < b.x and c.x > 1"), noisy, varies=True).verdict == "inconclusive"


def test_unmeasured_metric_is_named():
    j = judge(parse_criterion("v3.time_s < v2.time_s"), [{"v2.time_s": 1.0}], varies=False)
    assert j.verdict == "unmeasured" and j.unmeasured == "metric 'v3.time_s'"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.5, 1.5), min_size=2, max_size=6), st.floats(-3, 3))
def test_noise_rule_matches_its_statement(values, shift):
    """|mean(L) - mean(R)| < 2 s with s the sample std of the varying side <=> inconclusive."""
    samples = [{"a.x": v, "b.x": 1.0 + shift} for v in values]
    j = judge(parse_criterion("a.x < b.x"), samples, varies=True)
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    s = var ** 0.5
    within = s > 0 and abs(mean - (1.0 + shift)) < NOISE_FACTOR * s
    assert (j.verdict == "inconclusive") == within
    if not within:
        assert j.verdict == ("accepted" if mean < 1.0 + shift else "rejected")
