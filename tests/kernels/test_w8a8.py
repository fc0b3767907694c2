"""W8A8: quantisation kernels vs torch, the int8 matmul vs the exact integer reference, guards, bad input.

The kernels run on DEVICE (the GPU when Triton compiles for one, else the CPU under the interpreter); the
torch references run on the CPU and kernel results come back with .cpu() to be compared. The references stay
on the CPU on purpose: on CUDA, torch computes `tensor / python_scalar` as a multiply by the reciprocal,
so `quantize_rows_ref`'s scale (absmax / 127) can be an ulp off the IEEE division it states (and the kernel does).
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.errors import InputError
from infralab.kernels.ops.w8a8_matmul.kernel import (
    MAX_K_INT32_EXACT,
    W8A8Blocks,
    quantize_per_token,
    quantize_rows_ref,
    quantize_weight_per_channel,
    quantize_weight_per_channel_ref,
    w8a8_error_report,
    w8a8_matmul,
    w8a8_matmul_exact,
    w8a8_matmul_ref,
)

DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"

SMALL = W8A8Blocks(block_m=32, block_n=32, block_k=64)  # several programs and K steps, still quick
U = 2.0**-24  # FP32 unit roundoff


def _quantised_operands(m: int, n: int, k: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x_q, x_s = quantize_rows_ref(torch.randn(m, k, generator=g))
    w_q, w_s = quantize_weight_per_channel_ref(torch.randn(k, n, generator=g))
    return x_q, x_s, w_q, w_s


def _on_device(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.to(DEVICE) for t in tensors]


def _on_cpu(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.cpu() for t in tensors]


def test_quantize_per_token_matches_reference_bitwise():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 300, generator=g) * torch.logspace(-3, 3, 37)[:, None]
    x[5] = 0.0
    q, s = _on_cpu(*quantize_per_token(x.to(DEVICE), block_rows=16, block_cols=128))
    q_ref, s_ref = quantize_rows_ref(x)
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref)
    assert s[5].item() == 1.0 and (q[5] == 0).all()  # a zero row gets scale 1
    nonzero = torch.arange(37) != 5
    assert (q[nonzero].abs().amax(dim=1) == 127).all()  # the absmax element maps to +-127
    assert q.abs().max() <= 127  # -128 never used


def test_quantization_rounds_ties_to_even():
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 3.5, 126.5]])  # scale = 1 exactly
    q, s = quantize_per_token(x.to(DEVICE))
    assert s.tolist() == [1.0]
    assert q.tolist() == [[127, 0, 2, 2, 0, -2, 4, 126]]


def test_quantize_weight_per_channel_matches_reference():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(200, 45, generator=g)
    w[:, 7] = 0.0
    q, s = _on_cpu(*quantize_weight_per_channel(w.to(DEVICE), block_rows=16, block_cols=128))
    q_ref, s_ref = quantize_weight_per_channel_ref(w)
    assert q.shape == (200, 45) and s.shape == (45,)
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref)
    assert s[7].item() == 1.0
    assert torch.equal(s, torch.where(w.abs().amax(dim=0) == 0, 1.0, w.abs().amax(dim=0) / 127))


def test_quantize_reads_nothing_past_its_rows():
    big = torch.full((20, 150), float("nan"))
    g = torch.Generator().manual_seed(2)
    big[:13, :100] = torch.randn(13, 100, generator=g)
    window = big.to(DEVICE)[:13, :100]  # strided view inside a NaN-poisoned buffer
    q, s = _on_cpu(*quantize_per_token(window, block_rows=16, block_cols=64))
    q_ref, s_ref = quantize_rows_ref(big[:13, :100].clone())
    assert torch.isfinite(s).all()
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref)


@pytest.mark.parametrize("m,n,k,blocks", [
    (45, 70, 200, SMALL), (1, 33, 17, SMALL), (64, 64, 128, SMALL),
    (150, 50, 64, W8A8Blocks(block_m=16, block_n=16, block_k=64, group_m=4)),  # 10 row tiles: 3 groups
])
def test_matmul_equals_integer_reference_bitwise(m, n, k, blocks):
    x_q, x_s, w_q, w_s = _quantised_operands(m, n, k, seed=m + n + k)
    c = w8a8_matmul(*_on_device(x_q, x_s, w_q, w_s), blocks).cpu()
    assert torch.equal(c, w8a8_matmul_ref(x_q, x_s, w_q, w_s))
    exact = w8a8_matmul_exact(x_q, x_s, w_q, w_s)
    # three FP32 roundings (int32->fp32, two multiplies): relative error <= (1+u)^3 - 1
    bound = (1 + U) ** 3 - 1
    assert ((c.double() - exact).abs() <= bound * exact.abs()).all()


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 80), st.integers(0, 2**16))
def test_quantise_then_matmul_equals_reference_for_any_shape(m, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    x_q, x_s = quantize_per_token(x.to(DEVICE), block_rows=16, block_cols=32)
    w_q, w_s = quantize_weight_per_channel(w.to(DEVICE), block_rows=16, block_cols=32)
    assert torch.equal(x_q.cpu(), quantize_rows_ref(x)[0])
    assert torch.equal(w_q.cpu(), quantize_weight_per_channel_ref(w)[0])
    blocks = W8A8Blocks(block_m=16, block_n=16, block_k=32, group_m=2)  # up to 3 row tiles: a partial group
    c = w8a8_matmul(x_q, x_s, w_q, w_s, blocks).cpu()
    assert torch.equal(c, w8a8_matmul_ref(*_on_cpu(x_q, x_s, w_q, w_s)))


def test_matmul_accumulator_is_exact_in_int32_beyond_fp32_range():
    k = 4096  # 127 * 127 * 4096 = 66M > 2^24: an FP32 accumulator would round, int32 does not
    x_q = torch.full((16, k), 127, dtype=torch.int8)
    w_q = torch.full((k, 16), -127, dtype=torch.int8)
    w_q[0, :] = 1  # make the exact sum odd so that any FP32 accumulation shows
    ones_m, ones_n = torch.ones(16), torch.ones(16)
    c = w8a8_matmul(*_on_device(x_q, ones_m, w_q, ones_n), W8A8Blocks(16, 16, 1024)).cpu()
    exact = 127 * (-127 * (k - 1) + 1)
    assert torch.equal(c, torch.full((16, 16), float(exact), dtype=torch.float32))
    assert torch.equal(c, w8a8_matmul_ref(x_q, ones_m, w_q, ones_n))


def test_matmul_writes_only_inside_out():
    x_q, x_s, w_q, w_s = _quantised_operands(30, 40, 64, seed=5)
    big = torch.full((35, 50), float("nan"), device=DEVICE)
    w8a8_matmul(*_on_device(x_q, x_s, w_q, w_s), SMALL, out=big[:30, :40])
    big = big.cpu()
    assert torch.equal(big[:30, :40], w8a8_matmul_ref(x_q, x_s, w_q, w_s))
    assert torch.isnan(big[30:]).all() and torch.isnan(big[:, 40:]).all()


def test_matmul_on_transposed_weight_view():
    x_q, x_s, w_q, w_s = _quantised_operands(20, 24, 48, seed=6)
    x_q_d, x_s_d, w_q_d, w_s_d = _on_device(x_q, x_s, w_q, w_s)
    w_view = w_q_d.t().contiguous().t()  # column-major [K, N]
    assert not w_view.is_contiguous()
    c = w8a8_matmul(x_q_d, x_s_d, w_view, w_s_d, SMALL).cpu()
    assert torch.equal(c, w8a8_matmul_ref(x_q, x_s, w_q, w_s))


def test_error_report_measures_quantisation_error():
    rows = w8a8_error_report(m=32, n=48, k=256, seed=0, device=DEVICE)
    normal, outliers = rows
    for row in rows:
        assert row["kernel_vs_ref_bitwise"]
        assert row["max_rel_vs_exact"] <= row["rel_bound"]
    # per-token int8 on N(0,1): about 1 % (step absmax/127 with absmax ~ 3 sigma)
    assert 1e-3 < normal["rel_fro_vs_fp32"] < 2e-2
    # outlier channels inflate each row's absmax, so every other element loses precision
    assert outliers["rel_fro_vs_fp32"] > 2 * normal["rel_fro_vs_fp32"]


@pytest.mark.parametrize("call,name", [
    (lambda: quantize_per_token(torch.zeros(4, 4, dtype=torch.float64)), "x"),
    (lambda: quantize_per_token(torch.zeros(4)), "x"),
    (lambda: quantize_weight_per_channel(torch.zeros(2, 3, 4)), "w"),
    (lambda: w8a8_matmul(torch.zeros(4, 8, dtype=torch.int8), torch.ones(4),
                         torch.zeros(6, 5, dtype=torch.int8), torch.ones(5)), "w_q"),
    (lambda: w8a8_matmul(torch.zeros(4, 8), torch.ones(4),
                         torch.zeros(8, 5, dtype=torch.int8), torch.ones(5)), "x_q"),
    (lambda: w8a8_matmul(torch.zeros(4, 8, dtype=torch.int8), torch.ones(3),
                         torch.zeros(8, 5, dtype=torch.int8), torch.ones(5)), "x_scale"),
    (lambda: w8a8_matmul(torch.zeros(4, 8, dtype=torch.int8), torch.ones(4),
                         torch.zeros(8, 5, dtype=torch.int8), torch.ones(5, dtype=torch.float64)), "w_scale"),
    (lambda: w8a8_matmul(torch.zeros(1, MAX_K_INT32_EXACT + 1, dtype=torch.int8), torch.ones(1),
                         torch.zeros(MAX_K_INT32_EXACT + 1, 1, dtype=torch.int8), torch.ones(1)), "x_q"),
    (lambda: w8a8_matmul(torch.zeros(4, 8, dtype=torch.int8), torch.ones(4),
                         torch.zeros(8, 5, dtype=torch.int8), torch.ones(5), out=torch.zeros(5, 4)), "out"),
])
def test_bad_input_is_rejected_naming_the_argument(call, name):
    with pytest.raises(InputError, match=rf": {name}: .*expected"):
        call()
