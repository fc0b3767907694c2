"""Static work counts of the KDA decode variants and ReplaySSM (the `kda_decode` op,
`op.py`): bytes moved, arithmetic, divisions, transcendentals and the
elementwise work a tiling repeats, as plain functions of the shape.

The counts follow the kernels' structure: each entry asks the kernel module for the launch plan it
uses (tile sizes, programs, how often the prologue runs) and counts the operations written in the
kernel source, so a change of tiling shows up here without a device. This is what makes the KDA
decode tuning story visible on a CPU: v1 -> v2 removes the per-element divisions, v2 -> v3 removes
the normalisation and gating work repeated in every V tile.

Conventions (every entry follows them):
- `bytes`: compulsory memory traffic, every tensor element read or written once (the DRAM floor);
  `state_bytes` is the recurrent-state part of it. `bytes_loaded` sums what every program loads and
  stores (masked lanes excluded); the excess over `bytes` is repeated loads, mostly L2 hits.
- Operation counts are per executed lane: padded lanes of a power-of-two tile count, as the
  hardware computes them (for power-of-two shapes this equals the logical work).
- `flops`: elementwise arithmetic (add, sub, mul, div, max, abs, neg); reductions of n lanes count
  n - 1 adds; transcendentals are counted separately and not in `flops`.
- `divisions` are included in `flops` and also counted on their own (an FP32 IEEE division costs
  many instructions).
- `repeated_elementwise`: arithmetic plus transcendental operations that a tiling repeats with
  identical inputs (e.g. the per-(sequence, head) prologue recomputed in every V tile).
- `steps`: decode steps the counts cover (1, or a whole ring cycle for ReplaySSM).

`WorkCounts` and `Transcendentals` are the shared layer's (`infralab.work_formulas`, which also
holds the other ops' formulas). `WORK_COUNTS` is keyed by (kernel, variant); entries take the shape
as keyword arguments.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping

from infralab.errors import InputError
from infralab.kernels.ops.kda_decode.kernel import VARIANTS as KDA_VARIANTS
from infralab.kernels.ops.kda_decode.kernel import KdaLaunchPlan, kda_launch_plan
from infralab.kernels.ops.kda_decode.replay_ssm import replay_launch_plan
from infralab.work_formulas import F32, Transcendentals, WorkCounts, replay_ssm_cycle_bytes


@dataclass(frozen=True)
class OpCounts:
    """Operations of one piece of a kernel: arithmetic (divisions included), divisions, transcendentals."""

    arith: int = 0
    divisions: int = 0
    transcendentals: Transcendentals = Transcendentals()

    @property
    def elementwise(self) -> int:
        return self.arith + self.transcendentals.total

    def __add__(self, other: OpCounts) -> OpCounts:
        return OpCounts(self.arith + other.arith, self.divisions + other.divisions,
                        self.transcendentals + other.transcendentals)

    def scaled(self, times: int) -> OpCounts:
        return OpCounts(self.arith * times, self.divisions * times, self.transcendentals.scaled(times))


# ---------------------------------------------------------------------------------------------
# KDA decode (kernel.py)
# ---------------------------------------------------------------------------------------------


def _kda_gate_and_beta_ops(lanes: int) -> OpCounts:
    """`_gate_and_beta` on `lanes` key channels: gate (with softplus), decay exp, beta sigmoid."""
    # g_raw + dt_bias (1); softplus: abs, neg, 1 + ., max, + (5); -exp(A_log) (1, scalar); * softplus (1)
    gate = OpCounts(arith=7 * lanes + 1, transcendentals=Transcendentals(exp=lanes + 1, log=lanes))
    decay = OpCounts(transcendentals=Transcendentals(exp=lanes))
    # 1 / (1 + exp(-b)): neg, add, div
    beta = OpCounts(arith=3, divisions=1, transcendentals=Transcendentals(exp=1))
    return gate + decay + beta


def _sum_of_squares_ops(lanes: int) -> int:
    """x * x (n muls), tl.sum (n - 1 adds), + eps (1)."""
    return lanes + (lanes - 1) + 1


def kda_prologue_ops(plan: KdaLaunchPlan) -> OpCounts:
    """One run of a variant's prologue: q/k normalisation (with the 1/sqrt(K) scale) and gating."""
    lanes = plan.block_k
    if plan.divide_per_element:
        # v1 `_prologue_divide`: sqrt, then q / norm * SCALE and k / norm.
        norms = OpCounts(
            arith=2 * _sum_of_squares_ops(lanes) + 2 * lanes + lanes,
            divisions=2 * lanes,
            transcendentals=Transcendentals(sqrt=2),
        )
    else:
        # `normalise_rsqrt`: rsqrt(.) * SCALE (1 scalar mul), then q * inv and k * inv.
        norms = OpCounts(
            arith=2 * _sum_of_squares_ops(lanes) + 1 + 2 * lanes,
            transcendentals=Transcendentals(rsqrt=2),
        )
    return norms + _kda_gate_and_beta_ops(lanes)


