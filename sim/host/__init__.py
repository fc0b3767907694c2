"""Host threads, the GIL and device streams as simulated resources (virtual time only).

- `gil`: the global interpreter lock with CPython 3's switching rules.
- `thread`: a host thread running a program of segments (Python, native calls that hold or
  release the GIL, waits), recording its states as timeline intervals.
- `streams`: device streams (asynchronous launches, in-order execution, explicit synchronisation).
- `cpu`: CPU cores with identity, round-robin with a quantum, and Linux's wake-up placement.
- `overlap`: how much of one set of intervals another covers (dense feedback over timelines).
A study's own scenario built on these lives in its folder under experiments/.
"""
