"""Subcommands of `infralab` that belong to `infralab.sim`:

- `infralab sim run CONFIG.toml --out DIR [--seed N] [--max-trace-events N]`
- `infralab sim catalog`: the models, accelerators and links shipped with the package
"""

from __future__ import annotations

import argparse

# The timeline module is light (json, numpy); its cap is the CLI's default.
from infralab.sim.timeline import DEFAULT_MAX_EVENTS


def register(commands: argparse._SubParsersAction) -> None:
    """Add this part's subcommands; each sets `handler=` to a function(args) -> exit code."""
    sim = commands.add_parser("sim", help="discrete-event simulation of a serving cluster")
    sub = sim.add_subparsers(dest="sim_command", required=True, metavar="SIM_COMMAND")

    run = sub.add_parser("run", help="simulate a config; print a summary and write a results folder")
    run.add_argument("config", metavar="CONFIG.toml", help="simulation config (see docs/sim.md)")
    run.add_argument("--out", required=True, metavar="DIR", help="results folder to write")
    run.add_argument("--seed", type=_non_negative_int, default=None, help="override run.seed")
    run.add_argument(
        "--max-trace-events",
        type=_non_negative_int,
        default=DEFAULT_MAX_EVENTS,
        metavar="N",
        help="cap on timeline events in trace.json (default %(default)s; the earliest are kept)",
    )
    run.set_defaults(handler=_run)

    catalog = sub.add_parser("catalog", help="list the shipped models, accelerators and links")
    catalog.set_defaults(handler=_catalog)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _run(args: argparse.Namespace) -> int:
    from infralab.sim.run import run_config_file

    run_config_file(args.config, args.out, seed=args.seed, max_trace_events=args.max_trace_events)
    return 0


def _catalog(args: argparse.Namespace) -> int:
    from infralab.sim.specs import catalog

    for kind, names in catalog().items():
        print(f"{kind}: {', '.join(names)}")
    return 0
