"""ReplaySSM: checkpoint + ring replay against the plain KDA recurrence, over several flushes,
plus the memory accounting worked out by hand."""

import os

import pytest
import torch

from infralab.errors import InputError
from infralab.kernels.ops.kda_decode.kernel import kda_decode_ref
from infralab.kernels.ops.kda_decode.replay_ssm import ReplaySSMState, replay_ssm_memory, replay_state_ref, replay_step_ref

DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"

# Stated tolerances against the float64 plain recurrence (algebraically exact, not bit-exact).
# Measured on the interpreter: max |o - o64| ~ 3e-8 (|o| <= ~0.1), max |S - S64| ~ 2e-7 (|S| <= ~1).
OUT_ATOL, OUT_RTOL = 1e-6, 1e-5
STATE_ATOL, STATE_RTOL = 2e-6, 1e-5


def make_params(heads, head_k, gen):
    a_log = torch.log(torch.rand(heads, generator=gen) * 0.9 + 0.1)
    dt_bias = torch.randn(heads, head_k, generator=gen) * 0.5 - 1.0
    return a_log.to(DEVICE), dt_bias.to(DEVICE)


def make_step(batch, heads, head_k, head_v, gen):
    shapes = [(batch, heads, head_k), (batch, heads, head_k), (batch, heads, head_v),
              (batch, heads, head_k), (batch, heads)]
    return [torch.randn(s, generator=gen).to(DEVICE) for s in shapes]


def as64(*xs):
    return [x.double() for x in xs]


@pytest.mark.parametrize("dims, ring_len", [((2, 2, 32, 48), 4), ((1, 2, 40, 24), 3)])
def test_replay_matches_plain_recurrence_over_three_rings(dims, ring_len):
    """>= 3L steps: three flushes and a partly filled ring; non-power-of-two K/V and L in the second case."""
    batch, heads, head_k, head_v = dims
    gen = torch.Generator().manual_seed(21)
    a_log, dt_bias = make_params(heads, head_k, gen)
    start = torch.randn(batch, heads, head_k, head_v, generator=gen).to(DEVICE) * 0.3
    replay = ReplaySSMState(a_log, dt_bias, start, ring_len)
    state64 = start.double()
    checkpoint_before = replay.checkpoint.clone()
    worst_o = worst_s = 0.0
    for step in range(3 * ring_len + 2):
        q, k, v, g, b = make_step(batch, heads, head_k, head_v, gen)
        o = replay.step(q, k, v, g, b)
        o64, state64 = kda_decode_ref(*as64(q, k, v, g, b, a_log, dt_bias), state64)
        torch.testing.assert_close(o.double(), o64, atol=OUT_ATOL, rtol=OUT_RTOL)
        state = replay.materialize().double()
        torch.testing.assert_close(state, state64, atol=STATE_ATOL, rtol=STATE_RTOL)
        worst_o = max(worst_o, (o.double() - o64).abs().max().item())
        worst_s = max(worst_s, (state - state64).abs().max().item())
        flushed_now = (step + 1) % ring_len == 0
        # The checkpoint is written only by a flush, once every ring_len steps.
        assert torch.equal(replay.checkpoint, checkpoint_before) != flushed_now
        checkpoint_before = replay.checkpoint.clone()
    assert replay.flushes == 3 and replay.count == 2
    assert state64.abs().max() > 0.1
    print(f"replay L={ring_len}: max|o-o64|={worst_o:.2e} max|S-S64|={worst_s:.2e}")


