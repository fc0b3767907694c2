"""A tiny real engine and one short replay on it, shared by the tests of a module (building and
replaying take about a second). The fixtures skip, with a reason, where transformers is not
installed; the test modules that import the engine skip the same way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

NEEDS_TRANSFORMERS = "the real engine needs transformers (the extra infralab[real])"

TINY_SETTINGS = dict(max_batch_tokens=48, num_blocks=24, page_size=32, max_requests_per_batch=6, threads=1)
"""Small enough that prompts are chunked and batches hit the token budget; large enough (24 blocks of
32 tokens) that all of the workload below fits in the cache at once (20 blocks), so no request is
ever preempted, whatever the machine's speed."""

WORKLOAD = tuple((i, 0.004 * i, 9 + (13 * i) % 61, 1 + i % 5) for i in range(12))
"""(id, arrival_s, prompt_tokens, output_tokens): a handful of requests arriving faster than the tiny
engine serves them."""


@pytest.fixture(scope="session")
def workload() -> tuple[Any, ...]:
    pytest.importorskip("transformers", reason=NEEDS_TRANSFORMERS)
    from infralab.real.load_generator import ReplayRequest

    return tuple(ReplayRequest(*fields) for fields in WORKLOAD)


@pytest.fixture(scope="session")
def tiny_settings() -> Any:
    pytest.importorskip("transformers", reason=NEEDS_TRANSFORMERS)
    from infralab.real.engine import EngineSettings

    return EngineSettings(**TINY_SETTINGS)


@pytest.fixture(scope="module")
def engine(tiny_settings: Any) -> Iterator[Any]:
    from infralab.real.engine import RealEngine
    from infralab.real.model_shape import TINY

    engine = RealEngine(TINY, tiny_settings)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def replayed(engine: Any, workload: tuple[Any, ...]) -> Any:
    from infralab.real.load_generator import replay, warm_up

    # Listed out of arrival order on purpose: the generator must sort by arrival.
    with engine:
        warm_up(engine, requests=2, prompt_tokens=24, output_tokens=3)
        return replay(engine, list(reversed(workload)), rate_scale=2.0, seed=7, timeout_s=120,
                      fingerprint_repeats=2)
