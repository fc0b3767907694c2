"""The calibration table as the cost model reads it: which measured kernel stands for which
operator (`Calibration`), and the lookup of one kernel's rows (`CalibratedKernel`). Where a table
has rows for an operator, the measurement replaces that operator's roofline, never below what the
same work takes at 100 % of peak (docs/calibration.md; `CostModel.calibrated_ops`)."""

from __future__ import annotations

import math

from infralab.sim.calibration import CalibrationRow, CalibrationTable, scale, shape_key
from infralab.sim.cost.geometry import Geometry, attention_dtype
from infralab.sim.cost.small_ops import SMALL_OP_KERNELS
from infralab.sim.specs import DTYPE_BYTES

W8A8_DTYPES = ("int8", "fp8e4m3")  # weight dtypes whose GEMMs run 8-bit x 8-bit (W8A8)
# Calibration tables and the cost config use one dtype vocabulary (infralab.work_formulas).
_TABLE_DTYPE = {name: name for name in DTYPE_BYTES}
# BF16 and FP16 run at the same tensor-core and memory rate on A100/H100/H200 (datasheets): rows
# of one stand in for the other (Vidur profiles in FP16, most runs are BF16).
_SAME_RATE = {"bf16": ("bf16", "fp16"), "fp16": ("fp16", "bf16")}


def _table_dtypes(dtype: str) -> tuple[str, ...]:
    """Table dtypes whose rows time `dtype` (a cost-config dtype), preferred first."""
    return _SAME_RATE.get(dtype, (_TABLE_DTYPE[dtype],))


def _bucket(value: float) -> float:
    """`value` rounded to the nearest power of 2^(1/4) (steps of ~19 %): the granularity at which
    the nearest calibration row is chosen and memoised."""
    bucket: float = 2.0 ** (round(4.0 * math.log2(max(value, 1.0))) / 4.0)
    return bucket


class CalibratedKernel:
    """One kernel family of a table, bound to the first of `dtypes` it has rows for on the device.

    Exact shapes are looked up directly; otherwise the nearest rows are chosen once per shape
    bucket and the query's own shape is scaled at their rate (results are exact per shape, while
    the search runs once per bucket). Results are memoised per shape (the memo is cleared when it
    reaches `MEMO_LIMIT` entries, to bound memory over long runs)."""

    MEMO_LIMIT = 1 << 16

    def __init__(self, table: CalibrationTable, kernel: str, dtypes: tuple[str, ...], device: str,
                 peaks: tuple[float, float]) -> None:
        self.table, self.kernel, self.device, self.peaks = table, kernel, device, peaks
        self.dtype = next((d for d in dtypes if table.covers(kernel, d, device)), None)
        self._nearest: dict[tuple[tuple[str, float], ...], list[CalibrationRow]] = {}
        self._memo: dict[tuple[int, ...], float | None] = {}

    @property
    def active(self) -> bool:
        return self.dtype is not None

    def time(self, shape: dict[str, int]) -> float | None:
        """Seconds of one call at `shape` (callers name the fields in a fixed order), or None."""
        if self.dtype is None:
            return None
        memo_key = tuple(shape.values())
        if memo_key in self._memo:
            return self._memo[memo_key]
        result = self._measure(shape)
        if len(self._memo) >= self.MEMO_LIMIT:
            self._memo.clear()
        self._memo[memo_key] = result
        return result

    def _measure(self, shape: dict[str, int]) -> float | None:
        assert self.dtype is not None
        key = shape_key(shape)
        measured = self.table.exact(self.kernel, self.dtype, self.device, key)
        if measured is not None:
            return measured
        measured = self.table.along_line(self.kernel, self.dtype, self.device, shape, self.peaks)
        if measured is not None:
            return measured
        bucket = tuple((name, _bucket(value)) for name, value in key)
        rows = self._nearest.get(bucket)
        if rows is None:
            rows = self._nearest[bucket] = self.table.nearest(self.kernel, self.dtype, self.device, dict(bucket))
        if not rows:
            return None
        return min(scale(row, shape, self.peaks) for row in rows)


