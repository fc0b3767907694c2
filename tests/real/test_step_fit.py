"""The step-time model fitted on replay steps (real/step_fit.py) and the per-kind scaling of the
profile (agent/fidelity/step_times.py), on made-up steps whose times follow a known rule."""

from __future__ import annotations

import numpy as np
import pytest

from infralab.agent.fidelity.step_times import PSEUDO_STEPS, batch_factors, kind_factors, scaled_cv
from infralab.real.step_fit import batch_class, fit_steps, predict_steps, step_errors
from infralab.real.step_trace import BatchShape, StepRecord

FORWARD = (2e-3, 5e-5, 4e-4, 1e-7, 0.0)  # coefficients of 1, q, s, k, q*k
HOST = (3e-4, 0.0, 2e-5, 0.0, 0.0)


def made_up_steps(n: int = 60, noise: float = 0.0, seed: int = 0) -> list[StepRecord]:
    rng = np.random.default_rng(seed)
    steps, t = [], 0.0
    for i in range(n):
        seqs = int(rng.integers(1, 9))
        prefill = int(rng.integers(0, 200)) if i % 3 == 0 else 0
        q, k = prefill + seqs, int(rng.integers(q_min := prefill + seqs, q_min + 2000))
        terms = np.array([1.0, q, seqs, k, q * k])
        forward = float(terms @ FORWARD) * (1 + noise * rng.standard_normal())
        host = float(terms @ HOST)
        steps.append(StepRecord(i, t, t, t + forward, t + forward + host,
                                BatchShape(q, k - q, seqs, int(prefill > 0), prefill, seqs)))
        t += forward + host
    return steps


def test_a_linear_rule_is_recovered_and_cross_validates_to_zero_error() -> None:
    fit = fit_steps(made_up_steps())
    assert fit.forward == pytest.approx(FORWARD, rel=1e-6, abs=1e-12)
    assert fit.host == pytest.approx(HOST, rel=1e-6, abs=1e-12)
    assert fit.cv["worst_total"] == pytest.approx(0.0, abs=1e-9) and fit.cv["median_step"] == pytest.approx(0.0, abs=1e-9)


def test_no_coefficient_is_negative_even_on_noisy_steps() -> None:
    fit = fit_steps(made_up_steps(noise=0.3, seed=3))
    assert min(fit.forward + fit.host) >= 0.0 and fit.cv["worst_total"] > 0


def test_too_few_steps_are_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        fit_steps(made_up_steps(n=6))


def test_step_errors_split_the_totals_by_kind() -> None:
    steps = made_up_steps()
    truth = np.array([st.duration_s for st in steps])
    prefill = np.array([bool(st.batch.prefill_tokens) for st in steps])
    errors = step_errors(np.where(prefill, 1.1, 0.95) * truth, steps)
    assert errors["prefill_total"] == pytest.approx(0.1) and errors["decode_total"] == pytest.approx(-0.05)
    assert errors["worst_total"] == pytest.approx(0.1)
    assert predict_steps(lambda q, k, s: (1.0, 2.0), steps[:2]) == [3.0, 3.0]


def test_the_profile_scaled_per_kind_recovers_a_uniform_bias_of_each_kind() -> None:
    steps = made_up_steps()
    truth = np.array([st.duration_s for st in steps])
    prefill = np.array([bool(st.batch.prefill_tokens) for st in steps])
    biased = truth / np.where(prefill, 1.2, 0.9)  # a profile 20 % fast on prompt steps, 10 % slow on decode
    assert kind_factors(biased, steps) == pytest.approx((1.2, 0.9))
    assert scaled_cv(biased, steps)["worst_total"] == pytest.approx(0.0, abs=1e-9)


def test_batch_classes_are_the_nearest_powers_of_two() -> None:
    assert [batch_class(s) for s in (1, 2, 3, 5, 6, 11, 12, 16, 23)] == [1, 2, 4, 4, 8, 8, 16, 16, 32]


def test_a_class_error_hidden_in_the_kind_total_is_reported() -> None:
    steps = made_up_steps(n=90)
    truth = np.array([st.duration_s for st in steps])
    big = np.array([batch_class(st.batch.seqs) >= 8 for st in steps])
    decode = np.array([not st.batch.prefill_tokens for st in steps])
    # decode-only steps of 8 sequences 20 % fast, the rest slow by as much as makes the decode total exact
    small_share = truth[decode & ~big].sum() / truth[decode & big].sum()
    predicted = truth * np.where(big, 0.8, 1 + 0.2 / small_share)
    errors = step_errors(predicted, steps)
    assert errors["decode_total"] == pytest.approx(0.0, abs=1e-9)
    assert errors["worst_class_total"] >= 0.2 - 1e-9


def test_the_profile_scaled_per_batch_class_recovers_a_bias_that_differs_by_batch_size() -> None:
    steps = made_up_steps(n=300, seed=5)
    truth = np.array([st.duration_s for st in steps])
    bias = np.array([{1: 1.1, 2: 0.95, 4: 1.25, 8: 0.85}[batch_class(st.batch.seqs)] for st in steps])
    biased = truth / bias
    per_kind = scaled_cv(biased, steps)
    per_class = scaled_cv(biased, steps, by_batch=True)
    # the pseudo-steps draw each class a little towards its kind's factor, so not all the way
    assert per_class["worst_class_total"] < per_kind["worst_class_total"] / 2
    factors = batch_factors(biased, steps, pseudo=0)
    assert factors[(False, 4)] == pytest.approx(1.25) and factors[(False, 8)] == pytest.approx(0.85)


def test_a_class_of_few_steps_keeps_about_its_kinds_factor() -> None:
    steps = made_up_steps(n=60)
    truth = np.array([st.duration_s for st in steps])
    kinds = kind_factors(truth, steps)
    lone = max(range(len(steps)), key=lambda i: steps[i].batch.seqs * (not steps[i].batch.prefill_tokens))
    predicted = truth.copy()
    predicted[lone] = truth[lone] / 3.0  # one step 3x slower than its prediction
    factors = batch_factors(predicted, steps, pseudo=PSEUDO_STEPS)
    key = (False, batch_class(steps[lone].batch.seqs))
    assert kinds[1] <= factors[key] < 3.0
