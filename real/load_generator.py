"""Open-loop replay of a list of requests on the real engine, in real time.

Each request is submitted at its arrival time divided by `rate_scale` (the simulator's trace
option of that name: > 1 compresses inter-arrival times, more load), whether or not earlier
requests have finished, with a prompt of its length (token ids from a seeded stream per request,
so a prompt does not depend on the order of the others) and a forced output length. The engine
stamps every token as it appends it; the replay returns, per request, its arrival, its first
scheduling, every token's time and its finish, plus every engine step, the step-speed
fingerprint before and after, and the contention seen meanwhile (`real.contention`). All times
are seconds from the replay's start on the monotonic clock the engine stamps with
(`time.perf_counter`).

Latencies count from the intended arrival (`arrival_s`), not from when the generator managed to
submit (`submitted_s`): a late submission is the generator's delay, and the record shows it.

`closed_loop` drives the engine the other way, for capacity: a fixed number of requests in flight,
a new one submitted each time one finishes, recorded the same way (arrival = submission), with the
steady-state completion rate (`SteadyState`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from infralab.errors import InputError
from infralab.real.contention import Contention, CpuSampler, busiest, judge, machine_cores
from infralab.real.engine import RealEngine
from infralab.real.fingerprint import Fingerprint, fingerprint
from infralab.real.step_trace import StepRecord

WARMUP_SEED = 2**31 - 1
"""The prompt stream of the warm-up requests (any fixed seed; their tokens never matter)."""

RESULT_POLL_S = 0.5
"""How long one wait for a finished request lasts before the deadline is checked again (s)."""


class SoftResetError(RuntimeError):
    """The engine preempted a request for KV space (a soft reset), which drops the token times taken
    before it: the replay has no honest record of that request."""


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """One request to replay: arrival (s from the workload's start), prompt and output (tokens).
    The same fields as the simulator's `Request`, so a workload for one replays on the other."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """What happened to one request, seconds from the replay's start.

    `arrival_s`: intended arrival (workload time / rate_scale); `submitted_s`: when it was handed
    to the engine; `first_scheduled_s`: when the engine's scheduler first took it into a step;
    `token_times_s`: when each output token was appended (len == output_tokens); `finish_s`: when
    the request was marked finished (just after its last token).
    """

    id: int
    arrival_s: float
    submitted_s: float
    prompt_tokens: int
    output_tokens: int
    first_scheduled_s: float
    token_times_s: tuple[float, ...]
    finish_s: float

    @property
    def first_token_s(self) -> float:
        return self.token_times_s[0]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "arrival_s": self.arrival_s, "submitted_s": self.submitted_s,
                "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "first_scheduled_s": self.first_scheduled_s, "token_times_s": list(self.token_times_s),
                "finish_s": self.finish_s}


@dataclass(frozen=True, slots=True)
class Replay:
    """A replay's record: requests in id order, engine steps in order, the fingerprints around it."""

    requests: tuple[RequestTiming, ...]
    steps: tuple[StepRecord, ...]
    before: Fingerprint
    after: Fingerprint
    rate_scale: float
    wall_s: float  # replay start to the last request's finish
    contention: Contention | None = None  # other work on the machine meanwhile (real/contention.py)

    @property
    def max_submit_lag_s(self) -> float:
        """The latest the generator submitted any request past its intended arrival (s)."""
        return max((r.submitted_s - r.arrival_s for r in self.requests), default=0.0)

    def as_dict(self) -> dict[str, Any]:
        return {"rate_scale": self.rate_scale, "wall_s": self.wall_s, "max_submit_lag_s": self.max_submit_lag_s,
                "fingerprint_before": self.before.as_dict(), "fingerprint_after": self.after.as_dict(),
                "contention": None if self.contention is None else self.contention.as_dict(),
                "requests": [r.as_dict() for r in self.requests], "steps": [s.as_dict() for s in self.steps]}


def prompt_ids(request_id: int, length: int, vocab_size: int, seed: int) -> list[int]:
    """The prompt of one request: `length` token ids drawn from the stream (seed, request id)."""
    return np.random.default_rng([seed, request_id]).integers(0, vocab_size, size=length).tolist()


def check_replayable(requests: Sequence[ReplayRequest], context_length: int, cache_tokens: int,
                     where: str = "workload") -> None:
    """InputError naming the first request an engine cannot replay: prompt + output over the
    model's `context_length` or the engine's KV cache (`cache_tokens`; a request that cannot fit
    alone would be soft reset for ever), a repeated id, a bad arrival or an empty prompt or output."""
    seen: set[int] = set()
    for index, request in enumerate(requests):
        at = f"{where}: request {index} (id {request.id})"
        if request.id in seen:
            raise InputError(at, "repeats an id", "unique request ids")
        seen.add(request.id)
        if not (math.isfinite(request.arrival_s) and request.arrival_s >= 0):
            raise InputError(at, f"arrival_s is {request.arrival_s!r}", "a finite number >= 0")
        if request.prompt_tokens < 1 or request.output_tokens < 1:
            raise InputError(at, f"{request.prompt_tokens} prompt and {request.output_tokens} output tokens",
                             "at least 1 of each")
        tokens = request.prompt_tokens + request.output_tokens
        if tokens > min(context_length, cache_tokens):
            raise InputError(at, f"needs {tokens} tokens of context ({request.prompt_tokens} prompt + "
                             f"{request.output_tokens} output)",
                             f"at most {min(context_length, cache_tokens)} (the model's context {context_length} "
                             f"and the engine's KV cache {cache_tokens} tokens)")


def warm_up(engine: RealEngine, requests: int = 4, prompt_tokens: int = 48, output_tokens: int = 8,
            timeout_s: float = 120.0) -> None:
    """Run a few requests to completion (untimed): the first steps of a fresh engine are slow."""
    prompt_tokens = min(prompt_tokens, engine.cache_tokens // (2 * requests) - output_tokens)
    for i in range(requests):
        engine.submit(f"warmup-{i}", prompt_ids(i, prompt_tokens, engine.shape.vocab_size, WARMUP_SEED), output_tokens)
    _collect(engine, {f"warmup-{i}" for i in range(requests)}, time.perf_counter() + timeout_s)


def replay(engine: RealEngine, requests: Sequence[ReplayRequest], *, rate_scale: float = 1.0, seed: int = 0,
           timeout_s: float = 600.0, fingerprint_repeats: int = 9) -> Replay:
    """Replay `requests` open-loop on the running `engine` (warmed up by the caller) and record them.

    `timeout_s` bounds the whole replay (RuntimeError past it, or when the engine fails)."""
    if not (rate_scale > 0 and math.isfinite(rate_scale)):
        raise InputError("rate_scale", f"bad value {rate_scale!r}", "a positive number")
    check_replayable(requests, engine.shape.context_length, engine.cache_tokens)
    order = sorted(requests, key=lambda r: (r.arrival_s, r.id))
    prompts = {r.id: prompt_ids(r.id, r.prompt_tokens, engine.shape.vocab_size, seed) for r in order}
    with CpuSampler() as sampler:  # before, during and after: contention is judged on all of it
        before = fingerprint(engine, fingerprint_repeats)

        origin = time.perf_counter()
        deadline = origin + timeout_s
        submitted: dict[int, float] = {}
        for request in order:
            due = request.arrival_s / rate_scale  # relative to origin, compared as such: never submitted early
            while (wait := due - (time.perf_counter() - origin)) > 0:
                time.sleep(wait)
            submitted[request.id] = time.perf_counter() - origin
            engine.submit(str(request.id), prompts[request.id], request.output_tokens)
        outputs = _collect(engine, {str(r.id) for r in order}, deadline)

        after = fingerprint(engine, fingerprint_repeats)
    timings = tuple(_timing(request, rate_scale, submitted[request.id], outputs[str(request.id)], origin)
                    for request in sorted(requests, key=lambda r: r.id))
    steps = tuple(engine.trace.steps_since(origin))
    wall = max((t.finish_s for t in timings), default=0.0)
    contention = judge(sampler.samples, steps, origin, machine_cores(),
                       busiest(sampler.processes_before, sampler.processes_after))
    return Replay(timings, steps, before, after, rate_scale, wall, contention)


def _collect(engine: RealEngine, ids: set[str], deadline: float,
             on_result: Callable[[], None] | None = None) -> dict[str, Any]:
    """The engine's output for each of `ids` (RuntimeError on a failed request or past `deadline`);
    `on_result` is called after each one arrives (a closed loop submits the next request there)."""
    outputs: dict[str, Any] = {}
    while len(outputs) < len(ids):
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the engine finished {len(outputs)} of {len(ids)} requests before the deadline")
        output = engine.next_result(timeout_s=RESULT_POLL_S)
        if output is None or output.request_id not in ids:
            continue
        if output.error is not None:
            raise RuntimeError(f"the engine failed request {output.request_id}: {output.error}")
        outputs[output.request_id] = output
        if on_result is not None:
            on_result()
    return outputs


@dataclass(frozen=True, slots=True)
class SteadyState:
    """A closed-loop run's throughput while the engine held `concurrency` requests: the completions
    after the first `concurrency` (the first wave turned over) up to the one that triggered the last
    submission (after it the engine drains), over the time between them. Seconds, req/s."""

    concurrency: int
    requests: int
    window_s: tuple[float, float]
    completed: int

    @property
    def rate_rps(self) -> float:
        return self.completed / (self.window_s[1] - self.window_s[0])

    def as_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "requests": self.requests, "window_s": list(self.window_s),
                "completed": self.completed, "rate_rps": self.rate_rps}


def closed_loop(engine: RealEngine, requests: Sequence[ReplayRequest], concurrency: int, *, seed: int = 0,
                timeout_s: float = 600.0, fingerprint_repeats: int = 9) -> tuple[Replay, SteadyState]:
    """Keep `concurrency` of `requests` in the running `engine`: the first `concurrency` submitted at
    0 s, the next one each time one finishes, in order, until all are submitted (their `arrival_s`
    is ignored: a request arrives when it is submitted). Recorded as `replay` records, with the
    steady-state rate (`SteadyState`). Needs at least 2 x `concurrency` + 1 requests, so that the
    window holds completions of requests submitted into a full engine."""
    order = list(requests)
    if not 1 <= concurrency or len(order) < 2 * concurrency + 1:
        raise ValueError(f"a closed loop of concurrency {concurrency} needs at least {2 * concurrency + 1} "
                         f"requests, not {len(order)}")
    check_replayable(order, engine.shape.context_length, engine.cache_tokens)
    prompts = {r.id: prompt_ids(r.id, r.prompt_tokens, engine.shape.vocab_size, seed) for r in order}
    waiting = iter(order)
    submitted: dict[int, float] = {}
    with CpuSampler() as sampler:
        before = fingerprint(engine, fingerprint_repeats)
        origin = time.perf_counter()

        def submit_next() -> None:
            request = next(waiting, None)
            if request is not None:
                submitted[request.id] = time.perf_counter() - origin
                engine.submit(str(request.id), prompts[request.id], request.output_tokens)

        for _ in range(concurrency):
            submit_next()
        outputs = _collect(engine, {str(r.id) for r in order}, origin + timeout_s, submit_next)
        after = fingerprint(engine, fingerprint_repeats)
    timings = tuple(_timing(dataclasses.replace(r, arrival_s=submitted[r.id]), 1.0, submitted[r.id],
                            outputs[str(r.id)], origin) for r in sorted(order, key=lambda r: r.id))
    steps = tuple(engine.trace.steps_since(origin))
    finishes = sorted(t.finish_s for t in timings)
    last_submission = len(order) - concurrency  # the completion that submitted the last request (1-based)
    window = (finishes[concurrency - 1], finishes[last_submission - 1])
    completed = sum(window[0] < f <= window[1] for f in finishes)
    if window[1] <= window[0]:
        raise RuntimeError(f"the closed loop's steady window is empty ({window}): more requests")
    contention = judge(sampler.samples, steps, origin, machine_cores(),
                       busiest(sampler.processes_before, sampler.processes_after))
    replayed = Replay(timings, steps, before, after, 1.0, finishes[-1], contention)
    return replayed, SteadyState(concurrency, len(order), window, completed)


def _timing(request: ReplayRequest, rate_scale: float, submitted_s: float, output: Any, origin: float) -> RequestTiming:
    stamps = output.timestamps or []
    if len(output.generated_tokens) != request.output_tokens or len(stamps) != request.output_tokens:
        # Fewer stamps than tokens: the engine soft-reset the request (preempted it for KV space and
        # requeued it as a new prompt), which drops the stamps taken before; they are not invented here.
        raise SoftResetError(f"request {request.id} produced {len(output.generated_tokens)} tokens with "
                           f"{len(stamps)} timestamps, not its forced {request.output_tokens} (a request the "
                           "engine preempts loses its earlier token times: give the engine more KV blocks)")
    return RequestTiming(
        id=request.id, arrival_s=request.arrival_s / rate_scale, submitted_s=submitted_s,
        prompt_tokens=request.prompt_tokens, output_tokens=request.output_tokens,
        first_scheduled_s=output.lifespan[0] - origin, token_times_s=tuple(t - origin for t in stamps),
        finish_s=output.lifespan[1] - origin)
