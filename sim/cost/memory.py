"""An instance's device memory as an engine sizes it (`Memory.plan`, `MemoryPlan`): weights,
memory outside torch's allocator, the activation peak of the largest step, linear-attention state
slots and, what is left, the paged KV cache; and the bytes a token's KV and a sequence's
linear-attention state take (on the instance, on one rank, and to move between instances).

Units: bytes, tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from infralab.errors import InputError
from infralab.sim.cost.geometry import LOGITS_BYTES, Geometry
from infralab.sim.cost.pipeline import stage_layers
from infralab.sim.specs import DTYPE_BYTES

GIB = 2**30
# Memory outside torch's allocator per GPU (CUDA context, cuBLAS workspaces), as vLLM's profiler
# reports it: "non_torch_memory takes 0.35GiB" (vLLM V1, Llama-3.1-8B on one 80 GB GPU, a public
# log); tensor parallelism adds NCCL's buffers: 1.79 GiB at TP 1 vs 3.58 GiB at TP 2 in vLLM PR
# #10511's sanity check (Llama-3-8B on H100), i.e. +1.79 GiB per GPU.
NON_TORCH_BYTES_PER_GPU = 0.35 * GIB
TP_NON_TORCH_BYTES_PER_GPU = 1.79 * GIB


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """An instance's device memory as an engine sizes it (bytes, whole instance; `CostModel.memory_plan`)."""

    budget_bytes: float  # reported device memory x tp x gpu_memory_utilization
    weight_bytes: float
    non_torch_bytes: float  # CUDA context, NCCL buffers: memory torch's allocator does not see
    activation_peak_bytes: float  # the largest step's activations
    state_bytes: float  # linear-attention state slots (hybrid models)
    kv_bytes: float  # what is left for the paged KV cache
    kv_bytes_per_token: int
    kv_tokens: int

    def kv_blocks(self, block_size: int) -> int:
        """Whole KV blocks of `block_size` tokens."""
        return self.kv_tokens // block_size

    def to_json(self, block_size: int) -> dict[str, float | int]:
        return {
            "kv_blocks": self.kv_blocks(block_size),
            "kv_tokens": self.kv_tokens,
            "block_size": block_size,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "budget_bytes": self.budget_bytes,
            "weight_bytes": self.weight_bytes,
            "non_torch_bytes": self.non_torch_bytes,
            "activation_peak_bytes": self.activation_peak_bytes,
            "state_bytes": self.state_bytes,
            "kv_bytes": self.kv_bytes,
        }


