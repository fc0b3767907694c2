"""The kv_quantize op: its Triton kernel and torch reference (`kernel.py`), its `KernelOp` (`op.py`)
and, where it has one, its check suite (`check.py`). `op.py` is what the registry imports."""
