"""The GEMM operators of a step on one rank (seconds), and the sampler that follows the LM head:

- ``dense_gemm`` (`DenseGemms`): every non-expert linear layer (attention and KDA projections,
  dense MLPs, shared experts, MoE router) over the step's tokens; weights read once per step.
  Column-parallel layers split N over the TP ranks, row-parallel ones split K, small ones are
  replicated. Every kernel takes at least `extras.kernel_launch_s` (a GEMM class of `count` per
  step at least count x that).
- ``moe_experts`` (`MoeExperts`): routed experts. A batch of T tokens, each routed to k of E
  experts, touches E*(1-(1-k/E)^T) distinct experts in expectation (uniform routing); their weights
  are read once; flops are 2 x active expert parameters x tokens. Without expert parallelism the
  experts are split across the TP ranks; with `moe_ep` a rank holds whole experts.
- ``lm_head`` (`LmHead`): only for the sequences that emit a token this step (`output_tokens`).
- ``sampler`` (`Sampler`): the pass over the logits of the tokens emitted (softmax and sampling
  read the FP32 logits twice and write probabilities once), at least one kernel launch.

A calibration table's `matmul` rows (`w8a8_matmul` for W8A8) replace the roofline of the GEMMs,
never below the same work at 100 % of peak. Embedding gathers are not counted.

Units: seconds, bytes, FLOPs, tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from infralab.errors import InputError
from infralab.sim.cost.geometry import LOGITS_BYTES, Geometry

if TYPE_CHECKING:
    from infralab.sim.cost.calibrated import Calibration

SAMPLER_LOGIT_PASSES = 3  # softmax reads the logits, sampling reads them again and writes probabilities


@dataclass(frozen=True, slots=True)
class Gemm:
    """A class of identical GEMMs on one rank: C[M, n] = A[M, k] @ W[k, n], `count` per step."""

    name: str
    n: int
    k: int
    count: int


def dense_gemm_classes(g: Geometry) -> list[Gemm]:
    """Every non-expert GEMM class with its per-rank N and K (column-parallel layers split N,
    row-parallel ones split K, small ones are replicated)."""
    m, tp, h = g.model, g.tp, g.model.hidden_size
    gemms: list[Gemm] = []

    def add(name: str, n: int, k: int, count: int) -> None:
        if count and n and k:
            gemms.append(Gemm(name, n, k, count))

    full, heads = g.full_layers, g.heads
    if m.is_mla:
        if m.q_lora_rank:
            add("q_a", m.q_lora_rank, h, full)
            add("q_b", heads * m.qk_head_dim, m.q_lora_rank, full)
        else:
            add("q", heads * m.qk_head_dim, h, full)
        add("kv_a", m.kv_lora_rank + m.qk_rope_head_dim, h, full)
        add("kv_b", heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, full)
        add("attn_o", h, heads * m.v_head_dim, full)
    else:
        add("qkv", (heads + 2 * g.kv_heads) * m.head_dim, h, full)
        add("attn_o", h, heads * m.head_dim, full)
    lin, lheads, d = g.linear_layers, g.lin_heads, m.linear_head_dim
    add("kda_qkv", 3 * lheads * d, h, lin)
    add("kda_gate_a", d, h, 2 * lin)  # decay and output gates: low rank, replicated
    add("kda_gate_b", lheads * d, d, 2 * lin)
    add("kda_beta", lheads, h, lin)
    add("kda_o", h, lheads * d, lin)
    add("mlp_gate_up", 2 * m.intermediate_size // tp, h, m.num_dense_mlp_layers)
    add("mlp_down", h, m.intermediate_size // tp, m.num_dense_mlp_layers)
    shared = m.num_shared_experts * m.moe_intermediate_size // tp
    add("shared_gate_up", 2 * shared, h, m.num_moe_layers)
    add("shared_down", h, shared, m.num_moe_layers)
    add("router", m.num_experts, h, m.num_moe_layers)
    return gemms


class DenseGemms:
    """``dense_gemm``: the non-expert GEMM classes of the model (module docstring)."""

    def __init__(self, g: Geometry, calibrated: Calibration | None) -> None:
        self._g, self._calibrated = g, calibrated
        self.classes = dense_gemm_classes(g)

    def _work(self, gemm: Gemm, m: int) -> tuple[float, float]:
        """(flops, bytes) of the GEMM class `gemm` over `m` tokens: weights read once, activations
        read and written once."""
        g = self._g
        flops = 2.0 * m * gemm.n * gemm.k * gemm.count
        nbytes = gemm.count * (gemm.n * gemm.k * g.weight_width + m * (gemm.n + gemm.k) * g.act_width)
        return flops, nbytes

    def _roofline(self, gemm: Gemm, m: int) -> float:
        """The class's GEMMs at the roofline, each at least one kernel launch."""
        g = self._g
        return max(g.gemm_roofline(*self._work(gemm, m), g.gemm_rate), gemm.count * g.launch)

    def _ideal(self, gemm: Gemm, m: int) -> float:
        """The same GEMMs at 100 % of peak: the floor no measurement can beat."""
        flops, nbytes = self._work(gemm, m)
        return max(flops / self._g.peak, nbytes / self._g.accel.hbm_bandwidth)

    def time(self, tokens: int) -> float:
        """Seconds of every dense GEMM of a step of `tokens` tokens."""
        if tokens == 0:
            return 0.0
        total = 0.0
        for gemm in self.classes:
            measured = self._calibrated.gemm(gemm.n, gemm.k, tokens) if self._calibrated else None
            if measured is None:
                total += self._roofline(gemm, tokens)
            else:
                total += max(measured * gemm.count, self._ideal(gemm, tokens))
        return total

    def call_s(self, name: str, tokens: int) -> float:
        """Seconds of one call of the GEMM class `name` over `tokens` tokens, as `time` counts it."""
        gemm = next((gemm for gemm in self.classes if gemm.name == name), None)
        if gemm is None:
            raise InputError("gemm", f"unknown GEMM class {name!r}", f"one of {[gemm.name for gemm in self.classes]}")
        one = Gemm(gemm.name, gemm.n, gemm.k, 1)
        measured = self._calibrated.gemm(gemm.n, gemm.k, tokens) if self._calibrated else None
        if measured is None:
            return self._roofline(one, tokens)
        return max(measured, self._ideal(one, tokens))


