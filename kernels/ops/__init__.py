"""One module per kernel op: each registers the op's `KernelOp` (`OP`) with its partition adapter,
bench cases and work counts; the Triton kernel and its torch reference stay in `kernels/<kernel>.py`.
Importing these modules imports neither torch nor triton (see `kernels/kernel_op.py`)."""
