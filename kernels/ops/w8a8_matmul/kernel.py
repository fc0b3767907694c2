"""W8A8: INT8 activations (per token) times INT8 weights (per output channel), INT32 accumulation.

Quantisation rule (activations per row of x [M, K], weights per column of w [K, N]):

    scale = absmax / 127          (FP32, IEEE division; a row/column of zeros gets scale 1.0)
    q     = clamp(rne(v / scale), -127, 127)   as int8, rne = round to nearest, ties to even

The symmetric range [-127, 127] leaves -128 unused so that negation is exact. Inputs must be finite
(a NaN or inf would poison the whole row's scale; this is not checked, to keep the op sync-free).

The matmul accumulates int8 x int8 products in int32 (`tl.dot(..., out_dtype=tl.int32)`, which the
interpreter supports too), so the accumulator is exact as long as K * 127^2 < 2^31 (K <= 133143,
checked). The epilogue applies the scales in FP32, in this order:

    C[m, n] = (float(acc[m, n]) * x_scale[m]) * w_scale[n]

Three FP32 roundings (int32 -> FP32, two multiplies, no add so no FMA contraction), hence:

* `w8a8_matmul_ref` (exact integer product, then the same three FP32 steps) must match the kernel bitwise;
* against `w8a8_matmul_exact` (float64 from the exact integer product), every element has relative
  error <= (1 + 2^-24)^3 - 1 ~= 3 * 2^-24 ~= 1.8e-7, i.e. at most 3 ulp of the FP32 result.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from infralab.errors import InputError

INT8_QMAX = 127
# largest K whose worst-case dot product 127 * 127 * K still fits int32
MAX_K_INT32_EXACT = (2**31 - 1) // (INT8_QMAX * INT8_QMAX)


# ---- quantisation ----


@triton.jit
def _quantize_rows_kernel(x_ptr, q_ptr, scale_ptr, rows, cols,
                          stride_xr, stride_xc, stride_qr, stride_qc,
                          BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """One program quantises BLOCK_R rows: pass 1 finds each row's absmax, pass 2 rounds."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = r < rows
    absmax = tl.zeros((BLOCK_R,), dtype=tl.float32)
    for c0 in range(0, cols, BLOCK_C):
        c = c0 + tl.arange(0, BLOCK_C)
        mask = row_ok[:, None] & (c[None, :] < cols)
        x = tl.load(x_ptr + r[:, None] * stride_xr + c[None, :] * stride_xc, mask=mask, other=0.0)
        absmax = tl.maximum(absmax, tl.max(tl.abs(x), axis=1))
    scale = tl.math.div_rn(absmax, tl.full((BLOCK_R,), 127.0, tl.float32))
    scale = tl.where(absmax == 0.0, 1.0, scale)
    tl.store(scale_ptr + r, scale, mask=row_ok)
    for c0 in range(0, cols, BLOCK_C):
        c = c0 + tl.arange(0, BLOCK_C)
        mask = row_ok[:, None] & (c[None, :] < cols)
        x = tl.load(x_ptr + r[:, None] * stride_xr + c[None, :] * stride_xc, mask=mask, other=0.0)
        v = tl.math.div_rn(x, tl.broadcast_to(scale[:, None], x.shape))
        # round to nearest-even: adding and subtracting 1.5 * 2^23 leaves no fraction bits (exact for |v| < 2^22)
        v = (v + 12582912.0) - 12582912.0
        v = tl.minimum(tl.maximum(v, -127.0), 127.0)
        tl.store(q_ptr + r[:, None] * stride_qr + c[None, :] * stride_qc, v.to(tl.int8), mask=mask)


