"""Workloads: the requests a run replays (the simulator's or the real engine's load generator), from traces or synthetic distributions.

Public API: `Request`, `RequestTable` (what the readers return), `read_trace`, `build_workload`; helpers for callers that need the parts:
`read_trace_column`, `arrival_times`, `sample_lengths`, `ZeroLengthWarning`, `TRACE_FORMATS`.
"""

from infralab.workload.arrivals import arrival_times, gamma_arrivals, poisson_arrivals
from infralab.workload.build import build_workload
from infralab.workload.lengths import lognormal_lengths, sample_lengths
from infralab.workload.request import Request
from infralab.workload.request_table import RequestTable
from infralab.workload.schema import TRACE_FORMATS
from infralab.workload.traces import (
    MOONCAKE_BLOCK_TOKENS,
    ZeroLengthWarning,
    read_trace,
    read_trace_column,
)

__all__ = [
    "MOONCAKE_BLOCK_TOKENS",
    "TRACE_FORMATS",
    "Request",
    "RequestTable",
    "ZeroLengthWarning",
    "arrival_times",
    "build_workload",
    "gamma_arrivals",
    "lognormal_lengths",
    "poisson_arrivals",
    "read_trace",
    "read_trace_column",
    "sample_lengths",
]