def kda_update_tile_ops(block_k: int, block_v: int) -> OpCounts:
    """`_update_tile` on a [block_k, block_v] tile: decay, S^T k, u, rank-1 update, S^T q."""
    tile = block_k * block_v
    reduce = (block_k - 1) * block_v
    # s*decay, s*k_hat, k_hat*u, s + ., s*q (5 tile ops), two K reductions, v - s_k and beta * . (2 per column)
    return OpCounts(arith=5 * tile + 2 * reduce + 2 * block_v)


def kda_decode_counts(variant: str, batch: int, heads: int, head_k: int, head_v: int) -> WorkCounts:
    """One decode step of `kda_decode` variant v1/v2/v3 for B sequences, H heads, head dims K, V."""
    plan = kda_launch_plan(variant, head_k, head_v)
    pairs = batch * heads
    prologues = plan.prologues_per_head
    state_bytes = 2 * pairs * head_k * head_v * F32
    # q, k, g_raw (K each), v and out (V each), b (1) per (sequence, head); dt_bias (K) and A_log (1) per head.
    io_bytes = (pairs * (3 * head_k + 2 * head_v + 1) + heads * (head_k + 1)) * F32
    # Each prologue loads q, k, g_raw, dt_bias (K each), A_log and b; tiles share v/out/state columns.
    prologue_load_bytes = (4 * head_k + 2) * F32
    bytes_loaded = pairs * (prologues * prologue_load_bytes + (2 * head_k * head_v + 2 * head_v) * F32)
    prologue = kda_prologue_ops(plan)
    per_pair = prologue.scaled(prologues) + kda_update_tile_ops(plan.block_k, plan.block_v).scaled(plan.v_tiles)
    total = per_pair.scaled(pairs)
    return WorkCounts(
        kernel="kda_decode",
        variant=variant,
        shape=(("batch", batch), ("heads", heads), ("head_k", head_k), ("head_v", head_v)),
        steps=1,
        programs=pairs * plan.programs_per_head,
        bytes=state_bytes + io_bytes,
        state_bytes=state_bytes,
        bytes_loaded=bytes_loaded,
        repeated_load_bytes=pairs * (prologues - 1) * prologue_load_bytes,
        flops=total.arith,
        divisions=total.divisions,
        transcendentals=total.transcendentals,
        repeated_elementwise=pairs * (prologues - 1) * prologue.elementwise,
    )


def replay_step_ops(block_k: int, block_v: int, v_tiles: int, block_l: int) -> OpCounts:
    """`_replay_step_kernel` for one (sequence, head): prologue, replay weights over all block_l
    ring rows (masked rows are computed too), then per V tile the checkpoint and ring products."""
    lanes = block_k
    norms = OpCounts(arith=2 * _sum_of_squares_ops(lanes) + 1 + 2 * lanes, transcendentals=Transcendentals(rsqrt=2))
    beta = OpCounts(arith=3, divisions=1, transcendentals=Transcendentals(exp=1))
    gate = OpCounts(arith=7 * lanes + 1 + lanes, transcendentals=Transcendentals(exp=lanes + 1, log=lanes))
    rows = block_l * lanes
    # G_t - G_j, past_k * exp(.), two products with k_hat / q~ and their K reductions; w_self; exp(G_t);
    # decay_t * k_hat and decay_t * q~.
    weights = OpCounts(
        arith=4 * rows + 2 * block_l * (lanes - 1) + (2 * lanes - 1) + 2 * lanes,
        transcendentals=Transcendentals(exp=rows + lanes),
    )
    tile = block_k * block_v
    ring_tile = block_l * block_v
    # Per V tile: two checkpoint products + K reductions, two ring products + L reductions,
    # s_k sum, v - s_k, beta *, o's two sums and w_self * d.
    per_tile = OpCounts(arith=2 * tile + 2 * (block_k - 1) * block_v + 2 * ring_tile
                        + 2 * (block_l - 1) * block_v + 6 * block_v)
    return norms + beta + gate + weights + per_tile.scaled(v_tiles)


