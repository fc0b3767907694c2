"""One instance serving one request at a time is a single-server queue: its mean wait must match
Pollaczek-Khinchine, Wq = lambda * E[S^2] / (2 * (1 - rho)), rho = lambda * E[S].

Setup: max_num_seqs = 1, one output token (the request leaves at the end of its prefill step), no
prefix cache, prompts within one step's token budget, Poisson arrivals. The service time of a prompt
of p tokens is then exactly cost.step(StepWork.prefill(p)).total_s of the real CostModel, and the wait
is first_scheduled_s - arrival_s. E[S] and E[S^2] are the exact moments of the prompt distribution
(every possible prompt weighted by its probability), not sample moments, so the comparison also
checks that the sampled workload behaves like its distribution.

Load rho = 0.5, 100,000 requests per run. Tolerance: the seeds are fixed, so the numbers are too;
5 % is about 3 standard deviations of the relative error of the mean wait for runs of this length
(measured over 5 + 6 independent seeds at rho 0.5 and 0.6: 1.3-1.6 % for M/D/1, 0.8-2.9 % for M/G/1;
the wait's strong autocorrelation is why so many requests are needed).
"""

from __future__ import annotations

import numpy as np
import pytest
from support.sim_fakes import sim_config

from infralab.random_streams import stream
from infralab.sim.cluster import simulate
from infralab.sim.config import CostConfig, EngineConfig
from infralab.sim.cost import CostModel, StepWork
from infralab.sim.specs import load_accelerator, load_model
from infralab.workload.request import Request

COST = CostModel(load_model("llama-3-8b"), load_accelerator("H100"), CostConfig())
CONFIG = sim_config(engine=EngineConfig(max_num_seqs=1, max_batched_tokens=4096, prefix_cache=False))
N = 100_000


def service_s(prompt: int) -> float:
    return COST.step(StepWork.prefill(prompt)).total_s


def mean_wait(prompts: np.ndarray, rate: float, seed: int) -> float:
    gaps = stream(seed, "test.arrivals").exponential(1.0 / rate, size=len(prompts))
    arrivals = np.cumsum(gaps) - gaps[0]
    requests = [Request(i, float(arrivals[i]), int(prompts[i]), 1) for i in range(len(prompts))]
    record = simulate(CONFIG, requests, COST)
    waits = [r.first_scheduled_s - r.arrival_s for r in record.requests]
    assert min(waits) > -1e-9
    return float(np.mean(waits))


def pollaczek_khinchine(rate: float, es: float, es2: float) -> float:
    rho = rate * es
    return rate * es2 / (2 * (1 - rho))


def test_md1_mean_wait_matches_pollaczek_khinchine():
    prompt = 1024
    s = service_s(prompt)
    rate = 0.5 / s
    expected = pollaczek_khinchine(rate, s, s * s)  # = rho * S / (2 (1 - rho))
    measured = mean_wait(np.full(N, prompt), rate, seed=1)
    assert measured == pytest.approx(expected, rel=0.05)


def test_mg1_mean_wait_matches_pollaczek_khinchine():
    low, high = 64, 4096  # uniform prompt lengths: service times spread over ~30x
    support = np.arange(low, high + 1)
    services = np.array([service_s(int(p)) for p in support])
    es, es2 = services.mean(), (services**2).mean()
    rate = 0.5 / es
    expected = pollaczek_khinchine(rate, es, es2)
    prompts = stream(2, "test.prompts").integers(low, high + 1, size=N)
    measured = mean_wait(prompts, rate, seed=2)
    assert measured == pytest.approx(expected, rel=0.05)
    # The variable service must wait longer than a deterministic one of the same mean.
    assert expected > pollaczek_khinchine(rate, es, es * es) * 1.1
