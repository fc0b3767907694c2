"""The cost model of one serving instance, split by operator family (docs/sim.md, "Cost model")."""

from infralab.sim.cost.work import EXTRA_OPS, OPS, StepCost, StepWork

__all__ = ["EXTRA_OPS", "OPS", "StepCost", "StepWork"]
