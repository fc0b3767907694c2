"""One folder per kernel op, discovered by `kernels/registry.py`: `kernels/ops/<op>/` holds the Triton
kernel and its torch reference (`kernel.py`), the op's `KernelOp` (`op.py`: variants, splits, shapes,
partition adapter, bench cases, work counts) and its check suite (`check.py`). Importing `op.py`
imports neither torch nor triton (see `kernels/kernel_op.py`)."""
