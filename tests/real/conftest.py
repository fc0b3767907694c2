"""A tiny real engine and one short replay on it, shared by the tests of a module (building and
replaying take about a second). Skipped with a reason where transformers is not installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")

from infralab.real.engine import EngineSettings, RealEngine  # noqa: E402
from infralab.real.load_generator import Replay, ReplayRequest, replay, warm_up  # noqa: E402
from infralab.real.model_shape import TINY  # noqa: E402

TINY_SETTINGS = EngineSettings(max_batch_tokens=48, num_blocks=24, page_size=32, max_requests_per_batch=6, threads=1)
"""Small enough that prompts are chunked and batches hit the token budget; large enough (24 blocks of
32 tokens) that all of WORKLOAD fits in the cache at once (20 blocks), so no request is ever
preempted, whatever the machine's speed."""

WORKLOAD = tuple(ReplayRequest(id=i, arrival_s=0.004 * i, prompt_tokens=9 + (13 * i) % 61, output_tokens=1 + i % 5)
                 for i in range(12))
"""A handful of requests arriving faster than the tiny engine serves them (ids out of arrival order below)."""


@pytest.fixture(scope="session")
def workload() -> tuple[ReplayRequest, ...]:
    return WORKLOAD


@pytest.fixture(scope="session")
def tiny_settings() -> EngineSettings:
    return TINY_SETTINGS


@pytest.fixture(scope="module")
def engine() -> Iterator[RealEngine]:
    engine = RealEngine(TINY, TINY_SETTINGS)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def replayed(engine: RealEngine) -> Replay:
    # Listed out of arrival order on purpose: the generator must sort by arrival.
    requests = list(reversed(WORKLOAD))
    with engine:
        warm_up(engine, requests=2, prompt_tokens=24, output_tokens=3)
        return replay(engine, requests, rate_scale=2.0, seed=7, timeout_s=120, fingerprint_repeats=2)
