"""KV-cache transfer from prefill-pool to decode-pool instances (disaggregated layouts).

What moves: every rank's share of the request's KV (`cost.kv_bytes_per_token()`: the instance's
bytes per token, TP replicas included, e.g. an MLA latent replicated on each rank) and, for hybrid
models, its linear-attention state (`cost.linear_state_bytes_per_seq()`), each rank's part over its
own NIC (the link, see `infralab.sim.cluster`).

Per request (only those with more than one output token; a one-token request is complete when its
prefill is):
- "after_prefill": when its prefill completes, the decode router picks a decode instance, which
  reserves blocks for the prompt's KV (the request waits for them); then one flow of the prompt's
  KV and the state crosses the prefill instance's link.
- "layerwise": the decode instance is picked and asked for blocks at the request's first prefill
  step. Each prefill step's new KV (the first step of an admission also carries its prefix-cache
  hit) is sent as `layer_groups` equal flows, group i released at
  step_start + (i + 1) * step_duration / layer_groups, so transfer overlaps the prefill. The
  recurrent state of a hybrid model is final only when the prompt is: it is sent once, with the
  last prefill step's groups (not with every chunk). A group released before the reservation is
  granted waits for it.
The transfer ends when the prefill is complete and every flow has arrived; then the prefill
instance frees the request's blocks and the decode instance takes the request:
- `first_token = "decode"` (the default): as vLLM's P/D connectors do, the decode instance holds
  the prompt's KV but the last token's and computes that token in its next step it can admit the
  request to (a slot and budget permitting), whose end emits token 1 to the client; the prefill
  instance's own first token is not the client's. TTFT thus includes the transfer and the decode
  admission.
- `first_token = "prefill"`: token 1 is stamped at the end of the prefill step (labelled so in the
  summary) and the decode instance starts decoding token 2.
`kv_transfer_start_s` is when the first flow starts, `kv_transfer_end_s` when the last one ends.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass
import simpy

from infralab.sim.config import TransferConfig
from infralab.sim.engine.instance import Instance
from infralab.sim.engine.request_state import Seq
from infralab.sim.engine.step import StepPlan
from infralab.sim.link import Link
from infralab.sim.protocols import Router, StepCostModel


@dataclass(slots=True)
class _Job:
    """One request's transfer in progress."""

    prefill_seq: Seq
    source: Instance
    decode_seq: Seq
    target: Instance
    granted: simpy.Event
    link: Link
    prefill_done: bool = False
    unsent: int = 0  # layer groups announced but not started yet
    in_flight: int = 0


class KVTransfer:
    """Listens to prefill-pool instances (`StepListener`) and moves each request's KV."""

    def __init__(
        self,
        env: simpy.Environment,
        cfg: TransferConfig,
        cost: StepCostModel,
        links: dict[str, Link],
        decode_pool: Sequence[Instance],
        decode_router: Router,
    ) -> None:
        self.env = env
        self.layerwise = cfg.mode == "layerwise"
        self.groups = cfg.layer_groups
        self.first_token_on_decode = cfg.first_token == "decode"
        self.kv_bytes_per_token = cost.kv_bytes_per_token()
        self.state_bytes = cost.linear_state_bytes_per_seq()
        self.links = links  # prefill instance name -> the link its KV leaves on
        self.decode_pool = decode_pool
        self.router = decode_router
        self._jobs: dict[int, _Job] = {}

    # ---- StepListener ---------------------------------------------------------------------------

    def step_started(self, instance: Instance, plan: StepPlan, start_s: float, duration_s: float) -> None:
        if not self.layerwise:
            return
        for seq, new in plan.chunks:
            if seq.output <= 1:
                continue
            job = self._jobs.get(seq.id) or self._open(instance, seq)
            # The first chunk of an admission also carries the KV served by the prefix cache.
            tokens = new + (seq.computed if seq.computed == seq.cached else 0)
            # The recurrent state, once, with the step that completes the prompt.
            state = self.state_bytes if seq.computed + new == seq.target else 0
            job.unsent += self.groups
            nbytes = tokens * self.kv_bytes_per_token + state
            self.env.process(self._send_groups(job, nbytes, start_s, duration_s))

    def prefill_done(self, instance: Instance, seq: Seq) -> None:
        if self.layerwise:
            job = self._jobs[seq.id]
            job.prefill_done = True
            self._maybe_complete(job)
        else:
            job = self._open(instance, seq)
            job.prefill_done = True
            self.env.process(self._send_after_prefill(job))

    # ---- the flows ------------------------------------------------------------------------------

    def _open(self, source: Instance, seq: Seq) -> _Job:
        target = self.router.choose(seq.request, self.decode_pool)
        seq.rec.decode_instance = target.name
        decode_seq = Seq(seq.request, seq.rec, decodes_here=True)
        decode_seq.hashes = ()  # received KV does not enter the decode instance's prefix cache
        decode_seq.target = seq.prompt
        if self.first_token_on_decode:
            decode_seq.computed = seq.prompt - 1  # the last prompt token is computed there again
        else:  # its KV holds the prompt and the first token has been emitted
            decode_seq.computed = seq.prompt
            decode_seq.generated = 1
        granted = target.reserve(decode_seq)
        job = _Job(seq, source, decode_seq, target, granted, self.links[source.name])
        self._jobs[seq.id] = job
        return job

    def _send_after_prefill(self, job: _Job) -> Generator[simpy.Event, object, None]:
        if not job.granted.processed:
            yield job.granted
        nbytes = job.prefill_seq.prompt * self.kv_bytes_per_token + self.state_bytes
        job.in_flight += 1
        self._flow(job, nbytes)

    def _send_groups(self, job: _Job, nbytes: float, start_s: float, duration_s: float) -> Generator[simpy.Event, object, None]:
        part = nbytes / self.groups
        for i in range(self.groups):
            release = start_s + (i + 1) * duration_s / self.groups
            if release > self.env.now:
                yield self.env.timeout(release - self.env.now)
            if not job.granted.processed:
                yield job.granted
            job.unsent -= 1
            job.in_flight += 1
            self._flow(job, part)

    def _flow(self, job: _Job, nbytes: float) -> None:
        rec = job.prefill_seq.rec
        if math.isnan(rec.kv_transfer_start_s):
            rec.kv_transfer_start_s = self.env.now
        done = job.link.transfer(nbytes, label="kv", args=(("request", rec.id),))
        done.callbacks.append(lambda _event: self._flow_done(job))

    def _flow_done(self, job: _Job) -> None:
        job.in_flight -= 1
        self._maybe_complete(job)

    def _maybe_complete(self, job: _Job) -> None:
        if not (job.prefill_done and job.unsent == 0 and job.in_flight == 0):
            return
        pseq = job.prefill_seq
        pseq.rec.kv_transfer_end_s = self.env.now
        del self._jobs[pseq.id]
        job.source.release(pseq)
        dseq = job.decode_seq
        # The last prompt token computed again on the decode instance is no recompute.
        dseq.prefill_total = pseq.prefill_total - (dseq.target - dseq.computed)
        job.target.deliver(dseq)
