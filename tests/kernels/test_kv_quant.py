"""KV-cache quantisation per (token, head), bytes per token, and the paged cache builder.

Pure torch (no Triton kernel is called here), so everything runs on the CPU, where torch's float8 cast
serves as the oracle. The paged-attention tests build caches on the kernel's device.
"""

from __future__ import annotations

import pytest
import torch

from infralab.errors import InputError
from infralab.kernels.ops.kv_quantize.kernel import (
    BLOCK_SIZE,
    KV_DTYPES,
    STORAGE_DTYPE,
    allocate_paged_cache,
    build_paged_cache,
    dequantize_kv,
    kv_bytes_per_token,
    quantize_kv,
    write_kv,
)


def _kv(tokens: int, hkv: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, hkv, d, generator=g) * torch.logspace(-2, 2, tokens)[:, None, None]


def test_bytes_per_token_counts_payload_and_scales():
    # Llama-3-8B-like layer: 8 KV heads of 128
    assert kv_bytes_per_token("fp32", 8, 128) == 2 * 8 * 128 * 4
    assert kv_bytes_per_token("bf16", 8, 128) == 2 * 8 * 128 * 2
    assert kv_bytes_per_token("int8", 8, 128) == 2 * 8 * (128 + 4)  # one fp32 scale per (token, head)
    assert kv_bytes_per_token("fp8e4m3", 8, 128) == kv_bytes_per_token("int8", 8, 128)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_quantize_kv_layout_and_error_bound(kv_dtype):
    x = _kv(40, 3, 96, seed=1)
    payload, scale = quantize_kv(x, kv_dtype)
    assert payload.dtype == STORAGE_DTYPE[kv_dtype] and payload.shape == x.shape
    back = dequantize_kv(payload, scale, kv_dtype)
    err = (back - x).abs()
    absmax = x.abs().amax(dim=-1, keepdim=True)
    if kv_dtype == "fp32":
        assert scale is None and torch.equal(back, x)
    elif kv_dtype == "bf16":
        assert scale is None and (err <= x.abs() * 2.0**-8).all()  # half an ulp of an 8-bit significand
    elif kv_dtype == "int8":
        assert scale.shape == x.shape[:2]
        assert (err <= absmax / 127 * (0.5 + 1e-5)).all()  # half a quantisation step
    else:
        assert scale.shape == x.shape[:2]
        # relative half-ulp of a 4-bit significand in the normal range, absolute half-step below it
        step = torch.maximum(x.abs() * 2.0**-4, absmax / 448 * 2.0**-10)
        assert (err <= step * (1 + 1e-5)).all()


def test_fp8_payload_matches_torch_cast_of_scaled_values():
    x = _kv(25, 2, 64, seed=2).reshape(-1, 64)
    payload, scale = quantize_kv(x[:, None, :], "fp8e4m3")
    oracle = (x / scale).to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(payload[:, 0, :], oracle)
    assert torch.equal(scale[:, 0], x.abs().amax(dim=1) / 448)


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8e4m3"])
def test_zero_vector_gets_scale_one(kv_dtype):
    x = _kv(4, 2, 16, seed=3)
    x[1, 0] = 0.0
    payload, scale = quantize_kv(x, kv_dtype)
    assert scale[1, 0].item() == 1.0 and (payload[1, 0] == 0).all()
    assert torch.equal(dequantize_kv(payload, scale, kv_dtype)[1, 0], torch.zeros(16))


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_paged_cache_holds_every_token_through_a_shuffled_table(kv_dtype):
    batch, max_len, hkv, d = 3, 50, 2, 24
    k = torch.randn(batch, max_len, hkv, d, generator=torch.Generator().manual_seed(4))
    v = torch.randn(batch, max_len, hkv, d, generator=torch.Generator().manual_seed(5))
    lens = torch.tensor([50, 1, 33], dtype=torch.int32)
    cache = build_paged_cache(k, v, lens, kv_dtype, spare_blocks=3, generator=torch.Generator().manual_seed(6))
    table = cache.block_table
    assert table.dtype == torch.int32 and table.shape == (3, 4)
    assert table[1, 1:].eq(-1).all() and table[2, 3].item() == -1  # unused entries
    used = table[table >= 0]
    assert used.unique().numel() == used.numel() == 4 + 1 + 3  # no block shared
    assert not torch.equal(used.sort().values, used)  # shuffled
    for b, n in enumerate(lens.tolist()):
        pos = torch.arange(n)
        blocks, slots = table[b, pos // BLOCK_SIZE].long(), pos % BLOCK_SIZE
        for cache_t, scale_t, dense in ((cache.k_cache, cache.k_scale, k), (cache.v_cache, cache.v_scale, v)):
            payload, scale = quantize_kv(dense[b, :n], kv_dtype)
            assert torch.equal(cache_t[blocks, slots], payload)
            if scale is not None:
                assert torch.equal(scale_t[blocks, slots], scale)
    # the spare blocks keep their poison, so a stray read shows up as NaN
    spare = sorted(set(range(cache.k_cache.shape[0])) - set(used.tolist()))
    assert len(spare) == 3
    if cache.k_scale is not None:
        poisoned = cache.k_scale[spare]
    else:
        poisoned = dequantize_kv(cache.k_cache[spare], None, kv_dtype)
    assert torch.isnan(poisoned).all()


def test_kv_head_slice_is_a_view_of_the_same_storage():
    k = torch.randn(1, 20, 4, 8)
    cache = build_paged_cache(k, k.clone(), torch.tensor([20], dtype=torch.int32), "int8")
    part = cache.kv_head_slice(2, 4)
    assert part.k_cache.shape[2] == 2 and part.k_scale.shape[2] == 2
    assert part.k_cache.data_ptr() == cache.k_cache[:, :, 2:].data_ptr()


@pytest.mark.parametrize("call,name", [
    (lambda: kv_bytes_per_token("fp16", 8, 128), "kv_dtype"),
    (lambda: quantize_kv(torch.zeros(2, 3), "int4"), "kv_dtype"),
    (lambda: quantize_kv(torch.zeros(2, 3, dtype=torch.float16), "int8"), "x"),
    (lambda: build_paged_cache(torch.zeros(2, 8, 1, 4), torch.zeros(2, 8, 1, 4),
                               torch.tensor([3, 9], dtype=torch.int32), "int8"), "context_lens"),
    (lambda: build_paged_cache(torch.zeros(2, 8, 1, 4), torch.zeros(2, 8, 2, 4),
                               torch.tensor([3, 4], dtype=torch.int32), "int8"), "k, v"),
    (lambda: write_kv(*allocate_paged_cache(2, 1, 4, "int8"), torch.zeros(3, 1, 4), torch.zeros(3, 1, 4),
                      torch.tensor([0, 5, 32]), "int8"), "slots"),
])
def test_bad_input_is_rejected_naming_the_argument(call, name):
    with pytest.raises(InputError, match=rf": {name}: .*expected"):
        call()
