"""What `infralab kernels bench` times: per kernel, its cases (variant x dtype x shape) and, per case,
a zero-argument callable that performs one call on the chosen device with inputs prepared up front.

The cases, callables and shapes of each op are declared with the op (`kernels/ops/<op>/op.py`,
discovered by `kernels/registry.py`); this module holds what they share: the case, the named grids
gathered from the ops' shapes, and dispatch.

On a GPU the callable launches the Triton kernel (or, for `torch` baseline rows, torch's own op).
On the CPU it runs the torch reference of the variant's math: Triton's interpreter is a correctness
tool, not a timer. Variants whose references are the same math (KDA v1/v2/v3 all compute one decode
step) name the same `reference`, and the benchmark times that reference once and reports it for each
of them, so that CPU rows never suggest a speed difference that was not measured.

Torch and the kernel modules are imported inside the functions that need them (the CLI stays light).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from infralab.kernels.calibration import Shape
from infralab.kernels import registry

KERNELS: tuple[str, ...] = tuple(registry.OPS)
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
    """A named bench grid: the shapes of each op (op name -> shapes). The shipped grids are the
    ops' own (`KernelOp.shapes`, gathered by `grid`); tests may build smaller ones."""

    name: str
    shapes: Mapping[str, tuple[Shape, ...]]

    def of(self, kernel: str) -> tuple[Shape, ...]:
        """The shapes of op `kernel` in this grid (none if the grid leaves it out)."""
        return tuple(self.shapes.get(kernel, ()))


def grid(name: str) -> ShapeGrid:
    """The grid `name` ("small": a laptop CPU in well under a minute with torch references;
    "full": a GPU, shapes of a 7B-70B-class model's decode and prefill) from every op's shapes."""
    return ShapeGrid(name, {kernel: op.shapes.get(name, ()) for kernel, op in registry.OPS.items()})


SMALL = grid("small")
FULL = grid("full")
GRIDS: dict[str, ShapeGrid] = {"small": SMALL, "full": FULL}


# ---- cases ---------------------------------------------------------------------------------------


def cases_for(kernel: str, grid: ShapeGrid, on_gpu: bool) -> list[BenchCase]:
    """Every case of `kernel` in `grid` (the op's `bench_cases`); torch baseline rows only on a GPU
    (on the CPU the references are torch already)."""
    return registry.op(kernel).bench_cases(grid.of(kernel), on_gpu)


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
    return registry.op(case.kernel).prepare(case, device, gen, use_triton)


def randn(shape: tuple[int, ...], device: str, gen):
    """float32 N(0,1) of `shape` on `device`, drawn from `gen`."""
    import torch

    return torch.randn(shape, device=device, generator=gen, dtype=torch.float32)

