"""The real engine as configured: the settings its scheduler really uses (the facts docs/fidelity.md
states for the simulator's mirror), seeded weights, and the other scheduler serving a replay."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")

import torch  # noqa: E402

from infralab.real.engine import EngineSettings, RealEngine, build_model  # noqa: E402
from infralab.real.load_generator import ReplayRequest, replay  # noqa: E402
from infralab.real.model_shape import TINY  # noqa: E402


def test_fifo_resolves_as_the_specification_says() -> None:
    engine = RealEngine(TINY, EngineSettings(max_batch_tokens=16, max_requests_per_batch=64, num_blocks=12,
                                             page_size=16, threads=1))
    facts = engine.resolved()
    assert facts["scheduler"] == "FIFOScheduler" and facts["safety_margin"] == 0.15
    assert facts["max_requests_per_batch"] == 16  # the request cap is capped at the token budget
    assert facts["cache_tokens"] == facts["max_tokens_read"] == 12 * 16
    assert facts["decode_fast_path"] is False and facts["async_batching"] is False
    assert facts["cuda_graphs"] == (False, False) and facts["attention"] == "sdpa"


def test_prefill_first_has_no_safety_margin_by_default() -> None:
    engine = RealEngine(TINY, EngineSettings(scheduler="prefill_first", max_batch_tokens=16, num_blocks=12,
                                             page_size=16, threads=1))
    assert engine.resolved()["scheduler"] == "PrefillFirstScheduler"
    assert engine.resolved()["safety_margin"] == 0.0


def test_weights_follow_the_seed_and_leave_torch_global_rng_alone() -> None:
    state = torch.random.get_rng_state()
    first, again = build_model(TINY, EngineSettings(seed=3)), build_model(TINY, EngineSettings(seed=3))
    other = build_model(TINY, EngineSettings(seed=4))
    assert torch.equal(torch.random.get_rng_state(), state)
    weight = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(first.state_dict()[weight], again.state_dict()[weight])
    assert not torch.equal(first.state_dict()[weight], other.state_dict()[weight])


def test_the_prefill_first_scheduler_serves_forced_lengths_too() -> None:
    # Prompts longer than the budget, so that chunks and decodes compete for steps.
    requests = [ReplayRequest(i, 0.002 * i, 20 + 9 * i, 2 + i) for i in range(4)]
    engine = RealEngine(TINY, EngineSettings(scheduler="prefill_first", max_batch_tokens=24, num_blocks=16,
                                             page_size=16, threads=1))
    with engine:
        result = replay(engine, requests, fingerprint_repeats=1, timeout_s=120)
    assert [len(r.token_times_s) for r in result.requests] == [2, 3, 4, 5]
    assert sum(s.batch.q_tokens for s in result.steps) == sum(r.prompt_tokens + r.output_tokens - 1 for r in requests)
