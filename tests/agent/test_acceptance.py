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


# ---- checked at load time, so that judging cannot fail on the expression ------------------------


@pytest.mark.parametrize("text, problem", [
    ("1 == 1", "reads no measurement"),
    ("1", "reads no measurement"),
    ("min() < a.x", r"min\(\) takes at least 2"),
    ("abs(a.x, b.x) > 0", r"abs\(\) takes exactly 1"),
    ("a.x['k'] > 0", "subscript on 'a.x', which is a number"),
    ("'a' < 'b'", "string 'a' outside a subscript"),
    ("'a' * 200000000 == a.x", "string 'a'"),
    ("a.x / 0 > 1", "division by the constant 0"),
    ("a.x < 1e999", "not finite"),
    (" + ".join(["a.x"] * 30000) + " > 0", "characters long"),
    ("not " * 5000 + "a.x", "characters long"),
    ("not " * 45 + "a.x", "nested deeper than"),
    ("min(" + ", ".join(["a.x"] * 60) + ") > 0", "more than 200 parts"),
    ("m.d > 0", "is a mapping metric"),
    ("m.d[0] > 0", "not a string constant"),
])
def test_load_time_checks(text, problem):
    with pytest.raises(InputError, match=problem):
        parse_criterion(text, "acceptance", mappings=frozenset({"m.d"}))


@pytest.mark.parametrize("samples, reason", [
    ([{"a.x": 1.0, "b.x": 0.0}], "a.x / b.x divides by zero"),
    ([{"a.x": 1.0, "b.x": None}], "a.x / b.x is not a number here"),
    ([{"a.x": 1e308, "b.x": 1e-308}], "a.x / b.x is not finite"),
    ([{"a.x": 1e308, "b.x": 1.0}, {"a.x": -1e308, "b.x": 1.0}], "overflow"),
])
def test_arithmetic_failure_on_measured_values_is_inconclusive_with_a_reason(samples, reason):
    j = judge(parse_criterion("a.x / b.x > 1"), samples, varies=False)
    assert j.verdict == "inconclusive" and j.outcome is None and reason in j.undefined


_NAMES = st.sampled_from(["a.x", "b.y", "m.d['k']", "m.d", "1", "0", "1e999", "'s'", "min", "abs"])
_OPS = st.sampled_from([" + ", " - ", " * ", " / ", " < ", " <= ", " == ", " and ", " or ", ", ", " ** ", "["])
_WRAP = st.sampled_from(["{}", "not {}", "-{}", "abs({})", "min({})", "max({}, a.x)", "({})", "{}[0]"])


@st.composite
def expressions(draw) -> str:
    text = draw(_NAMES)
    for _ in range(draw(st.integers(0, 6))):
        text = draw(_WRAP).format(text) + draw(_OPS) + draw(_NAMES)
    return text


@settings(max_examples=300, deadline=None)
@given(expressions(), st.lists(st.sampled_from([0.0, 1.0, -2.5, 1e308, None, {"k": 0.0}, {"k": 2.0}]),
                               min_size=3, max_size=3))
def test_an_expression_is_refused_at_load_or_judged_without_an_exception(text, values):
    """Whatever the text: parse_criterion raises only InputError, and what it accepts `judge` can
    judge on any values (numbers, zero, huge, None, mappings) without raising."""
    try:
        c = parse_criterion(text, "acceptance", mappings=frozenset({"m.d"}))
    except InputError:
        return
    sample = {"a.x": values[0], "b.y": values[1], "m.d": values[2]}
    j = judge(c, [sample, sample], varies=False)
    assert j.verdict in ("accepted", "rejected", "inconclusive", "unmeasured")


def test_the_ladder_reports_why_a_criterion_was_undefined():
    from infralab.agent.validators.ladder import _reason, j_to_dict

    j = judge(parse_criterion("a.x / b.x > 1"), [{"a.x": 1.0, "b.x": 0.0}], varies=False)
    assert j_to_dict(j)["undefined"] == "a.x / b.x divides by zero"
    assert "undefined on these measurements (a.x / b.x divides by zero)" in _reason("inconclusive", (j,))
    defined = judge(parse_criterion("a.x > 1"), [{"a.x": 2.0}], varies=False)
    assert "undefined" not in j_to_dict(defined)  # results of well-defined criteria keep their bytes


def _gil_hypothesis(tmp_path, criterion: str):
    """The shipped GIL hypothesis with one acceptance expression replaced, its setup paths absolute."""
    from infralab.locations import experiments_dir

    experiments = experiments_dir()
    study = experiments / "gil_kv_transfer"
    text = (study / "hypothesis.toml").read_text()
    text = text.replace('"released.max_degradation <= 0.05"', f'"{criterion}"')
    text = text.replace('"published.toml"', f'"{study / "published.toml"}"')
    text = text.replace('"hook.py"', f'"{study / "hook.py"}"')
    path = tmp_path / "gil.toml"
    path.write_text(text)
    return path


def test_mapping_metrics_declared_by_a_validator_take_a_key_and_only_a_key(tmp_path):
    from infralab.agent.hypothesis import load_hypothesis

    hyp = load_hypothesis(_gil_hypothesis(tmp_path, "released.degradation['T8k-ep8-after-page1'] <= 0.05"))
    assert hyp.acceptance[0].names == {"released.degradation"}
    with pytest.raises(InputError, match=r"gil.toml:\d+: hypothesis.acceptance\[0\]: 'released.degradation' is a mapping"):
        load_hypothesis(_gil_hypothesis(tmp_path, "released.degradation <= 0.05"))
    with pytest.raises(InputError, match="subscript on 'released.max_degradation', which is a number"):
        load_hypothesis(_gil_hypothesis(tmp_path, "released.max_degradation['x'] <= 0.05"))
