"""The engine's schedule without its forward: which sequences, with how many tokens, in every step.

Runs the batch processor's own `prepare_next_batch()` and `update_batch()` (queue draining,
scheduler, cache allocation, batch building, token bookkeeping, finishing, offloading when the
cache is full) one step after another in the caller's thread, with no model forward in between:
every "sampled" token is token 0, which is no EOS here, so every request still ends at its forced
length. No clock is involved, so the result depends only on the requests, the order they arrive in
between steps, and the engine's settings: an executable specification of the engine's scheduling
that a simulator policy can be compared with exactly (docs/fidelity.md).

Arrivals are given in steps: `(after_steps, request)` puts the request in the engine's queue once
`after_steps` steps have run. When nothing is schedulable the engine waits (no step runs) until
the next arrival.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformers.generation.continuous_batching.requests import RequestState

from infralab.real.engine import NO_EOS, RealEngine
from infralab.real.load_generator import ReplayRequest


@dataclass(frozen=True, slots=True)
class ScheduledSequence:
    """One sequence of a step: its request, query tokens, past tokens read, whether it samples."""

    request_id: int
    query_tokens: int
    past_tokens: int
    samples: bool


@dataclass(frozen=True, slots=True)
class ScheduledStep:
    """One step, its sequences in the order the scheduler chose them."""

    index: int
    sequences: tuple[ScheduledSequence, ...]

    @property
    def q_tokens(self) -> int:
        return sum(s.query_tokens for s in self.sequences)


def schedule_without_forward(engine: RealEngine, arrivals: Sequence[tuple[int, ReplayRequest]],
                             max_steps: int = 100_000) -> list[ScheduledStep]:
    """Every step the engine schedules for `arrivals` (see the module doc); its loop must not be
    running. RuntimeError if the requests are not all finished within `max_steps` steps."""
    if engine.manager.is_running():
        raise RuntimeError("schedule_without_forward needs the engine's loop stopped")
    processor = engine.processor
    cls = type(processor)  # the class's methods: the step hooks (which time real steps) stay out
    cls.reset(processor)
    pending = sorted(arrivals, key=lambda pair: (pair[0], pair[1].arrival_s, pair[1].id))
    steps: list[ScheduledStep] = []
    finished: set[int] = set()
    clock = 0  # steps run, plus the steps an idle engine skipped while waiting for an arrival
    while (pending or processor.has_pending_requests()) and len(steps) < max_steps:
        if pending and not processor.has_pending_requests():
            clock = max(clock, pending[0][0])  # idle: nothing runs until the next arrival
        while pending and pending[0][0] <= clock:
            _enqueue(processor, pending.pop(0)[1])
        if not cls.prepare_next_batch(processor):
            raise RuntimeError("the engine scheduled nothing while requests were waiting")
        steps.append(ScheduledStep(len(steps), tuple(
            ScheduledSequence(int(f.state.request_id), f.query_length, f.state.position_offset - f.query_length,
                              bool(f.has_new_token))
            for f in processor.inputs_and_outputs.requests_in_batch)))
        cls.update_batch(processor)
        clock += 1
        finished |= _drain_finished(engine)
    if pending or processor.has_pending_requests():
        raise RuntimeError(f"requests still unfinished after {max_steps} steps")
    if finished != {request.id for _, request in arrivals}:
        raise RuntimeError(f"the engine reported {len(finished)} of {len(arrivals)} requests finished")
    return steps


def _enqueue(processor: object, request: ReplayRequest) -> None:
    # What `ContinuousBatchingManager.add_request` queues, built here so that no thread is involved.
    state = RequestState(request_id=str(request.id), initial_tokens=[1] * request.prompt_tokens,
                         max_new_tokens=request.output_tokens, eos_token_id=NO_EOS)
    processor.input_queue.put(state)  # type: ignore[attr-defined]


def _drain_finished(engine: RealEngine) -> set[int]:
    done = set()
    queue = engine.manager.output_router.output_queue
    while not queue.empty():
        done.add(int(queue.get_nowait().request_id))
    return done
