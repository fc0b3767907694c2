"""FP8 (e4m3fn) and BF16 encoding and decoding with integer bit operations, in torch and in Triton.

Why by hand: Triton's CPU interpreter converts FP32 -> FP8 and FP32 -> BF16 wrongly (it neither
rounds to nearest-even nor saturates), so a kernel that relied on `.to(tl.float8e4nv)` would have
different numerics on CPU and GPU. Doing the rounding on the FP32 bit pattern gives the same bits
everywhere. torch's own CPU conversions (`.to(torch.float8_e4m3fn)`, `.to(torch.bfloat16)`) are
correct and serve as the oracle in `tests/kernels/test_fp_formats.py`.

FP8 e4m3fn: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits, no infinities; 0x7F / 0xFF are NaN.
Largest finite value 448 (0x7E), smallest normal 2^-6 (0x08), subnormals are multiples of 2^-9
(0x01..0x07). Encoding rules used here (they match torch 2.13's CPU conversion on every non-NaN
input; torch 2.11's returns NaN for some inputs beyond the range, seen on an H200 image, so the tests
ask torch only inside it and check saturation against the rule below):

* round to nearest, ties to even, on the value (subnormals included);
* saturating: any finite value beyond +-448 after rounding, and +-inf, become +-448;
* NaN becomes 0x7F with the input's sign bit (both patterns are NaN in e4m3fn);
* -0.0 keeps its sign (0x80).

The normal range uses the carry trick `(a + 0x7FFFF + lsb) >> 20` on the FP32 magnitude `a`: adding
just under half of the dropped 20 bits plus the kept LSB rounds to nearest-even, and a carry out of the
mantissa bumps the exponent as it should. Subnormals (|x| < 2^-6) are the 24-bit significand shifted
right to units of 2^-9, rounded to nearest-even; the result 8 is exactly the encoding of 2^-6, so the
two ranges meet without a special case.

BF16: FP32's top 16 bits, rounded to nearest-even on the 16 dropped bits (overflow to inf, as IEEE
round-to-nearest does); NaN becomes a quiet NaN with its sign. BF16 bits travel as int16.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FP8_E4M3_MAX = 448.0
FP8_E4M3_NAN_BITS = 0x7F
_FP8_MAX_BITS = 0x7E  # 448
_FP8_MIN_NORMAL_F32_BITS = 0x3C800000  # 2^-6 as FP32 bits
_FP8_EXP_REBIAS = 127 - 7  # FP32 exponent bias minus e4m3 bias
_FP8_SUBNORMAL_UNIT = 2.0**-9
_F32_ABS_MASK = 0x7FFFFFFF
_F32_INF_BITS = 0x7F800000
_U32 = 0xFFFFFFFF


def _f32_bits(x: torch.Tensor, fn: str) -> torch.Tensor:
    """FP32 bit pattern of `x` as non-negative int64 (torch has no general uint32 arithmetic)."""
    if x.dtype != torch.float32:
        raise TypeError(f"{fn} takes float32, got {x.dtype}")
    return x.contiguous().view(torch.int32).to(torch.int64) & _U32


def _f32_from_bits(bits: torch.Tensor) -> torch.Tensor:
    """Inverse of `_f32_bits`: an int64 tensor holding a 32-bit pattern -> float32."""
    signed = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32)
    return signed.view(torch.float32)


def fp32_to_fp8e4m3_bits(x: torch.Tensor) -> torch.Tensor:
    """Encode FP32 `x` as FP8 e4m3fn (RNE, saturating at +-448); returns the bits as uint8, same shape."""
    bits = _f32_bits(x, "fp32_to_fp8e4m3_bits")
    sign = (bits >> 31) & 1
    a = bits & _F32_ABS_MASK
    # normal range: keep 3 of 23 mantissa bits, rebias the exponent, saturate
    lsb = (a >> 20) & 1
    normal = ((a + 0x7FFFF + lsb) >> 20) - (_FP8_EXP_REBIAS << 3)
    normal = torch.clamp(normal, max=_FP8_MAX_BITS)
    # subnormal range: the significand in units of 2^-9, i.e. shifted right by 141 - exponent
    exponent = a >> 23
    significand = (a & 0x7FFFFF) | 0x800000
    shift = torch.clamp(141 - exponent, 21, 31)  # >= 25 always gives 0, so 31 is a safe cap
    quotient = significand >> shift
    remainder = significand & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    round_up = (remainder > half) | ((remainder == half) & ((quotient & 1) == 1))
    subnormal = quotient + round_up.to(torch.int64)
    magnitude = torch.where(a < _FP8_MIN_NORMAL_F32_BITS, subnormal, normal)
    magnitude = torch.where(a > _F32_INF_BITS, torch.full_like(a, FP8_E4M3_NAN_BITS), magnitude)
    return ((sign << 7) | magnitude).to(torch.uint8).reshape(x.shape)


def fp8e4m3_bits_to_fp32(b: torch.Tensor) -> torch.Tensor:
    """Decode FP8 e4m3fn bits (uint8) to FP32 exactly; 0x7F/0xFF decode to NaN."""
    if b.dtype != torch.uint8:
        raise TypeError(f"fp8e4m3_bits_to_fp32 takes uint8 bits, got {b.dtype}")
    v = b.to(torch.int64)
    sign = (v >> 7) & 1
    exponent = (v >> 3) & 0xF
    mantissa = v & 0x7
    normal = _f32_from_bits((sign << 31) | ((exponent + _FP8_EXP_REBIAS) << 23) | (mantissa << 20))
    # m * 2^-9 is exact in FP32 for m in 0..7
    subnormal = mantissa.to(torch.float32) * _FP8_SUBNORMAL_UNIT
    subnormal = torch.where(sign == 1, -subnormal, subnormal)
    out = torch.where(exponent == 0, subnormal, normal)
    return torch.where((v & 0x7F) == FP8_E4M3_NAN_BITS, torch.full_like(out, float("nan")), out)


def fp32_to_bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """Round FP32 `x` to BF16 (RNE, overflow to inf, NaN kept quiet with sign); returns bits as int16."""
    bits = _f32_bits(x, "fp32_to_bf16_bits")
    sign = (bits >> 31) & 1
    a = bits & _F32_ABS_MASK
    rounded = (a + 0x7FFF + ((a >> 16) & 1)) >> 16
    rounded = torch.where(a > _F32_INF_BITS, (a >> 16) | 0x40, rounded)
    pattern = (sign << 15) | rounded
    return torch.where(pattern >= 2**15, pattern - 2**16, pattern).to(torch.int16).reshape(x.shape)


def bf16_bits_to_fp32(b: torch.Tensor) -> torch.Tensor:
    """Decode BF16 bits (int16) to FP32 exactly (the bits become FP32's top half)."""
    if b.dtype != torch.int16:
        raise TypeError(f"bf16_bits_to_fp32 takes int16 bits, got {b.dtype}")
    return _f32_from_bits((b.to(torch.int64) & 0xFFFF) << 16)


# ---- Triton twins (same bit operations; uint32 so that shifts are logical) ----


@triton.jit
def fp8e4m3_encode(x):
    """Triton twin of `fp32_to_fp8e4m3_bits` for an FP32 block; returns uint8 bits."""
    bits = x.to(tl.uint32, bitcast=True)
    sign = bits >> 31
    a = bits & 0x7FFFFFFF
    normal = ((a + 0x7FFFF + ((a >> 20) & 1)) >> 20).to(tl.int32) - (120 << 3)
    normal = tl.minimum(normal, 0x7E)
    exponent = (a >> 23).to(tl.int32)
    significand = (a & 0x7FFFFF) | 0x800000
    shift = tl.maximum(tl.minimum(141 - exponent, 31), 21).to(tl.uint32)
    quotient = significand >> shift
    remainder = significand & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    round_up = (remainder > half) | ((remainder == half) & ((quotient & 1) == 1))
    subnormal = (quotient + round_up.to(tl.uint32)).to(tl.int32)
    magnitude = tl.where(a < 0x3C800000, subnormal, normal)
    magnitude = tl.where(a > 0x7F800000, 0x7F, magnitude)
    return ((sign.to(tl.int32) << 7) | magnitude).to(tl.uint8)


@triton.jit
def fp8e4m3_decode(b):
    """Triton twin of `fp8e4m3_bits_to_fp32`: uint8 bits -> FP32 (exact)."""
    v = b.to(tl.uint32)
    sign = (v >> 7) & 1
    exponent = (v >> 3) & 0xF
    mantissa = v & 0x7
    normal = ((sign << 31) | ((exponent + 120) << 23) | (mantissa << 20)).to(tl.float32, bitcast=True)
    subnormal = mantissa.to(tl.float32) * 0.001953125  # 2^-9; exact for mantissa 0..7
    subnormal = tl.where(sign == 1, -subnormal, subnormal)
    out = tl.where(exponent == 0, subnormal, normal)
    nan = tl.full(out.shape, 0x7FC00000, tl.uint32).to(tl.float32, bitcast=True)
    return tl.where((v & 0x7F) == 0x7F, nan, out)


@triton.jit
def bf16_encode(x):
    """Triton twin of `fp32_to_bf16_bits`: FP32 block -> int16 bits."""
    bits = x.to(tl.uint32, bitcast=True)
    sign = bits >> 31
    a = bits & 0x7FFFFFFF
    rounded = (a + 0x7FFF + ((a >> 16) & 1)) >> 16
    rounded = tl.where(a > 0x7F800000, (a >> 16) | 0x40, rounded)
    # keep the low 16 bits of the pattern; int32 -> int16 truncates
    return ((sign << 15) | rounded).to(tl.int32).to(tl.int16)


@triton.jit
def bf16_decode(b):
    """Triton twin of `bf16_bits_to_fp32`: int16 bits -> FP32 (exact).

    Sign extension to int32 fills the top half, which the shift then pushes out.
    """
    return (b.to(tl.int32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _roundtrip_kernel(x_ptr, fp8_ptr, fp8_back_ptr, bf16_ptr, bf16_back_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    f8 = fp8e4m3_encode(x)
    tl.store(fp8_ptr + offs, f8, mask=mask)
    tl.store(fp8_back_ptr + offs, fp8e4m3_decode(f8), mask=mask)
    h = bf16_encode(x)
    tl.store(bf16_ptr + offs, h, mask=mask)
    tl.store(bf16_back_ptr + offs, bf16_decode(h), mask=mask)


def triton_roundtrip(x: torch.Tensor, block: int = 1024) -> dict[str, torch.Tensor]:
    """Run the Triton encoders/decoders over a flat FP32 tensor (for tests and the GPU check).

    Returns {"fp8": uint8 bits, "fp8_decoded": fp32, "bf16": int16 bits, "bf16_decoded": fp32}.
    """
    if x.dtype != torch.float32:
        raise TypeError(f"triton_roundtrip takes float32, got {x.dtype}")
    flat = x.contiguous().reshape(-1)
    n = flat.numel()
    out = {
        "fp8": torch.empty(n, dtype=torch.uint8, device=x.device),
        "fp8_decoded": torch.empty(n, dtype=torch.float32, device=x.device),
        "bf16": torch.empty(n, dtype=torch.int16, device=x.device),
        "bf16_decoded": torch.empty(n, dtype=torch.float32, device=x.device),
    }
    if n:
        grid = (triton.cdiv(n, block),)
        _roundtrip_kernel[grid](flat, out["fp8"], out["fp8_decoded"], out["bf16"], out["bf16_decoded"], n,
                                BLOCK=block)
    return {k: v.reshape(x.shape) for k, v in out.items()}
