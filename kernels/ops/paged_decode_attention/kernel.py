"""Decode attention over a quantised, paged KV cache (one query token per sequence, GQA).

One program per (sequence, KV head) serves that head's group of G = H / HKV query heads. It walks the
sequence's blocks through the block table, 16 tokens at a time, dequantises K and V on the fly
(int8 * scale; e4m3 and bf16 decoded from their bits with `fp_formats`' integer operations, since the
interpreter's FP8/BF16 casts cannot be trusted; fp32 as is) and keeps an online softmax (running max,
running sum, rescaled accumulator) in FP32. Slots past the context length are masked on load (the
cache may hold anything there) and their scores set to -inf.

Why the head split is exact: a program's arithmetic depends only on its own query heads and KV head,
never on how many heads the launch has, so running heads [0:H/2] and [H/2:H] as two launches gives the
same bits as one launch over all H. `tests/kernels/test_paged_attention.py` checks it.

The products q.k and p.v are broadcast multiplies with sums over D and over the block's tokens rather
than `tl.dot`, because G is often below the 16-row minimum of `tl.dot` and the kernel is memory-bound.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from infralab.errors import InputError
from infralab.kernels.fp_formats import bf16_decode, fp8e4m3_decode
from infralab.kernels.ops.kv_quantize.kernel import (
    BLOCK_SIZE,
    KV_DTYPES,
    SCALED,
    STORAGE_DTYPE,
    PagedKV,
    build_paged_cache,
    check_kv_dtype,
    dequantize_kv,
    kv_bytes_per_token,
)
from infralab.kernels.ops.w8a8_matmul.kernel import check_out

_KV_KIND = {"int8": 0, "fp8e4m3": 1, "bf16": 2, "fp32": 3}


@triton.jit
def _dequant(raw, scale, KV_KIND: tl.constexpr):
    """Payload block -> FP32 (scale is per row/token, already loaded; ignored when unscaled)."""
    if KV_KIND == 0:
        out = raw.to(tl.float32) * scale[:, None]
    elif KV_KIND == 1:
        out = fp8e4m3_decode(raw) * scale[:, None]
    elif KV_KIND == 2:
        out = bf16_decode(raw)
    else:
        out = raw
    return out


@triton.jit
def _paged_decode_kernel(q_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, table_ptr, lens_ptr, o_ptr, sm_scale,
                         G, D,
                         stride_qb, stride_qh, stride_qd,
                         stride_kb, stride_kt, stride_kh, stride_kd,
                         stride_vb, stride_vt, stride_vh, stride_vd,
                         stride_ksb, stride_kst, stride_ksh,
                         stride_vsb, stride_vst, stride_vsh,
                         stride_tb, stride_tj,
                         stride_ob, stride_oh, stride_od,
                         KV_KIND: tl.constexpr, HAS_SCALE: tl.constexpr,
                         BLOCK_T: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    g_ok = g < G
    d_ok = d < D
    heads = kv_head * G + g
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :] * stride_qd,
                mask=g_ok[:, None] & d_ok[None, :], other=0.0)
    ctx = tl.load(lens_ptr + b)
    m_i = tl.full((BLOCK_G,), -float("inf"), tl.float32)
    l_i = tl.zeros((BLOCK_G,), tl.float32)
    acc = tl.zeros((BLOCK_G, BLOCK_D), tl.float32)
    for j in range(0, tl.cdiv(ctx, BLOCK_T)):
        block = tl.load(table_ptr + b * stride_tb + j * stride_tj).to(tl.int64)
        t_ok = j * BLOCK_T + t < ctx
        kv_mask = t_ok[:, None] & d_ok[None, :]
        k_offs = block * stride_kb + kv_head * stride_kh + t[:, None] * stride_kt + d[None, :] * stride_kd
        v_offs = block * stride_vb + kv_head * stride_vh + t[:, None] * stride_vt + d[None, :] * stride_vd
        k_raw = tl.load(k_ptr + k_offs, mask=kv_mask, other=0)
        v_raw = tl.load(v_ptr + v_offs, mask=kv_mask, other=0)
        if HAS_SCALE:
            k_s = tl.load(ks_ptr + block * stride_ksb + t * stride_kst + kv_head * stride_ksh, mask=t_ok, other=0.0)
            v_s = tl.load(vs_ptr + block * stride_vsb + t * stride_vst + kv_head * stride_vsh, mask=t_ok, other=0.0)
        else:
            k_s = tl.zeros((BLOCK_T,), tl.float32)
            v_s = tl.zeros((BLOCK_T,), tl.float32)
        k = _dequant(k_raw, k_s, KV_KIND)
        v = _dequant(v_raw, v_s, KV_KIND)
        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * sm_scale  # [G, T]
        scores = tl.where(t_ok[None, :], scores, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))  # finite: every visited block has a valid token
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + b * stride_ob + heads[:, None] * stride_oh + d[None, :] * stride_od, out,
             mask=g_ok[:, None] & d_ok[None, :])


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} tensor of shape {tuple(t.shape)}"
    return type(t).__name__


def _require(t: object, name: str, dtype: torch.dtype, shape: tuple[int | None, ...], form: str) -> torch.Tensor:
    """InputError unless t is a tensor of `dtype` whose shape matches `shape` (None = any size)."""
    ok = (isinstance(t, torch.Tensor) and t.dtype == dtype and t.dim() == len(shape)
          and all(want is None or want == got for want, got in zip(shape, t.shape)))
    if not ok:
        raise InputError(f"paged_decode_attention: {name}", f"got {_describe(t)}", f"a {dtype} tensor {form}")
    return t  # type: ignore[return-value]


def _check_inputs(q, k_cache, v_cache, k_scale, v_scale, block_table, context_lens,
                  kv_dtype, check_tables: bool = True) -> tuple[int, int, int, int]:
    """Validate shapes and dtypes, and (if `check_tables`) the lengths and block ids; returns (B, H, HKV, D)."""
    check_kv_dtype(kv_dtype, "paged_decode_attention")
    _require(q, "q", torch.float32, (None, None, None), "[B, H, D]")
    batch, heads, d = q.shape
    store = STORAGE_DTYPE[kv_dtype]
    _require(k_cache, "k_cache", store, (None, BLOCK_SIZE, None, d),
             f"[num_blocks, {BLOCK_SIZE}, HKV, D={d}] holding {kv_dtype} payloads")
    num_blocks, _, hkv, _ = k_cache.shape
    _require(v_cache, "v_cache", store, tuple(k_cache.shape), f"of k_cache's shape {tuple(k_cache.shape)}")
    if hkv == 0 or heads % hkv:
        raise InputError("paged_decode_attention: q", f"H={heads} query heads over HKV={hkv} KV heads",
                         "H a positive multiple of HKV")
    if SCALED[kv_dtype]:
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            _require(s, name, torch.float32, (num_blocks, BLOCK_SIZE, hkv), f"[{num_blocks}, {BLOCK_SIZE}, {hkv}]")
    _require(block_table, "block_table", torch.int32, (batch, None), f"[B={batch}, max_blocks]")
    _require(context_lens, "context_lens", torch.int32, (batch,), f"[B={batch}]")
    tensors = [t for t in (q, k_cache, v_cache, k_scale, v_scale, block_table, context_lens) if t is not None]
    if len({t.device for t in tensors}) != 1:
        raise InputError("paged_decode_attention: inputs", "are on several devices", "all tensors on one device")
    if not check_tables:
        return batch, heads, hkv, d
    lens = context_lens.cpu().to(torch.int64)
    capacity = block_table.shape[1] * BLOCK_SIZE
    if batch and (lens.min() < 1 or lens.max() > capacity):
        raise InputError("paged_decode_attention: context_lens", f"got values in [{lens.min()}, {lens.max()}]",
                         f"lengths in [1, {capacity}] (max_blocks * {BLOCK_SIZE})")
    used = torch.arange(block_table.shape[1])[None, :] * BLOCK_SIZE < lens[:, None]
    ids = block_table.cpu()[used]
    if ids.numel() and (ids.min() < 0 or ids.max() >= num_blocks):
        raise InputError("paged_decode_attention: block_table", f"references block ids in [{ids.min()}, {ids.max()}]",
                         f"ids in [0, {num_blocks}) for every block within a context length")
    return batch, heads, hkv, d


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           k_scale: torch.Tensor | None, v_scale: torch.Tensor | None,
                           block_table: torch.Tensor, context_lens: torch.Tensor, kv_dtype: str,
                           sm_scale: float | None = None, num_warps: int = 4,
                           out: torch.Tensor | None = None, check_tables: bool = True) -> torch.Tensor:
    """Triton: o [B, H, D] FP32 = softmax(q k^T * sm_scale) v over each sequence's cached tokens.

    q [B, H, D] FP32; caches and scales as in `kv_quant` (scales may be None for bf16/fp32);
    sm_scale defaults to 1/sqrt(D). Any strides are accepted (e.g. a slice of the KV heads).
    `out`, if given, is a float32 [B, H, D] tensor (any strides) that receives o; nothing outside it is written.
    `check_tables=False` skips the checks of context_lens and block-table ids, which copy both to the host
    (a device sync): for timing loops over inputs already checked once. Unchecked bad ids read out of bounds.
    """
    batch, heads, hkv, d = _check_inputs(q, k_cache, v_cache, k_scale, v_scale, block_table, context_lens, kv_dtype,
                                         check_tables)
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    o = check_out(out, "paged_decode_attention", (batch, heads, d), q.device)
    if batch == 0 or heads == 0 or d == 0:
        return o
    group = heads // hkv
    has_scale = SCALED[kv_dtype]
    ks = k_scale if has_scale else k_cache  # unused pointer when unscaled
    vs = v_scale if has_scale else v_cache
    ks_strides = k_scale.stride() if has_scale else (0, 0, 0)
    vs_strides = v_scale.stride() if has_scale else (0, 0, 0)
    # int8/uint8/int16 payloads are integer bits; the kernel decodes them itself
    _paged_decode_kernel[(batch, hkv)](
        q, k_cache, v_cache, ks, vs, block_table, context_lens, o, scale, group, d,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *ks_strides, *vs_strides,
        *block_table.stride(), *o.stride(),
        KV_KIND=_KV_KIND[kv_dtype], HAS_SCALE=has_scale, BLOCK_T=BLOCK_SIZE,
        BLOCK_G=triton.next_power_of_2(group), BLOCK_D=triton.next_power_of_2(d), num_warps=num_warps)
    return o


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """q [H, D], k/v [T, HKV, D] (same dtype) -> [H, D]; GQA by repeating each KV head G times."""
    group = q.shape[0] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,thd->ht", q, k) * sm_scale
    return torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v)


def paged_decode_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               k_scale: torch.Tensor | None, v_scale: torch.Tensor | None,
                               block_table: torch.Tensor, context_lens: torch.Tensor, kv_dtype: str,
                               sm_scale: float | None = None,
                               compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Torch reference: gather each sequence's tokens through the block table, dequantise to FP32
    (the kernel's exact values), then plain softmax attention in `compute_dtype` (float64 for truth)."""
    batch, heads, _, d = _check_inputs(q, k_cache, v_cache, k_scale, v_scale, block_table, context_lens, kv_dtype)
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    out = torch.empty((batch, heads, d), dtype=compute_dtype, device=q.device)
    for b in range(batch):
        n = int(context_lens[b])
        pos = torch.arange(n, device=q.device)
        blocks = block_table[b, pos // BLOCK_SIZE].to(torch.int64)
        slot = pos % BLOCK_SIZE
        kv = []
        for cache, s in ((k_cache, k_scale), (v_cache, v_scale)):
            scales = s[blocks, slot] if SCALED[kv_dtype] else None
            kv.append(dequantize_kv(cache[blocks, slot], scales, kv_dtype).to(compute_dtype))
        out[b] = _attend(q[b].to(compute_dtype), kv[0], kv[1], scale)
    return out.to(torch.float32) if compute_dtype == torch.float32 else out


def dense_decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, context_lens: torch.Tensor,
                           sm_scale: float | None = None, compute_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Attention of q [B, H, D] over unquantised dense k, v [B, L, HKV, D] (first context_lens[b] tokens):
    the "FP32 attention" that the quantised formats are measured against (float64 arithmetic by default)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    return torch.stack([
        _attend(q[b].to(compute_dtype), k[b, :n].to(compute_dtype), v[b, :n].to(compute_dtype), scale)
        for b, n in enumerate(int(x) for x in context_lens)
    ])


def run_paged(q: torch.Tensor, cache: PagedKV, sm_scale: float | None = None) -> torch.Tensor:
    """`paged_decode_attention` over a `PagedKV` (convenience for harnesses)."""
    return paged_decode_attention(q, cache.k_cache, cache.v_cache, cache.k_scale, cache.v_scale,
                                  cache.block_table, cache.context_lens, cache.kv_dtype, sm_scale)


def kv_quant_report(batch: int = 4, heads: int = 8, kv_heads: int = 2, head_dim: int = 96,
                    context_lens: tuple[int, ...] = (37, 16, 100, 5), seed: int = 0,
                    device: str = "cpu") -> list[dict]:
    """Per kv_dtype: attention-output error against FP32 attention, and cache bytes per token.

    Data: q, k, v ~ N(0, 1) FP32. Truth: `dense_decode_attention` on the unquantised k, v in float64.
    Row: {"kv_dtype", "bytes_per_token" (one layer, K+V, scales included), "bytes_vs_fp32",
    "rel_fro", "max_abs" (kernel output vs truth), "kernel_vs_ref_max_abs" (kernel vs its torch
    reference on the same quantised cache: the kernel's own arithmetic error), "shape"}.
    """
    if len(context_lens) != batch:
        raise InputError("kv_quant_report: context_lens", f"got {len(context_lens)} lengths",
                         f"{batch} (one per sequence)")
    gen = torch.Generator().manual_seed(seed)
    max_len = max(context_lens)
    q = torch.randn(batch, heads, head_dim, generator=gen)
    k = torch.randn(batch, max_len, kv_heads, head_dim, generator=gen)
    v = torch.randn(batch, max_len, kv_heads, head_dim, generator=gen)
    lens = torch.tensor(context_lens, dtype=torch.int32)
    truth = dense_decode_attention(q, k, v, lens)
    fp32_bytes = kv_bytes_per_token("fp32", kv_heads, head_dim)
    rows = []
    for kv_dtype in KV_DTYPES:
        cache = build_paged_cache(k.to(device), v.to(device), lens.to(device), kv_dtype, spare_blocks=2,
                                  generator=torch.Generator().manual_seed(seed + 1))
        out = run_paged(q.to(device), cache).cpu().double()
        ref = paged_decode_attention_ref(q.to(device), cache.k_cache, cache.v_cache, cache.k_scale, cache.v_scale,
                                         cache.block_table, cache.context_lens, kv_dtype,
                                         compute_dtype=torch.float64).cpu()
        bytes_per_token = kv_bytes_per_token(kv_dtype, kv_heads, head_dim)
        rows.append({
            "kv_dtype": kv_dtype,
            "bytes_per_token": bytes_per_token,
            "bytes_vs_fp32": bytes_per_token / fp32_bytes,
            "rel_fro": float(torch.linalg.norm((out - truth).flatten()) / torch.linalg.norm(truth.flatten())),
            "max_abs": float((out - truth).abs().max()),
            "kernel_vs_ref_max_abs": float((out - ref).abs().max()),
            "shape": f"B={batch} H={heads} HKV={kv_heads} D={head_dim} ctx={list(context_lens)}",
        })
    return rows
