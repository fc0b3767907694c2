"""The `bench` subcommand of `infralab kernels` (wired in by `kernels/cli.py`).

Light on purpose: torch and triton are imported by the handler, not here.
"""

from __future__ import annotations

import argparse

from infralab.kernels.registry import OPS


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `bench` (shared by the CLI hub and `python -m infralab.kernels.bench`)."""
    parser.add_argument("--out", metavar="FILE.csv", default=None,
                        help="calibration table to write (default: results/calibration-<grid>-<device>.csv)")
    parser.add_argument("--grid", default="small", metavar="small|full",
                        help="shape grid: 'small' runs on a CPU in under a minute, 'full' is for GPUs (default: small)")
    parser.add_argument("--kernels", default="all", metavar="NAME,...",
                        help=f"comma-separated kernels: {', '.join(OPS)} (default: all)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run_bench_args(args: argparse.Namespace) -> int:
    """Handler: run the benchmark with parsed flags; bad flags raise InputError."""
    from infralab.kernels.bench import bench_command

    return bench_command(args.kernels, args.grid, args.out, progress=not args.no_progress)


def register_bench(commands: argparse._SubParsersAction) -> None:
    """Add `bench` to the `infralab kernels` subcommands (`commands` is their subparsers action)."""
    parser = commands.add_parser(
        "bench",
        help="time every kernel variant over a shape grid and write a calibration table (docs/calibration.md)",
        description="Time every kernel variant over a shape grid and write a calibration table. On a GPU the "
                    "Triton kernels are timed with triton.testing.do_bench; on the CPU the torch references "
                    "are timed and the device is labelled 'cpu'.",
    )
    add_bench_arguments(parser)
    parser.set_defaults(handler=run_bench_args)
