"""Host micro-probes: real Python threads calling the project's own native functions through
ctypes, once via `PyDLL` (the call keeps the GIL) and once via `CDLL` (the call releases it), to
measure what the host model (sim/host/) is calibrated with. See `micro.py`; a study's own
real-threads probe (its thread structure) lives in its folder under experiments/."""
