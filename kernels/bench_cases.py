"""What `infralab kernels bench` times: per kernel, its cases (variant x dtype x shape) and, per case,
a zero-argument callable that performs one call on the chosen device with inputs prepared up front.

On a GPU the callable launches the Triton kernel (or, for `torch` baseline rows, torch's own op).
On the CPU it runs the torch reference of the variant's math: Triton's interpreter is a correctness
tool, not a timer. Variants whose references are the same math (KDA v1/v2/v3 all compute one decode
step) name the same `reference`, and the benchmark times that reference once and reports it for each
of them, so that CPU rows never suggest a speed difference that was not measured.

Torch and the kernel modules are imported inside the functions that need them (the CLI stays light).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infralab.kernels.calibration import Shape

KERNELS: tuple[str, ...] = ("matmul", "w8a8_matmul", "kda_decode", "paged_decode_attention", "kv_quantize")

MATMUL_PRECISIONS = ("fp32", "tf32", "3xtf32")
KDA_VARIANTS = ("v1", "v2", "v3")
KV_DTYPES = ("int8", "fp8e4m3", "bf16", "fp32")
KV_QUANT_DTYPES = ("int8", "fp8e4m3", "bf16")  # fp32 "quantisation" is a copy
TORCH_BASELINE = "torch"  # variant name of rows that time torch's own op (cuBLAS), GPU only


@dataclass(frozen=True)
class BenchCase:
    """One row to measure. `compute` keys the device's peak FLOP/s (see device_peaks); `reference`
    names the torch function timed for this case on the CPU (cases with equal names share a timing)."""

    kernel: str
    variant: str
    dtype: str
    shape: Shape
    compute: str
    reference: str

    def dims(self) -> dict[str, int]:
        return dict(self.shape)

    def label(self) -> str:
        return f"{self.kernel}[{self.variant}] {';'.join(f'{n}={v}' for n, v in self.shape)} {self.dtype}"


@dataclass(frozen=True)
class ShapeGrid:
    """Shapes per kernel, as tuples of (name, value) pairs in the kernel's field order."""

    name: str
    matmul: tuple[Shape, ...]
    w8a8_matmul: tuple[Shape, ...]
    kda_decode: tuple[Shape, ...]  # (B, H, K, V)
    kda_replay_ring: int  # L of the ReplaySSM rows (0: no replay rows)
    paged_decode_attention: tuple[Shape, ...]  # (B, H, HKV, D, T)
    kv_quantize: tuple[Shape, ...]  # (T, HKV, D)


def mnk(m: int, n: int, k: int) -> Shape:
    return (("M", m), ("N", n), ("K", k))


def bhkv(b: int, h: int, k: int, v: int) -> Shape:
    return (("B", b), ("H", h), ("K", k), ("V", v))


def attention(b: int, h: int, hkv: int, d: int, t: int) -> Shape:
    return (("B", b), ("H", h), ("HKV", hkv), ("D", d), ("T", t))


def tokens(t: int, hkv: int, d: int) -> Shape:
    return (("T", t), ("HKV", hkv), ("D", d))


SMALL = ShapeGrid(
    name="small",
    matmul=(mnk(256, 256, 256), mnk(512, 512, 512)),
    w8a8_matmul=(mnk(64, 256, 256), mnk(128, 256, 256)),
    kda_decode=(bhkv(8, 4, 64, 64), bhkv(8, 8, 128, 128)),
    kda_replay_ring=8,
    paged_decode_attention=(attention(4, 8, 2, 128, 256),),
    kv_quantize=(tokens(256, 8, 128),),
)
"""Runs on a laptop CPU in well under a minute (torch references)."""

FULL = ShapeGrid(
    name="full",
    matmul=(mnk(1024, 1024, 1024), mnk(2048, 2048, 2048), mnk(4096, 4096, 4096), mnk(64, 8192, 8192)),
    w8a8_matmul=(mnk(4096, 8192, 8192), mnk(1024, 8192, 8192), mnk(64, 8192, 8192)),
    kda_decode=(bhkv(1, 32, 128, 128), bhkv(16, 32, 128, 128), bhkv(64, 32, 128, 128), bhkv(256, 32, 128, 128)),
    kda_replay_ring=8,
    paged_decode_attention=(attention(64, 32, 8, 128, 1024), attention(64, 32, 8, 128, 4096),
                            attention(8, 32, 8, 128, 32768)),
    kv_quantize=(tokens(4096, 8, 128), tokens(65536, 8, 128)),
)
"""For a GPU (shapes of a 7B-70B-class model's decode and prefill); too slow for CPU references."""

GRIDS: dict[str, ShapeGrid] = {"small": SMALL, "full": FULL}


# ---- cases ---------------------------------------------------------------------------------------


