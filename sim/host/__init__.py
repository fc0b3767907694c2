"""Host threads, the GIL and device streams as simulated resources (virtual time only).

- `gil`: the global interpreter lock with CPython 3's switching rules.
- `thread`: a host thread running a program of segments (Python, native calls that hold or
  release the GIL, waits), recording its states as timeline intervals.
- `streams`: device streams (asynchronous launches, in-order execution, explicit synchronisation).
- `moe_prefill`, `kv_transfer_thread`, `scenario`: the KV-transfer-vs-prefill case study.
- `host_schedule`: the host-only schedule of the real-threads probe, simulated.
- `overlap`, `attribution`: dense feedback over the recorded intervals.
"""
