"""What a simulation run records: the hand-off between the engine (which fills it) and the
metrics, timeline and attribution code (which read it). Times are simulated seconds.

Kept as plain, append-only containers so the engine's hot path does only cheap appends.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """One request's life. Unset times are NaN."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0  # prompt tokens served from the prefix cache (at the final admission)
    prefill_instance: str = ""
    decode_instance: str = ""
    first_scheduled_s: float = math.nan  # start of the first step that computed any of its prompt
    first_token_s: float = math.nan  # end of the step that produced output token 1
    # End time of every output token, first included; len == output_tokens once finished.
    token_times_s: array = field(default_factory=lambda: array("d"))
    kv_transfer_start_s: float = math.nan  # disaggregated layouts only
    kv_transfer_end_s: float = math.nan
    finish_s: float = math.nan
    preemptions: int = 0
    recomputed_tokens: int = 0  # prompt + output tokens computed again after preemptions


@dataclass(frozen=True, slots=True)
class Interval:
    """A span on a timeline track: a batch on an instance, a transfer on a link, a thread state."""

    track: str  # e.g. "instance/prefill-0", "link/nic-prefill-0", "thread/kv-transfer"
    name: str  # e.g. "batch", "prefill", "decode", "transfer", "gil-wait"
    start_s: float
    end_s: float
    args: tuple[tuple[str, Any], ...] = ()  # small key/value details (tokens, bytes, request id)


@dataclass(frozen=True, slots=True)
class CounterSample:
    """A value of a named counter on a track from time `t_s` on (step function)."""

    track: str
    name: str  # e.g. "waiting", "running", "kv_used_blocks", "active_flows"
    t_s: float
    value: float


@dataclass(slots=True)
class RunRecord:
    """Everything a run produced, in order of occurrence within each list."""

    requests: list[RequestRecord] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)
    counters: list[CounterSample] = field(default_factory=list)
    # Static facts per resource, e.g. {"instance/prefill-0": {"role": "prefill", "kv_capacity_blocks": 1234}}
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    end_s: float = 0.0  # simulated time when the last event happened
