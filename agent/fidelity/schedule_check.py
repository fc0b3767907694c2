"""A real replay's schedule against the mirror's, step by step, with no clock involved.

The replay records every step's shape (`infralab.real.step_trace`) and when each request was handed
to the engine. The engine takes its input queue at the start of each step (`prepare_next_batch`), so
a request joins the first step that starts after its submission: that gives its arrival in steps.
The mirror (`infralab.sim.engine.hf_scheduler.schedule_in_steps`) is then driven with the same
arrivals in steps, and each step's shape (query tokens, past tokens read, sequences, sequences that
sample) is compared with the engine's. Equal shapes in every step say that a latency error of the
study comes from time (step costs, host time, the machine), not from what the mirror schedules.

The same replay gives the host time the mirror has no step for: the gap between one step's end and
the next one's start while the engine is busy (the loop's own overhead) and, after an idle spell,
the time from a submission to the step that takes it (the loop's wake-up). Units: seconds.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from infralab.real.load_generator import RequestTiming
from infralab.real.step_trace import StepRecord
from infralab.agent.fidelity.sim_side import MirroredSequence, schedule_in_steps
from infralab.workload.request import Request

SHAPE_FIELDS = ("q_tokens", "kv_tokens_read", "seqs", "new_tokens")


def arrival_steps(requests: Sequence[RequestTiming], steps: Sequence[StepRecord]) -> list[int]:
    """Per request, the index of the step whose queue drain took it: the first step that started at
    or after its submission, or the step that first scheduled it if that is earlier (a submission
    in the microseconds between a step's start and its queue drain joins that step)."""
    starts = [step.start_s for step in steps]
    return [min(bisect.bisect_left(starts, r.submitted_s), bisect.bisect_right(starts, r.first_scheduled_s) - 1)
            if r.first_scheduled_s >= starts[0] else bisect.bisect_left(starts, r.submitted_s)
            for r in requests] if steps else [0] * len(requests)


def mirror_shapes(policy: Any, requests: Sequence[RequestTiming], after: Sequence[int]) -> list[tuple[int, ...]]:
    """The mirror's step shapes (SHAPE_FIELDS) for `requests` joining after `after` steps."""
    served = [(k, Request(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens)) for k, r in zip(after, requests)]
    return [_shape(step) for step in schedule_in_steps(policy, served)]


def schedule_vs_mirror(policy: Any, requests: Sequence[RequestTiming],
                       steps: Sequence[StepRecord]) -> dict[str, Any]:
    """{"steps", "mirror_steps", "differing" (steps whose shapes differ, compared in order),
    "first_difference" (index or None)} for a replay's `steps` and a fresh `policy` with the
    engine's settings. A step whose shape was not observed counts as differing."""
    mirrored = mirror_shapes(policy, requests, arrival_steps(requests, steps))
    real = [tuple(getattr(step.batch, name) for name in SHAPE_FIELDS) for step in steps]
    differing = [i for i in range(max(len(real), len(mirrored)))
                 if i >= len(real) or i >= len(mirrored) or real[i] != mirrored[i]]
    return {"steps": len(real), "mirror_steps": len(mirrored), "differing": len(differing),
            "first_difference": differing[0] if differing else None}


def loop_gaps(requests: Sequence[RequestTiming], steps: Sequence[StepRecord],
              idle_s: float = 0.002) -> dict[str, float | None]:
    """Host time between the replay's steps: {"busy_gap_s": mean gap (end -> next start) under
    `idle_s`, the loop's overhead between steps; "wake_up_s": mean time from the first submission
    in a longer gap to the step that follows it}; None where there was no such gap (JSON has no nan)."""
    gaps = [(steps[i].end_s, steps[i + 1].start_s) for i in range(len(steps) - 1)]
    busy = [start - end for end, start in gaps if start - end < idle_s]
    wakes = []
    for end, start in gaps:
        if start - end >= idle_s:
            submitted = [r.submitted_s for r in requests if end <= r.submitted_s <= start]
            if submitted:
                wakes.append(start - min(submitted))
    return {"busy_gap_s": sum(busy) / len(busy) if busy else None,
            "wake_up_s": sum(wakes) / len(wakes) if wakes else None}


def _shape(step: tuple[MirroredSequence, ...]) -> tuple[int, ...]:
    return (sum(s.query_tokens for s in step), sum(s.past_tokens for s in step), len(step),
            sum(s.samples for s in step))
