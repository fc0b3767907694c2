"""Handlers of the `infralab real ...` commands (flags in the command table, infralab/cli.py)."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    """`infralab real run CONFIG.toml --out DIR [--seed N] [--set KEY=VALUE ...]`."""
    from infralab.real.run import run_real_config_file

    run_real_config_file(args.config, args.out, overrides=args.set, seed=args.seed)
    return 0


def profile(args: argparse.Namespace) -> int:
    """`infralab real profile CONFIG.toml --out DIR [--also OTHER.toml ...] [--set KEY=VALUE ...] [--no-progress]`."""
    from infralab.real.profile_run import profile_config_file

    profile_config_file(args.config, args.out, overrides=args.set, show_progress=not args.no_progress,
                        also=args.also)
    return 0
