"""The serving-cluster model: a discrete-event (SimPy) simulation. Never imports torch or triton."""

from infralab.sim import native as _native

# Its hot modules run compiled only from a current build (sim/native.py says how).
NATIVE_MODE = _native.choose()
