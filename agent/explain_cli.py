"""The `infralab explain` and `infralab search` subcommands (wired in by infralab.agent.cli).

- `infralab explain RUN [--against BASELINE] [--json] [--metric M] [--top N] [--overlap A B]...`
- `infralab search SPACE.toml [--out DIR] [--jobs N] [--json] [--no-progress]`

Both print text for people, or with --json the documents of docs/explain.md on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(commands: argparse._SubParsersAction) -> None:
    """Add `explain` and `search`; each sets `handler=` to a function(args) -> exit code."""
    explain = commands.add_parser(
        "explain",
        help="where a run's time went, and why it differs from a baseline run",
        description="RUN and BASELINE: a results folder of `infralab sim run`, or a timeline .json "
        "(e.g. `infralab gil run` writes DIR/timelines/<scenario>-held.json and -released.json).",
    )
    explain.add_argument("run", metavar="RUN", help="results folder or timeline .json")
    explain.add_argument("--against", metavar="BASELINE", default=None, help="the run to compare with")
    explain.add_argument("--json", action="store_true", help="print the JSON document (docs/explain.md)")
    explain.add_argument("--metric", choices=("auto", "e2e", "ttft", "span"), default="auto",
                         help="what to explain: mean E2E or TTFT (results folders), span (timelines)")
    explain.add_argument("--top", type=_positive_int, default=10, metavar="N", help="requests/steps listed")
    explain.add_argument("--overlap", nargs=2, action="append", metavar=("A", "B"), default=None,
                         help="an interval-set pair to compare, each TRACK[:NAMES[:OPS]] "
                         "(repeatable; replaces the default pairs)")
    explain.set_defaults(handler=_explain)

    search = commands.add_parser(
        "search",
        help="explore a configuration space with the simulator: best configurations and the Pareto front",
    )
    search.add_argument("space", metavar="SPACE.toml", help="search space (docs/explain.md, e.g. experiments/search_pd_ratio.toml)")
    search.add_argument("--out", metavar="DIR", default=None,
                        help="results folder (default results/search/<SPACE file stem>)")
    search.add_argument("--jobs", type=_positive_int, default=2, metavar="N", help="local processes (default 2)")
    search.add_argument("--json", action="store_true", help="print search.json on stdout")
    search.add_argument("--no-progress", action="store_true", help="no progress bar")
    search.set_defaults(handler=_search)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _explain(args: argparse.Namespace) -> int:
    from infralab.agent.explain import explain
    from infralab.agent.explain_text import format_text
    from infralab.agent.interval_sets import parse_selector
    from infralab.agent.run_dir import load_run

    pairs = None
    if args.overlap:
        pairs = [(parse_selector(a), parse_selector(b)) for a, b in args.overlap]
    run = load_run(args.run)
    baseline = load_run(args.against) if args.against else None
    doc = explain(run, baseline, metric=args.metric, overlaps=pairs, top=args.top)
    if args.json:
        sys.stdout.write(json.dumps(doc, sort_keys=True, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(format_text(doc))
    return 0


def _search(args: argparse.Namespace) -> int:
    from infralab.agent.search import format_text, run_search

    out = args.out or str(Path("results") / "search" / Path(args.space).stem)
    report = run_search(args.space, out, jobs=args.jobs, progress=not args.no_progress)
    if args.json:
        sys.stdout.write(json.dumps(report, sort_keys=True, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(format_text(report))
        print(f"wrote {out}/search.json, search.csv, pareto.png")
    return 0
