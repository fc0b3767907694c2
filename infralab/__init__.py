"""infralab: real Triton kernels paired with a discrete-event model of an LLM-serving cluster.

Parts (one direction of dependency): `infralab.agent` uses `infralab.sim` and `infralab.kernels`;
`sim` never imports torch or triton; `kernels` never imports `sim`. They meet through calibration files.
"""

__version__ = "0.1.0"
