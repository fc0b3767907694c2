"""The serving-cluster model: a discrete-event (SimPy) simulation. Never imports torch or triton."""
