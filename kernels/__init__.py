"""Triton kernels with torch references, partition checks, microbenchmarks and host probes. Never imports infralab.sim."""
