"""The cost model of one serving instance, split by operator family (docs/sim.md, "Cost model").

`CostModel` (`model.py`) is the seam the engine calls; each operator family is a module of its own
(`gemm.py`, `attention.py`, `linear_attention.py`, `collectives.py`, `small_ops.py`, `pipeline.py`),
built once from the instance's `Geometry` (`geometry.py`), with host overheads (`host.py`), memory
sizing (`memory.py`) and the calibration reader (`calibrated.py`) beside them.
"""

from infralab.sim.cost.calibrated import W8A8_DTYPES
from infralab.sim.cost.geometry import LOGITS_BYTES, Geometry
from infralab.sim.cost.linear_attention import KDA_CHUNK
from infralab.sim.cost.memory import GIB, NON_TORCH_BYTES_PER_GPU, TP_NON_TORCH_BYTES_PER_GPU, MemoryPlan
from infralab.sim.cost.model import CostModel, decode_run_ends_stepwise
from infralab.sim.cost.pipeline import pipeline_bubble_fraction, stage_layers
from infralab.sim.cost.small_ops import SMALL_OP_KERNELS
from infralab.sim.cost.work import EXTRA_OPS, OPS, StepCost, StepWork

__all__ = [
    "EXTRA_OPS", "GIB", "KDA_CHUNK", "LOGITS_BYTES", "NON_TORCH_BYTES_PER_GPU", "OPS", "SMALL_OP_KERNELS",
    "TP_NON_TORCH_BYTES_PER_GPU", "W8A8_DTYPES", "CostModel", "Geometry", "MemoryPlan", "StepCost", "StepWork",
    "decode_run_ends_stepwise", "pipeline_bubble_fraction", "stage_layers",
]
