"""Stand-ins for the simulator's tests: a placeholder workload, a linear fake cost model whose
KV capacity is set by hand, and a SimConfig builder with small defaults."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any

from infralab.sim.config import HardwareConfig, SimConfig
from infralab.sim.cost import StepWork, decode_run_ends_stepwise
from infralab.workload.schema import FixedLength, PoissonArrivals, SyntheticWorkload

# simulate() takes its requests from the caller; the config's workload is never read, but SimConfig
# requires one.
PLACEHOLDER_WORKLOAD = SyntheticWorkload(
    kind="synthetic",
    num_requests=1,
    arrival=PoissonArrivals(kind="poisson", rate=1.0),
    prompt=FixedLength(kind="fixed", value=1),
    output=FixedLength(kind="fixed", value=1),
)


@dataclass(frozen=True)
class FakeStepCost:
    """The one field of a step's cost that the engine reads: its duration (seconds)."""

    total_s: float


@dataclass(frozen=True)
class FakeCost:
    """A cost model with a step time affine in the step's work and a KV capacity given outright, so
    tests can make KV memory tight and compute step times by hand.

    Step time (seconds) = per_step_s + per_prefill_token_s * prefill tokens
    + per_attn_pair_s * prefill attention pairs + per_decode_seq_s * decode sequences
    + per_context_token_s * decode context tokens, summed in that order (so a term whose rate is 0
    adds exactly nothing). Defaults: 1 ms per step, 10 us per prefill token, 0.1 ms per decode
    sequence, no attention or context term, 1000 bytes of KV per token, no recurrent state."""

    capacity_tokens: int
    _: KW_ONLY
    per_step_s: float = 1e-3
    per_prefill_token_s: float = 1e-5
    per_attn_pair_s: float = 0.0
    per_decode_seq_s: float = 1e-4
    per_context_token_s: float = 0.0
    transfer_bytes_per_token: int = 1000
    state_bytes_per_seq: int = 0  # a hybrid model's recurrent state (bytes per sequence)

    def step(self, work: StepWork) -> FakeStepCost:
        return FakeStepCost(
            self.per_step_s
            + self.per_prefill_token_s * work.prefill_tokens
            + self.per_attn_pair_s * work.prefill_attn_pairs
            + self.per_decode_seq_s * work.decode_seqs
            + self.per_context_token_s * work.decode_context_tokens
        )

    def decode_step_s(self, seqs: int, context_tokens: int) -> float:
        """Seconds of a decode-only step; the same as step() on that work."""
        return self.step(StepWork.decode(seqs, context_tokens)).total_s

    def decode_run_ends(
        self, seqs: int, context_tokens: int, start_s: float, steps: int, horizon_s: float
    ) -> list[float]:
        return decode_run_ends_stepwise(self.decode_step_s, seqs, context_tokens, start_s, steps, horizon_s)

    def kv_capacity_tokens(self, gpu_memory_utilization: float, max_num_seqs: int = 0, max_batched_tokens: int = 0) -> int:
        """Tokens of KV cache per instance: `capacity_tokens`, whatever the arguments."""
        return self.capacity_tokens

    def kv_transfer_bytes(self, tokens: int) -> int:
        """Bytes of KV moved for `tokens` tokens."""
        return self.transfer_bytes_per_token * tokens

    def kv_bytes_per_token(self) -> int:
        return self.transfer_bytes_per_token

    def linear_state_bytes_per_seq(self) -> int:
        return self.state_bytes_per_seq


def sim_config(**overrides: Any) -> SimConfig:
    """A SimConfig for Llama-3-8B on an H100 with the placeholder workload and SimConfig's defaults
    for the rest; `overrides` replace any SimConfig field (e.g. engine=EngineConfig(block_size=16))."""
    fields: dict[str, Any] = dict(
        model="llama-3-8b", hardware=HardwareConfig(accelerator="H100"), workload=PLACEHOLDER_WORKLOAD
    )
    return SimConfig(**(fields | overrides))