class Calibration:
    """The calibration table as the cost model uses it: which kernel stands for which operator."""

    def __init__(self, table: CalibrationTable, g: Geometry) -> None:
        accel, cfg = g.accel, g.cfg
        device, bw = accel.calibration_device, accel.hbm_bandwidth
        self._g = g
        peaks = (g.peak, bw)
        if cfg.dtype in W8A8_DTYPES:
            # W8A8 tables may be INT8 or FP8 (the same tensor-core rate on Hopper): one stands in for the other.
            others = tuple(d for d in W8A8_DTYPES if d != cfg.dtype)
            self._matmul = CalibratedKernel(table, "w8a8_matmul", (cfg.dtype, *others), device, peaks)
        else:
            self._matmul = CalibratedKernel(table, "matmul", _table_dtypes(cfg.dtype), device, peaks)
        # Attention rows by KV dtype, else the attention's compute dtype (never the weights' 8-bit one).
        kv_dtypes = (*_table_dtypes(cfg.kv_dtype), *_table_dtypes(attention_dtype(cfg)))
        attention_peaks = (g.attn_peak, bw)
        self._attention = CalibratedKernel(table, "paged_decode_attention", kv_dtypes, device, attention_peaks)
        self._prefill = CalibratedKernel(table, "prefill_attention", kv_dtypes, device, attention_peaks)
        act_dtypes = _table_dtypes("fp32" if cfg.dtype == "fp32" else "bf16")
        self._small = {k: CalibratedKernel(table, k, act_dtypes, device, peaks) for k in SMALL_OP_KERNELS}
        self._all_reduce = CalibratedKernel(table, "all_reduce", act_dtypes, device, peaks)
        # The KDA decode kernel keeps its state and arithmetic in FP32.
        self._kda = CalibratedKernel(table, "kda_decode", ("fp32", _TABLE_DTYPE[cfg.dtype]), device,
                                     (g.state_peak, bw))
        ops = set()
        if self._matmul.active:
            ops |= {"dense_gemm", "lm_head"} | ({"moe_experts"} if g.model.is_moe else set())
        self.decode_covered = self._attention.active and bool(g.full_layers)
        if (self.decode_covered or self._prefill.active) and g.full_layers:
            ops.add("attention")
        if any(kernel.active for kernel in self._small.values()) and cfg.extras.small_ops:
            ops.add("small_ops")
        if self._all_reduce.active and g.tp > 1:
            ops.add("tp_collectives")
        if self._kda.active and g.linear_layers:
            ops.add("linear_attention")
        self.ops = frozenset(ops)

    def gemm(self, n: int, k: int, m: int) -> float | None:
        """Seconds of one C[m, n] = A[m, k] @ W[k, n]."""
        return self._matmul.time({"M": m, "N": n, "K": k})

    def decode_attention(self, seqs: int, context: int) -> float | None:
        """Seconds of one layer's decode attention over `seqs` sequences (mean context per seq)."""
        g = self._g
        shape = {
            "B": seqs,
            "H": g.heads,
            "HKV": g.kv_heads,
            "D": g.kv_dim,
            "T": max(1, math.ceil(context / seqs)),
        }
        return self._attention.time(shape)

    def prefill_attention(self, new: int, context: int) -> float | None:
        """Seconds of one layer's prefill attention of one chunk of `new` tokens whose sequence
        holds `context` tokens after it (cached + new)."""
        g = self._g
        shape = {"Q": new, "T": context, "H": g.heads, "HKV": g.kv_heads, "D": g.kv_dim}
        return self._prefill.time(shape)

    def covers_small_op(self, kernel: str) -> bool:
        """Whether the table has rows for the small kernel `kernel` on this device."""
        return self._small[kernel].active

    def small_op(self, kernel: str, shape: dict[str, int]) -> float | None:
        """Seconds of one call of a per-layer elementwise kernel (SMALL_OP_KERNELS)."""
        return self._small[kernel].time(shape)

    def all_reduce(self, ranks: int, payload_bytes: float) -> float | None:
        """Seconds of one all-reduce of `payload_bytes` over `ranks` ranks (rows count elements
        of 2 bytes)."""
        return self._all_reduce.time({"W": ranks, "N": max(1, round(payload_bytes / 2))})

    def kda_decode(self, seqs: int) -> float | None:
        """Seconds of one layer's KDA decode step over `seqs` sequences."""
        d = self._g.model.linear_head_dim
        return self._kda.time({"B": seqs, "H": self._g.lin_heads, "K": d, "V": d})