class MoeExperts:
    """``moe_experts``: the routed experts' grouped GEMMs (module docstring)."""

    def __init__(self, g: Geometry, calibrated: Calibration | None) -> None:
        self._g, self._calibrated = g, calibrated

    def expected_experts_touched(self, tokens: int) -> float:
        """Distinct routed experts a batch of `tokens` touches per layer, in expectation, when
        each token picks k of E experts uniformly: E * (1 - (1 - k/E)^tokens)."""
        e, k = self._g.model.num_experts, self._g.model.experts_per_token
        if e == 0 or tokens == 0:
            return 0.0
        return e * (1.0 - (1.0 - k / e) ** tokens)

    def time(self, tokens: int) -> float:
        """Seconds of every MoE layer's routed experts over `tokens` tokens."""
        g = self._g
        m = g.model
        if not m.is_moe or tokens == 0:
            return 0.0
        touched, routed, width = self._shape(tokens)
        h = m.hidden_size
        if self._calibrated is not None:
            per_expert = max(1, round(routed / touched))
            up = self._calibrated.gemm(2 * width, h, per_expert)
            down = self._calibrated.gemm(h, width, per_expert)
            if up is not None and down is not None:
                ideal = self._layer(tokens, g.peak, g.accel.hbm_bandwidth)
                return m.num_moe_layers * max(touched * (up + down), ideal)
        # grouped expert GEMMs: up and down, at least a launch each
        layer = max(self._layer(tokens, g.gemm_rate, g.mem_rate), 2 * g.launch)
        return m.num_moe_layers * layer

    def _shape(self, tokens: int) -> tuple[float, float, int]:
        """(experts touched, routed token copies, expert width) on one rank per MoE layer. Without
        EP every rank holds a 1/tp slice of every expert; with `moe_ep` = e a rank holds E/e whole
        experts, each split over tp/e ranks, and gets 1/e of the routed copies (uniform routing)."""
        g = self._g
        m = g.model
        touched = self.expected_experts_touched(tokens)
        if g.moe_ep == 1:
            return touched, tokens * m.experts_per_token, m.moe_intermediate_size // g.tp
        ep = g.moe_ep
        return touched / ep, tokens * m.experts_per_token / ep, m.moe_intermediate_size // (g.tp // ep)

    def _layer(self, tokens: int, flop_rate: float, byte_rate: float) -> float:
        g = self._g
        m = g.model
        touched, routed, width = self._shape(tokens)
        h = m.hidden_size
        flops = 2.0 * routed * 3 * h * width
        nbytes = touched * 3 * h * width * g.weight_width + routed * (2 * h + 3 * width) * g.act_width
        if flop_rate == g.gemm_rate:  # the roofline (the other call is the 100 %-of-peak floor)
            return g.gemm_roofline(flops, nbytes, flop_rate, byte_rate)
        return max(flops / flop_rate, nbytes / byte_rate)


class LmHead:
    """``lm_head``: the vocabulary projection of the rows that emit a token (split over
    `lm_head_tp` ranks; 8-bit checkpoints keep it in bf16)."""

    def __init__(self, g: Geometry, calibrated: Calibration | None) -> None:
        self._g, self._calibrated = g, calibrated

    def time(self, rows: int) -> float:
        if rows == 0:
            return 0.0
        g = self._g
        vocab, h = g.model.vocab_size // g.lm_head_tp, g.model.hidden_size
        # An 8-bit checkpoint's LM head is bf16: the table's (8-bit) matmul rows do not time it.
        same_dtype = self._calibrated is not None and g.lm_peak == g.peak
        measured = self._calibrated.gemm(vocab, h, rows) if same_dtype and self._calibrated is not None else None
        flops = 2.0 * rows * vocab * h
        nbytes = vocab * h * g.lm_width + rows * (h * g.act_width + vocab * LOGITS_BYTES)
        if measured is not None:
            return max(measured, flops / g.lm_peak, nbytes / g.accel.hbm_bandwidth)
        return max(g.gemm_roofline(flops, nbytes, g.lm_peak * g.cfg.efficiency.gemm), g.launch)


class Sampler:
    """``sampler``: the passes over the logits of the rows that emit a token."""

    def __init__(self, g: Geometry) -> None:
        self._g = g

    def time(self, rows: int) -> float:
        """The sampler's passes over the FP32 logits of `rows` emitted tokens (whole vocabulary:
        the logits are gathered before sampling), at least one launch."""
        g = self._g
        if rows == 0 or not g.cfg.extras.sampler:
            return 0.0
        nbytes = rows * g.model.vocab_size * LOGITS_BYTES * SAMPLER_LOGIT_PASSES
        return max(nbytes / g.mem_rate, g.launch)
