"""KV-cache quantisation per (token, head) and the paged cache layout the decode kernel reads.

Formats (`kv_dtype`), what a slot stores, and the rule (x is one head's D-vector of one token):

    "int8"    int8 payload,  scale = absmax/127, q = clamp(rne(x/scale), -127, 127)  (as W8A8 activations)
    "fp8e4m3" uint8 payload (e4m3fn bits), scale = absmax/448, q = fp8(x/scale), RNE and saturating
    "bf16"    int16 payload (bf16 bits), no scale: q = bf16(x), RNE
    "fp32"    float32 payload, no scale (the unquantised baseline)

An all-zero vector gets scale 1.0. Dequantisation is `float(q) * scale`: one FP32 rounding for the
scaled formats, exact for bf16 and fp32. Encoding uses the bit-operation codecs of `fp_formats`
(torch's own casts are only the test oracle), so the kernel's on-the-fly decoding and this file agree
on every bit.

Paged layout (vLLM style): `k_cache`, `v_cache` [num_blocks, BLOCK_SIZE=16, HKV, D] in the payload
dtype; `k_scale`, `v_scale` [num_blocks, 16, HKV] float32 (None for bf16/fp32);
`block_table` [B, max_blocks] int32 maps a sequence's logical block j to a physical block;
`context_lens` [B] int32. Token t of sequence b lives in block block_table[b, t // 16], slot t % 16.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infralab.errors import InputError
from infralab.kernels.fp_formats import (
    FP8_E4M3_MAX,
    FP8_E4M3_NAN_BITS,
    bf16_bits_to_fp32,
    fp8e4m3_bits_to_fp32,
    fp32_to_bf16_bits,
    fp32_to_fp8e4m3_bits,
)
from infralab.kernels.ops.w8a8_matmul.kernel import INT8_QMAX, quantize_rows_ref
from infralab.work_formulas import KV_CACHE_DTYPES, KV_SCALED, kv_cache_bytes

BLOCK_SIZE = 16
KV_DTYPES = KV_CACHE_DTYPES  # the one vocabulary (infralab.work_formulas), shared with the simulator
STORAGE_DTYPE = {"int8": torch.int8, "fp8e4m3": torch.uint8, "bf16": torch.int16, "fp32": torch.float32}
SCALED = KV_SCALED
_BF16_NAN_BITS = 0x7FC0


def check_kv_dtype(kv_dtype: object, where: str) -> str:
    """Return `kv_dtype` if it names a format, else raise InputError."""
    if kv_dtype not in KV_DTYPES:
        raise InputError(f"{where}: kv_dtype", f"got {kv_dtype!r}", f"one of {', '.join(KV_DTYPES)}")
    return kv_dtype  # type: ignore[return-value]


def kv_bytes_per_token(kv_dtype: str, hkv: int, d: int) -> int:
    """Cache bytes one token occupies in one layer: K and V payloads plus their scales (bytes)."""
    check_kv_dtype(kv_dtype, "kv_bytes_per_token")
    return kv_cache_bytes(kv_dtype, 2, hkv, d)


def quantize_kv(x: torch.Tensor, kv_dtype: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Quantise FP32 x [..., HKV, D] per (token, head): returns (payload [..., HKV, D], scale [..., HKV] or None)."""
    check_kv_dtype(kv_dtype, "quantize_kv")
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.dim() < 2:
        raise InputError("quantize_kv: x", f"got {getattr(x, 'dtype', type(x).__name__)}",
                         "a float32 tensor [..., HKV, D]")
    if kv_dtype == "fp32":
        return x.clone(), None
    if kv_dtype == "bf16":
        return fp32_to_bf16_bits(x), None
    rows = x.reshape(-1, x.shape[-1])
    if kv_dtype == "int8":
        q, scale = quantize_rows_ref(rows)
        return q.reshape(x.shape), scale.reshape(x.shape[:-1])
    absmax = rows.abs().amax(dim=1)
    scale = torch.where(absmax == 0, torch.ones_like(absmax), absmax / FP8_E4M3_MAX)
    q = fp32_to_fp8e4m3_bits(rows / scale[:, None])
    return q.reshape(x.shape), scale.reshape(x.shape[:-1])


def dequantize_kv(payload: torch.Tensor, scale: torch.Tensor | None, kv_dtype: str) -> torch.Tensor:
    """Inverse of `quantize_kv` up to the rounding: payload [..., D] (+ scale [...]) -> FP32 [..., D]."""
    check_kv_dtype(kv_dtype, "dequantize_kv")
    if kv_dtype == "fp32":
        return payload.to(torch.float32)
    if kv_dtype == "bf16":
        return bf16_bits_to_fp32(payload)
    values = payload.to(torch.float32) if kv_dtype == "int8" else fp8e4m3_bits_to_fp32(payload)
    return values * scale[..., None]


@dataclass(frozen=True)
class PagedKV:
    """One layer's paged, quantised KV cache plus the block table of the sequences in it."""

    k_cache: torch.Tensor  # [num_blocks, 16, HKV, D] payload dtype
    v_cache: torch.Tensor
    k_scale: torch.Tensor | None  # [num_blocks, 16, HKV] float32, or None for bf16/fp32
    v_scale: torch.Tensor | None
    block_table: torch.Tensor  # [B, max_blocks] int32
    context_lens: torch.Tensor  # [B] int32
    kv_dtype: str

    def kv_head_slice(self, lo: int, hi: int) -> PagedKV:
        """The same cache restricted to KV heads [lo, hi) (views, no copy): what one head-parallel rank holds."""
        def cut(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[:, :, lo:hi]
        return PagedKV(cut(self.k_cache), cut(self.v_cache), cut(self.k_scale), cut(self.v_scale),
                       self.block_table, self.context_lens, self.kv_dtype)


# (k_cache, v_cache, k_scale, v_scale); the scales are None for bf16/fp32
CacheTensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]


