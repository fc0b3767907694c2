"""Work formulas of the kernels' operators, shared by `infralab.kernels` and `infralab.sim`.

Pure Python (no torch, triton, numpy, sim or kernels imports): the kernels write these counts into
every calibration row (`kernels bench`) and the simulator scales measured rows to other shapes with
them (`sim.calibration.scale`). One module, so the two parts cannot drift apart.

- `WorkCounts`: the one type for a call's static work (bytes, FLOPs, divisions, transcendentals,
  repeated elementwise work; for kernels whose launch plan is counted, also programs, state and
  loaded bytes), covering `steps` decode steps (1, or a ReplaySSM ring cycle).
- exact per-call counts of the GEMM, attention and KV-quantisation kernels (the KDA decode counts
  follow the Triton launch plan and live with that op, `kernels/ops/kda_decode/`);
- `scaling_work`: the leading terms the simulator uses to scale between shapes of one kernel.

Conventions of the exact counts:
- `bytes`: compulsory traffic, every input read and every output written once (the DRAM floor).
- `flops`: the operator's useful arithmetic; a multiply-add is 2 (integer MACs too). For 3xTF32 it
  is the same 2*M*N*K as FP32, so achieved TFLOP/s compare precisions at equal useful work (the three
  tensor-core products it runs are accounted for in the device peak of the "3xtf32" mode).
- `repeated_elementwise`: elementwise operations a tiling repeats on identical inputs. The matmul
  kernels round or split an operand tile each time a program loads it, so A is transformed once
  per N tile and B once per M tile; everything beyond the first time is repeated work.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TypeVar

F32, BF16, INT8 = 4, 2, 1  # bytes per element


@dataclass(frozen=True)
class Transcendentals:
    """Transcendental operations by kind (sigmoid is counted as its exp plus one division)."""

    exp: int = 0
    log: int = 0
    sqrt: int = 0
    rsqrt: int = 0

    @property
    def total(self) -> int:
        return self.exp + self.log + self.sqrt + self.rsqrt

    def __add__(self, other: Transcendentals) -> Transcendentals:
        return Transcendentals(self.exp + other.exp, self.log + other.log, self.sqrt + other.sqrt,
                               self.rsqrt + other.rsqrt)

    def scaled(self, times: int) -> Transcendentals:
        return Transcendentals(self.exp * times, self.log * times, self.sqrt * times, self.rsqrt * times)


@dataclass(frozen=True)
class WorkCounts:
    """Static work of one call (or of `steps` decode steps), independent of the device.

    `bytes` moved to/from device memory and `flops` (divisions included) as in the module's
    conventions; `divisions`, `transcendentals` and `repeated_elementwise` are the operations the
    KDA tuning story is about. The launch-plan fields are counted for the KDA decode kernels only
    (0 elsewhere): `programs` launched, `state_bytes` (the recurrent-state part of `bytes`),
    `bytes_loaded` (what every program loads and stores; the excess over `bytes` is repeated loads,
    mostly L2 hits) and `repeated_load_bytes`. `kernel`, `variant` and `shape` label the counts."""

    bytes: int
    flops: int
    divisions: int = 0
    transcendentals: Transcendentals = Transcendentals()
    repeated_elementwise: int = 0
    steps: int = 1
    programs: int = 0
    state_bytes: int = 0
    bytes_loaded: int = 0
    repeated_load_bytes: int = 0
    kernel: str = ""
    variant: str = ""
    shape: tuple[tuple[str, int], ...] = ()

    def per_step(self) -> dict[str, float]:
        """Work of one decode step (a ReplaySSM cycle divided by its steps), transcendentals as a total."""
        return {
            "bytes": self.bytes / self.steps,
            "bytes_loaded": self.bytes_loaded / self.steps,
            "flops": self.flops / self.steps,
            "divisions": self.divisions / self.steps,
            "transcendentals": self.transcendentals.total / self.steps,
            "repeated_elementwise": self.repeated_elementwise / self.steps,
            "programs": self.programs / self.steps,
        }

    def as_dict(self) -> dict[str, object]:
        """Flat, JSON-ready form (shape as a mapping, transcendentals by kind plus a total)."""
        out = asdict(self)
        out["shape"] = dict(self.shape)
        out["transcendentals"] = {**asdict(self.transcendentals), "total": self.transcendentals.total}
        return out


# ---- GEMMs -----------------------------------------------------------------------------------------

# Elementwise operations per element of the in-kernel TF32 transforms (`tf32.tf32_round`:
# shift, and, two adds, mask, NaN test, select; `tf32_split`: two roundings and a subtraction).
TF32_ROUND_OPS = 7
TF32_SPLIT_OPS = 2 * TF32_ROUND_OPS + 1
_TRANSFORM_OPS = {"fp32": 0, "tf32": TF32_ROUND_OPS, "3xtf32": TF32_SPLIT_OPS}


_Count = TypeVar("_Count", int, float)


def gemm_elements(m: _Count, n: _Count, k: _Count) -> _Count:
    """Elements of A [M,K], B [K,N] and C [M,N]: each read or written once."""
    return m * k + k * n + m * n


def matmul_counts(precision: str, m: int, n: int, k: int, block_m: int, block_n: int) -> WorkCounts:
    """`matmul(a, b, precision)` with (block_m, block_n) output tiles: FP32 A [M,K], B [K,N], C [M,N]."""
    ops = _TRANSFORM_OPS[precision]
    repeats = m * k * (math.ceil(n / block_n) - 1) + k * n * (math.ceil(m / block_m) - 1)
    return WorkCounts(bytes=F32 * gemm_elements(m, n, k), flops=2 * m * n * k, repeated_elementwise=ops * repeats)


def torch_matmul_counts(dtype: str, m: int, n: int, k: int) -> WorkCounts:
    """torch.matmul baseline in `dtype` ("fp32" or "bf16"): operands and result in that dtype."""
    width = F32 if dtype == "fp32" else BF16
    return WorkCounts(bytes=width * gemm_elements(m, n, k), flops=2 * m * n * k)


def w8a8_counts(m: int, n: int, k: int) -> WorkCounts:
    """`w8a8_matmul`: int8 A [M,K] and B [K,N], FP32 scales [M] and [N], FP32 C [M,N]; 2 int ops per
    multiply-add; the epilogue's two scale multiplies per output are counted too."""
    return WorkCounts(bytes=INT8 * (m * k + k * n) + F32 * (m + n + m * n), flops=2 * m * n * k + 2 * m * n)


