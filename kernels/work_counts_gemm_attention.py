"""Static work counts of the kernels `work_counts.py` (KDA decode, ReplaySSM) does not cover:
matmul in three precisions (and torch's own matmul as a baseline), W8A8 matmul, paged decode
attention and KV quantisation. Plain functions of the shape; the benchmark writes them into the
calibration table beside each measured time.

Conventions (as in `work_counts`, where they apply):
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

from infralab.kernels.calibration import WorkCounts

F32, BF16, INT8 = 4, 2, 1

# Elementwise operations per element of the in-kernel TF32 transforms (`tf32.tf32_round`:
# shift, and, two adds, mask, NaN test, select; `tf32_split`: two roundings and a subtraction).
TF32_ROUND_OPS = 7
TF32_SPLIT_OPS = 2 * TF32_ROUND_OPS + 1
_TRANSFORM_OPS = {"fp32": 0, "tf32": TF32_ROUND_OPS, "3xtf32": TF32_SPLIT_OPS}


def matmul_counts(precision: str, m: int, n: int, k: int, block_m: int, block_n: int) -> WorkCounts:
    """`matmul(a, b, precision)` with (block_m, block_n) output tiles: FP32 A [M,K], B [K,N], C [M,N]."""
    ops = _TRANSFORM_OPS[precision]
    repeats = m * k * (math.ceil(n / block_n) - 1) + k * n * (math.ceil(m / block_m) - 1)
    return WorkCounts(bytes=F32 * (m * k + k * n + m * n), flops=2 * m * n * k, repeated_elementwise=ops * repeats)


def torch_matmul_counts(dtype: str, m: int, n: int, k: int) -> WorkCounts:
    """torch.matmul baseline in `dtype` ("fp32" or "bf16"): operands and result in that dtype."""
    width = F32 if dtype == "fp32" else BF16
    return WorkCounts(bytes=width * (m * k + k * n + m * n), flops=2 * m * n * k)


def w8a8_counts(m: int, n: int, k: int) -> WorkCounts:
    """`w8a8_matmul`: int8 A [M,K] and B [K,N], FP32 scales [M] and [N], FP32 C [M,N]; 2 int ops per
    multiply-add; the epilogue's two scale multiplies per output are counted too."""
    return WorkCounts(bytes=INT8 * (m * k + k * n) + F32 * (m + n + m * n), flops=2 * m * n * k + 2 * m * n)


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
        transcendentals=batch * heads * (context + blocks),  # exp per score, plus the rescale per block
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
