"""KDA decode kernels v1/v2/v3 against the torch reference (float32 and float64), under head splits,
with non-power-of-two head dims, out-of-bounds poison and bad inputs."""

import os

import pytest
import torch

from infralab.errors import InputError
from infralab.kernels.ops.kda_decode.kernel import VARIANTS, kda_decode, kda_decode_ref, kda_launch_plan

DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"

# Stated tolerances, kernel (float32 state carried over many steps) vs float64 reference.
# Measured on the interpreter: max |o - o64| ~ 5e-8 (|o| <= ~0.1), max |S - S64| ~ 2e-7 (|S| <= ~1).
OUT_ATOL, OUT_RTOL = 1e-6, 1e-5
STATE_ATOL, STATE_RTOL = 2e-6, 1e-5


def make_params(heads: int, head_k: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A_log and dt_bias that give decays around 0.5..0.95, so the state remembers many steps."""
    a_log = torch.log(torch.rand(heads, generator=gen) * 0.9 + 0.1)
    dt_bias = torch.randn(heads, head_k, generator=gen) * 0.5 - 1.0
    return a_log.to(DEVICE), dt_bias.to(DEVICE)


def make_step(batch: int, heads: int, head_k: int, head_v: int, gen: torch.Generator):
    """q, k, v, g_raw, b for one decode step."""
    shapes = [(batch, heads, head_k), (batch, heads, head_k), (batch, heads, head_v),
              (batch, heads, head_k), (batch, heads)]
    return [torch.randn(s, generator=gen).to(DEVICE) for s in shapes]


def as64(*xs):
    return [x.double() for x in xs]


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_matches_float64_reference_over_32_steps(variant):
    batch, heads, head_k, head_v = 1, 2, 32, 64  # two V tiles for v1/v2; few programs keep it fast
    gen = torch.Generator().manual_seed(7)
    a_log, dt_bias = make_params(heads, head_k, gen)
    state = torch.zeros(batch, heads, head_k, head_v, device=DEVICE)
    state64 = state.double()
    state32_ref = state.clone()
    worst_o = worst_o32 = 0.0
    for _ in range(32):
        q, k, v, g, b = make_step(batch, heads, head_k, head_v, gen)
        o = kda_decode(q, k, v, g, b, a_log, dt_bias, state, variant=variant)
        o64, state64 = kda_decode_ref(*as64(q, k, v, g, b, a_log, dt_bias), state64)
        o32, state32_ref = kda_decode_ref(q, k, v, g, b, a_log, dt_bias, state32_ref)
        torch.testing.assert_close(o.double(), o64, atol=OUT_ATOL, rtol=OUT_RTOL)
        worst_o = max(worst_o, (o.double() - o64).abs().max().item())
        worst_o32 = max(worst_o32, (o - o32).abs().max().item())
    torch.testing.assert_close(state.double(), state64, atol=STATE_ATOL, rtol=STATE_RTOL)
    torch.testing.assert_close(state, state32_ref, atol=STATE_ATOL, rtol=STATE_RTOL)
    assert worst_o32 <= OUT_ATOL
    # The state really carries memory: it is far from what one step from zero would give.
    assert state64.abs().max() > 0.1
    print(f"{variant}: max|o-o64|={worst_o:.2e} max|o-o32ref|={worst_o32:.2e} "
          f"max|S-S64|={(state.double() - state64).abs().max().item():.2e}")


@pytest.mark.parametrize("variant", VARIANTS)
def test_non_power_of_two_dims_inside_poisoned_buffers(variant):
    """K=96, V=80: masked K lanes and a partial last V tile; state and out are views into
    NaN-filled buffers (padded rows/columns and bytes past the end) that must stay untouched."""
    batch, heads, head_k, head_v = 1, 2, 96, 80
    gen = torch.Generator().manual_seed(11)
    a_log, dt_bias = make_params(heads, head_k, gen)
    state_buf = torch.full((batch, heads, head_k + 3, head_v + 5), float("nan"), device=DEVICE)
    state = state_buf[:, :, :head_k, :head_v]
    state.copy_(torch.randn(batch, heads, head_k, head_v, generator=gen).to(DEVICE) * 0.1)
    n_out = batch * heads * head_v
    out_buf = torch.full((n_out + 64,), float("nan"), device=DEVICE)
    out = out_buf[:n_out].view(batch, heads, head_v)
    state64 = state.double()
    for _ in range(3):
        q, k, v, g, b = make_step(batch, heads, head_k, head_v, gen)
        o = kda_decode(q, k, v, g, b, a_log, dt_bias, state, variant=variant, out=out)
        assert o.data_ptr() == out.data_ptr()
        o64, state64 = kda_decode_ref(*as64(q, k, v, g, b, a_log, dt_bias), state64)
        torch.testing.assert_close(o.double(), o64, atol=OUT_ATOL, rtol=OUT_RTOL)
    torch.testing.assert_close(state.double(), state64, atol=STATE_ATOL, rtol=STATE_RTOL)
    assert torch.isnan(state_buf[:, :, head_k:, :]).all()
    assert torch.isnan(state_buf[:, :, :, head_v:]).all()
    assert torch.isnan(out_buf[n_out:]).all()
    assert torch.isfinite(state).all() and torch.isfinite(out).all()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("contiguous_halves", [False, True])
def test_head_split_is_bitwise_equal_to_whole(variant, contiguous_halves):
    """What the partitioning harness does: heads [0:H/2] and [H/2:H] run separately (as strided
    views updating the state in place, or as contiguous copies) must equal the unsplit run bit for bit."""
    batch, heads, head_k, head_v = 2, 4, 32, 48
    gen = torch.Generator().manual_seed(3)
    a_log, dt_bias = make_params(heads, head_k, gen)
    state_whole = torch.randn(batch, heads, head_k, head_v, generator=gen).to(DEVICE) * 0.1
    state_split = state_whole.clone()
    for _ in range(2):
        q, k, v, g, b = make_step(batch, heads, head_k, head_v, gen)
        o_whole = kda_decode(q, k, v, g, b, a_log, dt_bias, state_whole, variant=variant)
        parts = []
        for heads_slice in (slice(0, heads // 2), slice(heads // 2, heads)):
            args = [x[:, heads_slice] for x in (q, k, v, g, b)] + [a_log[heads_slice], dt_bias[heads_slice]]
            part_state = state_split[:, heads_slice]
            if contiguous_halves:
                args = [x.contiguous() for x in args]
                part_state = part_state.contiguous()
            parts.append(kda_decode(*args, part_state, variant=variant))
            if contiguous_halves:
                state_split[:, heads_slice] = part_state
        o_split = torch.cat(parts, dim=1)
        assert torch.equal(o_split, o_whole)
        assert torch.equal(state_split, state_whole)


def test_variants_agree_and_differ_only_by_rounding():
    batch, heads, head_k, head_v = 1, 2, 64, 64
    gen = torch.Generator().manual_seed(5)
    a_log, dt_bias = make_params(heads, head_k, gen)
    start = torch.randn(batch, heads, head_k, head_v, generator=gen).to(DEVICE) * 0.1
    q, k, v, g, b = make_step(batch, heads, head_k, head_v, gen)
    outs = {}
    for variant in VARIANTS:
        state = start.clone()
        outs[variant] = (kda_decode(q, k, v, g, b, a_log, dt_bias, state, variant=variant), state)
    for variant in ("v1", "v3"):
        torch.testing.assert_close(outs[variant][0], outs["v2"][0], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(outs[variant][1], outs["v2"][1], atol=1e-6, rtol=1e-5)


def test_launch_plans_follow_the_case_study():
    p1, p2, p3 = (kda_launch_plan(v, 128, 128) for v in VARIANTS)
    assert (p1.block_v, p1.v_tiles, p1.prologues_per_head, p1.divide_per_element) == (32, 4, 4, True)
    assert (p2.block_v, p2.v_tiles, p2.prologues_per_head, p2.divide_per_element) == (32, 4, 4, False)
    assert (p3.programs_per_head, p3.prologues_per_head, p3.divide_per_element) == (1, 1, False)
    wide = kda_launch_plan("v3", 96, 320)  # 5 tiles of 64 pad less than 3 of 128
    assert (wide.block_k, wide.block_v, wide.v_tiles, wide.programs_per_head) == (128, 64, 5, 1)
    assert [kda_launch_plan("v3", 64, v).block_v for v in (8, 80, 96, 128, 192, 256)] == [8, 32, 32, 64, 64, 64]


# --------------------------------------------------------------------------------------------- bad input


def good_inputs(batch=2, heads=2, head_k=16, head_v=8):
    gen = torch.Generator().manual_seed(0)
    a_log, dt_bias = make_params(heads, head_k, gen)
    q, k, v, g, b = make_step(batch, heads, head_k, head_v, gen)
    state = torch.zeros(batch, heads, head_k, head_v, device=DEVICE)
    return dict(q=q, k=k, v=v, g=g, b=b, A_log=a_log, dt_bias=dt_bias, state=state)


@pytest.mark.parametrize(
    "name, bad, message",
    [
        ("k", lambda x: x[:, :, :-1], r"'k'.*shape \[2, 2, 15\].*\[B, H, K\] = \[2, 2, 16\]"),
        ("v", lambda x: x[0], r"'v'.*shape \[2, 8\].*\[B, H, V\]"),
        ("b", lambda x: x[:, :, None], r"'b'.*\[B, H\] = \[2, 2\]"),
        ("A_log", lambda x: x[:1], r"'A_log'.*\[H\] = \[2\]"),
        ("dt_bias", lambda x: x.t(), r"'dt_bias'.*\[H, K\] = \[2, 16\]"),
        ("state", lambda x: x[..., :-1], r"'state'.*shape \[2, 2, 16, 7\].*\[B, H, K, V\] = \[2, 2, 16, 8\]"),
        ("g", lambda x: x.half(), r"'g'.*dtype torch.float16.*float32"),
        ("state", lambda x: x.double(), r"'state'.*dtype torch.float64"),
        ("q", lambda x: x[0, 0], r"'q'.*\[B, H, K\]"),
        ("q", lambda x: x.tolist(), r"'q'.*list"),
        ("v", lambda x: "v", r"'v'.*str"),
        ("A_log", lambda x: x.numpy() if x.device.type == "cpu" else x.cpu().numpy(), r"'A_log'.*ndarray"),
    ],
)
def test_bad_inputs_name_the_argument_and_expected_shape(name, bad, message):
    inputs = good_inputs()
    inputs[name] = bad(inputs[name])
    with pytest.raises(InputError, match=message):
        kda_decode(**inputs)


def test_bad_variant_and_out_are_rejected():
    inputs = good_inputs()
    with pytest.raises(InputError, match=r"'variant'.*'v4'.*one of"):
        kda_decode(**inputs, variant="v4")
    with pytest.raises(InputError, match=r"'out'.*\[B, H, V\] = \[2, 2, 8\]"):
        kda_decode(**inputs, out=torch.empty(2, 2, 9, device=DEVICE))


def test_wrong_device_is_rejected():
    inputs = good_inputs()
    inputs["b"] = inputs["b"].to("meta")
    with pytest.raises(InputError, match=r"'b'.*is on meta"):
        kda_decode(**inputs)


def test_reference_works_in_float64_and_leaves_state_alone():
    inputs = {k: v.double() for k, v in good_inputs().items()}
    inputs["state"] += 0.5
    before = inputs["state"].clone()
    o, new_state = kda_decode_ref(**inputs)
    assert o.dtype == new_state.dtype == torch.float64
    assert torch.equal(inputs["state"], before)
    assert not torch.equal(new_state, before)


@pytest.mark.skipif(torch.cuda.is_available(), reason="only meaningful without a GPU")
def test_cpu_tensors_without_the_interpreter_get_one_clear_error():
    import subprocess
    import sys

    script = (
        "import os; os.environ.pop('TRITON_INTERPRET', None)\n"
        "import torch\n"
        "from infralab.errors import InputError\n"
        "from infralab.kernels.ops.kda_decode.kernel import kda_decode\n"
        "z = torch.zeros\n"
        "try:\n"
        "    kda_decode(z(1,1,4), z(1,1,4), z(1,1,4), z(1,1,4), z(1,1), z(1), z(1,4), z(1,1,4,4))\n"
        "except InputError as e:\n"
        "    print('InputError:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert "InputError: kda_decode: tensors are on the CPU but Triton needs a GPU" in done.stdout, done.stderr
