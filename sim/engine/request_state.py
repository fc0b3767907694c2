"""The mutable state of one request on one instance (`Seq`), as the scheduler sees it.

A request that moves between instances (prefill pool -> decode pool) has one `Seq` per instance,
all sharing its `RequestRecord`. Token counts are in tokens; steps are the instance's step numbers.
"""

from __future__ import annotations

from infralab.metrics.records import RequestRecord
from infralab.sim.protocols import ServedRequest


class Seq:
    """One request's progress on one instance.

    - `target`: tokens that must be in the KV cache before the next output token can be sampled:
      the prompt on first admission, prompt + generated tokens after a recompute preemption.
    - `computed`: tokens in the KV cache now (prefix-cache hits included).
    - `base`: first token position covered by the request's private KV blocks; positions below it
      live in pinned prefix-cache entries (`pinned`, their hashes in prompt order).
    - `blocks`: private KV blocks held.
    - while decoding: at step n the request emits output token `dec_gen0 + (n - dec_step0) + 1`;
      the fast `Scheduler` brings token counters up to date only when it stops decoding (the
      `ReferenceScheduler` keeps them current and ignores `dec_step0`, `dec_gen0` and `epoch`).
    - `decodes_here`: False on a prefill-pool instance (the request leaves after its prefill).
    - `streams_tokens`: whether the tokens sampled here reach the client (are recorded). False on a
      prefill-pool instance when the decode instance emits the first token
      (`cluster.transfer.first_token = "decode"`): its prefill's token is then not the client's.
    - `epoch` bumps whenever the request stops running or decoding, which invalidates the
      per-step reminders (block growth, finish) filed for it.
    """

    __slots__ = (
        "request",
        "rec",
        "prompt",
        "output",
        "hashes",
        "decodes_here",
        "streams_tokens",
        "target",
        "computed",
        "cached",
        "base",
        "blocks",
        "pinned",
        "generated",
        "dec_step0",
        "dec_gen0",
        "epoch",
        "prefill_total",
    )

    def __init__(self, request: ServedRequest, rec: RequestRecord, decodes_here: bool) -> None:
        self.request = request
        self.rec = rec
        self.prompt: int = request.prompt_tokens
        self.output: int = request.output_tokens
        self.hashes: tuple[int, ...] = request.block_hashes
        self.decodes_here = decodes_here
        self.streams_tokens = True
        self.target = self.prompt
        self.computed = 0
        self.cached = 0
        self.base = 0
        self.blocks = 0
        self.pinned: list[int] = []
        self.generated = 0
        self.dec_step0 = -1
        self.dec_gen0 = 0
        self.epoch = 0
        # Prompt (and recomputed) tokens computed for this request so far, on every instance.
        self.prefill_total = 0

    @property
    def id(self) -> int:
        return self.rec.id

    def remaining_work(self) -> int:
        """Tokens of work left on this instance (prefill tokens to compute + decode steps to run),
        for a request that is not decoding right now (decoding ones are counted in aggregate)."""
        if self.computed < self.target:
            decode_steps = self.output - self.generated - 1 if self.decodes_here else 0
            return self.target - self.computed + decode_steps
        return self.output - self.generated if self.decodes_here else 0
