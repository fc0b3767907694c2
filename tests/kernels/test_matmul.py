"""Matmul in three precisions: TF32 bit rounding, kernel vs torch emulation and float64, masks,
out-of-bounds guard and input errors. Runs in Triton's interpreter on CPU (conftest sets it)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.errors import InputError
from infralab.kernels.check import fp32_level_rel_fro
from infralab.kernels.ops.matmul.check import matmul_max_rel_fro
from infralab.kernels.compare import compare
from infralab.kernels.ops.matmul.kernel import (
    PRECISIONS,
    accumulation_bound,
    interpreting,
    matmul,
    matmul_float64,
    matmul_reference,
)
from infralab.kernels.ops.matmul.tf32 import round_to_tf32, split_3xtf32

DEVICE = "cpu" if interpreting() else "cuda"
BLOCKS = (32, 64, 128)  # large blocks keep the interpreter's program count low


def f32_from_bits(*patterns: int) -> torch.Tensor:
    signed = [p - 2**32 if p >= 2**31 else p for p in patterns]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


def bits_of(x: torch.Tensor) -> list[int]:
    return [b & 0xFFFFFFFF for b in x.view(torch.int32).tolist()]


# ------------------------------------------------------------------------------- TF32 rounding


def test_tf32_rounds_to_nearest_with_ties_to_even():
    one = 0x3F800000
    x = f32_from_bits(
        one + 0x0FFF,  # just below half an ulp: down
        one + 0x1000,  # exactly half, kept LSB even: down to 1.0
        one + 0x1001,  # just above half: up
        one + 0x2000 + 0x1000,  # exactly half, kept LSB odd: up to even
        0x3FFFF000,  # 1.99999..: half, carry through the mantissa into the exponent -> 2.0
    )
    assert bits_of(round_to_tf32(x)) == [one, one, one + 0x2000, one + 0x4000, 0x40000000]


def test_tf32_special_values():
    x = torch.tensor([float("inf"), -float("inf"), 0.0, -0.0, 3.4028234663852886e38, -1.5])
    r = round_to_tf32(x)
    assert bits_of(r[:4]) == bits_of(x[:4])  # infinities and signed zeros unchanged
    assert r[4].item() == float("inf")  # beyond the largest TF32 value + half an ulp: overflows
    assert r[5].item() == -1.5
    nans = f32_from_bits(0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001)  # would carry into the sign / truncate to inf
    rounded = round_to_tf32(nans)
    assert torch.isnan(rounded).all()
    assert [b >> 31 for b in bits_of(rounded)] == [0, 1, 0]  # sign kept


finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite_f32, min_size=1, max_size=64))
def test_tf32_rounding_properties(values):
    x = torch.tensor(values, dtype=torch.float32)
    r = round_to_tf32(x)
    finite = torch.isfinite(r)
    assert all(b & 0x1FFF == 0 for b in bits_of(r[finite]))  # only 10 mantissa bits left
    assert torch.equal(round_to_tf32(r), r)  # idempotent
    # nearest: at most half a TF32 ulp away (2^-11 relative; 2^-137 absolute among subnormals,
    # where the 10 kept mantissa bits have a fixed spacing of 2^-136), computed exactly in float64
    err = (r[finite].double() - x[finite].double()).abs()
    assert bool((err <= torch.clamp(x[finite].double().abs() * 2.0**-11, min=2.0**-137)).all())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=-(2.0**100), max_value=2.0**100, width=32, allow_nan=False), min_size=1, max_size=64))
def test_3xtf32_split_keeps_22_bits(values):
    x = torch.tensor(values, dtype=torch.float32)
    big, small = split_3xtf32(x)
    assert torch.equal(round_to_tf32(small), small)
    residual = x.double() - big.double()
    assert torch.equal(residual, (x - big).double())  # x - big is exact in FP32
    error = (x.double() - (big.double() + small.double())).abs()
    assert bool((error <= torch.clamp(x.double().abs() * 2.0**-21, min=2.0**-137)).all())


def test_products_of_tf32_values_are_exact_in_fp32():
    """The claim that makes the interpreter's FP32 dot equal to a TF32 tensor-core dot on
    pre-rounded operands: every product of two TF32 values (big or small parts) is exact in FP32."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(20000, generator=gen) * torch.exp(torch.randn(20000, generator=gen) * 5)
    y = torch.randn(20000, generator=gen) * torch.exp(torch.randn(20000, generator=gen) * 5)
    xb, xs = split_3xtf32(x)
    yb, ys = split_3xtf32(y)
    for p, q in ((xb, yb), (xb, ys), (xs, yb)):
        assert torch.equal((p * q).double(), p.double() * q.double())


# ------------------------------------------------------------------------------- kernel numerics