def check_out(out: torch.Tensor | None, where: str, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """A caller-supplied float32 output of `shape` on `device`, or a fresh one when `out` is None."""
    if out is None:
        return torch.empty(shape, dtype=torch.float32, device=device)
    if not isinstance(out, torch.Tensor):
        raise InputError(f"{where}: out", f"got {type(out).__name__}", f"a float32 tensor of shape {list(shape)}")
    if out.dtype != torch.float32 or tuple(out.shape) != shape or out.device != device:
        got = f"{out.dtype} tensor of shape {tuple(out.shape)} on {out.device}"
        raise InputError(f"{where}: out", f"got {got}", f"a float32 tensor of shape {list(shape)} on {device}")
    return out


def _check_matrix(t: object, where: str, name: str, dtype: torch.dtype, shape_hint: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.dtype != dtype:
        got = f"{t.dtype} tensor of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise InputError(f"{where}: {name}", f"got {got}", f"a 2-D {dtype} tensor {shape_hint}")
    return t


def _quantize_rows(x: torch.Tensor, block_r: int, block_c: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each row of the (possibly strided) 2-D view `x`; q is written with x's own layout."""
    rows, cols = x.shape
    q = torch.empty_like(x, dtype=torch.int8)  # keeps x's strides when x is dense (e.g. w.t())
    scale = torch.empty(rows, dtype=torch.float32, device=x.device)
    if rows and cols:
        grid = (triton.cdiv(rows, block_r),)
        _quantize_rows_kernel[grid](x, q, scale, rows, cols, x.stride(0), x.stride(1), q.stride(0), q.stride(1),
                                    BLOCK_R=block_r, BLOCK_C=block_c)
    elif rows:
        scale.fill_(1.0)
    return q, scale


def quantize_per_token(x: torch.Tensor, block_rows: int = 16,
                       block_cols: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton: FP32 activations x [M, K] -> (int8 [M, K], FP32 scale [M]), one scale per row (token)."""
    _check_matrix(x, "quantize_per_token", "x", torch.float32, "[M, K] (tokens x features)")
    return _quantize_rows(x, block_rows, block_cols)


def quantize_weight_per_channel(w: torch.Tensor, block_rows: int = 16,
                                block_cols: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton: FP32 weights w [K, N] -> (int8 [K, N], FP32 scale [N]), one scale per output column."""
    _check_matrix(w, "quantize_weight_per_channel", "w", torch.float32, "[K, N] (in x out features)")
    q_t, scale = _quantize_rows(w.t(), block_rows, block_cols)  # columns of w are rows of w.t()
    return q_t.t(), scale


def quantize_rows_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference for the per-row rule (`quantize_per_token`; use x.t() for per-column)."""
    absmax = x.abs().amax(dim=1) if x.shape[1] else torch.zeros(x.shape[0], device=x.device)
    scale = torch.where(absmax == 0, torch.ones_like(absmax), absmax / INT8_QMAX)
    q = torch.clamp(torch.round(x / scale[:, None]), -INT8_QMAX, INT8_QMAX).to(torch.int8)
    return q, scale


def quantize_weight_per_channel_ref(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference for `quantize_weight_per_channel`."""
    q_t, scale = quantize_rows_ref(w.t())
    return q_t.t(), scale


# ---- matmul ----


@triton.jit
def _w8a8_matmul_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr):
    # grouped launch order: GROUP_M row tiles share each column tile while it is in L2
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % group_rows
    pid_n = (pid % (GROUP_M * tiles_n)) // group_rows
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0)
        b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0)
        acc = tl.dot(a, b, acc=acc, out_dtype=tl.int32)
    a_scale = tl.load(a_scale_ptr + rm, mask=rm < M, other=0.0)
    b_scale = tl.load(b_scale_ptr + rn, mask=rn < N, other=0.0)
    c = (acc.to(tl.float32) * a_scale[:, None]) * b_scale[None, :]
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@dataclass(frozen=True)
class W8A8Blocks:
    """Tile sizes and launch options of `w8a8_matmul` (defaults aim at a Hopper-class GPU)."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 128
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3


def _check_w8a8_inputs(x_q, x_scale, w_q, w_scale) -> tuple[int, int, int]:
    where = "w8a8_matmul"
    _check_matrix(x_q, where, "x_q", torch.int8, "[M, K]")
    _check_matrix(w_q, where, "w_q", torch.int8, "[K, N]")
    m, k = x_q.shape
    if w_q.shape[0] != k:
        raise InputError(f"{where}: w_q", f"has {w_q.shape[0]} rows but x_q has K={k} columns",
                         f"w_q of shape [{k}, N]")
    n = w_q.shape[1]
    for name, t, length, what in (("x_scale", x_scale, m, "M"), ("w_scale", w_scale, n, "N")):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or tuple(t.shape) != (length,):
            got = f"{t.dtype} tensor of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise InputError(f"{where}: {name}", f"got {got}", f"a float32 tensor of shape [{what}] = [{length}]")
    if k > MAX_K_INT32_EXACT:
        raise InputError(f"{where}: x_q", f"K={k} can overflow the int32 accumulator",
                         f"K <= {MAX_K_INT32_EXACT} (127*127*K < 2^31)")
    devices = {t.device for t in (x_q, x_scale, w_q, w_scale)}
    if len(devices) != 1:
        raise InputError(f"{where}: inputs", f"on several devices {sorted(map(str, devices))}", "one device")
    return m, n, k


def w8a8_matmul(x_q: torch.Tensor, x_scale: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor,
                blocks: W8A8Blocks = W8A8Blocks(), out: torch.Tensor | None = None) -> torch.Tensor:
    """Triton: C [M, N] FP32 = (x_q [M, K] int8 @ w_q [K, N] int8, exact in int32) * x_scale[m] * w_scale[n].

    `out`, if given, is a float32 [M, N] tensor (any strides, e.g. a window of a larger buffer) that
    receives C; nothing outside it is written.
    """
    m, n, k = _check_w8a8_inputs(x_q, x_scale, w_q, w_scale)
    c = check_out(out, "w8a8_matmul", (m, n), x_q.device)
    if m == 0 or n == 0:
        return c
    grid = (triton.cdiv(m, blocks.block_m) * triton.cdiv(n, blocks.block_n),)
    _w8a8_matmul_kernel[grid](x_q, x_scale, w_q, w_scale, c, m, n, k,
                              x_q.stride(0), x_q.stride(1), w_q.stride(0), w_q.stride(1), c.stride(0), c.stride(1),
                              BLOCK_M=blocks.block_m, BLOCK_N=blocks.block_n, BLOCK_K=blocks.block_k,
                              GROUP_M=blocks.group_m,
                              num_warps=blocks.num_warps, num_stages=blocks.num_stages)
    return c


def _int_product(x_q: torch.Tensor, w_q: torch.Tensor) -> torch.Tensor:
    """The exact integer product x_q @ w_q, held in float64, on the inputs' device.

    Exact in any summation order: every product and partial sum is an integer of magnitude
    <= K * 127^2 < 2^31 (K is checked), far inside float64's 2^53 exact-integer range. float64
    rather than int64 because CUDA has no int64 matmul and CPU int64 matmul is very slow.
    """
    return x_q.to(torch.float64) @ w_q.to(torch.float64)


def w8a8_matmul_ref(x_q: torch.Tensor, x_scale: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """Torch reference with the kernel's FP32 epilogue: exact integer product, then the same three FP32 steps
    (float64 -> float32 of an integer rounds to nearest-even, as the kernel's int32 -> float32 does)."""
    _check_w8a8_inputs(x_q, x_scale, w_q, w_scale)
    acc = _int_product(x_q, w_q).to(torch.float32)
    return (acc * x_scale[:, None]) * w_scale[None, :]


def w8a8_matmul_exact(x_q: torch.Tensor, x_scale: torch.Tensor, w_q: torch.Tensor,
                      w_scale: torch.Tensor) -> torch.Tensor:
    """The dequantised product in float64 (exact integer product, scales applied in float64)."""
    _check_w8a8_inputs(x_q, x_scale, w_q, w_scale)
    return _int_product(x_q, w_q) * x_scale.double()[:, None] * w_scale.double()[None, :]


# ---- error report ----


def _rel_fro(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.norm((a.double() - b.double()).flatten()) / torch.linalg.norm(b.double().flatten()))


def make_activations(m: int, k: int, outlier_channels: int, outlier_gain: float, gen: torch.Generator) -> torch.Tensor:
    """N(0,1) activations [m, k]; `outlier_channels` feature columns scaled by `outlier_gain`
    (the LLM activation pattern that per-token scaling handles worst)."""
    x = torch.randn(m, k, generator=gen)
    if outlier_channels:
        cols = torch.randperm(k, generator=gen)[:outlier_channels]
        x[:, cols] *= outlier_gain
    return x


def w8a8_error_report(m: int = 64, n: int = 96, k: int = 256, seed: int = 0, outlier_channels: int = 4,
                      outlier_gain: float = 50.0, device: str = "cpu",
                      blocks: W8A8Blocks = W8A8Blocks(64, 64, 128)) -> list[dict]:
    """Quantise N(0,1) data (and data with outlier channels), run the kernel, report its errors.

    Rows: {"data", "m", "n", "k", "kernel_vs_ref_bitwise", "max_rel_vs_exact", "max_ulp_bound",
    "rel_fro_vs_fp32"}. `rel_fro_vs_fp32` compares with the product of the unquantised FP32 inputs
    (computed in float64), i.e. the quantisation error; `max_rel_vs_exact` is the kernel's own
    arithmetic error against the exact dequantised product (bounded by 3 * 2^-24).
    """
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(k, n, generator=gen) / k**0.5
    rows = []
    for label, channels in (("normal", 0), (f"outliers({outlier_channels}x{outlier_gain:g})", outlier_channels)):
        x = make_activations(m, k, channels, outlier_gain, gen)
        x_q, x_s = quantize_per_token(x.to(device))
        w_q, w_s = quantize_weight_per_channel(w.to(device))
        c = w8a8_matmul(x_q, x_s, w_q, w_s, blocks).cpu()
        exact = w8a8_matmul_exact(x_q, x_s, w_q, w_s).cpu()
        nonzero = exact != 0
        rel = ((c.double() - exact).abs()[nonzero] / exact.abs()[nonzero]).max().item() if nonzero.any() else 0.0
        rows.append({
            "data": label, "m": m, "n": n, "k": k,
            "kernel_vs_ref_bitwise": bool(torch.equal(c, w8a8_matmul_ref(x_q, x_s, w_q, w_s).cpu())),
            "max_rel_vs_exact": rel,
            "rel_bound": 3 * 2.0**-24,
            "rel_fro_vs_fp32": _rel_fro(c, x.double() @ w.double()),
        })
    return rows