# ---- attention and the KV cache ----------------------------------------------------------------------


def paged_attention_counts(kv_bytes_per_token: int, scaled: bool, batch: int, heads: int, kv_heads: int,
                           head_dim: int, context: int, block_size: int) -> WorkCounts:
    """`paged_decode_attention` with every sequence at `context` tokens; `kv_bytes_per_token` is one
    token's K+V bytes across the KV heads (scales included), as `kv_quant.kv_bytes_per_token` gives it.

    One program per (sequence, KV head) dequantises each K/V element once and shares it with the
    G = H/HKV query heads of its group, so no elementwise work is repeated."""
    blocks = math.ceil(context / block_size)
    qo_bytes = 2 * batch * heads * head_dim * F32
    table_bytes = batch * (blocks + 1) * 4  # block-table entries and the context length (int32)
    products = 4 * batch * heads * context * head_dim  # q.k and p.v, a multiply-add each
    dequant = 2 * batch * kv_heads * context * head_dim if scaled else 0  # payload * scale, K and V
    return WorkCounts(
        bytes=batch * context * kv_bytes_per_token + qo_bytes + table_bytes,
        flops=products + dequant,
        divisions=batch * heads * head_dim,  # the final acc / l
        # exp per score, plus the rescale per block
        transcendentals=Transcendentals(exp=batch * heads * (context + blocks)),
    )


def kv_quantize_counts(payload_bytes: int, scaled: bool, tokens: int, kv_heads: int, head_dim: int) -> WorkCounts:
    """`quantize_kv` of FP32 x [T, HKV, D]: per (token, head) an absmax, a scale (one division) and a
    division per element for the scaled formats; bf16 is pure bit work (no floating-point ops)."""
    elements = tokens * kv_heads * head_dim
    rows = tokens * kv_heads
    out_bytes = payload_bytes * elements + (F32 * rows if scaled else 0)
    if not scaled:
        return WorkCounts(bytes=F32 * elements + out_bytes, flops=0)
    return WorkCounts(
        bytes=F32 * elements + out_bytes,
        flops=3 * elements + rows,  # abs, max, x / scale; absmax / qmax
        divisions=elements + rows,
    )


