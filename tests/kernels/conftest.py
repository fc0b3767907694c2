"""Kernel tests run in Triton's CPU interpreter when no CUDA device is present.

TRITON_INTERPRET must be set before triton is first imported (triton.jit reads it when a kernel is
defined), so this runs at conftest import time, before any test module imports a kernel.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
