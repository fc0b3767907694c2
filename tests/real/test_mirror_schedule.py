"""The simulator's mirror of the engine's scheduler (`sim/engine/hf_scheduler.py`) against the
engine itself: for random small workloads, every step's sequences (request, query tokens, past
tokens, whether it samples), in the engine's order, must equal what the real engine's own
scheduler does (`real.schedule_trace.schedule_without_forward`: the engine's `prepare_next_batch`
and `update_batch`, no forward, no clock). Arrivals are given in steps on both sides, so no timing
is involved: this is the proof that the mirror schedules as the engine does, request by request.

The tight caches (every request fits alone, not all together) exercise the safety margin, starved
requests and the engine's soft resets. The last test runs the mirror through the whole simulator
(config, cluster, SimPy instance) with 1-second steps: token times are then the engine's steps."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from infralab.real.engine import EngineSettings, RealEngine  # noqa: E402
from infralab.real.load_generator import ReplayRequest  # noqa: E402
from infralab.real.model_shape import TINY  # noqa: E402
from infralab.real.schedule_trace import schedule_without_forward  # noqa: E402
from infralab.sim.cluster import simulate  # noqa: E402
from infralab.sim.config import config_from_doc  # noqa: E402
from infralab.sim.engine.hf_scheduler import HFScheduler, schedule_in_steps  # noqa: E402
from infralab.workload.request import Request  # noqa: E402

Row = tuple[int, int, int, bool]  # request id, query tokens, past tokens, samples

ENGINES = {
    # name: (scheduler, max_batch_tokens, num_blocks, page_size, max_requests_per_batch)
    "fifo-roomy": ("fifo", 24, 64, 8, 5),
    "prefill_first-roomy": ("prefill_first", 24, 64, 8, 5),
    "fifo-tight": ("fifo", 16, 10, 8, 4),
    "prefill_first-tight": ("prefill_first", 16, 10, 8, 4),
    "fifo-one-seq": ("fifo", 7, 12, 4, 1),
}


@pytest.fixture(scope="module")
def engines() -> dict[str, RealEngine]:
    return {name: RealEngine(TINY, EngineSettings(scheduler=scheduler, max_batch_tokens=tokens, num_blocks=blocks,
                                                  page_size=page, max_requests_per_batch=requests, threads=1))
            for name, (scheduler, tokens, blocks, page, requests) in ENGINES.items()}


def mirror_schedule(engine: RealEngine, arrivals: list[tuple[int, ReplayRequest]]) -> list[list[Row]]:
    """The mirror's steps for `arrivals`, driven the way `schedule_without_forward` drives the
    engine: a request joins once `after` steps have run; an idle engine waits for the next one."""
    resolved = engine.resolved()
    policy = HFScheduler(max_num_seqs=resolved["max_requests_per_batch"], max_batched_tokens=resolved["max_batch_tokens"],
                         block_size=resolved["page_size"], capacity_blocks=resolved["num_blocks"],
                         prefill_first=resolved["scheduler"] == "PrefillFirstScheduler",
                         safety_margin=resolved["safety_margin"])
    served = [(after, Request(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens)) for after, r in arrivals]
    return [[(s.request_id, s.query_tokens, s.past_tokens, s.samples) for s in step]
            for step in schedule_in_steps(policy, served)]


def real_schedule(engine: RealEngine, arrivals: list[tuple[int, ReplayRequest]]) -> list[list[Row]]:
    return [[(s.request_id, s.query_tokens, s.past_tokens, s.samples) for s in step.sequences]
            for step in schedule_without_forward(engine, arrivals)]


def _arrivals(workload: list[tuple[int, int, int]]) -> list[tuple[int, ReplayRequest]]:
    return [(after, ReplayRequest(id=i, arrival_s=0.0, prompt_tokens=prompt, output_tokens=output))
            for i, (after, prompt, output) in enumerate(workload)]


def test_the_mirror_reproduces_the_pinned_fifo_schedule(engines: dict[str, RealEngine]) -> None:
    # The hand-checked case of tests/real/test_schedule_trace.py, on the roomy FIFO engine.
    arrivals = _arrivals([(0, 20, 3), (0, 5, 4), (2, 9, 2), (30, 3, 2)])
    engine = engines["fifo-roomy"]
    assert mirror_schedule(engine, arrivals) == real_schedule(engine, arrivals)


def test_a_full_cache_soft_resets_in_both(engines: dict[str, RealEngine]) -> None:
    # 10 blocks of 8 tokens: three long requests cannot all grow; the engine resets the newest.
    arrivals = _arrivals([(0, 30, 12), (0, 26, 12), (1, 20, 12)])
    engine = engines["fifo-tight"]
    mirrored = mirror_schedule(engine, arrivals)
    assert mirrored == real_schedule(engine, arrivals)
    computed = sum(query for step in mirrored for _, query, _, _ in step)
    assert computed > sum(p + o - 1 for p, o in ((30, 12), (26, 12), (20, 12)))  # something was recomputed


workloads = st.lists(st.tuples(st.integers(0, 10), st.integers(1, 40), st.integers(1, 8)), min_size=1, max_size=7)


@settings(max_examples=60, deadline=None)
@given(workload=workloads, name=st.sampled_from(sorted(ENGINES)))
def test_the_mirror_schedules_every_step_as_the_engine_does(
        engines: dict[str, RealEngine], workload: list[tuple[int, int, int]], name: str) -> None:
    engine = engines[name]
    _, _, blocks, page, _ = ENGINES[name]
    # Every request must fit the cache alone (else the engine itself cannot serve it).
    workload = [(after, min(prompt, blocks * page - output), output) for after, prompt, output in workload]
    arrivals = _arrivals(workload)
    assert mirror_schedule(engine, arrivals) == real_schedule(engine, arrivals)


class OneSecondSteps:
    """A cost model whose every step takes 1 s (`StepCostModel`): token times count steps."""

    def __init__(self, cache_tokens: int) -> None:
        self.cache_tokens = cache_tokens

    def step(self, work: object) -> SimpleNamespace:
        return SimpleNamespace(total_s=1.0)

    def decode_step_s(self, seqs: int, context_tokens: int) -> float:
        return 1.0

    def kv_capacity_tokens(self, gpu_memory_utilization: float, max_num_seqs: int = 0, max_batched_tokens: int = 0) -> int:
        return self.cache_tokens

    def kv_transfer_bytes(self, tokens: int) -> int:
        return 0


@settings(max_examples=20, deadline=None)
@given(workload=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 8)), min_size=1, max_size=7),
       name=st.sampled_from(sorted(ENGINES)))
def test_a_simulated_run_with_the_mirror_emits_tokens_at_the_engines_steps(
        engines: dict[str, RealEngine], workload: list[tuple[int, int]], name: str) -> None:
    # Through the whole simulator (config, cluster, SimPy instance): every request queued at 0 s,
    # every step 1 s, so a token stamped at t s came from step t - 1 of the engine's schedule.
    engine = engines[name]
    scheduler, tokens, blocks, page, requests = ENGINES[name]
    workload = [(min(prompt, blocks * page - output), output) for prompt, output in workload]
    arrivals = _arrivals([(0, prompt, output) for prompt, output in workload])
    expected: dict[int, list[float]] = {i: [] for i in range(len(workload))}
    for index, step in enumerate(real_schedule(engine, arrivals)):
        for request_id, _, _, samples in step:
            if samples:
                expected[request_id].append(float(index + 1))
    doc = {"model": "small-llama-cpu", "hardware": {"accelerator": "H100"},
           "workload": {"kind": "synthetic", "num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0},
                        "prompt": {"kind": "fixed", "value": 1}, "output": {"kind": "fixed", "value": 1}},
           "engine": {"scheduler": f"hf_{scheduler}", "max_batched_tokens": tokens, "max_num_seqs": requests,
                      "block_size": page, "prefix_cache": False}}
    cfg = config_from_doc(doc, "mirror", Path("."))
    served = [Request(i, 0.0, prompt, output) for i, (prompt, output) in enumerate(workload)]
    record = simulate(cfg, served, OneSecondSteps(blocks * page), check_invariants=True)
    assert {r.id: list(r.token_times_s) for r in record.requests} == expected
