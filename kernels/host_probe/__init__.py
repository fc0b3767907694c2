"""A host-concurrency probe: real Python threads calling the project's own native functions
through ctypes, once via `PyDLL` (the call keeps the GIL) and once via `CDLL` (the call releases
it), with intervals recorded by `time.perf_counter_ns`. See `probe.py`."""
