"""Whether a kernel shape's tensors fit this machine before any is allocated: a shape too large for
memory is one InputError naming the hypothesis field, never an allocation error or the kernel's
out-of-memory kill halfway through a run. The memory is where the kernel's tensors live
(`free_bytes`): the GPU's free memory when they are allocated on one, else the host's.

The estimate is `scaling_work`'s bytes term (the elements each call reads and writes, up to a
constant per kernel) at 8 bytes an element (float64 copies for the comparison) times COPIES (inputs,
the unsplit and split outputs, the references): deliberately generous, since refusing a shape
that would just fit costs a smaller shape, while accepting one that does not costs the machine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from infralab.errors import InputError
from infralab.work_formulas import scaling_work

BYTES_PER_ELEMENT = 8
COPIES = 6


def available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    """Memory a new allocation can use: Linux's MemAvailable, else the physical pages free."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def free_bytes(device: str) -> tuple[int, str]:
    """Free memory on `device`, where kernel tensors are allocated, and where that is (for messages):
    the GPU's (torch's mem_get_info) for "cuda", else the host's `available_bytes`."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0]), "on the GPU"
    return available_bytes(), "here"


def shape_bytes(kernel: str, dims: Mapping[str, int]) -> float:
    """Bytes a check of `kernel` at `dims` allocates, generously (module docstring)."""
    _, elements = scaling_work(kernel, {name: float(size) for name, size in dims.items()})
    return elements * BYTES_PER_ELEMENT * COPIES


def check_fits_memory(kernel: str, dims: Mapping[str, int], where: str, available: int | None = None,
                      device: str | None = None) -> None:
    """InputError at `where` when the tensors of `kernel` at `dims` would not fit in the memory of
    `device` (default: where kernels run, `kernel_device`)."""
    need = shape_bytes(kernel, dims)
    if available is None:
        from infralab.kernels.interpreter import kernel_device

        have, place = free_bytes(device or kernel_device())
    else:
        have, place = available, "here"
    if need > have:
        shown = ";".join(f"{name}={size}" for name, size in dims.items())
        raise InputError(where, f"the tensors of {kernel} at {shown} need about {need / 2**30:.3g} GiB, "
                                f"more than the {have / 2**30:.3g} GiB free {place}", "a smaller shape")
