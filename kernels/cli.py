"""Subcommands of `infralab` that belong to `infralab.kernels`."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    """Add this part's subcommands; each sets `handler=` to a function(args) -> exit code."""
