"""Static work counts: the KDA tuning story (v1 -> v2 cuts divisions, v2 -> v3 cuts repeated work)
as numbers worked out by hand, invariants over shapes, and their tie to the kernels' tiling."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.errors import InputError
from infralab.kernels.ops.kda_decode import kernel as kda_decode
from infralab.kernels.ops.kda_decode.work_counts import WORK_COUNTS, work_counts

TARGET = dict(batch=64, heads=32, head_k=128, head_v=128)


def kda(variant, **shape):
    return work_counts("kda_decode", variant, **(shape or TARGET))


def test_target_shape_by_hand():
    v1, v2, v3 = kda("v1"), kda("v2"), kda("v3")
    pairs = 64 * 32
    # State read + write: 2 * 2048 * 128 * 128 * 4 B; q, k, g, v, o (3K + 2V floats) and b per pair;
    # dt_bias and A_log per head.
    assert v1.state_bytes == 2 * pairs * 128 * 128 * 4 == 268_435_456
    assert v1.bytes == 268_435_456 + pairs * (3 * 128 + 2 * 128 + 1) * 4 + 32 * 129 * 4 == 273_703_040
    assert v1.bytes == v2.bytes == v3.bytes  # the traffic floor does not depend on the tiling
    # ~57 us at 4.8 TB/s: the H200 target is >= 80 % of that bandwidth.
    assert v3.bytes / 4.8e12 == pytest.approx(57.0e-6, rel=0.01)
    # Programs: 4 V tiles of 32 per pair for v1/v2, one program per pair for v3.
    assert (v1.programs, v2.programs, v3.programs) == (4 * pairs, 4 * pairs, pairs)
    # Divisions: v1 divides q and k elementwise (2K) and in the sigmoid (1), in each of 4 tiles;
    # v2 keeps only the sigmoid's; v3 runs its prologue once.
    assert v1.divisions == pairs * 4 * (2 * 128 + 1) == 2_105_344
    assert v2.divisions == pairs * 4 == 8192
    assert v3.divisions == pairs == 2048
    # Prologue, per run: arithmetic 14K + 4 (v1) / 13K + 5 (v2, v3); exp 2K + 2, log K, 2 (r)sqrt.
    per_run_v1 = 14 * 128 + 4 + (2 * 128 + 2) + 128 + 2
    per_run_v2 = 13 * 128 + 5 + (2 * 128 + 2) + 128 + 2
    assert v1.repeated_elementwise == pairs * 3 * per_run_v1 == 13_418_496
    assert v2.repeated_elementwise == pairs * 3 * per_run_v2 == 12_638_208
    assert v3.repeated_elementwise == 0
    assert v1.repeated_load_bytes == v2.repeated_load_bytes == pairs * 3 * (4 * 128 + 2) * 4
    assert v3.repeated_load_bytes == 0
    # FLOPs: the state update is 7 K V per pair in every variant, plus the prologue runs.
    assert v3.flops == pairs * (7 * 128 * 128 + 13 * 128 + 5)
    assert v1.flops == pairs * (7 * 128 * 128 + 4 * (14 * 128 + 4))
    assert (v1.transcendentals.sqrt, v1.transcendentals.rsqrt) == (pairs * 8, 0)
    assert (v3.transcendentals.sqrt, v3.transcendentals.rsqrt) == (0, pairs * 2)
    assert v3.transcendentals.exp == pairs * (2 * 128 + 2)
    assert v3.transcendentals.log == pairs * 128


def test_counts_follow_the_kernel_tiling_constant(monkeypatch):
    """Changing the kernels' V tile changes the counts: they are derived, not tabulated."""
    before = kda("v1")
    monkeypatch.setattr(kda_decode, "TILED_BLOCK_V", 64)
    after = kda("v1")
    assert after.programs == before.programs // 2
    assert after.divisions == before.divisions // 2
    assert after.repeated_elementwise == before.repeated_elementwise // 3  # 1 repeat instead of 3


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 8),
    heads=st.integers(1, 8),
    head_k=st.integers(1, 300),
    head_v=st.integers(1, 300),
)
def test_tuning_story_holds_for_every_shape(batch, heads, head_k, head_v):
    shape = dict(batch=batch, heads=heads, head_k=head_k, head_v=head_v)
    v1, v2, v3 = (kda(v, **shape) for v in ("v1", "v2", "v3"))
    pairs = batch * heads
    tiles = -(-head_v // 32)
    assert v1.bytes == v2.bytes == v3.bytes
    assert v1.state_bytes == 2 * pairs * head_k * head_v * 4
    assert v1.divisions > v2.divisions >= v3.divisions == pairs
    assert v2.divisions == pairs * tiles
    assert v1.flops >= v2.flops >= v3.flops
    assert v3.repeated_elementwise == 0 and v3.repeated_load_bytes == 0
    assert (v2.repeated_elementwise > 0) == (tiles > 1)
    assert v1.repeated_elementwise >= v2.repeated_elementwise
    assert v1.bytes_loaded - v1.repeated_load_bytes == v3.bytes_loaded
    assert v3.bytes_loaded >= v3.bytes
    d = v1.as_dict()
    assert d["shape"] == shape and d["transcendentals"]["total"] == v1.transcendentals.total


def test_replay_by_hand_small_shape():
    # B = H = 1, K = 4, V = 8, L = 2 (slot = 2K + V = 16 floats):
    # state: checkpoint read by both steps (2 * 32) + flush read and write (2 * 32) = 128 floats;
    # ring: step 2 reads slot 0 (16) and G_1 (4), the steps write 2 slots (32), the flush reads
    # G_L (4) and both slots (32) = 88 floats; io: 2 steps * (3K + 2V + 1 + K + 1) = 68 floats.
    w = work_counts("kda_decode", "replay", batch=1, heads=1, head_k=4, head_v=8, ring_len=2)
    assert w.steps == 2 and w.programs == 3
    assert w.state_bytes == 128 * 4
    assert w.bytes == (128 + 88 + 68) * 4 == 1136
    assert w.repeated_load_bytes == 0 and w.repeated_elementwise == 0


def test_replay_trades_state_traffic_for_compute():
    replay = work_counts("kda_decode", "replay", **TARGET, ring_len=8)
    v3 = kda("v3")
    # The state is written once per cycle: (L + 2) K V floats per L steps instead of 2 K V per step.
    assert replay.state_bytes == 64 * 32 * (8 + 2) * 128 * 128 * 4
    assert replay.state_bytes / replay.steps < v3.state_bytes
    assert replay.bytes / replay.steps < v3.bytes
    # ... but replaying the ring costs transcendentals (exp(G_t - G_j) per slot and channel).
    assert replay.transcendentals.exp / replay.steps > 4 * v3.transcendentals.exp


def test_registry_and_bad_requests():
    assert {("kda_decode", v) for v in ("v1", "v2", "v3", "replay")} <= set(WORK_COUNTS)
    with pytest.raises(InputError, match=r"kda_decode/v9.*one of .*kda_decode/v1"):
        work_counts("kda_decode", "v9", **TARGET)
    with pytest.raises(InputError, match=r"shape keys.*exactly the keys \['batch', 'heads', 'head_k', 'head_v'\]"):
        work_counts("kda_decode", "v1", batch=1, heads=1, head_k=8)
    with pytest.raises(InputError, match=r"shape 'head_v': is 0.*integer >= 1"):
        work_counts("kda_decode", "v3", batch=1, heads=1, head_k=8, head_v=0)
    with pytest.raises(TypeError):
        WORK_COUNTS[("x", "y")] = None  # read-only registry
