"""Paged decode attention over quantised caches: kernel vs reference, head split, guards, bad input.

Inputs are drawn on the CPU (seeded) and moved to DEVICE (the GPU when Triton compiles for one, else the
CPU under the interpreter); caches are built there, and the torch references run on the same device.
"""

from __future__ import annotations

import os

import pytest
import torch

from infralab.errors import InputError
from infralab.kernels.ops.kv_quantize.kernel import KV_DTYPES, build_paged_cache
from infralab.kernels.ops.paged_decode_attention.kernel import (
    dense_decode_attention,
    kv_quant_report,
    paged_decode_attention,
    paged_decode_attention_ref,
    run_paged,
)

DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"

LENS = (37, 16, 100, 5, 1)  # ragged, one exact block, one single token


def _problem(kv_dtype: str, heads: int = 8, kv_heads: int = 2, d: int = 96, lens=LENS, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    batch, max_len = len(lens), max(lens)
    q = torch.randn(batch, heads, d, generator=g).to(DEVICE)
    k = torch.randn(batch, max_len, kv_heads, d, generator=g).to(DEVICE)
    v = torch.randn(batch, max_len, kv_heads, d, generator=g).to(DEVICE)
    cache = build_paged_cache(k, v, torch.tensor(lens, dtype=torch.int32, device=DEVICE), kv_dtype, spare_blocks=2,
                              generator=torch.Generator().manual_seed(seed + 1))
    return q, k, v, cache


def _ref(q, cache, compute_dtype=torch.float32):
    return paged_decode_attention_ref(q, cache.k_cache, cache.v_cache, cache.k_scale, cache.v_scale,
                                      cache.block_table, cache.context_lens, cache.kv_dtype,
                                      compute_dtype=compute_dtype)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_kernel_matches_reference(kv_dtype):
    q, _, _, cache = _problem(kv_dtype)
    out = run_paged(q, cache)
    assert torch.isfinite(out).all()  # poisoned slots past each context were never used
    assert (out - _ref(q, cache)).abs().max() < 2e-6
    assert (out.double() - _ref(q, cache, torch.float64)).abs().max() < 2e-6


@pytest.mark.parametrize("heads,kv_heads,d", [(3, 3, 40), (6, 2, 64), (4, 1, 17)])
def test_other_head_layouts(heads, kv_heads, d):
    q, _, _, cache = _problem("fp8e4m3", heads, kv_heads, d, lens=(19, 48), seed=3)
    assert (run_paged(q, cache) - _ref(q, cache)).abs().max() < 2e-6


def test_fp32_cache_reproduces_dense_attention():
    q, k, v, cache = _problem("fp32")
    truth = dense_decode_attention(q, k, v, cache.context_lens)
    assert (run_paged(q, cache).double() - truth).abs().max() < 2e-6


def test_single_token_context_returns_its_value():
    q, _, v, cache = _problem("fp32", lens=(1,), seed=4)
    out = run_paged(q, cache)
    assert torch.equal(out[0], v[0, 0].repeat_interleave(4, dim=0))  # G = 4 heads share KV head


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_head_split_is_bitwise_equal(kv_dtype):
    q, _, _, cache = _problem(kv_dtype, heads=6, kv_heads=2, lens=(37, 5))
    whole = run_paged(q, cache)
    halves = [run_paged(q[:, :3], cache.kv_head_slice(0, 1)), run_paged(q[:, 3:], cache.kv_head_slice(1, 2))]
    assert torch.equal(torch.cat(halves, dim=1), whole)


def test_writes_only_inside_out():
    q, _, _, cache = _problem("int8", lens=(20, 7))
    big = torch.full((3, 10, 100), float("nan"), device=DEVICE)
    paged_decode_attention(q, cache.k_cache, cache.v_cache, cache.k_scale, cache.v_scale, cache.block_table,
                           cache.context_lens, "int8", out=big[:2, :8, :96])
    assert torch.equal(big[:2, :8, :96], run_paged(q, cache))
    assert torch.isnan(big[2:]).all() and torch.isnan(big[:, 8:]).all() and torch.isnan(big[:, :, 96:]).all()


def test_unchecked_tables_give_the_same_result():
    q, _, _, cache = _problem("bf16", lens=(20, 7))
    args = (q, cache.k_cache, cache.v_cache, cache.k_scale, cache.v_scale, cache.block_table, cache.context_lens,
            "bf16")
    assert torch.equal(paged_decode_attention(*args, check_tables=False), paged_decode_attention(*args))


def test_report_orders_formats_by_precision_and_size():
    rows = {r["kv_dtype"]: r for r in kv_quant_report(batch=2, heads=4, kv_heads=2, head_dim=96, context_lens=(70, 9),
                                                    device=DEVICE)}
    assert list(rows) == list(KV_DTYPES)
    errors = [rows[k]["rel_fro"] for k in ("fp32", "bf16", "int8", "fp8e4m3")]
    assert errors == sorted(errors) and errors[0] < 1e-6 and errors[-1] < 0.1
    assert rows["int8"]["bytes_per_token"] < rows["bf16"]["bytes_per_token"] < rows["fp32"]["bytes_per_token"]
    assert all(r["kernel_vs_ref_max_abs"] < 2e-6 for r in rows.values())


def _call(**changes):
    """A valid int8 call with some arguments replaced (a value, or a function of the valid arguments)."""
    q, _, _, cache = _problem("int8", lens=(20, 7))
    args = dict(q=q, k_cache=cache.k_cache, v_cache=cache.v_cache, k_scale=cache.k_scale, v_scale=cache.v_scale,
                block_table=cache.block_table, context_lens=cache.context_lens, kv_dtype="int8")
    args.update({k: (f(args) if callable(f) else f) for k, f in changes.items()})
    return paged_decode_attention(**args)


@pytest.mark.parametrize("changes,name", [
    (dict(kv_dtype="fp16"), "kv_dtype"),
    (dict(q=lambda a: a["q"].double()), "q"),
    (dict(q=lambda a: a["q"][:, :7]), "q"),  # 7 heads over 2 KV heads
    (dict(k_cache=lambda a: a["k_cache"].view(torch.uint8)), "k_cache"),  # fp8 bits under kv_dtype int8
    (dict(v_cache=lambda a: a["v_cache"][:, :, :, :64]), "v_cache"),
    (dict(k_scale=None), "k_scale"),
    (dict(block_table=lambda a: a["block_table"].long()), "block_table"),
    (dict(context_lens=lambda a: torch.tensor([20, 33], dtype=torch.int32, device=DEVICE)), "context_lens"),
    (dict(context_lens=lambda a: torch.tensor([20, 0], dtype=torch.int32, device=DEVICE)), "context_lens"),
    (dict(block_table=lambda a: a["block_table"].clone().fill_(99)), "block_table"),
    (dict(out=torch.zeros(2, 8, 95, device=DEVICE)), "out"),
])
def test_bad_input_is_rejected_naming_the_argument(changes, name):
    with pytest.raises(InputError, match=rf": {name}: .*expected"):
        _call(**changes)
