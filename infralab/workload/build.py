"""Turn a workload config (`[workload]` table) into the list of requests a run replays."""

from __future__ import annotations

from array import array
from pathlib import Path

from infralab.errors import InputError
from infralab.locations import resolve_path
from infralab.random_streams import stream
from infralab.workload.arrivals import arrival_times
from infralab.workload.lengths import sample_lengths
from infralab.workload.request_table import RequestTable
from infralab.workload.schema import LengthSpec, SyntheticWorkload, TraceWorkload
from infralab.workload.traces import read_trace


def build_workload(
    spec: TraceWorkload | SyntheticWorkload, base_dir: Path, seed: int, context_length: int | None = None
) -> RequestTable:
    """The requests of a workload, ids 0..n-1 in arrival order, first arrival at 0 s, as columns
    (a `RequestTable`: it reads like a list of `Request`, at 8 bytes per number).

    Trace paths that are relative resolve against `base_dir` (the config file's folder).
    Synthetic workloads draw arrivals, prompt and output lengths from three independent streams
    ("workload.arrivals", "workload.prompt", "workload.output"), so the same seed gives the same
    requests, and changing one distribution leaves the others' draws unchanged. Prompt and
    output lengths are drawn independently (an empirical pair loses the trace's correlation).
    With `context_length` (the model's, tokens), a prompt longer than it is an InputError naming
    the trace file and line, or the config's `workload.prompt`.
    """
    if isinstance(spec, TraceWorkload):
        return read_trace(
            resolve_path(spec.path, Path(base_dir)),
            spec.format,
            rate_scale=spec.rate_scale,
            start_s=spec.start_s,
            end_s=spec.end_s,
            max_requests=spec.max_requests,
            max_prompt_tokens=spec.max_prompt_tokens,
            context_length=context_length,
        )
    if isinstance(spec, SyntheticWorkload):
        requests = _synthetic(spec, Path(base_dir), seed)
        if context_length is not None:
            _check_context(requests, context_length)
        return requests
    raise TypeError(f"unknown workload spec {spec!r}")


def _synthetic(spec: SyntheticWorkload, base_dir: Path, seed: int) -> RequestTable:
    n = spec.num_requests
    arrivals = array("d", arrival_times(spec.arrival, n, stream(seed, "workload.arrivals")).tolist())
    prompts = array("q", _lengths(spec.prompt, n, seed, base_dir, "workload.prompt"))
    outputs = array("q", _lengths(spec.output, n, seed, base_dir, "workload.output"))
    return RequestTable(arrivals, prompts, outputs, None)


def _lengths(spec: LengthSpec, n: int, seed: int, base_dir: Path, field: str) -> list[int]:
    # The config field doubles as the stream name: "workload.prompt", "workload.output".
    lengths: list[int] = sample_lengths(spec, n, stream(seed, field), base_dir, field).tolist()
    return lengths


def _check_context(requests: RequestTable, context_length: int) -> None:
    """A drawn request must fit the model's context: its prompt, then prompt + output (the KV it
    ends with; an engine refuses a request whose prompt + max tokens exceed it)."""
    too_long = next((r for r in requests if r.prompt_tokens > context_length), None)
    if too_long is not None:
        raise InputError(
            "workload.prompt",
            f"request {too_long.id} draws a prompt of {too_long.prompt_tokens} tokens, longer than "
            f"the model's context_length {context_length}",
            "prompt lengths that fit the model's context (lower the values, or set `max` for lognormal)",
        )
    too_long = next((r for r in requests if r.prompt_tokens + r.output_tokens > context_length), None)
    if too_long is not None:
        raise InputError(
            "workload.output",
            f"request {too_long.id} draws {too_long.prompt_tokens} prompt + {too_long.output_tokens} output "
            f"tokens, more than the model's context_length {context_length}",
            "prompt + output lengths that fit the model's context (lower either, or set `max`)",
        )
