"""Handlers of the `infralab sim ...` commands (flags in the command table, infralab/cli.py)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from infralab.errors import InputError


def run(args: argparse.Namespace) -> int:
    """`infralab sim run CONFIG.toml --out DIR [--seed N] [--set KEY=VALUE ...] [--percentiles Q,...]
    [--max-trace-events N] [--timeline | --no-timeline]` (neither: a timeline for runs of at most
    DEFAULT_TIMELINE_MAX_REQUESTS requests)."""
    from pathlib import Path

    from infralab.overrides import overrides_blamed, set_flags
    from infralab.sim.run import run_config_file
    from infralab.metrics.timeline import DEFAULT_MAX_EVENTS

    if args.timeline and args.no_timeline:
        raise InputError("--timeline, --no-timeline", "both given", "at most one of them")
    timeline = True if args.timeline else False if args.no_timeline else None
    cap = DEFAULT_MAX_EVENTS if args.max_trace_events is None else args.max_trace_events
    percentiles = percentiles_override(args.percentiles)
    # An error in a value given on the command line is named at the flag that gave it.
    written = {**set_flags(args.set), **{a: f"--percentiles {args.percentiles!r}" for a in percentiles}}
    with overrides_blamed(str(Path(args.config)), written):
        run_config_file(args.config, args.out, seed=args.seed, max_trace_events=cap, timeline=timeline,
                        overrides=[*args.set, *percentiles])
    return 0


def catalog(args: argparse.Namespace) -> int:
    """`infralab sim catalog [NAME] [--json] [--accelerator A --tp N --dtype D ...]`: the shipped
    specs, or one spec's figures (a model's derived figures and, with --accelerator, its KV capacity)."""
    import json

    from infralab.sim.catalog_view import catalog_listing, spec_figures

    if args.name is None:
        data = catalog_listing()
        lines = [f"{kind}: {', '.join(names)}" for kind, names in data.items()]
    else:
        data = spec_figures(
            args.name,
            accelerator=args.accelerator,
            tp=args.tp,
            dtype=args.dtype,
            kv_dtype=args.kv_dtype,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_num_seqs=args.max_num_seqs,
            max_batched_tokens=args.max_batched_tokens,
            block_size=args.block_size,
            **_glm_knobs(args),
        )
        lines = [f"{key}: {value}" for key, value in _flatten(data)]
    print(json.dumps(data, indent=2) if args.json else "\n".join(lines))
    return 0


def _glm_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """The GLM-class knobs of `sim catalog` (None: off), as `spec_figures` takes them."""
    from infralab.sim.catalog_view import HARDWARE_KNOBS

    knobs = {knob: getattr(args, knob) for knob in HARDWARE_KNOBS}
    layer_dtypes = tuple(args.kv_layer_dtypes.split(",")) if args.kv_layer_dtypes else None
    return {**knobs, "replay_ssm_ring": args.replay_ssm_ring, "kv_layer_dtypes": layer_dtypes,
            "w8a8_check": args.w8a8_check}


def percentiles_override(text: str | None) -> list[str]:
    """`--percentiles 50,90,99.9` as the override `metrics.percentiles=[50.0, 90.0, 99.9]` (none
    when the flag is not given); the config's validation then checks range and order."""
    if text is None:
        return []
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise InputError(f"--percentiles {text!r}", "not a comma-separated list of numbers",
                         "percentiles between 0 and 100, e.g. 50,90,99.9") from None
    return [f"metrics.percentiles=[{', '.join(repr(v) for v in values)}]"]


def _flatten(data: Mapping[str, object], prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out
