"""Where Triton kernels run: compiled on a CUDA device, or in Triton's CPU interpreter.

`triton.jit` reads TRITON_INTERPRET when a kernel is defined, so `use_interpreter_without_gpu`
must run before any kernel module is imported. torch is imported inside the functions, so that
CLI modules can import this file without loading it.
"""

from __future__ import annotations

import os


def interpreting() -> bool:
    """True when Triton kernels run in the CPU interpreter (TRITON_INTERPRET set and not 0)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def use_interpreter_without_gpu() -> str:
    """Set TRITON_INTERPRET=1 when there is no CUDA device; returns a label of where kernels run."""
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
    if interpreting():
        return "cpu (Triton interpreter)"
    return torch.cuda.get_device_name()


def kernel_device() -> str:
    """Where kernel inputs live: the GPU when Triton compiles for one, else the CPU (interpreter)."""
    import torch

    return "cpu" if interpreting() or not torch.cuda.is_available() else "cuda"