def test_kernel_step_writes_the_reference_ring_slot():
    """The Triton step against the torch replay reference on the same checkpoint and ring."""
    batch, heads, head_k, head_v, ring_len = 1, 2, 16, 24, 4
    gen = torch.Generator().manual_seed(5)
    a_log, dt_bias = make_params(heads, head_k, gen)
    replay = ReplaySSMState(a_log, dt_bias, torch.randn(batch, heads, head_k, head_v, generator=gen).to(DEVICE),
                            ring_len)
    for slot in range(ring_len - 1):
        inputs = make_step(batch, heads, head_k, head_v, gen)
        o_ref, k_hat, g_t, d_t = replay_step_ref(replay.checkpoint, replay.ring_k, replay.ring_g, replay.ring_d,
                                                 slot, *inputs, a_log, dt_bias)
        o = replay.step(*inputs)
        torch.testing.assert_close(o, o_ref, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(replay.ring_k[:, :, slot], k_hat, atol=1e-7, rtol=1e-6)
        torch.testing.assert_close(replay.ring_g[:, :, slot], g_t, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(replay.ring_d[:, :, slot], d_t, atol=1e-6, rtol=1e-5)
    # Cumulative log-decay never increases along the ring (every g_t <= 0).
    assert (replay.ring_g[:, :, 1:ring_len - 1] <= replay.ring_g[:, :, :ring_len - 2]).all()


def test_early_flush_changes_nothing_observable_and_ring_of_one_is_plain_decode():
    batch, heads, head_k, head_v = 1, 1, 16, 16
    gen = torch.Generator().manual_seed(9)
    a_log, dt_bias = make_params(heads, head_k, gen)
    start = torch.randn(batch, heads, head_k, head_v, generator=gen).to(DEVICE) * 0.3
    steps = [make_step(batch, heads, head_k, head_v, gen) for _ in range(3)]
    lazy, eager, plain = (ReplaySSMState(a_log, dt_bias, start, n) for n in (8, 8, 1))
    for inputs in steps:
        o_lazy, o_eager, o_plain = lazy.step(*inputs), eager.step(*inputs), plain.step(*inputs)
        eager.flush()
        torch.testing.assert_close(o_eager, o_lazy, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(o_plain, o_lazy, atol=1e-6, rtol=1e-5)
    assert (lazy.flushes, eager.flushes, plain.flushes) == (0, 3, 3)
    eager.flush()  # empty ring: no-op
    assert eager.flushes == 3
    torch.testing.assert_close(lazy.materialize(), eager.checkpoint, atol=2e-6, rtol=1e-5)
    assert torch.equal(replay_state_ref(eager.checkpoint, eager.ring_k, eager.ring_g, eager.ring_d, 0),
                       eager.checkpoint)


def test_memory_accounting_by_hand():
    # K = V = 128, L = 8, one head: checkpoint 128*128*4 = 65536 B; ring 8*(128+128+128)*4 = 12288 B.
    m = replay_ssm_memory(128, 128, 8)
    assert (m.checkpoint_bytes, m.ring_bytes, m.total_bytes) == (65536, 12288, 77824)
    assert (m.plain_state_bytes, m.window_states_bytes) == (65536, 524288)
    assert m.overhead_vs_plain == pytest.approx(77824 / 65536)  # 1.1875
    assert m.fraction_of_window_states == pytest.approx(77824 / 524288)  # 0.1484
    # K = 96, V = 80, L = 3, 32 heads: 32*96*80*4 = 983040 B; ring 32*3*(96+96+80)*4 = 104448 B.
    m = replay_ssm_memory(96, 80, 3, heads=32)
    assert (m.checkpoint_bytes, m.ring_bytes, m.total_bytes) == (983040, 104448, 1087488)
    assert m.window_states_bytes == 3 * 983040
    # The state object reports its own layout.
    gen = torch.Generator().manual_seed(0)
    a_log, dt_bias = make_params(2, 16, gen)
    state = ReplaySSMState(a_log, dt_bias, torch.zeros(3, 2, 16, 8, device=DEVICE), 5)
    assert state.memory() == replay_ssm_memory(16, 8, 5, heads=2)
    ring_bytes = sum(t[0].numel() * t.element_size() for t in (state.ring_k, state.ring_g, state.ring_d))
    assert ring_bytes == state.memory().ring_bytes
    assert state.checkpoint[0].numel() * 4 == state.memory().checkpoint_bytes


def test_bad_inputs_are_rejected_with_the_argument_named():
    gen = torch.Generator().manual_seed(0)
    a_log, dt_bias = make_params(2, 16, gen)
    state = torch.zeros(1, 2, 16, 8, device=DEVICE)
    with pytest.raises(InputError, match=r"'ring_len'.*integer >= 1"):
        ReplaySSMState(a_log, dt_bias, state, 0)
    with pytest.raises(InputError, match=r"'state'.*\[B, H, K, V\]"):
        ReplaySSMState(a_log, dt_bias, state[0], 4)
    with pytest.raises(InputError, match=r"'dt_bias'.*\[H, K\] = \[2, 16\]"):
        ReplaySSMState(a_log, dt_bias[:, :8], state, 4)
    with pytest.raises(InputError, match=r"'state'.*float64"):
        ReplaySSMState(a_log, dt_bias, state.double(), 4)
    replay = ReplaySSMState(a_log, dt_bias, state, 4)
    q, k, v, g, b = make_step(1, 2, 16, 8, gen)
    with pytest.raises(InputError, match=r"ReplaySSMState.step.*B, H, K, V"):
        replay.step(q, k, torch.zeros(1, 2, 9, device=DEVICE), g, b)
    with pytest.raises(InputError, match=r"ReplaySSMState.step argument 'b'.*\[B, H\]"):
        replay.step(q, k, v, g, b[:, :1])
    with pytest.raises(InputError, match=r"'ring_len'"):
        replay_ssm_memory(128, 128, 0)
    assert replay.count == 0  # rejected steps leave the ring alone


def test_head_split_is_bitwise_equal_to_whole():
    """Two ReplaySSM states on heads [0:H/2] and [H/2:H] (inputs as strided views) give the unsplit
    outputs and checkpoints bit for bit, across a flush."""
    batch, heads, head_k, head_v, ring_len = 2, 4, 16, 24, 2
    gen = torch.Generator().manual_seed(13)
    a_log, dt_bias = make_params(heads, head_k, gen)
    start = torch.randn(batch, heads, head_k, head_v, generator=gen).to(DEVICE) * 0.3
    halves = (slice(0, heads // 2), slice(heads // 2, heads))
    whole = ReplaySSMState(a_log, dt_bias, start, ring_len)
    parts = [ReplaySSMState(a_log[s], dt_bias[s], start[:, s], ring_len) for s in halves]
    for _ in range(3):
        q, k, v, g, b = make_step(batch, heads, head_k, head_v, gen)
        o_whole = whole.step(q, k, v, g, b)
        o_parts = [p.step(*(x[:, s] for x in (q, k, v, g, b))) for p, s in zip(parts, halves)]
        assert torch.equal(torch.cat(o_parts, dim=1), o_whole)
    assert whole.flushes == 1 and whole.count == 1
    assert torch.equal(torch.cat([p.checkpoint for p in parts], dim=1), whole.checkpoint)
    assert torch.equal(torch.cat([p.ring_d for p in parts], dim=1), whole.ring_d)
