"""Workloads: the requests a simulation replays, from traces or synthetic distributions.

Public API: `Request`, `RequestTable` (what the readers return), `read_trace`, `build_workload`; helpers for callers that need the parts:
`read_trace_column`, `arrival_times`, `sample_lengths`, `ZeroLengthWarning`, `TRACE_FORMATS`.
"""

from infralab.sim.workloads.arrivals import arrival_times, gamma_arrivals, poisson_arrivals
from infralab.sim.workloads.build import build_workload
from infralab.sim.workloads.lengths import lognormal_lengths, sample_lengths
from infralab.sim.workloads.request import Request
from infralab.sim.workloads.request_table import RequestTable
from infralab.sim.workloads.traces import (
    MOONCAKE_BLOCK_TOKENS,
    TRACE_FORMATS,
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
