"""The open-loop load generator on a tiny real engine: forced lengths, monotonic token times after
arrival, arrival order, the step hook's accounting, and the inputs it refuses. No timing assertions:
only orderings and counts, which hold at any machine speed."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")

from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.errors import InputError
from infralab.real.engine import EngineSettings, RealEngine
from infralab.real.load_generator import Replay, ReplayRequest, check_replayable, prompt_ids

Workload = tuple[ReplayRequest, ...]


def test_every_request_finishes_once_with_exactly_its_forced_output_length(
        replayed: Replay, workload: Workload) -> None:
    assert [r.id for r in replayed.requests] == sorted(r.id for r in workload)
    wanted = {r.id: r for r in workload}
    for record in replayed.requests:
        assert len(record.token_times_s) == record.output_tokens == wanted[record.id].output_tokens
        assert record.prompt_tokens == wanted[record.id].prompt_tokens


def test_token_times_are_non_decreasing_and_after_arrival(replayed: Replay) -> None:
    for r in replayed.requests:
        assert r.arrival_s <= r.submitted_s <= r.first_scheduled_s <= r.first_token_s
        assert list(r.token_times_s) == sorted(r.token_times_s)
        assert r.token_times_s[-1] <= r.finish_s <= replayed.wall_s


def test_requests_are_submitted_in_arrival_order_at_scaled_times(replayed: Replay, workload: Workload) -> None:
    by_arrival = sorted(replayed.requests, key=lambda r: (r.arrival_s, r.id))
    submitted = [r.submitted_s for r in by_arrival]
    assert submitted == sorted(submitted)
    # FIFO takes waiting requests in arrival order, and this cache never refuses one.
    admitted = [r.first_scheduled_s for r in by_arrival]
    assert admitted == sorted(admitted)
    wanted = {r.id: r.arrival_s for r in workload}
    assert all(r.arrival_s == pytest.approx(wanted[r.id] / replayed.rate_scale) for r in replayed.requests)


def test_the_step_hook_sees_every_query_token_the_requests_needed(replayed: Replay) -> None:
    # A request's prompt is computed once and each output token but the last is fed back once.
    needed = sum(r.prompt_tokens + r.output_tokens - 1 for r in replayed.requests)
    batches = [step.batch for step in replayed.steps]
    assert all(not b.missing for b in batches)
    assert sum(b.q_tokens for b in batches) == needed
    assert sum(b.prefill_tokens for b in batches) == sum(r.prompt_tokens for r in replayed.requests)
    assert sum(b.new_tokens for b in batches) == sum(r.output_tokens for r in replayed.requests)


def test_steps_are_ordered_and_within_the_engine_caps(replayed: Replay, tiny_settings: EngineSettings) -> None:
    steps = replayed.steps
    assert [s.index for s in steps] == list(range(len(steps)))
    for step in steps:
        assert 0 <= step.start_s <= step.forward_start_s <= step.forward_end_s <= step.end_s
        assert 1 <= step.batch.seqs <= tiny_settings.max_requests_per_batch
        assert step.batch.seqs <= step.batch.q_tokens <= tiny_settings.max_batch_tokens
    assert all(a.end_s <= b.start_s for a, b in zip(steps, steps[1:]))
    # Request 4's prompt (61 tokens) is over the budget (48): the step that chunks it is full.
    assert max(s.batch.q_tokens for s in steps) == tiny_settings.max_batch_tokens


def test_each_token_lands_in_a_step_that_emitted_it(replayed: Replay) -> None:
    # Token stamps are taken inside update_batch, between a step's forward end and its end.
    spans = [(s.forward_end_s, s.end_s) for s in replayed.steps]
    for r in replayed.requests:
        for t in r.token_times_s:
            assert any(lo <= t <= hi for lo, hi in spans)


def test_the_fingerprint_brackets_the_replay(replayed: Replay) -> None:
    assert replayed.before.shapes == replayed.after.shapes and replayed.before.shapes
    assert all(t > 0 for t in replayed.before.forward_s + replayed.after.forward_s)


def test_a_request_longer_than_the_cache_is_refused_by_name(engine: RealEngine, workload: Workload) -> None:
    too_long = ReplayRequest(id=5, arrival_s=0.0, prompt_tokens=engine.cache_tokens, output_tokens=1)
    with pytest.raises(InputError, match=r"request 1 \(id 5\).*tokens of context"):
        check_replayable([workload[0], too_long], engine.shape.context_length, engine.cache_tokens)


def test_repeated_ids_are_refused(engine: RealEngine, workload: Workload) -> None:
    with pytest.raises(InputError, match="repeats an id"):
        check_replayable([workload[0], workload[0]], engine.shape.context_length, engine.cache_tokens)


@settings(max_examples=30, deadline=None)
@given(request_id=st.integers(0, 10**6), length=st.integers(1, 200), seed=st.integers(0, 2**32 - 1))
def test_a_prompt_depends_only_on_its_seed_id_and_length(request_id: int, length: int, seed: int) -> None:
    ids = prompt_ids(request_id, length, 1000, seed)
    assert ids == prompt_ids(request_id, length, 1000, seed)
    assert len(ids) == length and all(0 <= t < 1000 for t in ids)
    assert prompt_ids(request_id, length + 5, 1000, seed)[:length] == ids


# ------------------------------------------------------------------------------------- closed loop


def test_a_closed_loop_keeps_its_concurrency_and_measures_the_steady_window(engine: RealEngine,
                                                                            workload: Workload) -> None:
    from infralab.real.load_generator import closed_loop

    requests = [ReplayRequest(i + 1, 0.0, 8 + 4 * (i % 3), 2 + i % 3) for i in range(7)]
    with engine:
        replayed, steady = closed_loop(engine, requests, 3, seed=1, timeout_s=120, fingerprint_repeats=1)
    records = sorted(replayed.requests, key=lambda r: r.submitted_s)
    assert [r.id for r in records] == [1, 2, 3, 4, 5, 6, 7]  # submitted in order
    finishes = sorted(r.finish_s for r in records)
    for k, record in enumerate(records[3:]):  # each later request went in when the k-th one finished
        assert record.submitted_s >= finishes[k] and record.arrival_s == record.submitted_s
    in_flight = [sum(r.submitted_s <= t < r.finish_s for r in records) for t in (r.submitted_s for r in records)]
    assert max(in_flight) <= 3
    assert steady.window_s == (finishes[2], finishes[3]) and steady.completed == 1
    assert steady.rate_rps == pytest.approx(1 / (finishes[3] - finishes[2]))


def test_a_closed_loop_refuses_too_few_requests(engine: RealEngine) -> None:
    from infralab.real.load_generator import closed_loop

    with pytest.raises(ValueError, match="needs at least 7 requests, not 6"):
        closed_loop(engine, [ReplayRequest(i, 0.0, 8, 2) for i in range(6)], 3)