# ---- scaling between shapes (the simulator's calibration lookup) ---------------------------------------


# Elements one token touches in each per-layer elementwise kernel (read + written).
_ELEMENTWISE = {
    "rms_norm": lambda g: 2.0 * g("D", 1),
    "silu_mul": lambda g: 3.0 * g("D", 1),  # gate and up in, product out
    "residual_add": lambda g: 3.0 * g("D", 1),
    "rope": lambda g: 2.0 * (g("H", 1) + g("HKV", 1)) * g("D", 1),  # q and k rotated in place
}


def scaling_work(kernel: str, shape: Mapping[str, float]) -> tuple[float, float]:
    """Work of one call as (flops, bytes) up to a constant factor per kernel, for scaling a measured
    row to another shape of the same kernel (only ratios between shapes are used, so element widths
    cancel). Missing shape fields count as 1 (L as 0). The leading terms per kernel:

    - matmul: 2*M*N*K flops; A, B and C read/written once (`gemm_elements`).
    - w8a8_matmul: same flops; 1-byte A and B, 4-byte (FP32) C.
    - kda_decode: per sequence and head a K x V state read and written, ~8 K*V flops; with a replay
      ring of L updates (`L`), a checkpoint state plus L (k, v) pairs, and L+1 state-sized updates.
    - paged_decode_attention: K and V of T tokens per KV head read; 4*D flops per query head, token.
    - kv_quantize: T*HKV*D elements read and written.
    - prefill_attention (one sequence's chunk of Q new tokens at total context T): 4*D flops per
      query head and causal query-key pair; K and V of T tokens read, queries and outputs once.
    - all_reduce (W ranks, N elements): a ring moves 2*(W-1)/W*N elements per rank; no flops.
    - send_recv: N elements.
    - rms_norm, silu_mul, residual_add, rope (T tokens): elementwise over T rows of their widths.
    Unknown kernels scale with the product of their shape fields.
    """
    g = shape.get
    if kernel == "matmul":
        m, n, k = g("M", 1), g("N", 1), g("K", 1)
        return 2.0 * m * n * k, float(gemm_elements(m, n, k))
    if kernel == "w8a8_matmul":
        m, n, k = g("M", 1), g("N", 1), g("K", 1)
        return 2.0 * m * n * k, m * k + k * n + 4.0 * m * n
    if kernel == "kda_decode":
        b, h, dk, dv, ring = g("B", 1), g("H", 1), g("K", 1), g("V", 1), g("L", 0)
        state = b * h * dk * dv
        return 8.0 * state * (ring + 1), 2.0 * state + b * h * (ring + 2) * (dk + dv)
    if kernel == "paged_decode_attention":
        b, h, hkv, d, t = g("B", 1), g("H", 1), g("HKV", 1), g("D", 1), g("T", 1)
        return 4.0 * b * h * t * d, 2.0 * b * hkv * t * d + 2.0 * b * h * d
    if kernel == "kv_quantize":
        elems = g("T", 1) * g("HKV", 1) * g("D", 1)
        return float(elems), 2.0 * elems
    if kernel == "prefill_attention":
        q, t, h, hkv, d = g("Q", 1), g("T", 1), g("H", 1), g("HKV", 1), g("D", 1)
        pairs = q * (t - q) + q * (q + 1) / 2.0
        return 4.0 * h * d * pairs, 2.0 * hkv * t * d + 2.0 * h * q * d
    if kernel == "all_reduce":
        w, n = g("W", 2), g("N", 1)
        return 0.0, 2.0 * (w - 1) / w * n
    if kernel == "send_recv":
        return 0.0, float(g("N", 1))
    if kernel in _ELEMENTWISE:
        elements = g("T", 1) * _ELEMENTWISE[kernel](g)
        return elements, elements
    product = float(math.prod(shape.values())) if shape else 1.0
    return product, product


# ---- KV-cache formats (one vocabulary for kernels and simulator) ---------------------------------------

