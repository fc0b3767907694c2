"""Encoding the images of multimodal requests: in an encode pool (layout "epd") or inline, on the
instance that prefills the request (layouts "colocated" and "disaggregated").

- **EPD** (`EncodePool`): a request with images goes, on arrival, to the encode instance
  `cluster.encode_router` picks ("least_outstanding_tokens": fewest image tokens queued or
  encoding). Each encode instance encodes one request's images at a time, in arrival order (a
  ViT over 576-patch images is compute-bound, so batching requests together would not shorten the
  work; docs/sim.md). Its embeddings then cross the encode instance's NIC link ("nic-encode-<i>",
  one lane per accelerator, as the prefill NICs) to the prefill instance `cluster.router` picks
  when they leave, which receives the request with its embeddings: its prefill never encodes. A
  request without images goes straight to the prefill pool.
- **Inline** (`InlineEncoder`): vLLM runs a multimodal request's encoder in the engine step that
  first schedules its prompt, before that step's forward pass (vllm/v1/worker/gpu_model_runner.py,
  `execute_model` calls `_execute_mm_encoder` before the model): so the step that first computes a
  request's prompt (on each admission: a recompute after preemption encodes again) takes the
  encoder's time for its images on top of its language-model time. vLLM's encoder budget
  (`max_num_encoder_input_tokens`) is not modelled.

Per request (`EncodeRecord`, requests.csv's encode columns): `encode_s` is the time the encode stage
adds to TTFT: EPD, arrival to embeddings at the prefill instance (queue + compute + transfer);
inline, the encoder's compute inside the prefill step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass

import simpy

from infralab.sim.encoder_cost import EncoderCost
from infralab.sim.engine.step import StepPlan
from infralab.sim.link import Link
from infralab.sim.protocols import Router, ServedRequest
from infralab.metrics.encode_records import EncodeRecord
from infralab.metrics.records import CounterSample, Interval, RequestRecord, RunRecord

def encode_records(requests: Iterable[ServedRequest], images: Mapping[int, int], image_tokens: int) -> dict[int, EncodeRecord]:
    """An EncodeRecord per request id (`images[id]` images each, `image_tokens` prompt tokens
    for a request that has any)."""
    out: dict[int, EncodeRecord] = {}
    for r in requests:
        n = images.get(r.id, 0)
        out[r.id] = EncodeRecord(n, image_tokens if n else 0, arrival_s=r.arrival_s)
    return out


class InlineEncoder:
    """The `Instance.extra_step_s` hook of a front instance (colocated or prefill) in layouts
    without an encode pool: seconds its step spends encoding the images of the requests whose
    prompt it first computes (all of them in one batch)."""

    def __init__(self, name: str, encoder: EncoderCost, encodes: Mapping[int, EncodeRecord]) -> None:
        self.name, self.encoder, self.encodes = name, encoder, encodes

    def __call__(self, plan: StepPlan, start_s: float) -> float:
        starting = [self.encodes[seq.request.id] for seq, _new in plan.chunks if seq.computed == seq.cached]
        starting = [enc for enc in starting if enc.images]
        if not starting:
            return 0.0
        seconds = self.encoder.images_s(sum(enc.images for enc in starting))
        for enc in starting:
            enc.encode_instance = self.name
            enc.encode_start_s, enc.encode_end_s = start_s, start_s + seconds
            enc.embeddings_ready_s = enc.encode_end_s
        return seconds


@dataclass(slots=True)
class _Job:
    request: ServedRequest
    rec: RequestRecord
    enc: EncodeRecord


class EncodeInstance:
    """One encode instance: a FIFO of requests, one request's images encoded at a time; its
    embeddings leave over `link`, and `handoff(request, rec)` takes the request on to the prefill
    pool when they have arrived. Timeline track "instance/encode-<i>": an "batch" interval per
    request (its busy time), counter "waiting" (requests queued, the one encoding included)."""

    def __init__(self, env: simpy.Environment, index: int, encoder: EncoderCost, link: Link, record: RunRecord,
                 handoff: Callable[[ServedRequest, RequestRecord], None]) -> None:
        self.env, self.index, self.name = env, index, f"encode-{index}"
        self.encoder, self.link, self.record, self.handoff = encoder, link, record, handoff
        self.track = f"instance/{self.name}"
        self._queue: deque[_Job] = deque()
        self._queued_tokens = 0
        self._wake: simpy.Event | None = None
        record.resources[self.track] = {"kind": "instance", "role": "encode", "tp": encoder.cost.tp,
                                        "accelerator": encoder.cost.accel.name}
        env.process(self._run())

    @property
    def outstanding_tokens(self) -> int:
        """Image tokens queued or encoding here (what `least_outstanding_tokens` compares)."""
        return self._queued_tokens

    def cached_prefix_tokens(self, request: ServedRequest) -> int:
        """An encode instance holds no prefix cache (`cluster.encode_router` offers no prefix_aware)."""
        return 0

    def submit(self, request: ServedRequest, rec: RequestRecord, enc: EncodeRecord) -> None:
        enc.encode_instance = self.name
        self._queue.append(_Job(request, rec, enc))
        self._queued_tokens += enc.image_tokens
        self._count()
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _count(self) -> None:
        self.record.counters.append(CounterSample(self.track, "waiting", self.env.now, len(self._queue)))

    def _run(self) -> Generator[simpy.Event, object, None]:
        env = self.env
        while True:
            if not self._queue:
                self._wake = env.event()
                yield self._wake
                self._wake = None
            job = self._queue[0]
            start = env.now
            seconds = self.encoder.images_s(job.enc.images)
            yield env.timeout(seconds)
            job.enc.encode_start_s, job.enc.encode_end_s = start, start + seconds
            self.record.intervals.append(Interval(self.track, "batch", start, start + seconds,
                                                  (("request", job.rec.id), ("images", job.enc.images))))
            self._queue.popleft()
            self._queued_tokens -= job.enc.image_tokens
            self._count()
            self._send(job)

    def _send(self, job: _Job) -> None:
        nbytes = self.encoder.embedding_bytes(job.enc.images)
        done = self.link.transfer(nbytes, label="embeddings", args=(("request", job.rec.id),))
        done.callbacks.append(lambda _event: self._arrived(job))

    def _arrived(self, job: _Job) -> None:
        job.enc.embeddings_ready_s = self.env.now
        self.handoff(job.request, job.rec)


class EncodePool:
    """The encode pool of an EPD layout in front of the prefill pool: `admit(request, rec)` sends
    a request with images to an encode instance and one without straight to `to_prefill`."""

    def __init__(self, instances: list[EncodeInstance], router: Router, encodes: Mapping[int, EncodeRecord],
                 to_prefill: Callable[[ServedRequest, RequestRecord], None]) -> None:
        self.instances, self.router, self.encodes, self.to_prefill = instances, router, encodes, to_prefill

    def admit(self, request: ServedRequest, rec: RequestRecord) -> None:
        enc = self.encodes[request.id]
        if not enc.images:
            self.to_prefill(request, rec)
            return
        self.router.choose(request, self.instances).submit(request, rec, enc)
