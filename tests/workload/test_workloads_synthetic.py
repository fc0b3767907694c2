"""Synthetic workloads: seeded streams, arrival processes, length distributions, build_workload."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.errors import InputError
from infralab.random_streams import stream
from infralab.workload import build_workload, gamma_arrivals, lognormal_lengths, poisson_arrivals
from infralab.workload.schema import (
    EmpiricalLength,
    FixedLength,
    GammaArrivals,
    LogNormalLength,
    PoissonArrivals,
    SyntheticWorkload,
    TraceWorkload,
    UniformLength,
)


def _synthetic(n=200, arrival=None, prompt=None, output=None):
    return SyntheticWorkload(
        kind="synthetic",
        num_requests=n,
        arrival=arrival or PoissonArrivals(kind="poisson", rate=4.0),
        prompt=prompt or UniformLength(kind="uniform", low=10, high=2000),
        output=output or LogNormalLength(kind="lognormal", median=100, sigma=1.0, max=4000),
    )


# ---- random streams --------------------------------------------------------------------------------


def test_streams_are_reproducible_and_independent_by_name_and_seed():
    a = stream(7, "workload.arrivals").random(5)
    assert np.array_equal(a, stream(7, "workload.arrivals").random(5))
    assert not np.array_equal(a, stream(7, "workload.prompt").random(5))
    assert not np.array_equal(a, stream(8, "workload.arrivals").random(5))


def test_stream_rejects_negative_seed():
    with pytest.raises(ValueError):
        stream(-1, "x")


# ---- build_workload -------------------------------------------------------------------------------


def test_same_seed_same_requests_different_seed_different_requests(tmp_path):
    spec = _synthetic()
    first = build_workload(spec, tmp_path, seed=3)
    assert first == build_workload(spec, tmp_path, seed=3)
    assert first != build_workload(spec, tmp_path, seed=4)
    assert [r.id for r in first] == list(range(200))
    assert first[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(first, first[1:]))
    assert all(r.block_hashes == () for r in first)
    # plain Python numbers, so results serialise identically everywhere
    assert all(type(r.arrival_s) is float and type(r.prompt_tokens) is int for r in first)


def test_each_part_draws_from_its_own_stream(tmp_path):
    base = build_workload(_synthetic(), tmp_path, seed=1)
    other_output = build_workload(_synthetic(output=FixedLength(kind="fixed", value=9)), tmp_path, seed=1)
    assert [r.arrival_s for r in base] == [r.arrival_s for r in other_output]
    assert [r.prompt_tokens for r in base] == [r.prompt_tokens for r in other_output]
    assert {r.output_tokens for r in other_output} == {9}


def test_trace_workload_resolves_relative_path(tmp_path):
    (tmp_path / "traces").mkdir()
    rows = "arrived_at,num_prefill_tokens,num_decode_tokens\n1.0,5,6\n3.0,7,8\n"
    (tmp_path / "traces" / "t.csv").write_text(rows)
    spec = TraceWorkload(kind="trace", path="traces/t.csv", format="vidur", rate_scale=2.0)
    requests = build_workload(spec, tmp_path, seed=0)
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in requests] == [(0.0, 5, 6), (1.0, 7, 8)]


# ---- arrival processes ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_mean_rate_and_exponential_gaps(seed):
    rate, n = 12.5, 200_000
    gaps = np.diff(poisson_arrivals(rate, n, stream(seed, "test")))
    assert len(gaps) == n - 1
    assert 1.0 / gaps.mean() == pytest.approx(rate, rel=0.015)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("cv", [0.25, 1.0, 3.0])
def test_gamma_mean_and_coefficient_of_variation(cv):
    rate, n = 5.0, 200_000
    gaps = np.diff(gamma_arrivals(rate, cv, n, stream(11, "test")))
    assert gaps.mean() == pytest.approx(1.0 / rate, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.03)
    assert (gaps >= 0).all()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 50), seed=st.integers(0, 2**32), cv=st.floats(0.1, 5.0))
def test_arrivals_start_at_zero_and_never_go_backwards(n, seed, cv):
    spec = _synthetic(n=n, arrival=GammaArrivals(kind="gamma", rate=3.0, cv=cv))
    requests = build_workload(spec, ".", seed=seed)
    assert len(requests) == n and requests[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(requests, requests[1:]))
    assert all(r.prompt_tokens >= 1 and r.output_tokens >= 1 for r in requests)


# ---- length distributions -------------------------------------------------------------------------


def test_fixed_and_uniform_lengths(tmp_path):
    prompt = FixedLength(kind="fixed", value=128)
    spec = _synthetic(n=5000, prompt=prompt, output=UniformLength(kind="uniform", low=3, high=7))
    requests = build_workload(spec, tmp_path, seed=5)
    assert {r.prompt_tokens for r in requests} == {128}
    assert {r.output_tokens for r in requests} == {3, 4, 5, 6, 7}  # both ends inclusive


def test_uniform_with_low_above_high_is_an_input_error(tmp_path):
    spec = _synthetic(prompt=UniformLength(kind="uniform", low=10, high=5))
    with pytest.raises(InputError, match=r"workload\.prompt\.high"):
        build_workload(spec, tmp_path, seed=0)


def test_lognormal_median_sigma_and_clip():
    values = lognormal_lengths(800.0, 0.5, None, 100_000, stream(2, "test"))
    assert np.median(values) == pytest.approx(800, rel=0.02)
    assert np.log(values).std() == pytest.approx(0.5, rel=0.03)
    clipped = lognormal_lengths(800.0, 2.0, 1000, 10_000, stream(2, "test"))
    assert clipped.max() == 1000 and clipped.min() >= 1


def test_empirical_lengths_resample_the_trace_column(tmp_path):
    rows = [(100, 1), (200, 2), (300, 3)]
    lines = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    lines += [f"{i},{p},{o}" for i, (p, o) in enumerate(rows)]
    (tmp_path / "lengths.csv").write_text("\n".join(lines) + "\n")
    prompt = EmpiricalLength(kind="empirical", path="lengths.csv", format="vidur", column="input")
    absolute = str(tmp_path / "lengths.csv")
    output = EmpiricalLength(kind="empirical", path=absolute, format="vidur", column="output")
    requests = build_workload(_synthetic(n=3000, prompt=prompt, output=output), tmp_path, seed=9)
    prompts = [r.prompt_tokens for r in requests]
    assert set(prompts) == {100, 200, 300}
    assert {r.output_tokens for r in requests} == {1, 2, 3}
    assert np.mean(prompts) == pytest.approx(200, rel=0.03)


def test_empirical_from_missing_trace_names_the_file(tmp_path):
    prompt = EmpiricalLength(kind="empirical", path="nope.jsonl", format="mooncake", column="input")
    with pytest.raises(InputError, match="nope.jsonl: file not found"):
        build_workload(_synthetic(prompt=prompt), tmp_path, seed=0)
