"""Matmul C = A·B in three precisions (FP32 in and out): "fp32", "tf32" and "3xtf32".

- "fp32":   IEEE FP32 products, FP32 accumulation (`tl.dot(..., input_precision="ieee")`).
- "tf32":   both operands rounded to TF32 (10-bit mantissa, round-to-nearest-even) with integer bit
            operations inside the kernel, then an FP32-accumulated dot. On a GPU the dot runs with
            `input_precision="tf32"`, which is exact on operands that are already TF32; in Triton's
            interpreter the dot is FP32, which gives the same products because a product of two TF32
            values is exact in FP32 (see `infralab.kernels.ops.matmul.tf32`).
- "3xtf32": each operand split into big = tf32(x) and small = tf32(x - big). Per K block, the three
            products are accumulated into a zero accumulator in the order small_a·big_b, then
            big_a·small_b, then big_a·big_b, and that block sum is added to the running FP32
            accumulator (small·small is dropped: it is below FP32 resolution of the result).

The torch references (`matmul_reference`) emulate each precision with the same bit operations but
leave the summation order to torch; `matmul_float64` is the ground truth. Accumulation order differs
between the kernel and torch, so they agree within an accumulation-order bound, not bitwise and not
within 1 ulp (near-cancelling outputs differ by thousands of ulps): see `accumulation_bound`. With
inputs whose sums are all exact (small integers) they are bitwise equal.

In the interpreter `tl.dot(a, b, acc)` is `fl(fl(a @ b) + acc)` with numpy's FP32 matmul; on a GPU
the MMA accumulates into `acc` directly. The kernel compiles for sm_90 with TF32 wgmma instructions
for "tf32"/"3xtf32" (three times as many for 3xtf32) and FP32 FMAs for "fp32"
(tests/kernels/test_matmul.py reads the PTX).
"""

from __future__ import annotations

from typing import Literal

import torch
import triton
import triton.language as tl

from infralab.errors import InputError
from infralab.kernels.interpreter import interpreting
from infralab.kernels.ops.matmul.tf32 import round_to_tf32, split_3xtf32, tf32_round, tf32_split

Precision = Literal["fp32", "tf32", "3xtf32"]
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "3xtf32")

# Defaults suit a GPU (and keep the interpreter's program count low); tests pass their own.
DEFAULT_BLOCKS = (128, 128, 32)

_PRECISION_CODE = {"fp32": 0, "tf32": 1, "3xtf32": 2}


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    PRECISION: tl.constexpr,  # 0 = fp32, 1 = tf32, 2 = 3xtf32
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        # masked lanes load 0.0, which adds nothing to any product
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k0 + ks)[None, :] * stride_ak,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptr + (k0 + ks)[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if PRECISION == 0:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        elif PRECISION == 1:
            acc = tl.dot(tf32_round(a), tf32_round(b), acc, input_precision="tf32")
        else:
            a_big, a_small = tf32_split(a)
            b_big, b_small = tf32_split(b)
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            part = tl.dot(a_small, b_big, part, input_precision="tf32")
            part = tl.dot(a_big, b_small, part, input_precision="tf32")
            part = tl.dot(a_big, b_big, part, input_precision="tf32")
            acc += part
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=row_ok[:, None] & col_ok[None, :])