def cases_for(kernel: str, grid: ShapeGrid, on_gpu: bool) -> list[BenchCase]:
    """Every case of `kernel` in `grid`; torch baseline rows only on a GPU (on the CPU the
    references are torch already)."""
    if kernel == "matmul":
        out = []
        for shape in grid.matmul:
            out += [BenchCase("matmul", p, p, shape, p, f"matmul_ref:{p}") for p in MATMUL_PRECISIONS]
            if on_gpu:
                out += [BenchCase("matmul", TORCH_BASELINE, d, shape, d, "") for d in ("fp32", "bf16")]
        return out
    if kernel == "w8a8_matmul":
        out = []
        for shape in grid.w8a8_matmul:
            out.append(BenchCase("w8a8_matmul", "triton", "int8", shape, "int8", "w8a8_ref"))
            if on_gpu:  # the baseline the W8A8 target is measured against
                out.append(BenchCase("matmul", TORCH_BASELINE, "bf16", shape, "bf16", ""))
        return out
    if kernel == "kda_decode":
        out = []
        for shape in grid.kda_decode:
            out += [BenchCase("kda_decode", v, "fp32", shape, "fp32", "kda_ref") for v in KDA_VARIANTS]
            if grid.kda_replay_ring:
                ring = shape + (("L", grid.kda_replay_ring),)
                out.append(BenchCase("kda_decode", "replay", "fp32", ring, "fp32", "replay_ref"))
        return out
    if kernel == "paged_decode_attention":
        return [BenchCase("paged_decode_attention", "triton", d, shape, "fp32", f"paged_ref:{d}")
                for shape in grid.paged_decode_attention for d in KV_DTYPES]
    if kernel == "kv_quantize":
        # quantize_kv is torch code on every device (no Triton kernel): "torch" everywhere
        return [BenchCase("kv_quantize", TORCH_BASELINE, d, shape, "fp32", f"kv_quantize:{d}")
                for shape in grid.kv_quantize for d in KV_QUANT_DTYPES]
    raise ValueError(f"unknown kernel {kernel!r}")


# ---- callables -----------------------------------------------------------------------------------

Call = Callable[[], object]


def prepare(case: BenchCase, device: str, seed: int = 0, use_triton: bool | None = None) -> Call:
    """Inputs for `case` on `device` ("cpu" or "cuda"), and a callable doing one call with them.

    With `use_triton` (default: on any device but "cpu") the callable launches the Triton kernel,
    else it runs the torch reference; torch baseline rows run torch's op either way. (Triton on
    "cpu" needs TRITON_INTERPRET=1: the tests use it to check the wiring, never to time.)
    Inputs are N(0,1) from a generator seeded with `seed` (same seed, same data)."""
    import torch

    if use_triton is None:
        use_triton = device != "cpu"
    gen = torch.Generator(device=device).manual_seed(seed)
    preparers = {
        "matmul": _prepare_matmul,
        "w8a8_matmul": _prepare_w8a8,
        "kda_decode": _prepare_kda,
        "paged_decode_attention": _prepare_paged,
        "kv_quantize": _prepare_kv_quantize,
    }
    return preparers[case.kernel](case, device, gen, use_triton)


def _randn(shape, device, gen):
    import torch

    return torch.randn(shape, device=device, generator=gen, dtype=torch.float32)


def _prepare_matmul(case: BenchCase, device: str, gen, use_triton: bool) -> Call:
    import torch

    d = case.dims()
    a = _randn((d["M"], d["K"]), device, gen)
    b = _randn((d["K"], d["N"]), device, gen)
    if case.variant == TORCH_BASELINE:
        if case.dtype == "bf16":
            a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
            return lambda: torch.matmul(a, b)
        return lambda: _torch_fp32_matmul(a, b)
    from infralab.kernels.matmul import matmul, matmul_reference

    if not use_triton:
        return lambda: matmul_reference(a, b, case.variant)
    out = torch.empty((d["M"], d["N"]), device=device, dtype=torch.float32)
    return lambda: matmul(a, b, case.variant, out=out)