def test_kernel_rounding_matches_torch_twin_bitwise():
    """With B = I each output is one exact product, so C shows the kernel's rounded operand."""
    gen = torch.Generator().manual_seed(4)
    k = 80
    a = (torch.randn(24, k, generator=gen) * torch.logspace(-30, 30, k)).to(DEVICE)
    eye = torch.eye(k, device=DEVICE)
    assert torch.equal(matmul(a, eye, "tf32", blocks=BLOCKS), round_to_tf32(a))
    big, small = split_3xtf32(a)
    assert torch.equal(matmul(a, eye, "3xtf32", blocks=BLOCKS), small + big)
    assert torch.equal(matmul(a, eye, "fp32", blocks=BLOCKS), a)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_kernel_equals_emulation_bitwise_when_all_sums_are_exact(precision):
    """Small integers: every product and partial sum is exact, so order cannot matter and any
    difference would be a masking or indexing bug."""
    gen = torch.Generator().manual_seed(5)
    a = torch.randint(-8, 9, (37, 150), generator=gen).float().to(DEVICE)
    b = torch.randint(-8, 9, (150, 45), generator=gen).float().to(DEVICE)
    assert torch.equal(matmul(a, b, precision, blocks=BLOCKS), matmul_reference(a, b, precision))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape", [(37, 300, 45), (1, 17, 1), (64, 128, 130)])
def test_kernel_matches_emulation_within_summation_order_bound(precision, shape):
    """Kernel and torch emulation round operands identically but sum in different orders, so they
    are NOT bitwise equal (nor within 1 ulp: near-cancelling outputs differ by thousands of ulps);
    every element is within the order-only bound 2*gamma_n*(|A||B|)."""
    m, k, n = shape
    gen = torch.Generator().manual_seed(6)
    a = torch.randn(m, k, generator=gen).to(DEVICE)
    b = torch.randn(k, n, generator=gen).to(DEVICE)
    c = matmul(a, b, precision, blocks=BLOCKS)
    ref = matmul_reference(a, b, precision)
    assert c.shape == (m, n) and c.dtype == torch.float32
    assert bool(((c.double() - ref.double()).abs() <= accumulation_bound(a, b, precision)).all())


def test_kernel_is_not_bitwise_equal_to_torch_for_a_long_reduction():
    """States the finding behind the bound above (for this seed and shape)."""
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(16, 1024, generator=gen).to(DEVICE)
    b = torch.randn(1024, 32, generator=gen).to(DEVICE)
    c = compare(matmul(a, b, "fp32", blocks=BLOCKS), matmul_reference(a, b, "fp32"))
    assert not c.bitwise_equal
    assert c.max_ulp > 1


# Relative Frobenius error vs float64 on N(0,1) data, the bounds of `kernels check`: TF32 at least
# 1e-4 (it rounded its operands) and at most 1e-3; fp32 and 3xtf32 FP32-level, a bound growing as
# sqrt(K). Measured ~2e-7 / ~3e-4 / ~2e-7 in the interpreter; the compiled fp32 kernel on an H200
# 1.07-1.15e-6 at K = 4096 (docs/gpu.md).
def band(precision: str, k: int) -> tuple[float, float]:
    return (1e-4 if precision == "tf32" else 0.0), matmul_max_rel_fro(precision, k)


def test_fp32_level_bound_is_1e_6_up_to_k_281_and_grows_as_sqrt_k():
    assert fp32_level_rel_fro(256) == 1e-6
    assert fp32_level_rel_fro(4096) == pytest.approx(64 * 2.0**-24)
    assert fp32_level_rel_fro(16384) == pytest.approx(2 * fp32_level_rel_fro(4096))
    assert matmul_max_rel_fro("tf32", 4096) == 1e-3 and matmul_max_rel_fro("3xtf32", 4096) == fp32_level_rel_fro(4096)


@pytest.mark.parametrize("k", [256, 4096])
def test_kernel_error_against_float64(k):
    gen = torch.Generator().manual_seed(k)
    a = torch.randn(16, k, generator=gen).to(DEVICE)
    b = torch.randn(k, 32, generator=gen).to(DEVICE)
    truth = matmul_float64(a, b)
    errors = {p: compare(matmul(a, b, p, blocks=(16, 32, 512)), truth).rel_fro for p in PRECISIONS}
    for p in PRECISIONS:
        low, high = band(p, k)
        assert low <= errors[p] <= high, (p, errors[p])
    assert errors["3xtf32"] < errors["tf32"] / 100  # 3xTF32 recovers FP32-level accuracy


def test_emulation_error_against_float64_at_k_16384():
    gen = torch.Generator().manual_seed(8)
    a = torch.randn(32, 16384, generator=gen)
    b = torch.randn(16384, 32, generator=gen)
    truth = matmul_float64(a, b)
    for p in PRECISIONS:
        low, high = band(p, 16384)
        assert low <= compare(matmul_reference(a, b, p), truth).rel_fro <= high


# ------------------------------------------------------------------------------- memory safety


