"""``small_ops``: the per-layer elementwise kernels of a step on one rank (seconds).

Per layer two residual adds each fused with the RMSNorm that follows (vLLM's fused_add_rms_norm:
reads x and the residual, writes both; `extras.fused_add_norm`, else two norms and two adds),
RoPE (full-attention layers) and the gated activation (SiLU-and-mul, one kernel):
elementwise traffic at the kernel's fraction of HBM bandwidth (`RooflineExtrasConfig`,
`extras.memory_fraction`), each kernel at least `extras.kernel_launch_s` (5-23 % of a layer in
Vidur's profiles). A calibration table's `rms_norm`, `residual_add`, `rope` and `silu_mul` rows
replace a kernel's estimate.

Units: seconds, bytes, elements, tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infralab.errors import InputError
from infralab.sim.cost.geometry import Geometry

if TYPE_CHECKING:
    from infralab.sim.cost.calibrated import Calibration

SMALL_OP_KERNELS = ("rms_norm", "residual_add", "rope", "silu_mul")  # calibration kernels of small_ops


class SmallOps:
    """The per-layer elementwise kernels (module docstring)."""

    def __init__(self, g: Geometry, calibrated: Calibration | None) -> None:
        self._g, self._calibrated = g, calibrated
        extras = g.cfg.extras
        self._rates = {k: g.accel.hbm_bandwidth * extras.memory_fraction(k) for k in SMALL_OP_KERNELS}

    def time(self, tokens: int) -> float:
        """Per-layer elementwise kernels over `tokens` (see the module docstring), all layers."""
        if tokens == 0 or not self._g.cfg.extras.small_ops:
            return 0.0
        return sum(count * self._op_s(kernel, shape, elements)
                   for kernel, shape, elements, count in self._kernels(tokens))

    def call_s(self, kernel: str, tokens: int) -> float:
        """Seconds of one call of the small kernel `kernel` (SMALL_OP_KERNELS) over `tokens`."""
        model = self._g.model
        for name, shape, elements, _ in self._kernels(tokens):
            if name == kernel and (kernel != "silu_mul" or not model.num_moe_layers):
                return self._op_s(kernel, shape, elements)
        raise InputError("small op", f"{kernel!r} is not a small op of {model.name}", f"one of {SMALL_OP_KERNELS}")

    def launches(self, tokens: int) -> int:
        """Kernels the small ops launch in a step of `tokens` tokens."""
        if tokens == 0 or not self._g.cfg.extras.small_ops:
            return 0
        return sum(count for _, _, _, count in self._kernels(tokens))

    def _op_s(self, kernel: str, shape: dict[str, int], elements: float) -> float:
        """One call of a small kernel: a calibrated row where a table has one, else its traffic
        (`elements` read + written) at the kernel's fraction of HBM bandwidth, at least one launch."""
        measured = self._calibrated.small_op(kernel, shape) if self._calibrated else None
        if measured is not None:
            return measured
        return max(elements * self._g.act_width / self._rates[kernel], self._g.launch)

    def _kernels(self, tokens: int) -> list[tuple[str, dict[str, int], float, int]]:
        """(kernel, shape on one rank, elements read + written, calls per step) of each small op."""
        g = self._g
        m, h, t = g.model, g.model.hidden_size, tokens
        layers = m.num_layers
        measured_norms = self._calibrated is not None and self._calibrated.covers_small_op("rms_norm")
        if g.cfg.extras.fused_add_norm and not measured_norms:
            # one kernel adds the residual and normalises: reads x and the residual, writes both
            ops: list[tuple[str, dict[str, int], float, int]] = [("rms_norm", {"T": t, "D": h}, 4.0 * t * h, 2 * layers)]
        else:  # a calibration table times the kernels it measured: the norm and the add apart
            ops = [("rms_norm", {"T": t, "D": h}, 2.0 * t * h, 2 * layers),
                   ("residual_add", {"T": t, "D": h}, 3.0 * t * h, 2 * layers)]
        if g.full_layers:
            shape = {"T": t, "H": g.heads, "HKV": g.kv_heads, "D": g.qk_dim}
            elements = 2.0 * t * (g.heads + g.kv_heads) * g.qk_dim
            ops.append(("rope", shape, elements, g.full_layers))
        if m.num_dense_mlp_layers:
            width = m.intermediate_size // g.tp
            ops.append(("silu_mul", {"T": t, "D": width}, 3.0 * t * width, m.num_dense_mlp_layers))
        if m.num_moe_layers:  # every routed (and shared) expert's activation, one grouped kernel
            width = m.moe_intermediate_size // g.tp
            rows = t * (m.experts_per_token + m.num_shared_experts)
            ops.append(("silu_mul", {"T": rows, "D": width}, 3.0 * rows * width, m.num_moe_layers))
        return ops
