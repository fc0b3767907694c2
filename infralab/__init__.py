"""infralab: real Triton kernels paired with a discrete-event model of an LLM-serving cluster.

Parts (one direction of dependency): `infralab.agent` uses `infralab.sim`, `infralab.kernels` and
`infralab.real`; `sim` never imports torch or triton; `kernels` and `real` never import `sim`. They
meet through the shared layer (this package's own modules, `infralab.workload`, `infralab.metrics`)
and calibration files.
"""

__version__ = "0.1.0"