def replay_flush_ops(block_k: int, block_v: int, v_tiles: int, ring_len: int) -> OpCounts:
    """`_replay_flush_kernel` for one (sequence, head) with a full ring of `ring_len` entries."""
    tile = block_k * block_v
    # S0 * exp(G_L); per entry: G_L - G_j, k_j * exp(.), the outer product and the accumulation.
    per_tile = OpCounts(
        arith=tile + ring_len * (2 * block_k + 2 * tile),
        transcendentals=Transcendentals(exp=block_k + ring_len * block_k),
    )
    return per_tile.scaled(v_tiles)


def kda_replay_counts(batch: int, heads: int, head_k: int, head_v: int, ring_len: int) -> WorkCounts:
    """One ring cycle of ReplaySSM: `ring_len` decode steps and the flush that ends it.

    Unlike plain decode, ReplaySSM rereads its ring by design, so `bytes` is the traffic of the
    algorithm (`infralab.work_formulas.replay_ssm_cycle_bytes`, which the simulator uses too). The flush's V tiles each reread k_hat, G and G_L: those rereads are `repeated_load_bytes`.
    """
    plan = replay_launch_plan(head_k, head_v, ring_len)
    pairs = batch * heads
    repeated_floats = pairs * (plan.v_tiles - 1) * (head_k + ring_len * 2 * head_k)
    bytes_total = replay_ssm_cycle_bytes(batch, heads, head_k, head_v, ring_len)
    state_floats = ring_len * head_k * head_v + 2 * head_k * head_v  # checkpoint reads + the flush's read/write
    # Every step program loads dt_bias and A_log for its own (sequence, head).
    per_program_params = ring_len * (pairs - heads) * (head_k + 1) * F32
    ops = (replay_step_ops(plan.block_k, plan.block_v, plan.v_tiles, plan.block_l).scaled(ring_len)
           + replay_flush_ops(plan.block_k, plan.block_v, plan.v_tiles, ring_len)).scaled(pairs)
    # The flush recomputes exp(G_L) and k_j * exp(G_L - G_j) (sub, exp, mul per lane) in every V tile.
    flush_weights = plan.block_k + ring_len * 3 * plan.block_k
    return WorkCounts(
        kernel="kda_decode",
        variant="replay",
        shape=(("batch", batch), ("heads", heads), ("head_k", head_k), ("head_v", head_v), ("ring_len", ring_len)),
        steps=ring_len,
        programs=pairs * (ring_len + plan.v_tiles),
        bytes=bytes_total,
        state_bytes=pairs * state_floats * F32,
        bytes_loaded=bytes_total + repeated_floats * F32 + per_program_params,
        repeated_load_bytes=repeated_floats * F32,
        flops=ops.arith,
        divisions=ops.divisions,
        transcendentals=ops.transcendentals,
        repeated_elementwise=pairs * (plan.v_tiles - 1) * flush_weights,
    )


def _kda_entry(variant: str) -> Callable[..., WorkCounts]:
    def counts(batch: int, heads: int, head_k: int, head_v: int) -> WorkCounts:
        return kda_decode_counts(variant, batch, heads, head_k, head_v)

    counts.__doc__ = f"kda_decode {variant}: one decode step (bytes, FLOPs, divisions, ...)."
    return counts


WORK_COUNTS: Mapping[tuple[str, str], Callable[..., WorkCounts]] = MappingProxyType({
    **{("kda_decode", variant): _kda_entry(variant) for variant in KDA_VARIANTS},
    ("kda_decode", "replay"): kda_replay_counts,
})
"""(kernel, variant) -> function(**shape) -> WorkCounts. Read-only; add entries here."""


def work_counts(kernel: str, variant: str, **shape: int) -> WorkCounts:
    """Static work counts of `kernel`/`variant` at `shape` (keyword arguments, e.g. batch=64)."""
    entry = WORK_COUNTS.get((kernel, variant))
    if entry is None:
        known = ", ".join(f"{k}/{v}" for k, v in sorted(WORK_COUNTS))
        raise InputError("work_counts", f"no entry for kernel/variant {kernel}/{variant}", f"one of {known}")
    params = list(inspect.signature(entry).parameters)
    if sorted(shape) != sorted(params):
        raise InputError(f"work_counts {kernel}/{variant}", f"got shape keys {sorted(shape)}",
                         f"exactly the keys {params}")
    for name, value in shape.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"work_counts {kernel}/{variant} shape '{name}'", f"is {value!r}", "an integer >= 1")
    return entry(**shape)
