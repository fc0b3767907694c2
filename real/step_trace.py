"""Every step the real engine runs, observed from inside its own loop.

transformers' `ContinuousBatchingManager` runs one loop in a background thread; each turn calls its
batch processor's `prepare_next_batch()` (take new requests, schedule, build the batch tensors),
then `_generation_step(model)` (forward, logits, sampling) and `update_batch()` (append the sampled
tokens, finish requests). `install_step_hooks` wraps those three methods on one processor instance
(nothing global is patched) and records, per step that ran, its four times and the batch's shape
read from the batch the processor built. A turn that found nothing to run is not a step and is not
recorded. A quantity the processor does not expose is recorded as missing (None, and its name in
`missing`), never guessed.

Times are `time.perf_counter()` values (CLOCK_MONOTONIC on Linux), the clock the engine stamps its
own token times with; `StepTrace.steps_since(origin)` turns them into seconds from `origin`.

Each step also times a fixed piece of pure Python (`speed_probe`, PROBE_ITERATIONS iterations,
about 10 us) in the engine's own thread right before its forward: the machine's speed at that
moment. Each vCPU of the VMs these runs were made on runs at one of two speeds, 1.9x apart for pure
Python, in spells of 0.1-3 s (benchmarks/vcpu_speed.py; docs/fidelity.md, "The machine's two
speeds"), and a step in a slow spell takes longer; the probe says which steps ran in one. Its time
is part of the step's host time (between `start_s` and `forward_start_s`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any

BATCH_FIELDS = ("q_tokens", "kv_tokens_read", "seqs", "prefill_seqs", "prefill_tokens", "new_tokens")
PROBE_ITERATIONS = 200  # about 10 us of Python on a fast spell here: under 0.2 % of a step


def speed_probe() -> float:
    """Seconds a fixed piece of pure Python takes now (the machine's speed at this moment)."""
    start = perf_counter()
    total = 0
    for i in range(PROBE_ITERATIONS):
        total += i * i
    return perf_counter() - start


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What one step computed. Token counts are tokens; None = the processor did not expose it.

    `q_tokens`: query tokens in the forward (prompt chunks + one per decoding sequence).
    `kv_tokens_read`: tokens already in the KV cache that the step read (sum of the sequences' past
    lengths; the scheduler's `cache_budget` counts the same). `seqs`: sequences in the batch.
    `prefill_seqs`/`prefill_tokens`: the sequences whose query is prompt (a chunk or the rest of
    it) and their query tokens. `new_tokens`: sequences that sample an output token this step.
    """

    q_tokens: int | None
    kv_tokens_read: int | None
    seqs: int | None
    prefill_seqs: int | None
    prefill_tokens: int | None
    new_tokens: int | None

    @property
    def kv_tokens(self) -> int | None:
        """Keys the step attended over (past + query): the profile table's `kv_tokens`."""
        return None if self.kv_tokens_read is None or self.q_tokens is None else self.kv_tokens_read + self.q_tokens

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(name for name in BATCH_FIELDS if getattr(self, name) is None)


UNOBSERVED = BatchShape(None, None, None, None, None, None)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One engine step (seconds on the recorder's clock; see `StepTrace.steps_since`).

    start_s -> forward_start_s: scheduling and building the batch (host);
    forward_start_s -> forward_end_s: `_generation_step` (model forward, logits, sampling);
    forward_end_s -> end_s: `update_batch` (host: tokens appended, requests finished, outputs sent).
    """

    index: int
    start_s: float
    forward_start_s: float
    forward_end_s: float
    end_s: float
    batch: BatchShape
    probe_s: float | None = None  # `speed_probe` right before the forward; None: not timed (older records)

    @property
    def forward_s(self) -> float:
        return self.forward_end_s - self.forward_start_s

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def host_s(self) -> float:
        """Time of the step outside the forward (scheduling, batch building, update)."""
        return self.duration_s - self.forward_s

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> StepRecord:
        """The record `as_dict` wrote (a replay.json's step)."""
        probe = row.get("probe_s")
        return cls(int(row["index"]), float(row["start_s"]), float(row["forward_start_s"]),
                   float(row["forward_end_s"]), float(row["end_s"]), BatchShape(*(row[name] for name in BATCH_FIELDS)),
                   None if probe is None else float(probe))

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready); missing quantities are None and named in "missing"."""
        row: dict[str, Any] = {"index": self.index, "start_s": self.start_s, "forward_start_s": self.forward_start_s,
                               "forward_end_s": self.forward_end_s, "end_s": self.end_s}
        row.update({name: getattr(self.batch, name) for name in BATCH_FIELDS})
        row["missing"] = list(self.batch.missing)
        row["probe_s"] = self.probe_s
        return row


def batch_shape(processor: Any) -> BatchShape:
    """The shape of the batch `processor` just built (call right after a `prepare_next_batch()` that
    returned True). `prepare_batch_tensors` has already advanced each request's `position_offset`
    by its query length, so the past length it read is the offset minus the query."""
    batch = getattr(getattr(processor, "inputs_and_outputs", None), "requests_in_batch", None)
    if batch is None:
        return UNOBSERVED
    q_tokens = kv_read = prefill_seqs = prefill_tokens = new_tokens = 0
    for future in batch:
        state, query = future.state, future.query_length
        past = state.position_offset - query
        q_tokens += query
        kv_read += past
        if past < len(state.initial_tokens):  # its query still holds prompt tokens
            prefill_seqs += 1
            prefill_tokens += query
        new_tokens += bool(future.has_new_token)
    return BatchShape(q_tokens, kv_read, len(batch), prefill_seqs, prefill_tokens, new_tokens)


class StepTrace:
    """The steps recorded so far (appended by the engine's thread, read by the caller's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: list[StepRecord] = []
        self._open: dict[str, Any] | None = None

    def clear(self) -> None:
        with self._lock:
            self._steps.clear()

    def steps_since(self, origin: float) -> list[StepRecord]:
        """The steps that started at or after `origin` (a perf_counter value), their times shifted to
        seconds from it and their indices renumbered from 0."""
        with self._lock:
            kept = [step for step in self._steps if step.start_s >= origin]
        return [replace(step, index=i, start_s=step.start_s - origin, forward_start_s=step.forward_start_s - origin,
                        forward_end_s=step.forward_end_s - origin, end_s=step.end_s - origin)
                for i, step in enumerate(kept)]

    # The three hooks run in the engine's thread, in this order, once per step.
    def _prepared(self, start: float, batch: BatchShape) -> None:
        self._open = {"start": start, "batch": batch}

    def _forward(self, start: float, end: float, probe_s: float) -> None:
        if self._open is not None:
            self._open.update(forward_start=start, forward_end=end, probe=probe_s)

    def _updated(self, end: float) -> None:
        step, self._open = self._open, None
        if step is None or "forward_start" not in step:
            return
        with self._lock:
            self._steps.append(StepRecord(len(self._steps), step["start"], step["forward_start"],
                                          step["forward_end"], end, step["batch"], step["probe"]))


def install_step_hooks(processor: Any, trace: StepTrace, synchronize: Callable[[], None] | None = None) -> None:
    """Wrap `processor`'s three step methods (on the instance only) so that each step lands in `trace`.
    `synchronize` (e.g. `torch.cuda.synchronize` on a GPU, whose kernels run asynchronously) is
    called before the forward's end is stamped, so that the forward's time is its own; on CPU
    nothing runs asynchronously and it is None."""
    prepare, generate, update = processor.prepare_next_batch, processor._generation_step, processor.update_batch

    def prepare_next_batch() -> bool:
        start = perf_counter()
        ready = prepare()
        if ready:
            trace._prepared(start, batch_shape(processor))
        return ready

    def _generation_step(model: Any) -> None:
        probe = speed_probe()
        start = perf_counter()
        generate(model)
        if synchronize is not None:
            synchronize()
        trace._forward(start, perf_counter(), probe)

    def update_batch() -> None:
        update()
        trace._updated(perf_counter())

    processor.prepare_next_batch = prepare_next_batch
    processor._generation_step = _generation_step
    processor.update_batch = update_batch