#: The KV-cache formats the `kv_quantize` / `paged_decode_attention` kernels implement, by the one name
#: both the kernels and the simulator use (`cost.kv_layer_dtypes`, `cost.kv_dtype`): payload bytes per
#: element and whether a float32 scale per (token, head) comes with it (absmax scaling).
KV_PAYLOAD_BYTES: Mapping[str, int] = {"int8": 1, "fp8e4m3": 1, "bf16": 2, "fp32": 4}
KV_SCALED: Mapping[str, bool] = {"int8": True, "fp8e4m3": True, "bf16": False, "fp32": False}
KV_CACHE_DTYPES: tuple[str, ...] = tuple(KV_PAYLOAD_BYTES)
KV_SCALE_BYTES = F32  # one float32 scale per (token, head) and per cached tensor


def kv_cache_bytes(kv_dtype: str, tensors: int, heads: int, head_dim: int) -> int:
    """Bytes one token occupies in one layer's cache: `tensors` cached tensors (2 for GQA's K and V,
    1 for MLA's latent) of `heads` x `head_dim` elements, plus a scale per (tensor, head) for the
    scaled formats. `kv_dtype` is one of KV_CACHE_DTYPES (KeyError otherwise: callers check names)."""
    per_head = head_dim * KV_PAYLOAD_BYTES[kv_dtype] + (KV_SCALE_BYTES if KV_SCALED[kv_dtype] else 0)
    return tensors * heads * per_head


def kv_dequant_flops(kv_dtype: str, elements: int) -> int:
    """Multiplies that dequantise `elements` cached elements (payload x scale, one each; 0 unscaled),
    as `paged_attention_counts` counts them."""
    return elements if KV_SCALED[kv_dtype] else 0


# ---- ReplaySSM (kernels/ops/kda_decode/replay_ssm.py) -------------------------------------------------------------------


def replay_ssm_state_bytes(heads: int, head_k: int, head_v: int, ring_len: int) -> int:
    """Bytes per sequence of ReplaySSM over `heads` heads: the float32 K x V checkpoint plus a ring of
    `ring_len` slots of (k_hat [K], cumulative log-decay G [K], d [V]) float32 each."""
    return heads * (head_k * head_v + ring_len * (2 * head_k + head_v)) * F32


def replay_ssm_cycle_bytes(batch: int, heads: int, head_k: int, head_v: int, ring_len: int) -> int:
    """Compulsory traffic (bytes) of one ReplaySSM ring cycle (`ring_len` decode steps and the flush
    that ends it) for `batch` sequences: per (sequence, head) each step reads the checkpoint (K*V),
    the filled slots (0 + 1 + ... + L-1 of them, 2K + V floats each) and G_{t-1} (all steps but the
    first) and writes one slot; the flush reads the checkpoint, G_L and the whole ring once and
    writes the checkpoint; per step the inputs q, k, g (K each), v and o (V each), b, and per head
    dt_bias and A_log."""
    pairs, kv, slot = batch * heads, head_k * head_v, 2 * head_k + head_v
    state_floats = ring_len * kv + 2 * kv
    ring_floats = (ring_len * (ring_len - 1) // 2) * slot + (ring_len - 1) * head_k + ring_len * slot
    ring_floats += head_k + ring_len * slot
    io_floats = ring_len * (pairs * (3 * head_k + 2 * head_v + 1) + heads * (head_k + 1))
    return (pairs * (state_floats + ring_floats) + io_floats) * F32


def replay_ssm_cycle_flops(batch: int, heads: int, head_k: int, head_v: int, ring_len: int) -> int:
    """Useful arithmetic of one ReplaySSM ring cycle at logical (unpadded) widths: per (sequence,
    head) and step, the q/k normalisation and gating (~12K), the replay weights over the ring
    (~4LK + 2L(K-1) + 4K), the two checkpoint products with their K reductions (4KV - 2V) and the
    two ring products with their L reductions (4LV - 2V), plus the flush (K*V + L(2K + 2KV)).
    The kernels' own counts (`kernels/work_counts.kda_replay_counts`) add the lanes their
    power-of-two tiles pad; for power-of-two K, V and L the two agree on the leading terms."""
    k, v, ring = head_k, head_v, ring_len
    prologue = 2 * (2 * k) + 1 + 2 * k + 3 + 8 * k + 1
    weights = 4 * ring * k + 2 * ring * (k - 1) + (2 * k - 1) + 2 * k
    products = 2 * k * v + 2 * (k - 1) * v + 2 * ring * v + 2 * (ring - 1) * v + 6 * v
    flush = k * v + ring * (2 * k + 2 * k * v)
    return batch * heads * (ring * (prologue + weights + products) + flush)