def _torch_fp32_matmul(a, b):
    """torch.matmul with TF32 switched off, so the baseline is IEEE FP32 (cuBLAS SGEMM)."""
    import torch

    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return torch.matmul(a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow


def _prepare_w8a8(case: BenchCase, device: str, gen, use_triton: bool) -> Call:
    import torch

    from infralab.kernels.w8a8 import quantize_rows_ref, w8a8_matmul, w8a8_matmul_ref

    d = case.dims()
    x = _randn((d["M"], d["K"]), device, gen)
    w = _randn((d["K"], d["N"]), device, gen) / d["K"] ** 0.5
    # torch's quantiser: the same rule as the Triton one, and it runs on any device
    x_q, x_s = quantize_rows_ref(x)
    w_qt, w_s = quantize_rows_ref(w.t())
    w_q = w_qt.t()
    if not use_triton:
        return lambda: w8a8_matmul_ref(x_q, x_s, w_q, w_s)
    out = torch.empty((d["M"], d["N"]), device=device, dtype=torch.float32)
    return lambda: w8a8_matmul(x_q, x_s, w_q, w_s, out=out)


def kda_inputs(dims: dict[str, int], device: str, gen):
    """q, k, v, g_raw, b, A_log, dt_bias, state for one decode step at dims B, H, K, V (float32)."""
    import torch

    b, h, k, v = dims["B"], dims["H"], dims["K"], dims["V"]
    q, key, g = (_randn((b, h, k), device, gen) for _ in range(3))
    val = _randn((b, h, v), device, gen)
    beta = _randn((b, h), device, gen)
    # decays around 0.5..0.95, as in the kernel tests, so the state stays bounded over many steps
    a_log = torch.log(torch.rand(h, device=device, generator=gen) * 0.9 + 0.1)
    dt_bias = _randn((h, k), device, gen) * 0.5 - 1.0
    state = _randn((b, h, k, v), device, gen) * 0.1
    return q, key, val, g, beta, a_log, dt_bias, state


def _prepare_kda(case: BenchCase, device: str, gen, use_triton: bool) -> Call:
    import torch

    dims = case.dims()
    q, k, v, g, b, a_log, dt_bias, state = kda_inputs(dims, device, gen)
    if case.variant == "replay":
        return _prepare_replay(dims, device, (q, k, v, g, b, a_log, dt_bias, state), use_triton)
    from infralab.kernels.kda_decode import kda_decode, kda_decode_ref

    if not use_triton:
        return lambda: kda_decode_ref(q, k, v, g, b, a_log, dt_bias, state)
    out = torch.empty_like(v)
    # the state is updated in place: repeated calls are consecutive decode steps (bounded by the decay)
    return lambda: kda_decode(q, k, v, g, b, a_log, dt_bias, state, variant=case.variant, out=out)


class ReplayCycle:
    """One ReplaySSM ring cycle: `ring_len` decode steps and the flush that ends it. The benchmark
    divides the cycle's time by `ring_len` (`calls_per_run`), so a row is the amortised cost of
    one decode step, flush included."""

    def __init__(self, step: Callable[[], object], ring_len: int) -> None:
        self.step = step
        self.calls_per_run = ring_len

    def __call__(self) -> None:
        for _ in range(self.calls_per_run):
            self.step()


def _prepare_replay(dims: dict[str, int], device: str, inputs, use_triton: bool) -> Call:
    import torch

    q, k, v, g, b, a_log, dt_bias, state = inputs
    ring_len = dims["L"]
    if use_triton:
        from infralab.kernels.replay_ssm import ReplaySSMState

        replay = ReplaySSMState(a_log, dt_bias, state, ring_len)  # flushes itself every ring_len steps
        return ReplayCycle(lambda: replay.step(q, k, v, g, b), ring_len)
    from infralab.kernels.replay_ssm import replay_state_ref, replay_step_ref

    batch, heads, head_k, head_v = state.shape
    checkpoint = state.clone()
    ring_k = torch.zeros(batch, heads, ring_len, head_k, device=state.device)
    ring_g = torch.zeros_like(ring_k)
    ring_d = torch.zeros(batch, heads, ring_len, head_v, device=state.device)
    slot = [0]

    def step() -> None:
        _, k_hat, g_t, d_t = replay_step_ref(checkpoint, ring_k, ring_g, ring_d, slot[0], q, k, v, g, b, a_log, dt_bias)
        ring_k[:, :, slot[0]], ring_g[:, :, slot[0]], ring_d[:, :, slot[0]] = k_hat, g_t, d_t
        slot[0] += 1
        if slot[0] == ring_len:
            checkpoint.copy_(replay_state_ref(checkpoint, ring_k, ring_g, ring_d, ring_len))
            slot[0] = 0

    return ReplayCycle(step, ring_len)


def _prepare_paged(case: BenchCase, device: str, gen, use_triton: bool) -> Call:
    import torch

    from infralab.kernels.kv_quant import build_paged_cache
    from infralab.kernels.paged_attention import paged_decode_attention, paged_decode_attention_ref

    d = case.dims()
    batch, heads, hkv, head_dim, ctx = d["B"], d["H"], d["HKV"], d["D"], d["T"]
    q = _randn((batch, heads, head_dim), device, gen)
    k = _randn((batch, ctx, hkv, head_dim), device, gen)
    v = _randn((batch, ctx, hkv, head_dim), device, gen)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=device)
    # a shuffled block table (CPU generator: build_paged_cache draws the permutation on the CPU)
    cache = build_paged_cache(k, v, lens, case.dtype, generator=torch.Generator().manual_seed(1))
    del k, v
    args = (q, cache.k_cache, cache.v_cache, cache.k_scale, cache.v_scale, cache.block_table,
            cache.context_lens, case.dtype)
    if not use_triton:
        return lambda: paged_decode_attention_ref(*args)
    out = torch.empty_like(q)
    return lambda: paged_decode_attention(*args, out=out)


def _prepare_kv_quantize(case: BenchCase, device: str, gen, use_triton: bool) -> Call:
    from infralab.kernels.kv_quant import quantize_kv

    d = case.dims()
    x = _randn((d["T"], d["HKV"], d["D"]), device, gen)
    return lambda: quantize_kv(x, case.dtype)