def allocate_paged_cache(num_blocks: int, hkv: int, d: int, kv_dtype: str,
                         device: str | torch.device = "cpu") -> CacheTensors:
    """Cache tensors for `num_blocks` blocks, filled with poison (NaN payloads, or NaN scales for int8),
    so that reading a slot that was never written shows up as NaN in the output instead of passing silently."""
    check_kv_dtype(kv_dtype, "allocate_paged_cache")
    shape = (num_blocks, BLOCK_SIZE, hkv, d)
    poison = {"int8": INT8_QMAX, "fp8e4m3": FP8_E4M3_NAN_BITS, "bf16": _BF16_NAN_BITS, "fp32": float("nan")}[kv_dtype]
    k = torch.full(shape, poison, dtype=STORAGE_DTYPE[kv_dtype], device=device)
    v = torch.full(shape, poison, dtype=STORAGE_DTYPE[kv_dtype], device=device)
    if not SCALED[kv_dtype]:
        return k, v, None, None
    k_scale = torch.full(shape[:3], float("nan"), dtype=torch.float32, device=device)
    return k, v, k_scale, k_scale.clone()


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k_scale: torch.Tensor | None, v_scale: torch.Tensor | None,
             k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor, kv_dtype: str) -> None:
    """Quantise FP32 k, v [T, HKV, D] and store token i at flat slot slots[i] = block * 16 + offset (in place)."""
    check_kv_dtype(kv_dtype, "write_kv")
    if k.shape != v.shape or k.dim() != 3 or tuple(k.shape[1:]) != tuple(k_cache.shape[2:]):
        raise InputError("write_kv: k, v", f"got shapes {tuple(k.shape)} and {tuple(v.shape)}",
                         f"two float32 tensors [T, {k_cache.shape[2]}, {k_cache.shape[3]}]")
    if slots.dim() != 1 or slots.shape[0] != k.shape[0]:
        raise InputError("write_kv: slots", f"got shape {tuple(slots.shape)}", f"[T] = [{k.shape[0]}] slot indices")
    capacity = k_cache.shape[0] * BLOCK_SIZE
    if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= capacity):
        raise InputError("write_kv: slots", f"got values in [{int(slots.min())}, {int(slots.max())}]",
                         f"slot indices in [0, {capacity}) (num_blocks * {BLOCK_SIZE})")
    for cache, scale, x in ((k_cache, k_scale, k), (v_cache, v_scale, v)):
        payload, s = quantize_kv(x, kv_dtype)
        cache.view(-1, *cache.shape[2:])[slots] = payload
        if s is not None:
            scale.view(-1, scale.shape[2])[slots] = s


def build_paged_cache(k: torch.Tensor, v: torch.Tensor, context_lens: torch.Tensor, kv_dtype: str,
                      spare_blocks: int = 0, generator: torch.Generator | None = None) -> PagedKV:
    """Fill a paged cache from dense FP32 k, v [B, L, HKV, D] whose first context_lens[b] tokens are real.

    Each sequence gets cdiv(len, 16) blocks; `spare_blocks` extra (poisoned) blocks are allocated and
    never referenced. With a `generator`, physical blocks are a random permutation (a shuffled block
    table, as after many allocations and frees); without one they are handed out in order. Unused
    block-table entries are -1.
    """
    check_kv_dtype(kv_dtype, "build_paged_cache")
    if k.dim() != 4 or k.shape != v.shape or k.dtype != torch.float32 or v.dtype != torch.float32:
        raise InputError("build_paged_cache: k, v", f"got {k.dtype} {tuple(k.shape)} and {v.dtype} {tuple(v.shape)}",
                         "two float32 tensors [B, L, HKV, D] of the same shape")
    batch, max_len, hkv, d = k.shape
    lens = [int(n) for n in context_lens.tolist()]
    if len(lens) != batch or any(n < 1 or n > max_len for n in lens):
        raise InputError("build_paged_cache: context_lens", f"got {lens}", f"{batch} lengths in [1, {max_len}]")
    blocks_per_seq = [-(-n // BLOCK_SIZE) for n in lens]
    num_blocks = sum(blocks_per_seq) + spare_blocks
    order = torch.randperm(num_blocks, generator=generator) if generator is not None else torch.arange(num_blocks)
    table = torch.full((batch, max(blocks_per_seq)), -1, dtype=torch.int32)
    k_cache, v_cache, k_scale, v_scale = allocate_paged_cache(num_blocks, hkv, d, kv_dtype, k.device)
    next_block = 0
    for b, (n, nblk) in enumerate(zip(lens, blocks_per_seq)):
        table[b, :nblk] = order[next_block:next_block + nblk].to(torch.int32)
        next_block += nblk
        pos = torch.arange(n)
        slots = table[b, pos // BLOCK_SIZE].to(torch.int64) * BLOCK_SIZE + pos % BLOCK_SIZE
        write_kv(k_cache, v_cache, k_scale, v_scale, k[b, :n], v[b, :n], slots.to(k.device), kv_dtype)
    return PagedKV(k_cache, v_cache, k_scale, v_scale, table.to(k.device),
                   torch.tensor(lens, dtype=torch.int32, device=k.device), kv_dtype)
