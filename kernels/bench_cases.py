"""What `infralab kernels bench` times: per kernel, its cases (variant x dtype x shape) and, per case,
a zero-argument callable that performs one call on the chosen device with inputs prepared up front.

The cases and callables of each op are registered with the op (`kernels/ops/<op>.py`, collected in
`kernels/registry.py`); this module holds what they share: the case, the shape grids and dispatch.

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
from infralab.kernels.registry import OPS

KERNELS: tuple[str, ...] = tuple(OPS)
"""Every op, in table order."""

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
    """Every case of `kernel` in `grid` (the op's `bench_cases`); torch baseline rows only on a GPU
    (on the CPU the references are torch already)."""
    if kernel not in OPS:
        raise ValueError(f"unknown kernel {kernel!r}")
    return OPS[kernel].bench_cases(grid, on_gpu)


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
    return OPS[case.kernel].prepare(case, device, gen, use_triton)


def randn(shape: tuple[int, ...], device: str, gen):
    """float32 N(0,1) of `shape` on `device`, drawn from `gen`."""
    import torch

    return torch.randn(shape, device=device, generator=gen, dtype=torch.float32)

