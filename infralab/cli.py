"""The `infralab` command. Each part registers its own subcommands:

- `infralab sim ...`      (infralab.sim.cli)
- `infralab kernels ...`  (infralab.kernels.cli)
- agent commands          (infralab.agent.cli)

Part modules import heavy libraries (torch, triton) inside their handlers, not at import time,
so that `infralab sim run` stays light.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from infralab.errors import InputError


def build_parser() -> argparse.ArgumentParser:
    from infralab.agent import cli as agent_cli
    from infralab.kernels import cli as kernels_cli
    from infralab.sim import cli as sim_cli

    parser = argparse.ArgumentParser(prog="infralab", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim_cli.register(commands)
    kernels_cli.register(commands)
    agent_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; bad input prints one line `error: ...` and exits with status 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
