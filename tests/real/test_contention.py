"""Contention seen by a replay (real/contention.py): the rule on made-up CPU samples and steps. A
real run beside CPU hogs is tested with the other real-run tests (tests/real/test_real_run.py)."""

from __future__ import annotations

import pytest

from infralab.real.contention import (OTHER_SHARE_LIMIT, SLOW_FACTOR, CpuSample, busiest, judge, slow_steps,
                                      windows)
from infralab.real.step_trace import BatchShape, StepRecord


def samples(other: list[float], own: float = 1.0, cores: int = 2, dt: float = 1.0) -> list[CpuSample]:
    """Cumulative samples `dt` apart: in window i other processes use other[i] of the machine."""
    out, busy, own_s, total = [CpuSample(0.0, 0.0, 0.0, 0.0, 0.0)], 0.0, 0.0, 0.0
    for i, share in enumerate(other):
        total += cores * dt
        own_s += own * dt
        busy += own * dt + share * cores * dt
        out.append(CpuSample((i + 1) * dt, busy, 0.0, total, own_s))
    return out


def step(index: int, forward_s: float, q_tokens: int = 8, seqs: int = 8, prefill: int = 0) -> StepRecord:
    start = float(index)
    return StepRecord(index, start, start, start + forward_s, start + forward_s,
                      BatchShape(q_tokens, 512, seqs, int(prefill > 0), prefill, seqs))


def test_a_quiet_replay_is_not_flagged() -> None:
    steps = [step(i, 0.010) for i in range(40)]
    seen = judge(samples([0.01, 0.02, 0.0, 0.01]), steps, origin=0.0, cores=2)
    assert not seen.flagged and seen.reasons == () and seen.slow_steps == ()
    assert seen.other_share == pytest.approx(0.01) and seen.line().startswith("none seen")


def test_one_busy_window_flags_the_replay_and_says_when() -> None:
    seen = judge(samples([0.0, 0.0, 0.6, 0.0, 0.0, 0.0]), [], origin=0.0, cores=2)
    assert seen.flagged and seen.max_window_share == pytest.approx(0.6)
    assert [round(w.other_share, 6) for w in seen.windows] == [0.0, 0.0, 0.6, 0.0, 0.0, 0.0]
    assert "2.00-3.00 s" in seen.reasons[0] and "over 1 s" in seen.reasons[0] and seen.line().startswith("YES")


def test_a_blip_shorter_than_the_span_does_not_flag_it() -> None:
    """A kernel thread's 0.25 s burst at 60 % of the cores, in an otherwise quiet replay sampled
    every 0.25 s: no 1 s span reaches the limit (0.6 / 4 = 15 %)."""
    seen = judge(samples([0.0] * 8 + [0.6] + [0.0] * 8, dt=0.25), [], origin=0.0, cores=2)
    assert not seen.flagged and seen.max_window_share == pytest.approx(0.6)


def test_a_steady_share_over_the_limit_flags_it_though_no_window_does() -> None:
    seen = judge(samples([OTHER_SHARE_LIMIT + 0.02] * 5), [], origin=0.0, cores=2)
    assert len(seen.reasons) == 1 and "over the replay" in seen.reasons[0]


def test_steps_slow_for_their_shape_flag_it_without_proc() -> None:
    steps = [step(i, 0.010) for i in range(40)] + [step(40 + i, 0.010 * (SLOW_FACTOR + 1)) for i in range(3)]
    steps += [step(50 + i, 0.200, q_tokens=256, seqs=1, prefill=256) for i in range(6)]  # another class: not slow
    assert slow_steps(steps) == (40, 41, 42)
    seen = judge(samples([0.0]), steps, origin=0.0, cores=2)
    assert seen.flagged and "3 of 49 steps" in seen.reasons[0]


def test_a_class_too_small_is_not_judged() -> None:
    assert slow_steps([step(0, 0.01), step(1, 0.01), step(2, 1.0)]) == ()


def test_windows_skip_samples_where_the_machine_clock_did_not_move() -> None:
    same = [CpuSample(0.0, 0.0, 0.0, 0.0, 0.0), CpuSample(0.1, 0.0, 0.0, 0.0, 0.0), CpuSample(1.0, 1.0, 0.0, 2.0, 0.5)]
    assert [(w.start_s, w.end_s, w.other_share) for w in windows(same, origin=0.0)] == [(0.0, 1.0, 0.25)]


def test_the_busiest_other_processes_are_named() -> None:
    before = {1: ("idle", 5.0), 2: ("hog", 1.0)}
    after = {1: ("idle", 5.0), 2: ("hog", 4.0), 3: ("new", 0.5)}
    assert busiest(before, after) == ({"pid": 2, "name": "hog", "cpu_s": 3.0}, {"pid": 3, "name": "new", "cpu_s": 0.5})
