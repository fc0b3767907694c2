"""TF32 rounding and the 3xTF32 split, done with integer bit operations on the FP32 bit pattern.

TF32 keeps FP32's sign and 8-bit exponent and 10 of its 23 mantissa bits. Rounding an FP32 value to
TF32 here is round-to-nearest-even on the 13 dropped bits:

    bits' = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000

The carry out of the mantissa correctly bumps the exponent (and rounds values beyond the largest TF32
number up to infinity, as IEEE round-to-nearest does). Infinities pass through unchanged (their low
13 bits are zero). NaNs are kept as quiet NaNs with their sign, because adding to an all-ones pattern
would carry into the sign bit.

The same arithmetic exists twice, once for torch (the references) and once as `@triton.jit` helpers
(the kernels), so that the kernels' numerics do not depend on what the hardware or Triton's
interpreter does with `input_precision` (the interpreter ignores it).

Why pre-rounded operands make the dot exact in its products: a TF32 value has an 11-bit significand
(10 stored + the implicit bit), so the product of two has at most 22 significant bits and fits an
FP32 significand (24 bits) exactly, as long as it neither overflows nor falls below FP32's normal range.
An FP32 dot over TF32 operands (the interpreter) therefore rounds only in the accumulation, which is
what a tensor core's TF32 mode does with an FP32 accumulator. `tests/kernels/test_matmul.py` checks the
claim on random operands against float64 products.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

TF32_MANTISSA_BITS = 10
_DROPPED_BITS = 23 - TF32_MANTISSA_BITS  # 13
_KEEP_MASK = 0xFFFFE000  # sign, exponent and the top 10 mantissa bits
_HALF_MINUS_ONE = 0x0FFF  # (1 << 12) - 1: together with the kept LSB this gives ties-to-even
_QUIET_BIT = 0x00400000  # the top mantissa bit: set on NaNs so truncation cannot turn one into inf
_U32 = 0xFFFFFFFF


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """Round an FP32 tensor to the nearest TF32 value (ties to even); returns FP32 holding TF32 values."""
    if x.dtype != torch.float32:
        raise TypeError(f"round_to_tf32 takes float32, got {x.dtype}")
    # int64 arithmetic on the unsigned bit pattern: torch has no general uint32 arithmetic, and the
    # explicit mask keeps the result a 32-bit pattern.
    bits = x.contiguous().view(torch.int32).to(torch.int64) & _U32
    lsb = (bits >> _DROPPED_BITS) & 1
    rounded = (bits + _HALF_MINUS_ONE + lsb) & _KEEP_MASK
    nan = torch.isnan(x.contiguous())
    rounded = torch.where(nan, (bits & _KEEP_MASK) | _QUIET_BIT, rounded)
    # back to a signed 32-bit pattern so that .view(float32) sees the same bits
    signed = torch.where(rounded >= 2**31, rounded - 2**32, rounded).to(torch.int32)
    return signed.view(torch.float32).reshape(x.shape)


def split_3xtf32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split FP32 `x` into (big, small), both TF32 values, with big = tf32(x) and small = tf32(x - big).

    `x - big` is exact in FP32 (big is x with its low bits rounded off), so big + small carries
    22 of x's 24 significand bits.
    """
    big = round_to_tf32(x)
    return big, round_to_tf32(x - big)


@triton.jit
def tf32_round(x):
    """Triton twin of `round_to_tf32` for an FP32 block (same bit operations)."""
    bits = x.to(tl.uint32, bitcast=True)
    lsb = (bits >> 13) & 1
    rounded = (bits + 0xFFF + lsb) & 0xFFFFE000
    quiet_nan = (bits & 0xFFFFE000) | 0x00400000
    rounded = tl.where(x != x, quiet_nan, rounded)
    return rounded.to(tl.float32, bitcast=True)


@triton.jit
def tf32_split(x):
    """Triton twin of `split_3xtf32`: returns (big, small)."""
    big = tf32_round(x)
    small = tf32_round(x - big)
    return big, small
