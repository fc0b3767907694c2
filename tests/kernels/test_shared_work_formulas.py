"""The formulas the simulator takes from the shared layer agree with the kernels' own counts and
formats: ReplaySSM's traffic and arithmetic per ring cycle and state bytes, and the KV-cache
formats (one dtype vocabulary)."""

from __future__ import annotations

import pytest

from infralab.kernels.ops.kv_quantize.kernel import KV_DTYPES, kv_bytes_per_token
from infralab.kernels.ops.kda_decode.replay_ssm import replay_ssm_memory
from infralab.kernels.ops.kda_decode.work_counts import kda_replay_counts
from infralab.work_formulas import (
    KV_CACHE_DTYPES,
    kv_cache_bytes,
    replay_ssm_cycle_bytes,
    replay_ssm_cycle_flops,
    replay_ssm_state_bytes,
)

SHAPES = [(1, 32, 128, 128, 8), (4, 8, 64, 64, 4), (2, 4, 128, 128, 16), (3, 2, 32, 64, 2)]


@pytest.mark.parametrize("batch, heads, k, v, ring", SHAPES)
def test_replay_cycle_work_matches_the_kernels_counts(batch, heads, k, v, ring):
    counts = kda_replay_counts(batch, heads, k, v, ring)
    assert replay_ssm_cycle_bytes(batch, heads, k, v, ring) == counts.bytes
    # the kernels count the lanes of their tiles (the flush's per-V-tile weights included); for
    # power-of-two shapes the logical count differs only by that repeated flush work
    assert replay_ssm_cycle_flops(batch, heads, k, v, ring) == pytest.approx(counts.flops, rel=0.01)
    assert replay_ssm_cycle_flops(batch, heads, k, v, ring) <= counts.flops


@pytest.mark.parametrize("heads, k, v, ring", [(32, 128, 128, 8), (2, 16, 32, 3)])
def test_replay_state_bytes_match_the_kernels_memory(heads, k, v, ring):
    assert replay_ssm_state_bytes(heads, k, v, ring) == replay_ssm_memory(k, v, ring, heads).total_bytes


def test_one_kv_dtype_vocabulary():
    assert KV_DTYPES == KV_CACHE_DTYPES == ("int8", "fp8e4m3", "bf16", "fp32")
    for dtype in KV_DTYPES:
        assert kv_bytes_per_token(dtype, 8, 128) == kv_cache_bytes(dtype, 2, 8, 128)
