"""ReplaySSM for KDA decode: a checkpoint state plus a ring of the last L updates, replayed on demand.

Plain KDA decode (see `kda_decode`) keeps one live K x V state per (sequence, head) and rewrites
it every step. ReplaySSM keeps a checkpoint S0 (the state right after the last flush) and, per step
since then, one ring slot; the output is computed by replaying the ring against the checkpoint, and
S is never materialised except when the ring is full, when the checkpoint is rewritten (flushed).
This trades compute (a replay that grows with the ring) for memory and state traffic: the K x V
state is read every step but written only once every L steps, and any state of the last L steps
can be recovered from the checkpoint and a prefix of the ring (what speculative decoding or a
rollback needs) without storing L full states.

The recurrence replayed. Steps since the checkpoint are t = 1..L; per channel gate and decay

    g_t     = -exp(A_log) * softplus(g_raw_t + dt_bias)        (length K, <= 0)
    alpha_t = exp(g_t)                                          (the decay applied at step t)
    d_t     = beta_t * (v_t - S_{t-1}^T (alpha_t * k_hat_t))    (the delta-rule update u_t)
    S_t     = Diag(alpha_t) S_{t-1} + k_hat_t d_t^T             (identical to kda_decode)

With the cumulative log-decay G_t = g_1 + ... + g_t (G_0 = 0) the state unrolls to

    S_t = Diag(exp G_t) S0 + sum_{j<=t} Diag(exp(G_t - G_j)) k_hat_j d_j^T

so, with q~ = q_hat / sqrt(K), every quantity a step needs is a replay:

    S_{t-1}^T (alpha_t k_hat_t) = S0^T (exp(G_t) k_hat_t) + sum_{j<t} d_j <k_hat_j, exp(G_t - G_j) k_hat_t>
    o_t = S_t^T q~_t            = S0^T (exp(G_t) q~_t)   + sum_{j<t} d_j <k_hat_j, exp(G_t - G_j) q~_t>
                                                          + d_t <k_hat_t, q~_t>

Ring layout, per (sequence, head), float32, slot j = step j since the checkpoint (0-based):
    ring_k [L, K]: k_hat_j      ring_g [L, K]: G_j (cumulative log-decay)      ring_d [L, V]: d_j
Bytes per (sequence, head): checkpoint K*V*4 + ring L*(K + K + V)*4 (see `replay_ssm_memory`).
The slot counter is one host-side integer shared by the batch (every sequence steps together).

ReplaySSM is algebraically exact, not bit-exact: sums run in a different order than the plain
recurrence and exp(G_t - G_j) replaces a product of decays.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from infralab.errors import InputError
from infralab.kernels.ops.kda_decode.kernel import (
    NORM_EPS,
    check_kda_inputs,
    check_tensor,
    check_triton_device,
    load_head_inputs,
    log_decay,
    normalise_rsqrt,
    v3_block_v,
)

BYTES_PER_FLOAT = 4


# ---------------------------------------------------------------------------------------------
# Memory accounting
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayMemory:
    """Bytes per sequence (all `heads` heads) of ReplaySSM against keeping states explicitly."""

    head_k: int
    head_v: int
    ring_len: int
    heads: int
    checkpoint_bytes: int  # heads * K * V * 4
    ring_bytes: int  # heads * L * (K + K + V) * 4: k_hat, cumulative log-decay G, d
    plain_state_bytes: int  # heads * K * V * 4: the one live state plain decode keeps
    window_states_bytes: int  # heads * L * K * V * 4: every state of the last L steps, kept explicitly

    @property
    def total_bytes(self) -> int:
        return self.checkpoint_bytes + self.ring_bytes

    @property
    def overhead_vs_plain(self) -> float:
        """ReplaySSM bytes / plain state bytes (> 1: the ring costs extra over one live state)."""
        return self.total_bytes / self.plain_state_bytes

    @property
    def fraction_of_window_states(self) -> float:
        """ReplaySSM bytes / bytes of L explicit states (what it replaces for rollback)."""
        return self.total_bytes / self.window_states_bytes


def replay_ssm_memory(head_k: int, head_v: int, ring_len: int, heads: int = 1) -> ReplayMemory:
    """Memory per sequence in bytes for head dims K, V, a ring of `ring_len` slots and `heads` heads."""
    for name, value in (("head_k", head_k), ("head_v", head_v), ("ring_len", ring_len), ("heads", heads)):
        if not isinstance(value, int) or value < 1:
            raise InputError(f"replay_ssm_memory argument '{name}'", f"is {value!r}", "an integer >= 1")
    state = heads * head_k * head_v * BYTES_PER_FLOAT
    return ReplayMemory(
        head_k=head_k,
        head_v=head_v,
        ring_len=ring_len,
        heads=heads,
        checkpoint_bytes=state,
        ring_bytes=heads * ring_len * (head_k + head_k + head_v) * BYTES_PER_FLOAT,
        plain_state_bytes=state,
        window_states_bytes=ring_len * state,
    )


@dataclass(frozen=True)
class ReplayLaunchPlan:
    """Tiles of the replay kernels (shared with work_counts): the step kernel runs one program per
    (sequence, head) looping over V tiles, the flush kernel one program per (sequence, head, V tile)."""

    block_k: int  # K padded to a power of two
    block_v: int  # V columns per tile
    v_tiles: int
    block_l: int  # ring slots padded to a power of two (>= 2); the step kernel computes all of them


def replay_launch_plan(head_k: int, head_v: int, ring_len: int) -> ReplayLaunchPlan:
    """The tiling the replay kernels use for head dims (K, V) and a ring of `ring_len` slots."""
    block_v = v3_block_v(head_v)
    return ReplayLaunchPlan(
        block_k=triton.next_power_of_2(head_k),
        block_v=block_v,
        v_tiles=triton.cdiv(head_v, block_v),
        block_l=max(triton.next_power_of_2(ring_len), 2),
    )


# ---------------------------------------------------------------------------------------------
# Torch reference of the replay (same algebra as the kernels, any float dtype)
# ---------------------------------------------------------------------------------------------


def replay_step_ref(checkpoint, ring_k, ring_g, ring_d, slot, q, k, v, g, b, A_log, dt_bias):
    """One replayed step against entries [0, slot) of the ring.

    Returns (o [B,H,V], k_hat [B,H,K], G_t [B,H,K], d_t [B,H,V]); the caller stores the last three
    in ring slot `slot`. Nothing is modified.
    """
    head_k = q.shape[-1]
    q_scaled = q / torch.sqrt((q * q).sum(-1, keepdim=True) + NORM_EPS) * head_k**-0.5
    k_hat = k / torch.sqrt((k * k).sum(-1, keepdim=True) + NORM_EPS)
    gate = -torch.exp(A_log)[None, :, None] * F.softplus(g + dt_bias[None])
    beta = torch.sigmoid(b)
    g_prev = ring_g[:, :, slot - 1] if slot > 0 else torch.zeros_like(gate)
    g_t = g_prev + gate
    past_k, past_g, past_d = ring_k[:, :, :slot], ring_g[:, :, :slot], ring_d[:, :, :slot]
    weights = past_k * torch.exp(g_t[:, :, None] - past_g)  # [B,H,slot,K]
    decay_t = torch.exp(g_t)
    s_k = torch.einsum("bhkv,bhk->bhv", checkpoint, decay_t * k_hat)
    s_k = s_k + torch.einsum("bhjv,bhj->bhv", past_d, (weights * k_hat[:, :, None]).sum(-1))
    d_t = beta[..., None] * (v - s_k)
    o = torch.einsum("bhkv,bhk->bhv", checkpoint, decay_t * q_scaled)
    o = o + torch.einsum("bhjv,bhj->bhv", past_d, (weights * q_scaled[:, :, None]).sum(-1))
    o = o + d_t * (k_hat * q_scaled).sum(-1, keepdim=True)
    return o, k_hat, g_t, d_t


def replay_state_ref(checkpoint, ring_k, ring_g, ring_d, count):
    """S after `count` ring entries: Diag(exp G) S0 + sum_j Diag(exp(G - G_j)) k_hat_j d_j^T."""
    if count == 0:
        return checkpoint.clone()
    g_last = ring_g[:, :, count - 1]
    weights = ring_k[:, :, :count] * torch.exp(g_last[:, :, None] - ring_g[:, :, :count])
    return checkpoint * torch.exp(g_last)[..., None] + torch.einsum("bhjk,bhjv->bhkv", weights, ring_d[:, :, :count])


# ---------------------------------------------------------------------------------------------
# Triton kernels
# ---------------------------------------------------------------------------------------------


@triton.jit(do_not_specialize=["slot", "prev_slot", "prev_k_limit"])
def _replay_step_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, b_ptr, alog_ptr, dtb_ptr, ckpt_ptr, ring_k_ptr, ring_g_ptr, ring_d_ptr, o_ptr,
    sq_b, sq_h, sq_k, sk_b, sk_h, sk_k, sv_b, sv_h, sv_v, sg_b, sg_h, sg_k, sb_b, sb_h,
    sa_h, sdt_h, sdt_k, so_b, so_h, so_v,
    slot, prev_slot, prev_k_limit, H,
    HEAD_K: tl.constexpr, HEAD_V: tl.constexpr, RING_LEN: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, BL: tl.constexpr, EPS: tl.constexpr, SCALE: tl.constexpr,
):
    # One program per (sequence, head): the prologue and the replay weights are computed once.
    # Checkpoint and ring are owned, contiguous buffers: [B*H, K, V] and [B*H, L, K or V].
    pid = tl.program_id(0)
    bi = (pid // H).to(tl.int64)
    hi = (pid % H).to(tl.int64)
    head = pid.to(tl.int64)
    offs_k = tl.arange(0, BK)
    k_mask = offs_k < HEAD_K
    q, k, g_raw, dt_bias, a_log, b_raw = load_head_inputs(
        q_ptr, k_ptr, g_ptr, dtb_ptr, alog_ptr, b_ptr, bi, hi, offs_k, k_mask,
        sq_b, sq_h, sq_k, sk_b, sk_h, sk_k, sg_b, sg_h, sg_k, sdt_h, sdt_k, sa_h, sb_b, sb_h)
    q_scaled, k_hat = normalise_rsqrt(q, k, EPS, SCALE)
    beta = 1.0 / (1.0 + tl.exp(-b_raw))
    ring_row = head * RING_LEN
    # G_{t-1} from the previous slot; prev_k_limit is 0 at slot 0 (G_0 = 0), else HEAD_K.
    g_prev = tl.load(ring_g_ptr + (ring_row + prev_slot) * HEAD_K + offs_k, mask=offs_k < prev_k_limit, other=0.0)
    g_t = g_prev + log_decay(g_raw, dt_bias, a_log)

    # Replay weights <k_hat_j, exp(G_t - G_j) x> for x = k_hat_t and q~_t, over past slots j < slot.
    offs_l = tl.arange(0, BL)
    past = offs_l < slot
    lk_offs = (ring_row + offs_l)[:, None] * HEAD_K + offs_k[None, :]
    lk_mask = past[:, None] & k_mask[None, :]
    past_k = tl.load(ring_k_ptr + lk_offs, mask=lk_mask, other=0.0)
    past_g = tl.load(ring_g_ptr + lk_offs, mask=lk_mask, other=0.0)
    weighted = past_k * tl.exp(g_t[None, :] - past_g)
    w_k = tl.sum(weighted * k_hat[None, :], 1)
    w_q = tl.sum(weighted * q_scaled[None, :], 1)
    w_self = tl.sum(k_hat * q_scaled, 0)
    decay_t = tl.exp(g_t)
    ckpt_k = decay_t * k_hat
    ckpt_q = decay_t * q_scaled
    tl.store(ring_k_ptr + (ring_row + slot) * HEAD_K + offs_k, k_hat, mask=k_mask)
    tl.store(ring_g_ptr + (ring_row + slot) * HEAD_K + offs_k, g_t, mask=k_mask)

    for v_start in tl.static_range(0, HEAD_V, BV):
        offs_v = v_start + tl.arange(0, BV)
        v_mask = offs_v < HEAD_V
        s0 = tl.load(ckpt_ptr + (head * HEAD_K + offs_k[:, None]) * HEAD_V + offs_v[None, :],
                     mask=k_mask[:, None] & v_mask[None, :], other=0.0)
        past_d = tl.load(ring_d_ptr + (ring_row + offs_l)[:, None] * HEAD_V + offs_v[None, :],
                         mask=past[:, None] & v_mask[None, :], other=0.0)
        s_k = tl.sum(s0 * ckpt_k[:, None], 0) + tl.sum(past_d * w_k[:, None], 0)
        v = tl.load(v_ptr + bi * sv_b + hi * sv_h + offs_v * sv_v, mask=v_mask, other=0.0)
        d = beta * (v - s_k)
        o = tl.sum(s0 * ckpt_q[:, None], 0) + tl.sum(past_d * w_q[:, None], 0) + w_self * d
        tl.store(ring_d_ptr + (ring_row + slot) * HEAD_V + offs_v, d, mask=v_mask)
        tl.store(o_ptr + bi * so_b + hi * so_h + offs_v * so_v, o, mask=v_mask)


@triton.jit(do_not_specialize=["count"])
def _replay_flush_kernel(
    ckpt_ptr, ring_k_ptr, ring_g_ptr, ring_d_ptr, count,
    HEAD_K: tl.constexpr, HEAD_V: tl.constexpr, RING_LEN: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
):
    # Grid (B*H, V tiles): rewrite one [K, BV] tile of the checkpoint as the state after `count` steps.
    head = tl.program_id(0).to(tl.int64)
    offs_k = tl.arange(0, BK)
    k_mask = offs_k < HEAD_K
    offs_v = tl.program_id(1) * BV + tl.arange(0, BV)
    v_mask = offs_v < HEAD_V
    ring_row = head * RING_LEN
    g_last = tl.load(ring_g_ptr + (ring_row + count - 1) * HEAD_K + offs_k, mask=k_mask, other=0.0)
    tile_ptrs = ckpt_ptr + (head * HEAD_K + offs_k[:, None]) * HEAD_V + offs_v[None, :]
    tile_mask = k_mask[:, None] & v_mask[None, :]
    s = tl.load(tile_ptrs, mask=tile_mask, other=0.0) * tl.exp(g_last)[:, None]
    for j in range(0, count):
        k_j = tl.load(ring_k_ptr + (ring_row + j) * HEAD_K + offs_k, mask=k_mask, other=0.0)
        g_j = tl.load(ring_g_ptr + (ring_row + j) * HEAD_K + offs_k, mask=k_mask, other=0.0)
        d_j = tl.load(ring_d_ptr + (ring_row + j) * HEAD_V + offs_v, mask=v_mask, other=0.0)
        s += (k_j * tl.exp(g_last - g_j))[:, None] * d_j[None, :]
    tl.store(tile_ptrs, s, mask=tile_mask)


# ---------------------------------------------------------------------------------------------
# Stateful wrapper
# ---------------------------------------------------------------------------------------------


class ReplaySSMState:
    """KDA decode state held as a checkpoint plus a ring of the last `ring_len` updates.

    `step` runs one decode token for every sequence (Triton replay kernel) and returns o [B,H,V];
    after every `ring_len` steps the checkpoint is flushed (rewritten as the current state) and the
    ring restarts. A_log [H], dt_bias [H,K] and the starting state [B,H,K,V] are float32; the
    starting state is copied, not aliased.
    """

    def __init__(self, A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, ring_len: int) -> None:
        where = "ReplaySSMState"
        if not isinstance(state, torch.Tensor) or state.dim() != 4:
            raise InputError(f"{where} argument 'state'", "is not a 4-d tensor",
                             "a float32 tensor of shape [B, H, K, V]")
        batch, heads, head_k, head_v = state.shape
        device = state.device
        check_tensor("state", state, (batch, heads, head_k, head_v), "B, H, K, V", device, where)
        check_tensor("A_log", A_log, (heads,), "H", device, where)
        check_tensor("dt_bias", dt_bias, (heads, head_k), "H, K", device, where)
        if not isinstance(ring_len, int) or isinstance(ring_len, bool) or ring_len < 1:
            raise InputError(f"{where} argument 'ring_len'", f"is {ring_len!r}", "an integer >= 1")
        check_triton_device(where, device, _replay_step_kernel)
        self.A_log = A_log
        self.dt_bias = dt_bias
        self.ring_len = ring_len
        self.shape = (batch, heads, head_k, head_v)
        self.checkpoint = state.detach().clone().contiguous()
        self.ring_k = torch.zeros(batch, heads, ring_len, head_k, dtype=torch.float32, device=device)
        self.ring_g = torch.zeros_like(self.ring_k)
        self.ring_d = torch.zeros(batch, heads, ring_len, head_v, dtype=torch.float32, device=device)
        self.count = 0  # ring slots filled since the last flush
        self.flushes = 0

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """One decode token: q, k, g [B,H,K], v [B,H,V], b [B,H] float32; returns o [B,H,V]."""
        shape = check_kda_inputs(q, k, v, g, b, self.A_log, self.dt_bias, None, where="ReplaySSMState.step")
        if (shape.batch, shape.heads, shape.head_k, shape.head_v) != self.shape:
            raise InputError("ReplaySSMState.step argument 'q'/'v'",
                             f"give B, H, K, V = {shape.batch}, {shape.heads}, {shape.head_k}, {shape.head_v}",
                             f"the state's B, H, K, V = {self.shape}")
        batch, heads, head_k, head_v = self.shape
        plan = replay_launch_plan(head_k, head_v, self.ring_len)
        out = torch.empty(batch, heads, head_v, dtype=torch.float32, device=q.device)
        _replay_step_kernel[(batch * heads,)](
            q, k, v, g, b, self.A_log, self.dt_bias, self.checkpoint, self.ring_k, self.ring_g, self.ring_d, out,
            *q.stride(), *k.stride(), *v.stride(), *g.stride(), *b.stride(),
            *self.A_log.stride(), *self.dt_bias.stride(), *out.stride(),
            self.count, max(self.count - 1, 0), head_k if self.count > 0 else 0, heads,
            HEAD_K=head_k, HEAD_V=head_v, RING_LEN=self.ring_len,
            BK=plan.block_k, BV=plan.block_v, BL=plan.block_l, EPS=NORM_EPS, SCALE=head_k**-0.5,
        )
        self.count += 1
        if self.count == self.ring_len:
            self.flush()
        return out

    def flush(self) -> None:
        """Rewrite the checkpoint as the current state and empty the ring (no-op when empty)."""
        if self.count == 0:
            return
        batch, heads, head_k, head_v = self.shape
        plan = replay_launch_plan(head_k, head_v, self.ring_len)
        _replay_flush_kernel[(batch * heads, plan.v_tiles)](
            self.checkpoint, self.ring_k, self.ring_g, self.ring_d, self.count,
            HEAD_K=head_k, HEAD_V=head_v, RING_LEN=self.ring_len, BK=plan.block_k, BV=plan.block_v,
        )
        self.count = 0
        self.flushes += 1

    def materialize(self) -> torch.Tensor:
        """The current state S [B,H,K,V] (torch replay; nothing is modified)."""
        return replay_state_ref(self.checkpoint, self.ring_k, self.ring_g, self.ring_d, self.count)

    def memory(self) -> ReplayMemory:
        """Bytes per sequence of this state's layout."""
        _, heads, head_k, head_v = self.shape
        return replay_ssm_memory(head_k, head_v, self.ring_len, heads)
