"""Agent tests run kernels in Triton's CPU interpreter when no CUDA device is present (set before
triton is first imported, as in tests/kernels/conftest.py)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
