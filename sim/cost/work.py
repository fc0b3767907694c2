"""What one engine step computes (`StepWork`) and what it costs (`StepCost`), and the names of the
operators a step's device time is made of (`OPS`, in the order `CostModel` sums them, and the
`EXTRA_OPS` the layer-class knobs add).

Operators (`StepCost.by_op`), each timed for one tensor-parallel rank (ranks run in lockstep) by
the module named beside it:

- ``dense_gemm``, ``moe_experts``, ``lm_head``, ``sampler``: `sim/cost/gemm.py`
- ``attention``: `sim/cost/attention.py`
- ``linear_attention``: `sim/cost/linear_attention.py`
- ``tp_collectives``: `sim/cost/collectives.py`
- ``small_ops``: `sim/cost/small_ops.py`

The knobs of `HardwareConfig` (linear_tp, lm_head_tp, moe_ep, layer_split, pp, pp_micro_batches)
and `CostConfig` (replay_ssm_ring, kv_layer_dtypes, dtype "int8" for W8A8), all off by default
(docs/sim.md "GLM-class techniques"), change the operators above and add `EXTRA_OPS`:
``kv_broadcast`` (Layer Split) and ``ep_all_to_all`` (expert parallelism), both in
`sim/cost/collectives.py`, and ``pp_transfer`` (pipeline stages, `sim/cost/pipeline.py`; with pp
every operator is the pipelined step's). ``launch_gaps``: the idle device time between the kernels
of a step run without a CUDA graph (`extras.eager_launch_s` per kernel; `CostModel.kernel_launches`).

Units: seconds, bytes, FLOPs, tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

OPS = ("dense_gemm", "attention", "linear_attention", "moe_experts", "lm_head", "tp_collectives", "small_ops", "sampler")
# Operators added only when a layer-class knob asks for them (StepCost.by_op keys beyond OPS).
EXTRA_OPS = ("kv_broadcast", "ep_all_to_all", "pp_transfer", "launch_gaps")


@dataclass(frozen=True, slots=True)
class StepWork:
    """What one engine step computes, summed over its sequences (tokens, pairs of tokens)."""

    prefill_seqs: int = 0
    prefill_tokens: int = 0  # new prompt tokens computed this step
    prefill_attn_pairs: int = 0  # sum over prefill seqs of new*cached + new*(new+1)/2
    prefill_context_tokens: int = 0  # sum over prefill seqs of cached + new (KV read or written)
    decode_seqs: int = 0  # one token each
    decode_context_tokens: int = 0  # sum of the decode sequences' context lengths
    output_tokens: int = 0  # tokens emitted: decode seqs + prefills that finish their prompt

    # Spelled out: compiled (sim/native.py), the __init__ dataclasses writes runs as Python, about
    # 3 us a step with keywords; this one sets the slots directly (frozen all the same).
    def __init__(self, prefill_seqs: int = 0, prefill_tokens: int = 0, prefill_attn_pairs: int = 0,
                 prefill_context_tokens: int = 0, decode_seqs: int = 0, decode_context_tokens: int = 0,
                 output_tokens: int = 0) -> None:
        object.__setattr__(self, "prefill_seqs", prefill_seqs)
        object.__setattr__(self, "prefill_tokens", prefill_tokens)
        object.__setattr__(self, "prefill_attn_pairs", prefill_attn_pairs)
        object.__setattr__(self, "prefill_context_tokens", prefill_context_tokens)
        object.__setattr__(self, "decode_seqs", decode_seqs)
        object.__setattr__(self, "decode_context_tokens", decode_context_tokens)
        object.__setattr__(self, "output_tokens", output_tokens)

    @staticmethod
    def prefill(tokens: int, cached: int = 0) -> StepWork:
        """One whole prompt of `tokens` new tokens after `cached` cached ones; it emits 1 token."""
        return StepWork.prefill_chunk(tokens, cached, finishes=True)

    @staticmethod
    def prefill_chunk(tokens: int, cached: int = 0, finishes: bool = False) -> StepWork:
        """A chunk of `tokens` new prompt tokens after `cached` already in the KV cache; it emits a
        token only when it `finishes` the prompt."""
        return StepWork(
            prefill_seqs=1,
            prefill_tokens=tokens,
            prefill_attn_pairs=tokens * cached + tokens * (tokens + 1) // 2,
            prefill_context_tokens=cached + tokens,
            output_tokens=1 if finishes else 0,
        )

    @staticmethod
    def decode(seqs: int, context_tokens: int) -> StepWork:
        """`seqs` decode sequences with `context_tokens` context in total; each emits a token."""
        return StepWork(decode_seqs=seqs, decode_context_tokens=context_tokens, output_tokens=seqs)

    @property
    def tokens(self) -> int:
        """Tokens that pass through the layers this step (prefill tokens + one per decode seq)."""
        return self.prefill_tokens + self.decode_seqs

    def rank_share(self, ranks: int) -> StepWork:
        """The work of the busiest of `ranks` data-parallel ranks when the step's sequences are dealt
        out evenly, each to one rank: ceil(n / ranks) of its n decode sequences and of its n prefill
        sequences, with their shares of the tokens, pairs and context (rounded up), on the same
        rank. Identity for one rank."""
        if ranks == 1:
            return self

        def share(count: int, total: int) -> int:
            return -(-total * -(-count // ranks) // count) if count else 0

        prefills, decodes = self.prefill_seqs, self.decode_seqs
        prefill_share, decode_share = -(-prefills // ranks), -(-decodes // ranks)
        prefill_outputs = self.output_tokens - decodes
        return StepWork(
            prefill_seqs=prefill_share,
            prefill_tokens=share(prefills, self.prefill_tokens),
            prefill_attn_pairs=share(prefills, self.prefill_attn_pairs),
            prefill_context_tokens=share(prefills, self.prefill_context_tokens),
            decode_seqs=decode_share,
            decode_context_tokens=share(decodes, self.decode_context_tokens),
            output_tokens=decode_share + min(prefill_outputs, prefill_share),
        )

    def __add__(self, other: StepWork) -> StepWork:
        return StepWork(
            self.prefill_seqs + other.prefill_seqs,
            self.prefill_tokens + other.prefill_tokens,
            self.prefill_attn_pairs + other.prefill_attn_pairs,
            self.prefill_context_tokens + other.prefill_context_tokens,
            self.decode_seqs + other.decode_seqs,
            self.decode_context_tokens + other.decode_context_tokens,
            self.output_tokens + other.output_tokens,
        )


@dataclass(frozen=True, slots=True)
class StepCost:
    """Seconds of one step: device (sum of `by_op`), host overheads, and their sum."""

    device_s: float
    host_s: float
    total_s: float
    by_op: Mapping[str, float]

    def __init__(self, device_s: float, host_s: float, total_s: float, by_op: Mapping[str, float]) -> None:
        # spelled out, as StepWork's
        object.__setattr__(self, "device_s", device_s)
        object.__setattr__(self, "host_s", host_s)
        object.__setattr__(self, "total_s", total_s)
        object.__setattr__(self, "by_op", by_op)
