"""Subcommands of `infralab` that belong to `infralab.agent`."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    """Add this part's subcommands; each sets `handler=` to a function(args) -> exit code."""
    from infralab.agent import commands as loop_commands
    from infralab.agent import explain_cli

    loop_commands.register(commands)
    _register_gil(commands)
    explain_cli.register(commands)


def _register_gil(commands: argparse._SubParsersAction) -> None:
    gil = commands.add_parser("gil", help="host threads and the GIL: the KV-transfer vs prefill case study")
    sub = gil.add_subparsers(dest="gil_command", required=True, metavar="SUBCOMMAND")
    run = sub.add_parser("run", help="simulate the scenarios (and, with --probe, confirm on real threads)")
    run.add_argument("experiment", help="experiment TOML, e.g. experiments/gil_kv_transfer.toml")
    run.add_argument("--out", required=True, help="result folder (written atomically)")
    run.add_argument("--probe", action="store_true", help="also run the real-threads probe and compare")
    run.set_defaults(handler=_gil_run)


def _gil_run(args: argparse.Namespace) -> int:
    from infralab.agent.studies import load_hook
    from infralab.locations import experiments_dir

    # The GIL study's own code (experiments/gil_kv_transfer/hook.py) runs its experiment format.
    hook = load_hook(experiments_dir() / "gil_kv_transfer" / "hook.py")
    hook.run_experiment(args.experiment, args.out, with_probe=args.probe)
    return 0