def _check_operand(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise InputError(f"matmul: {name}", f"got {type(x).__name__}", "a torch.Tensor")
    if x.dim() != 2:
        raise InputError(f"matmul: {name}", f"has shape {tuple(x.shape)}", "a 2-D tensor")
    if x.dtype != torch.float32:
        raise InputError(f"matmul: {name}", f"has dtype {x.dtype}", "torch.float32")
    if interpreting() and x.device.type != "cpu":
        raise InputError(f"matmul: {name}", f"is on {x.device} while TRITON_INTERPRET=1", "a CPU tensor")
    if not interpreting() and x.device.type != "cuda":
        raise InputError(f"matmul: {name}", f"is on {x.device} and no interpreter is set",
                         "a CUDA tensor (or TRITON_INTERPRET=1 with CPU tensors)")
    return x


def _check_blocks(blocks: tuple[int, int, int]) -> None:
    for name, size in zip(("block_m", "block_n", "block_k"), blocks):
        if size < 16 or size & (size - 1):
            raise InputError(f"matmul: {name}", f"is {size}", "a power of two >= 16 (tl.dot's minimum)")


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    precision: Precision = "fp32",
    *,
    out: torch.Tensor | None = None,
    blocks: tuple[int, int, int] = DEFAULT_BLOCKS,
    num_warps: int = 8,
) -> torch.Tensor:
    """C[M,N] = A[M,K] · B[K,N] in `precision`; FP32 in, FP32 out. Any strides are accepted.

    `out`, if given, is a [M,N] float32 tensor (a view is fine) that receives C; nothing outside it
    is written. `blocks` = (BLOCK_M, BLOCK_N, BLOCK_K), powers of two >= 16.
    """
    if precision not in _PRECISION_CODE:
        raise InputError("matmul: precision", f"is {precision!r}", f"one of {', '.join(PRECISIONS)}")
    _check_operand("a", a)
    _check_operand("b", b)
    _check_blocks(blocks)
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b:
        raise InputError("matmul: b", f"has shape {tuple(b.shape)} but a is {tuple(a.shape)}",
                         f"b of shape [{k}, N] (a's second dimension)")
    if min(m, n, k) < 1:
        raise InputError("matmul: a, b", f"have shapes {tuple(a.shape)} and {tuple(b.shape)}",
                         "M, N, K >= 1")
    if a.device != b.device:
        raise InputError("matmul: b", f"is on {b.device} but a is on {a.device}", "both on one device")
    if out is None:
        out = torch.empty((m, n), dtype=torch.float32, device=a.device)
    else:
        _check_operand("out", out)
        if tuple(out.shape) != (m, n) or out.device != a.device:
            raise InputError("matmul: out", f"has shape {tuple(out.shape)} on {out.device}",
                             f"a float32 tensor of shape [{m}, {n}] on {a.device}")
    block_m, block_n, block_k = blocks
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _matmul_kernel[grid](
        a, b, out, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        PRECISION=_PRECISION_CODE[precision],
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        num_warps=num_warps,
    )
    return out


def matmul_reference(a: torch.Tensor, b: torch.Tensor, precision: Precision = "fp32") -> torch.Tensor:
    """Torch emulation of `matmul` in `precision` (same operand rounding, torch's summation order).

    Runs with torch's own TF32 switches off so that "fp32" really is IEEE FP32.
    """
    if precision not in _PRECISION_CODE:
        raise InputError("matmul_reference: precision", f"is {precision!r}", f"one of {', '.join(PRECISIONS)}")
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        if precision == "fp32":
            return a @ b
        if precision == "tf32":
            return round_to_tf32(a) @ round_to_tf32(b)
        a_big, a_small = split_3xtf32(a)
        b_big, b_small = split_3xtf32(b)
        return (a_small @ b_big + a_big @ b_small) + a_big @ b_big
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow


def matmul_float64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Ground truth: the product of the FP32 inputs computed in float64 (returned as float64)."""
    return a.double() @ b.double()


def accumulation_bound(a: torch.Tensor, b: torch.Tensor, precision: Precision) -> torch.Tensor:
    """Per-element bound on |kernel - reference| from summation order alone (float64, [M,N]).

    Two FP32 sums of the same K exact terms, in any two orders, differ by at most
    2·gamma_K·Σ|terms| with gamma_K = K·u/(1 - K·u), u = 2^-24 (Higham, Accuracy and Stability of
    Numerical Algorithms, Thm. 3.1). For 3xtf32 the terms are the three partial products.
    """
    terms = a.shape[1] * (3 if precision == "3xtf32" else 1) + 2  # +2: block-sum and split-part additions
    u = 2.0**-24
    gamma = terms * u / (1 - terms * u)
    magnitude = a.double().abs() @ b.double().abs()
    return 2 * gamma * magnitude
