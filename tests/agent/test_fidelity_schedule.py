"""The fidelity study's schedule check (`agent/fidelity/schedule_check.py`) on hand-worked replays:
arrivals in steps from submission times, the mirror's steps for them, the comparison of shapes and
the host time between steps. No engine, no clock: the replays are made up."""

from __future__ import annotations

import math

import pytest

from infralab.agent.fidelity.schedule_check import arrival_steps, loop_gaps, schedule_vs_mirror
from infralab.real.load_generator import RequestTiming
from infralab.real.step_trace import BatchShape, StepRecord
from infralab.sim.engine.hf_scheduler import HFScheduler


def policy() -> HFScheduler:
    # FIFO, 8 query tokens a step, 4 sequences, 16 blocks of 4 tokens (the safety margin never binds).
    return HFScheduler(max_num_seqs=4, max_batched_tokens=8, block_size=4, capacity_blocks=16)


def request(rid: int, submitted: float, first_scheduled: float, prompt: int, output: int) -> RequestTiming:
    return RequestTiming(rid, submitted, submitted, prompt, output, first_scheduled, (), math.nan)


def steps(shapes: list[tuple[int, int, int, int]], starts: list[float]) -> list[StepRecord]:
    # Each step: 10 ms of preparing, 70 ms forward, 10 ms update. Shape: q, past read, seqs, sampling.
    return [StepRecord(i, t, t + 0.01, t + 0.08, t + 0.09, BatchShape(q, kv, seqs, None, None, new))
            for i, ((q, kv, seqs, new), t) in enumerate(zip(shapes, starts))]


# A (prompt 5, 2 tokens) at 0 s; B (prompt 6, 1 token) handed in at 0.15 s, during step 1: it joins
# step 2. Worked by hand: step 0 computes A's prompt (5 tokens, samples), step 1 A's decode (1 token
# after 5), step 2 B's prompt (6 tokens, samples; B is then done).
A = request(0, 0.0, 0.0, 5, 2)
B = request(1, 0.15, 0.2, 6, 1)
STARTS = [0.0, 0.1, 0.2]


def test_a_request_joins_the_first_step_after_its_submission() -> None:
    assert arrival_steps([A, B], steps([(5, 0, 1, 1)] * 3, STARTS)) == [0, 2]


def test_a_request_scheduled_by_an_earlier_step_joined_that_step() -> None:
    # Submitted a few microseconds after step 1 started, before its queue drain took it in.
    late = request(1, 0.10001, 0.10002, 6, 1)
    assert arrival_steps([A, late], steps([(5, 0, 1, 1)] * 3, STARTS)) == [0, 1]


def test_the_engines_steps_for_these_arrivals_equal_the_mirrors() -> None:
    observed = steps([(5, 0, 1, 1), (1, 5, 1, 1), (6, 0, 1, 1)], STARTS)
    assert schedule_vs_mirror(policy(), [A, B], observed) == {
        "steps": 3, "mirror_steps": 3, "differing": 0, "first_difference": None}


def test_a_different_step_is_found_where_it_happens() -> None:
    # An engine that chunked B's prompt (3 + 3 tokens) would differ from step 2 on, and run a step more.
    observed = steps([(5, 0, 1, 1), (1, 5, 1, 1), (3, 0, 1, 0), (3, 3, 1, 1)], [*STARTS, 0.3])
    result = schedule_vs_mirror(policy(), [A, B], observed)
    assert result == {"steps": 4, "mirror_steps": 3, "differing": 2, "first_difference": 2}


def test_loop_gaps_split_busy_gaps_from_wake_ups() -> None:
    # Steps end 10 ms before the next starts except after step 1, where the engine was idle until
    # B (handed in at 0.25 s) woke it: its step starts at 0.254 s.
    observed = steps([(5, 0, 1, 1), (1, 5, 1, 1), (6, 0, 1, 1)], [0.0, 0.0905, 0.254])
    late_b = request(1, 0.25, 0.254, 6, 1)
    gaps = loop_gaps([A, late_b], observed)
    assert gaps["busy_gap_s"] == pytest.approx(0.0005)
    assert gaps["wake_up_s"] == pytest.approx(0.004)


def test_loop_gaps_of_a_replay_that_never_idled_have_no_wake_up() -> None:
    observed = steps([(5, 0, 1, 1), (1, 5, 1, 1), (6, 0, 1, 1)], [0.0, 0.0905, 0.181])
    gaps = loop_gaps([A, request(1, 0.05, 0.181, 6, 1)], observed)
    assert gaps == {"busy_gap_s": pytest.approx(0.0005), "wake_up_s": None}
