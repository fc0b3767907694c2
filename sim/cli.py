"""Handlers of the `infralab sim ...` commands (flags in the command table, infralab/cli.py)."""

from __future__ import annotations

import argparse

from infralab.errors import InputError


def run(args: argparse.Namespace) -> int:
    """`infralab sim run CONFIG.toml --out DIR [--seed N] [--set KEY=VALUE ...] [--percentiles Q,...]
    [--max-trace-events N] [--no-timeline]`."""
    from infralab.sim.run import run_config_file
    from infralab.sim.timeline import DEFAULT_MAX_EVENTS

    cap = DEFAULT_MAX_EVENTS if args.max_trace_events is None else args.max_trace_events
    run_config_file(args.config, args.out, seed=args.seed, max_trace_events=cap, timeline=not args.no_timeline,
                    overrides=[*args.set, *percentiles_override(args.percentiles)])
    return 0


def catalog(args: argparse.Namespace) -> int:
    """`infralab sim catalog`: the models, accelerators and links shipped with the package."""
    from infralab.sim.specs import catalog as shipped

    for kind, names in shipped().items():
        print(f"{kind}: {', '.join(names)}")
    return 0


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
