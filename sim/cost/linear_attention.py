"""``linear_attention``: the KDA (Kimi Delta Attention) layers of a step on one rank (seconds).

Decode reads and writes each sequence's K x V state (FP32) and conv window per step, on the FP32
units. With ReplaySSM (`cost.replay_ssm_ring` = L) the state is a checkpoint plus a ring of L
updates, and a decode step costs the kernel's ring cycle divided by its L steps
(`work_formulas.replay_ssm_cycle_bytes` / `_flops`). Prefill runs the chunked algorithm (chunks of
`KDA_CHUNK` tokens): about three state-sized products per token plus intra-chunk attention, on
tensor cores, and one state per chunk written and read back.

A calibration table's `kda_decode` rows replace the roofline of the plain decode, never below the
same work at 100 % of peak; KDA prefill and the ReplaySSM decode always use the roofline.

Units: seconds, bytes, FLOPs, tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infralab.sim.cost.geometry import Geometry
from infralab.sim.cost.work import StepWork
from infralab.work_formulas import replay_ssm_cycle_bytes, replay_ssm_cycle_flops

if TYPE_CHECKING:
    from infralab.sim.cost.calibrated import Calibration

KDA_CHUNK = 64  # tokens per chunk of the chunked KDA prefill (flash-linear-attention's default)
KDA_DECODE_FLOPS_PER_STATE_ELEMENT = 8  # decay, k.S, rank-1 update (3), q.S, per K x V element


class LinearAttention:
    """KDA prefill and decode, plain or with ReplaySSM (module docstring)."""

    def __init__(self, g: Geometry, calibrated: Calibration | None) -> None:
        self._g, self._calibrated = g, calibrated
        self._linear_layers = g.linear_layers

    def time(self, work: StepWork) -> float:
        """Seconds of all KDA layers of `work`."""
        if self._linear_layers == 0:
            return 0.0
        g = self._g
        total = 0.0
        d, heads, width = g.model.linear_head_dim, g.lin_heads, g.act_width
        per_seq_state = 2.0 * (g.lin_state_bytes + g.lin_conv_bytes)  # read and write
        if work.prefill_tokens:
            t = work.prefill_tokens
            # three state-sized products per token, plus intra-chunk scores and values 2*C*(K+V)
            flops = t * heads * (6.0 * d * d + 2.0 * KDA_CHUNK * (d + d))
            chunk_states = 2.0 * t / KDA_CHUNK * g.lin_state_bytes  # written, then read back
            nbytes = work.prefill_seqs * per_seq_state + chunk_states + t * g.lin_io_elems * width
            total += self._linear_layers * g.roofline(flops, nbytes, g.attn_rate)
        if work.decode_seqs and g.replay_ring:
            total += self._linear_layers * self._replay_decode_layer_s(work.decode_seqs)
        elif work.decode_seqs:
            b = work.decode_seqs
            flops = float(b * heads * KDA_DECODE_FLOPS_PER_STATE_ELEMENT * d * d)
            nbytes = b * (per_seq_state + g.lin_io_elems * width)
            measured = self._calibrated.kda_decode(b) if self._calibrated else None
            if measured is not None:
                ideal = max(flops / g.state_peak, nbytes / g.accel.hbm_bandwidth)
                total += self._linear_layers * max(measured, ideal)
            else:
                total += self._linear_layers * max(flops / g.state_rate, nbytes / g.mem_rate)
        return total

    def _replay_decode_layer_s(self, seqs: int) -> float:
        """One KDA layer's decode step with ReplaySSM on one rank: the kernel's ring cycle of
        `replay_ssm_ring` steps (`work_formulas.replay_ssm_cycle_bytes` / `_flops`), divided by
        its steps, plus the conv windows read and written, on the FP32 units. Calibration rows of
        the plain kernel do not time it (the roofline is used)."""
        g = self._g
        d, heads, ring = g.model.linear_head_dim, g.lin_heads, g.replay_ring
        flops = replay_ssm_cycle_flops(seqs, heads, d, d, ring) / ring
        nbytes = replay_ssm_cycle_bytes(seqs, heads, d, d, ring) / ring + seqs * 2.0 * g.lin_conv_bytes
        return max(flops / g.state_rate, nbytes / g.mem_rate)