@pytest.mark.parametrize("precision", PRECISIONS)
def test_out_of_bounds_guard_leaves_poisoned_memory_untouched(precision):
    """C is a view inside a larger NaN-poisoned buffer (padded rows and columns, strided):
    nothing outside the view may change, bit for bit."""
    m, k, n = 19, 70, 23  # nothing is a multiple of any block size
    gen = torch.Generator().manual_seed(9)
    a = torch.randn(m, k, generator=gen).to(DEVICE)
    b = torch.randn(k, n, generator=gen).to(DEVICE)
    buffer = torch.full((m + 7, n + 9), float("nan"), device=DEVICE)
    poison_bits = buffer.clone().view(torch.int32)
    out = buffer[3:3 + m, 5:5 + n]
    result = matmul(a, b, precision, out=out, blocks=BLOCKS)
    assert result.data_ptr() == out.data_ptr()
    inside = torch.zeros_like(buffer, dtype=torch.bool)
    inside[3:3 + m, 5:5 + n] = True
    assert torch.equal(buffer.view(torch.int32)[~inside], poison_bits[~inside])
    assert not torch.isnan(out).any()
    assert bool(((out.double() - matmul_reference(a, b, precision).double()).abs()
                 <= accumulation_bound(a, b, precision)).all())


def test_strided_inputs_are_read_through_their_strides():
    gen = torch.Generator().manual_seed(10)
    a = torch.randn(40, 60, generator=gen).to(DEVICE)
    bt = torch.randn(50, 60, generator=gen).to(DEVICE)
    c = matmul(a[::2], bt.t(), "fp32", blocks=BLOCKS)  # row-strided A, column-major B
    assert bool(((c.double() - a[::2].double() @ bt.t().double()).abs()
                 <= accumulation_bound(a[::2], bt.t(), "fp32")).all())


# ------------------------------------------------------------------------------- input errors


def _bad_calls():
    a = torch.randn(4, 8, device=DEVICE)
    b = torch.randn(8, 5, device=DEVICE)
    return [
        (lambda: matmul([[1.0]], b), "matmul: a", "torch.Tensor"),
        (lambda: matmul(a[None], b), "matmul: a", "2-D"),
        (lambda: matmul(a, b.double()), "matmul: b", "torch.float32"),
        (lambda: matmul(a, torch.randn(7, 5, device=DEVICE)), "matmul: b", "[8, N]"),
        (lambda: matmul(a, b, "bf16"), "matmul: precision", "fp32, tf32, 3xtf32"),
        (lambda: matmul(a, b, blocks=(16, 24, 32)), "matmul: block_n", "power of two"),
        (lambda: matmul(a, b, out=torch.empty(5, 4, device=DEVICE)), "matmul: out", "[4, 5]"),
        (lambda: matmul(torch.empty(0, 8, device=DEVICE), b), "matmul: a, b", ">= 1"),
        (lambda: matmul(a.to("meta"), b), "matmul: a", "CPU tensor" if interpreting() else "CUDA"),
    ]


@pytest.mark.parametrize("index", range(len(_bad_calls())))
def test_bad_input_raises_one_clear_input_error(index):
    call, where, expected = _bad_calls()[index]
    with pytest.raises(InputError) as info:
        call()
    assert info.value.where == where
    assert expected in str(info.value)


def test_accumulation_bound_is_positive_and_grows_with_k():
    a = torch.ones(1, 10)
    b = torch.ones(10, 1)
    small = accumulation_bound(a, b, "fp32").item()
    large = accumulation_bound(torch.ones(1, 1000), torch.ones(1000, 1), "fp32").item()
    assert 0 < small < large
    assert math.isclose(small, 2 * 12 * 2.0**-24 / (1 - 12 * 2.0**-24) * 10)


# ------------------------------------------------------------------------------- GPU code generation

_COMPILE_FOR_HOPPER = """
import json, re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from infralab.kernels.ops.matmul.kernel import DEFAULT_BLOCKS, PRECISIONS, _matmul_kernel
names = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
         "stride_cm", "stride_cn"]
signature = {n: ("*fp32" if n.endswith("_ptr") else "i32") for n in names}
found = {}
for code, precision in enumerate(PRECISIONS):
    constants = dict(zip(("PRECISION", "BLOCK_M", "BLOCK_N", "BLOCK_K"), (code, *DEFAULT_BLOCKS)))
    source = ASTSource(_matmul_kernel, {**signature, **{k: "constexpr" for k in constants}}, constexprs=constants)
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8}).asm["ptx"]
    found[precision] = {"mma": re.findall(r"\\b(?:wgmma\\.mma_async|mma\\.sync)\\S*", ptx),
                        "fma": ptx.count("fma.rn.f32")}
print(json.dumps(found))
"""


def test_kernel_compiles_for_hopper_with_tf32_tensor_cores_only_where_asked():
    """Compiles for sm_90 without a GPU (Triton's bundled ptxas; in a subprocess, because the
    interpreter replaces jit functions in this one) and reads the PTX: "fp32" must use FP32 FMAs
    (IEEE), "tf32" TF32 tensor-core MMAs, "3xtf32" three times as many."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # silences a Triton 3.9 notice; fusion cannot touch this kernel's adds
    done = subprocess.run([sys.executable, "-c", _COMPILE_FOR_HOPPER], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["fp32"]["mma"] == [] and found["fp32"]["fma"] > 0
    assert found["tf32"]["mma"] and all(".tf32" in m for m in found["tf32"]["mma"] + found["3xtf32"]["mma"])
    assert len(found["3xtf32"]["mma"]) == 3 * len(found["tf32"]["mma"])
