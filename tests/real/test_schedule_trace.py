"""The engine's own scheduling, run without a forward (`real.schedule_trace`): exact schedules for
small cases, as docs/fidelity.md describes them (chunking, FIFO and prefill-first orders, the safety
margin), and invariants over random workloads. These pin transformers 5.23's behaviour: the
simulator's mirror policy is to reproduce these schedules."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from infralab.real.engine import EngineSettings, RealEngine  # noqa: E402
from infralab.real.load_generator import ReplayRequest  # noqa: E402
from infralab.real.model_shape import TINY  # noqa: E402
from infralab.real.schedule_trace import ScheduledStep, schedule_without_forward  # noqa: E402


def _engine(**knobs: object) -> RealEngine:
    base = dict(max_batch_tokens=16, num_blocks=8, page_size=8, max_requests_per_batch=4, threads=1)
    return RealEngine(TINY, EngineSettings(**{**base, **knobs}))  # type: ignore[arg-type]


def _rows(steps: list[ScheduledStep]) -> list[list[tuple[int, int, int, bool]]]:
    return [[(s.request_id, s.query_tokens, s.past_tokens, s.samples) for s in step.sequences] for step in steps]


def _request(rid: int, prompt: int, output: int) -> ReplayRequest:
    return ReplayRequest(id=rid, arrival_s=0.0, prompt_tokens=prompt, output_tokens=output)


def test_fifo_chunks_prompts_to_the_budget_left_and_runs_decodes_first() -> None:
    arrivals = [(0, _request(0, 20, 3)), (0, _request(1, 5, 4)), (2, _request(2, 9, 2)), (30, _request(3, 3, 2))]
    assert _rows(schedule_without_forward(_engine(), arrivals)) == [
        [(0, 16, 0, False)],  # request 0's prompt cut to the budget; a non-final chunk samples nothing
        [(0, 4, 16, True), (1, 5, 0, True)],  # the partly computed prompt before the waiting one
        [(0, 1, 20, True), (1, 1, 5, True), (2, 9, 0, True)],  # decodes first, then the new prompt
        [(0, 1, 21, True), (1, 1, 6, True), (2, 1, 9, True)],
        [(1, 1, 7, True)],
        [(3, 3, 0, True)],  # arrived while the engine was idle: no idle steps in between
        [(3, 1, 3, True)],
    ]


def test_prefill_first_runs_a_partly_computed_prompt_before_the_decodes() -> None:
    arrivals = [(0, _request(0, 4, 4)), (1, _request(1, 20, 2))]
    assert _rows(schedule_without_forward(_engine(scheduler="prefill_first"), arrivals)) == [
        [(0, 4, 0, True)],
        [(0, 1, 4, True), (1, 15, 0, False)],  # a new prompt waits behind the decodes
        [(1, 5, 15, True), (0, 1, 5, True)],  # a partly computed one goes first
        [(0, 1, 6, True), (1, 1, 20, True)],
    ]


@pytest.mark.parametrize(("margin", "admitted_at"), [(None, 2), (0.0, 1)])
def test_under_the_safety_margin_no_new_prompt_joins_the_decodes(margin: float | None, admitted_at: int) -> None:
    # Request 0 holds 9 of the 10 blocks: 10 % free is under FIFO's default margin of 15 %. Request 1
    # needs one block, which is free, but waits until request 0 finishes, unless the margin is 0.
    engine = _engine(max_batch_tokens=128, num_blocks=10, safety_margin=margin)
    steps = schedule_without_forward(engine, [(0, _request(0, 70, 2)), (1, _request(1, 4, 2))])
    first = min(step.index for step in steps if any(s.request_id == 1 for s in step.sequences))
    assert first == admitted_at


@pytest.fixture(scope="module")
def roomy_engines() -> dict[str, RealEngine]:
    # Every random workload below fits in the cache at once: no request is ever preempted.
    return {name: _engine(scheduler=name, max_batch_tokens=24, num_blocks=64, page_size=8, max_requests_per_batch=5)
            for name in ("fifo", "prefill_first")}


workloads = st.lists(st.tuples(st.integers(0, 12), st.integers(1, 40), st.integers(1, 6)), min_size=1, max_size=8)


@settings(max_examples=15, deadline=None)
@given(workload=workloads, scheduler=st.sampled_from(["fifo", "prefill_first"]))
def test_any_schedule_serves_every_token_once_within_the_budgets(
        roomy_engines: dict[str, RealEngine], workload: list[tuple[int, int, int]], scheduler: str) -> None:
    arrivals = [(after, _request(i, prompt, output)) for i, (after, prompt, output) in enumerate(workload)]
    steps = schedule_without_forward(roomy_engines[scheduler], arrivals)
    computed = {i: 0 for i in range(len(workload))}
    samples = {i: 0 for i in range(len(workload))}
    for step in steps:
        assert 1 <= len(step.sequences) <= 5 and step.q_tokens <= 24
        assert len({s.request_id for s in step.sequences}) == len(step.sequences)
        for seq in step.sequences:
            assert seq.past_tokens == computed[seq.request_id]  # a request continues where it stopped
            computed[seq.request_id] += seq.query_tokens
            samples[seq.request_id] += seq.samples
    for i, (_, prompt, output) in enumerate(workload):
        assert samples[i] == output and computed[i] == prompt + output - 1


def test_the_engine_really_runs_the_schedule_traced_without_forward() -> None:
    # Queued before the loop starts, the requests all reach the first step's scheduler: then the real
    # run's steps must be exactly the forward-less schedule's, whatever the machine's speed.
    requests = [_request(0, 20, 3), _request(1, 5, 4), _request(2, 9, 2), _request(3, 30, 3)]
    engine = _engine(num_blocks=16)
    for request in requests:
        engine.submit(str(request.id), [1] * request.prompt_tokens, request.output_tokens)
    with engine:
        done = 0
        while done < len(requests):
            done += engine.next_result(timeout_s=60) is not None
    real = [(s.batch.q_tokens, s.batch.kv_tokens_read, s.batch.seqs, s.batch.new_tokens)
            for s in engine.trace.steps_since(0.0)]
    traced = schedule_without_forward(engine, [(0, r) for r in requests])
    assert real == [(step.q_tokens, sum(s.past_tokens for s in step.sequences), len(step.sequences),
                     sum(s.samples for s in step.sequences)) for step in traced]
