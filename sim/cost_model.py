"""The cost model moved to the package `sim/cost/` (one module per operator family); this module
re-exports its names until every import names the package."""

from infralab.sim.config import CostConfig
from infralab.sim.cost import (
    EXTRA_OPS,
    OPS,
    W8A8_DTYPES,
    CostModel,
    MemoryPlan,
    StepCost,
    StepWork,
    decode_run_ends_stepwise,
    pipeline_bubble_fraction,
    stage_layers,
)

__all__ = [
    "EXTRA_OPS", "OPS", "W8A8_DTYPES", "CostConfig", "CostModel", "MemoryPlan", "StepCost", "StepWork",
    "decode_run_ends_stepwise", "pipeline_bubble_fraction", "stage_layers",
]