class Memory:
    """Memory queries of one instance (module docstring; `CostModel` exposes them)."""

    def __init__(self, g: Geometry) -> None:
        self._g = g

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token takes on the whole instance (all TP ranks, replicas included).

        With Layer Split (`layer_split` = g), the F full-attention layers are cut into g contiguous,
        balanced blocks, one per rank of each group (as vllm-ascend's KVPP assigns owners), so a
        rank holds only its block's KV: the instance's bytes per token are tp x the bytes of the
        fullest rank (ceil(F / g) of the F layers when their dtypes agree). With attention DP a
        token's KV lives once, whole, on the rank that runs its sequence."""
        g = self._g
        if g.attention_dp:
            return self.model_kv_bytes_per_token()
        if g.layer_split == 1 and g.cfg.kv_layer_dtypes is None:
            return g.model.kv_bytes_per_token(g.cfg.kv_dtype, g.tp)
        per_rank, start = 0, 0
        for size in stage_layers(g.full_layers, g.layer_split):
            per_rank = max(per_rank, sum(g.kv_layer_bytes[start:start + size]))
            start += size
        return int(per_rank * g.tp)

    def model_kv_bytes_per_token(self) -> int:
        """One copy of a token's KV over all full-attention layers, in their dtypes (bytes): what
        moves between instances."""
        g = self._g
        if g.cfg.kv_layer_dtypes is None:
            return g.model.kv_bytes_per_token(g.cfg.kv_dtype)
        return sum(g.model.kv_layer_bytes(dtype) for dtype in g.kv_dtypes)

    def linear_state_bytes_per_seq(self) -> int:
        """Linear-attention state bytes one sequence holds on the whole instance: each rank holds
        the state of its `linear_num_heads / linear_tp` heads (split over `linear_tp` ranks,
        replicated over the other tp / linear_tp), as plain K x V FP32 states or, with ReplaySSM,
        a checkpoint plus a ring of `replay_ssm_ring` updates (`work_formulas.replay_ssm_state_bytes`)."""
        g = self._g
        return int(g.linear_layers * (g.lin_state_bytes + g.lin_conv_bytes) * g.tp)

    def linear_state_bytes_per_rank(self) -> int:
        """Linear-attention state bytes one sequence holds on one rank (all KDA layers)."""
        g = self._g
        return int(g.linear_layers * (g.lin_state_bytes + g.lin_conv_bytes))

    def kv_transfer_bytes(self, tokens: int) -> int:
        """Bytes to move one sequence's cache of `tokens` tokens to another instance: its KV (one
        copy, without TP replicas) plus its linear-attention state."""
        return int(tokens * self.model_kv_bytes_per_token() + self.linear_state_bytes_per_seq())

    def weight_bytes(self) -> int:
        """Bytes of the model's weights in the configured dtype (whole instance): one copy, or with
        attention DP every weight but the routed experts' on each of the tp ranks."""
        g = self._g
        total = g.model.weight_bytes(g.cfg.dtype)
        if not g.attention_dp:
            return total
        routed = int(g.model.param_counts()["moe_routed"] * DTYPE_BYTES[g.cfg.dtype])
        return (total - routed) * g.tp + routed

    def activation_peak_bytes(self, max_num_seqs: int, max_batched_tokens: int) -> float:
        """Peak bytes of activations of the largest step, whole instance: what vLLM's profiler
        measures by running a dummy step of `max_batched_tokens` tokens and sampling
        `max_num_seqs` rows. Per rank: the MLP's gate/up output and activation (3 x its width
        per rank) and four hidden-state-sized buffers (residual, normed input, attention
        output, QKV), per token, plus FP32 logits and probabilities of `max_num_seqs` rows over
        the whole vocabulary. (Llama-3-8B, 8192 tokens, 256 seqs: 1.15 GiB; vLLM logs 1.19-1.26.)"""
        g = self._g
        m = g.model
        width = max(m.intermediate_size if m.num_dense_mlp_layers else 0,
                    (m.experts_per_token + m.num_shared_experts) * m.moe_intermediate_size if m.is_moe else 0)
        per_token = (3 * width // g.tp + 4 * m.hidden_size) * g.act_width
        logits = max_num_seqs * m.vocab_size * LOGITS_BYTES * 2
        return float(g.tp * (max_batched_tokens * per_token + logits))

    def plan(self, gpu_memory_utilization: float, max_num_seqs: int = 0, max_batched_tokens: int = 0) -> MemoryPlan:
        """How much KV cache fits, as vLLM sizes it (all figures for the whole instance):
        reported device memory x tp x pp x `gpu_memory_utilization` - weights - non-torch memory -
        the activation peak of the largest step - linear-attention state slots.

        Hybrid models keep a fixed-size linear-attention state per running sequence; like vLLM's
        state cache for hybrid models, one slot per possible running sequence (`max_num_seqs`) is
        set aside before the paged KV pool is sized. InputError when nothing is left."""
        g = self._g
        budget = gpu_memory_utilization * g.accel.usable_memory * g.tp * g.pp
        devices = g.tp * g.pp
        non_torch = g.tp * g.pp * (NON_TORCH_BYTES_PER_GPU + (TP_NON_TORCH_BYTES_PER_GPU if devices > 1 else 0.0))
        activation = self.activation_peak_bytes(max_num_seqs, max_batched_tokens)
        state = max_num_seqs * self.linear_state_bytes_per_seq()
        free = budget - self.weight_bytes() - non_torch - activation - state
        if free <= 0:
            slots = f", {max_num_seqs} linear-state slots ({state / 1e9:.1f} GB)" if state else ""
            raise InputError(
                "hardware",
                f"{g.model.name} weights ({self.weight_bytes() / 1e9:.1f} GB in {g.cfg.dtype}){slots}, "
                f"non-torch memory ({non_torch / 1e9:.1f} GB) and activations ({activation / 1e9:.1f} GB) do not fit in "
                f"{gpu_memory_utilization} x {g.accel.usable_memory / 1e9:.1f} GB x tp={g.tp}"
                f"{f' x pp={g.pp}' if g.pp > 1 else ''} of {g.accel.name}",
                "a larger tp, a larger accelerator, a smaller dtype, fewer engine.max_num_seqs "
                "or max_batched_tokens, or a higher gpu_memory_utilization",
            )
        per_token = self.kv_bytes_per_token()
        tokens = 2**62 if per_token == 0 else int(free // per_token)  # no full attention: KV never limits
        return MemoryPlan(budget, float(self.weight_bytes()), non_torch, activation, float(state), free, per_token, tokens)
