"""KDA (Kimi Delta Attention) decode: one token per sequence, gated delta rule with per-channel decay.

Per sequence b and head h (K = key head dim, V = value head dim, state S is K x V, float32):

    q_hat = q / sqrt(sum(q^2) + 1e-6)            k_hat likewise (L2 norm over K)
    g     = -exp(A_log[h]) * softplus(g_raw + dt_bias[h])   (per channel, length K, g <= 0)
    beta  = sigmoid(b)
    S     <- Diag(exp g) S                       decay each key channel
    u     = beta * (v - S^T k_hat)               delta-rule correction (uses the decayed S)
    S     <- S + k_hat u^T
    o     = S^T (q_hat * K^-1/2)

`kda_decode_ref` is the plain torch reference (works in float64 too). Three Triton variants are
kept side by side because the published tuning story is about their differences (v1 and v2 are one
V-tiled kernel whose `DIVIDE` flag picks the prologue, `_prologue_divide` or `_prologue_rsqrt`):

- `v1`: grid (B*H, V/BV) with BV = 32; every V tile reloads q, k, g_raw and recomputes both norms
  with one division per element, plus the gate.
- `v2`: same tiling; the division optimisation: one reciprocal square root per vector, then
  multiplies (only the sigmoid keeps a division).
- `v3`: one program per (sequence, head): the normalisation and gating prologue runs once and the
  program loops over V tiles of `v3_block_v(V)` columns (64 at V = 128), reusing its results.

Why this v3 design for an H200 at B=64, H=32, K=V=128 (traffic floor ~274 MB, ~57 us; the state
read + write is 98 % of it). A prologue kernel writing q_hat, k_hat, exp(g), beta for a V-tiled
update costs a second launch (a few us, 5-10 % of the floor) and an extra write + read of
~3K floats per head, so the prologue stays in the update kernel. Inside one program, the tile
width decides occupancy; an offline sm_90a compile of this file (ptxas -v, no spills in any of
these) gives: 128x128 tile with 8 warps 178 registers/thread -> 1 program per SM, so the SM's
loads stop while that program reduces and stores; 128x128 with 4 warps 254 -> 2 per SM;
128x64 with 4 warps 168 -> 3 per SM (96 KiB of state loads in flight per SM, more than the
~26 KiB that 4.8 TB/s x ~0.7 us latency needs spread over 132 SMs); 128x32 with 4 warps 105 -> 4
per SM but 4 serial tiles. 128x64 / 4 warps is the default; `launch_kda_decode` takes any
`KdaLaunchPlan`, so the GPU benchmark can sweep the alternatives and confirm or overturn this.

All tensors must be float32 (the state is the recurrence's accumulator; low-precision inputs are
the caller's cast to make explicitly). Inputs may be strided views (e.g. a head slice of a larger
tensor): the kernels take every stride, so a head-split run writes the state in place.

`kda_launch_plan` is the one place the tiling is decided; `infralab.kernels.ops.kda_decode.work_counts` derives
its static counts from the same plan, so the counts follow the kernel structure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from infralab.errors import InputError

NORM_EPS = 1e-6
"""Added to the sum of squares before the square root of the L2 norm."""

TILED_BLOCK_V = 32
"""V tile of the V-tiled variants v1 and v2 (the case study's BV)."""

V3_MAX_BLOCK_V = 64
"""Largest V tile of v3 (see the module docstring); wider V is covered by a loop in the program."""

VARIANTS = ("v1", "v2", "v3")


# ---------------------------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------------------------


def kda_decode_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step in plain torch, in the dtype of the inputs (float32 or float64).

    Shapes as in `kda_decode`. Returns (o [B,H,V], new_state [B,H,K,V]); `state` is not modified.
    """
    head_k = q.shape[-1]
    q_hat = q / torch.sqrt((q * q).sum(-1, keepdim=True) + NORM_EPS)
    k_hat = k / torch.sqrt((k * k).sum(-1, keepdim=True) + NORM_EPS)
    gate = -torch.exp(A_log)[None, :, None] * F.softplus(g + dt_bias[None])
    beta = torch.sigmoid(b)
    decayed = state * torch.exp(gate)[..., None]
    u = beta[..., None] * (v - torch.einsum("bhkv,bhk->bhv", decayed, k_hat))
    new_state = decayed + k_hat[..., None] * u[..., None, :]
    o = torch.einsum("bhkv,bhk->bhv", new_state, q_hat * head_k**-0.5)
    return o, new_state


# ---------------------------------------------------------------------------------------------
# Launch plan (shared with work_counts)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KdaLaunchPlan:
    """How one variant covers a (K, V) head: tile sizes, grid and how often the prologue runs."""

    variant: str
    block_k: int  # K padded to a power of two (one K tile: the whole key vector)
    block_v: int  # V columns per tile
    v_tiles: int  # tiles needed to cover V
    programs_per_head: int  # programs per (sequence, head)
    prologues_per_head: int  # times q/k/g are loaded and normalised/gated per (sequence, head)
    divide_per_element: bool  # v1 normalises with a division per element, v2/v3 with rsqrt + mul
    num_warps: int


def v3_block_v(head_v: int) -> int:
    """v3's V tile: the widest power of two <= V3_MAX_BLOCK_V (and >= TILED_BLOCK_V unless V is
    smaller) that pads V the least, so v3 never computes more padded columns than v1/v2 do."""
    widest = min(triton.next_power_of_2(head_v), V3_MAX_BLOCK_V)
    candidates = [widest]
    while candidates[-1] > TILED_BLOCK_V:
        candidates.append(candidates[-1] // 2)
    return min(candidates, key=lambda bv: (triton.cdiv(head_v, bv) * bv, -bv))


def kda_launch_plan(variant: str, head_k: int, head_v: int) -> KdaLaunchPlan:
    """The tiling each variant uses for head dims (head_k, head_v)."""
    if variant not in VARIANTS:
        raise InputError("kda_decode argument 'variant'", f"unknown variant {variant!r}", f"one of {VARIANTS}")
    block_k = triton.next_power_of_2(head_k)
    if variant in ("v1", "v2"):
        block_v = TILED_BLOCK_V
    else:
        block_v = v3_block_v(head_v)
    v_tiles = triton.cdiv(head_v, block_v)
    tiled = variant != "v3"
    # 4 warps: a 128x64 tile takes 168 registers/thread without spills; 8 warps replicate the
    # prologue across lanes (more exp instructions per thread), so they are kept for bigger tiles.
    num_warps = 4 if block_k * block_v <= 128 * 64 else 8
    return KdaLaunchPlan(
        variant=variant,
        block_k=block_k,
        block_v=block_v,
        v_tiles=v_tiles,
        programs_per_head=v_tiles if tiled else 1,
        prologues_per_head=v_tiles if tiled else 1,
        divide_per_element=variant == "v1",
        num_warps=num_warps,
    )


# ---------------------------------------------------------------------------------------------
# Triton building blocks (device functions; replay_ssm reuses load_head_inputs, log_decay, normalise_rsqrt)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _softplus(x):
    # log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|)).
    return tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x)))


@triton.jit
def load_head_inputs(q_ptr, k_ptr, g_ptr, dtb_ptr, alog_ptr, b_ptr, bi, hi, offs_k, k_mask,
                     sq_b, sq_h, sq_k, sk_b, sk_h, sk_k, sg_b, sg_h, sg_k, sdt_h, sdt_k, sa_h, sb_b, sb_h):
    q = tl.load(q_ptr + bi * sq_b + hi * sq_h + offs_k * sq_k, mask=k_mask, other=0.0)
    k = tl.load(k_ptr + bi * sk_b + hi * sk_h + offs_k * sk_k, mask=k_mask, other=0.0)
    g_raw = tl.load(g_ptr + bi * sg_b + hi * sg_h + offs_k * sg_k, mask=k_mask, other=0.0)
    dt_bias = tl.load(dtb_ptr + hi * sdt_h + offs_k * sdt_k, mask=k_mask, other=0.0)
    a_log = tl.load(alog_ptr + hi * sa_h)
    b_raw = tl.load(b_ptr + bi * sb_b + hi * sb_h)
    return q, k, g_raw, dt_bias, a_log, b_raw


@triton.jit
def log_decay(g_raw, dt_bias, a_log):
    """g = -exp(A_log) * softplus(g_raw + dt_bias), per key channel (always <= 0)."""
    return -tl.exp(a_log) * _softplus(g_raw + dt_bias)


@triton.jit
def _gate_and_beta(g_raw, dt_bias, a_log, b_raw):
    """Per-channel decay exp(g) and the scalar beta = sigmoid(b); the same code in every variant."""
    decay = tl.exp(log_decay(g_raw, dt_bias, a_log))
    beta = 1.0 / (1.0 + tl.exp(-b_raw))
    return decay, beta


@triton.jit
def normalise_rsqrt(q, k, EPS: tl.constexpr, SCALE: tl.constexpr):
    """q_hat * SCALE and k_hat with one reciprocal square root per vector (the 1/sqrt(K) folded in)."""
    q_inv = tl.rsqrt(tl.sum(q * q, 0) + EPS) * SCALE
    k_inv = tl.rsqrt(tl.sum(k * k, 0) + EPS)
    return q * q_inv, k * k_inv


@triton.jit
def _prologue_divide(q, k, g_raw, dt_bias, a_log, b_raw, EPS: tl.constexpr, SCALE: tl.constexpr):
    """v1: the norm is a square root and every element is divided by it."""
    q_norm = tl.sqrt(tl.sum(q * q, 0) + EPS)
    q_scaled = q / q_norm * SCALE
    k_norm = tl.sqrt(tl.sum(k * k, 0) + EPS)
    k_hat = k / k_norm
    decay, beta = _gate_and_beta(g_raw, dt_bias, a_log, b_raw)
    return q_scaled, k_hat, decay, beta


@triton.jit
def _prologue_rsqrt(q, k, g_raw, dt_bias, a_log, b_raw, EPS: tl.constexpr, SCALE: tl.constexpr):
    """v2/v3: one reciprocal square root per vector, then multiplies (the 1/sqrt(K) folded in)."""
    q_scaled, k_hat = normalise_rsqrt(q, k, EPS, SCALE)
    decay, beta = _gate_and_beta(g_raw, dt_bias, a_log, b_raw)
    return q_scaled, k_hat, decay, beta


@triton.jit
def _update_tile(s_ptr, v_ptr, o_ptr, bi, hi, offs_k, k_mask, offs_v, v_mask,
                 q_scaled, k_hat, decay, beta,
                 ss_b, ss_h, ss_k, ss_v, sv_b, sv_h, sv_v, so_b, so_h, so_v):
    """Decay, delta-rule update and output for one [K, BV] tile of the state (read once, written once)."""
    tile_mask = k_mask[:, None] & v_mask[None, :]
    s_ptrs = s_ptr + bi * ss_b + hi * ss_h + offs_k[:, None] * ss_k + offs_v[None, :] * ss_v
    s = tl.load(s_ptrs, mask=tile_mask, other=0.0)
    s = s * decay[:, None]
    s_k = tl.sum(s * k_hat[:, None], 0)
    v = tl.load(v_ptr + bi * sv_b + hi * sv_h + offs_v * sv_v, mask=v_mask, other=0.0)
    u = beta * (v - s_k)
    s = s + k_hat[:, None] * u[None, :]
    o = tl.sum(s * q_scaled[:, None], 0)
    tl.store(s_ptrs, s, mask=tile_mask)
    tl.store(o_ptr + bi * so_b + hi * so_h + offs_v * so_v, o, mask=v_mask)


# ---------------------------------------------------------------------------------------------
# The kernels: v1 and v2 (one V-tiled kernel, the prologue a compile-time flag) and v3
# ---------------------------------------------------------------------------------------------


@triton.jit
def _kda_decode_tiled_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, b_ptr, alog_ptr, dtb_ptr, s_ptr, o_ptr,
    sq_b, sq_h, sq_k, sk_b, sk_h, sk_k, sv_b, sv_h, sv_v, sg_b, sg_h, sg_k, sb_b, sb_h,
    sa_h, sdt_h, sdt_k, ss_b, ss_h, ss_k, ss_v, so_b, so_h, so_v,
    H, HEAD_K: tl.constexpr, HEAD_V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    EPS: tl.constexpr, SCALE: tl.constexpr, DIVIDE: tl.constexpr,
):
    """v1 (DIVIDE) and v2: one program per (sequence, head, V tile). They differ only in the
    prologue, chosen at compile time, so each compiles to the code of its own kernel."""
    pid_bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    bi = (pid_bh // H).to(tl.int64)
    hi = (pid_bh % H).to(tl.int64)
    offs_k = tl.arange(0, BK)
    k_mask = offs_k < HEAD_K
    # Every V tile repeats this prologue: loads, two norms and the gate.
    q, k, g_raw, dt_bias, a_log, b_raw = load_head_inputs(
        q_ptr, k_ptr, g_ptr, dtb_ptr, alog_ptr, b_ptr, bi, hi, offs_k, k_mask,
        sq_b, sq_h, sq_k, sk_b, sk_h, sk_k, sg_b, sg_h, sg_k, sdt_h, sdt_k, sa_h, sb_b, sb_h)
    if DIVIDE:  # v1: a division per element
        q_scaled, k_hat, decay, beta = _prologue_divide(q, k, g_raw, dt_bias, a_log, b_raw, EPS, SCALE)
    else:  # v2: rsqrt + multiplies instead of per-element division
        q_scaled, k_hat, decay, beta = _prologue_rsqrt(q, k, g_raw, dt_bias, a_log, b_raw, EPS, SCALE)
    offs_v = pid_v * BV + tl.arange(0, BV)
    _update_tile(s_ptr, v_ptr, o_ptr, bi, hi, offs_k, k_mask, offs_v, offs_v < HEAD_V,
                 q_scaled, k_hat, decay, beta,
                 ss_b, ss_h, ss_k, ss_v, sv_b, sv_h, sv_v, so_b, so_h, so_v)


@triton.jit
def _kda_decode_v3_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, b_ptr, alog_ptr, dtb_ptr, s_ptr, o_ptr,
    sq_b, sq_h, sq_k, sk_b, sk_h, sk_k, sv_b, sv_h, sv_v, sg_b, sg_h, sg_k, sb_b, sb_h,
    sa_h, sdt_h, sdt_k, ss_b, ss_h, ss_k, ss_v, so_b, so_h, so_v,
    H, HEAD_K: tl.constexpr, HEAD_V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    EPS: tl.constexpr, SCALE: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    bi = (pid_bh // H).to(tl.int64)
    hi = (pid_bh % H).to(tl.int64)
    offs_k = tl.arange(0, BK)
    k_mask = offs_k < HEAD_K
    # The prologue runs once per (sequence, head) ...
    q, k, g_raw, dt_bias, a_log, b_raw = load_head_inputs(
        q_ptr, k_ptr, g_ptr, dtb_ptr, alog_ptr, b_ptr, bi, hi, offs_k, k_mask,
        sq_b, sq_h, sq_k, sk_b, sk_h, sk_k, sg_b, sg_h, sg_k, sdt_h, sdt_k, sa_h, sb_b, sb_h)
    q_scaled, k_hat, decay, beta = _prologue_rsqrt(q, k, g_raw, dt_bias, a_log, b_raw, EPS, SCALE)
    # ... and its results are reused by every V tile.
    for v_start in tl.static_range(0, HEAD_V, BV):
        offs_v = v_start + tl.arange(0, BV)
        _update_tile(s_ptr, v_ptr, o_ptr, bi, hi, offs_k, k_mask, offs_v, offs_v < HEAD_V,
                     q_scaled, k_hat, decay, beta,
                     ss_b, ss_h, ss_k, ss_v, sv_b, sv_h, sv_v, so_b, so_h, so_v)


# variant -> (kernel, its compile-time flags)
_KERNELS = {"v1": (_kda_decode_tiled_kernel, {"DIVIDE": True}), "v2": (_kda_decode_tiled_kernel, {"DIVIDE": False}),
            "v3": (_kda_decode_v3_kernel, {})}


# ---------------------------------------------------------------------------------------------
# Input checks and launcher
# ---------------------------------------------------------------------------------------------


def _interpreted(kernel: object) -> bool:
    # triton.jit decides at definition time: the env var read later could disagree with the kernel.
    return type(kernel).__name__ == "InterpretedFunction"


def check_triton_device(where: str, device: torch.device, kernel: object = _kda_decode_v3_kernel) -> None:
    """Triton runs on a GPU, or anywhere under its interpreter (TRITON_INTERPRET=1 before import)."""
    if device.type == "cpu" and not _interpreted(kernel):
        raise InputError(where, "tensors are on the CPU but Triton needs a GPU here",
                         "CUDA tensors, or TRITON_INTERPRET=1 set before triton is first imported")


def check_tensor(name: str, x: object, shape: tuple[int, ...], dims: str, device: torch.device,
                 where: str = "kda_decode") -> None:
    """Raise InputError unless `x` is a float32 tensor of exactly `shape` on `device`."""
    label = f"{where} argument '{name}'"
    expected = f"a float32 tensor of shape [{dims}] = {list(shape)} on {device}"
    if not isinstance(x, torch.Tensor):
        raise InputError(label, f"is a {type(x).__name__}, not a tensor", expected)
    if x.dtype != torch.float32:
        raise InputError(label, f"has dtype {x.dtype}", expected)
    if tuple(x.shape) != shape:
        raise InputError(label, f"has shape {list(x.shape)}", expected)
    if x.device != device:
        raise InputError(label, f"is on {x.device}", expected)


@dataclass(frozen=True)
class KdaShape:
    """Batch (sequences), heads, key head dim and value head dim of one decode step."""

    batch: int
    heads: int
    head_k: int
    head_v: int


def check_kda_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, b: torch.Tensor,
                     A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor | None,
                     where: str = "kda_decode") -> KdaShape:
    """Validate a decode step's arguments; B, H, K come from `q` and V from `v`."""
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        got = f"shape {list(q.shape)}" if isinstance(q, torch.Tensor) else f"a {type(q).__name__}"
        raise InputError(f"{where} argument 'q'", f"is {got}", "a float32 tensor of shape [B, H, K]")
    if not isinstance(v, torch.Tensor) or v.dim() != 3:
        got = f"shape {list(v.shape)}" if isinstance(v, torch.Tensor) else f"a {type(v).__name__}"
        raise InputError(f"{where} argument 'v'", f"is {got}", "a float32 tensor of shape [B, H, V]")
    batch, heads, head_k = q.shape
    head_v = v.shape[2]
    device = q.device
    check_tensor("q", q, (batch, heads, head_k), "B, H, K", device, where)
    for name, x in (("k", k), ("g", g)):
        check_tensor(name, x, (batch, heads, head_k), "B, H, K", device, where)
    check_tensor("v", v, (batch, heads, head_v), "B, H, V", device, where)
    check_tensor("b", b, (batch, heads), "B, H", device, where)
    check_tensor("A_log", A_log, (heads,), "H", device, where)
    check_tensor("dt_bias", dt_bias, (heads, head_k), "H, K", device, where)
    if state is not None:
        check_tensor("state", state, (batch, heads, head_k, head_v), "B, H, K, V", device, where)
    if min(batch, heads, head_k, head_v) == 0:
        raise InputError(f"{where} argument 'q'", f"has an empty dimension (B, H, K, V = "
                         f"{batch}, {heads}, {head_k}, {head_v})", "B, H, K, V >= 1")
    check_triton_device(where, device)
    return KdaShape(batch, heads, head_k, head_v)


