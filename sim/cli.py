"""Handlers of the `infralab sim ...` commands (flags in the command table, infralab/cli.py)."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    """`infralab sim run CONFIG.toml --out DIR [--seed N] [--set KEY=VALUE ...] [--max-trace-events N]
    [--no-timeline]`."""
    from infralab.sim.run import run_config_file
    from infralab.sim.timeline import DEFAULT_MAX_EVENTS

    cap = DEFAULT_MAX_EVENTS if args.max_trace_events is None else args.max_trace_events
    run_config_file(args.config, args.out, seed=args.seed, max_trace_events=cap, timeline=not args.no_timeline,
                    overrides=args.set)
    return 0


def catalog(args: argparse.Namespace) -> int:
    """`infralab sim catalog`: the models, accelerators and links shipped with the package."""
    from infralab.sim.specs import catalog as shipped

    for kind, names in shipped().items():
        print(f"{kind}: {', '.join(names)}")
    return 0