def kda_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    state: torch.Tensor,
    *,
    variant: str = "v3",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """One KDA decode step with the Triton kernel `variant` ("v1", "v2" or "v3").

    q, k, g (raw gate): [B, H, K]; v: [B, H, V]; b (raw beta): [B, H]; A_log: [H]; dt_bias: [H, K];
    state: [B, H, K, V]. All float32 on one device (views with any strides are fine).
    `state` is updated IN PLACE; returns o [B, H, V] float32 (written into `out` when given).
    """
    shape = check_kda_inputs(q, k, v, g, b, A_log, dt_bias, state)
    plan = kda_launch_plan(variant, shape.head_k, shape.head_v)
    if out is None:
        out = torch.empty((shape.batch, shape.heads, shape.head_v), dtype=torch.float32, device=q.device)
    else:
        check_tensor("out", out, (shape.batch, shape.heads, shape.head_v), "B, H, V", q.device)
    launch_kda_decode(plan, shape, q, k, v, g, b, A_log, dt_bias, state, out)
    return out


def launch_kda_decode(plan: KdaLaunchPlan, shape: KdaShape, q, k, v, g, b, A_log, dt_bias, state, out) -> None:
    """Launch the plan's kernel writing `out` [B,H,V] (any strides) and updating `state` in place."""
    kernel, flags = _KERNELS[plan.variant]
    grid = (shape.batch * shape.heads, plan.programs_per_head)
    kernel[grid](
        q, k, v, g, b, A_log, dt_bias, state, out,
        *q.stride(), *k.stride(), *v.stride(), *g.stride(), *b.stride(),
        *A_log.stride(), *dt_bias.stride(), *state.stride(), *out.stride(),
        shape.heads, HEAD_K=shape.head_k, HEAD_V=shape.head_v, BK=plan.block_k, BV=plan.block_v,
        EPS=NORM_EPS, SCALE=shape.head_k**-0.5, num_warps=plan.num_warps, **flags,
    )
