"""Handlers of the agent's commands (flags in the command table, infralab/cli.py):

    infralab test HYPOTHESIS.toml [--confirm] [--quick] [--set K=V ...] [--json] [--out DIR] [--backend B] [--ray-address A]
    infralab reproduce [--out results/<timestamp>] [--quick] [--study NAME ...]
    infralab explain RUN [--against BASELINE] [--json] [--metric M] [--top N] [--overlap A B]...
    infralab search SPACE.toml [--set K=V ...] [--out DIR] [--jobs N] [--json] [--no-progress] [--backend B] [--ray-address A]
    infralab sim sweep CONFIG.toml --rates R,... [--seeds S,...] [--configs MORE.toml ...] --out DIR
    infralab sim capacity CONFIG.toml [--configs MORE.toml ...] [--seeds S,...] [--tolerance F] [--quantile pNN]

`test` exit status: 0 accepted, 1 rejected, 3 not decided (inconclusive, partial, unmeasured),
2 bad input. `reproduce` exits 0 when every study ran (its verdicts are results, not failures).
`explain` and `search` print text for people, or with --json the documents of docs/explain.md.
`--backend`/`--ray-address` choose where simulation jobs run (`infralab.agent.sim_pool.Execution`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from infralab.cli import SEED_MAX

if TYPE_CHECKING:
    from infralab.agent.sim_pool import Execution

EXIT = {"accepted": 0, "rejected": 1}
EXIT_UNDECIDED = 3


def _execution(args: argparse.Namespace) -> Execution:
    """The --backend and --ray-address flags, checked (the chosen backend can run here)."""
    from infralab.agent.sim_pool import Execution, require_backend

    execution = Execution(backend=args.backend, ray_address=args.ray_address)
    require_backend(execution)
    return execution


def test(args: argparse.Namespace) -> int:
    from infralab.agent.hypothesis import load_hypothesis
    from infralab.agent.report import test_text, write_test_result
    from infralab.agent.validators.ladder import run_test, test_json
    from infralab.results import atomic_output_dir

    execution = _execution(args)
    hyp = load_hypothesis(args.hypothesis, quick=args.quick, overrides=args.set)
    if args.out is not None:
        with atomic_output_dir(args.out) as tmp:
            result = run_test(hyp, confirm=args.confirm, workdir=Path(tmp), execution=execution)
            write_test_result(result, Path(tmp))
    else:
        result = run_test(hyp, confirm=args.confirm, execution=execution)
    if args.json:
        print(json.dumps(test_json(result), sort_keys=True, indent=2, allow_nan=False))
    else:
        sys.stdout.write(test_text(result))
    return EXIT.get(result.verdict, EXIT_UNDECIDED)


def reproduce(args: argparse.Namespace) -> int:
    from infralab.agent.reproduce import reproduce as run_studies
    from infralab.agent.reproduce import study_names
    from infralab.errors import InputError

    if args.study:
        unknown = [s for s in args.study if s not in study_names()]
        if unknown:
            raise InputError("--study", f"unknown study {unknown[0]!r}", f"one of {', '.join(study_names())}")
    report = run_studies(args.out, quick=args.quick, studies=tuple(args.study) if args.study else None)
    for study in report["studies"]:
        print(f"{study['verdict'].upper():>13}  {study['title']}")
    return 0


def explain(args: argparse.Namespace) -> int:
    from infralab.agent.explain import explain as explain_run
    from infralab.agent.explain_text import format_text
    from infralab.agent.interval_sets import parse_selector
    from infralab.agent.run_dir import load_run

    pairs = None
    if args.overlap:
        pairs = [(parse_selector(a), parse_selector(b)) for a, b in args.overlap]
    run = load_run(args.run)
    baseline = load_run(args.against) if args.against else None
    doc = explain_run(run, baseline, metric=args.metric, overlaps=pairs, top=args.top)
    if args.json:
        sys.stdout.write(json.dumps(doc, sort_keys=True, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(format_text(doc))
    return 0


def search(args: argparse.Namespace) -> int:
    from infralab.agent.search import format_text, run_search

    out = args.out if args.out is not None else str(Path("results") / "search" / Path(args.space).stem)
    report = run_search(args.space, out, jobs=args.jobs, progress=not args.no_progress, execution=_execution(args),
                        overrides=args.set)
    if args.json:
        sys.stdout.write(json.dumps(report, sort_keys=True, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(format_text(report))
        print(f"wrote {out}/search.json, search.csv, pareto.png")
    return 0


def optimize(args: argparse.Namespace) -> int:
    from infralab.agent.optimize import format_text, run_optimize
    from infralab.agent.rate_grid import parse_numbers

    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    seeds = tuple(parse_numbers(args.seeds, "--seeds", kind=int, positive=False, at_most=SEED_MAX))
    report = run_optimize(args.space, args.out, methods=methods, budget=args.budget, seeds=seeds, jobs=args.jobs,
                          overrides=args.set, execution=_execution(args), confirm=args.confirm)
    if args.json:
        sys.stdout.write(json.dumps(report, sort_keys=True, indent=2, allow_nan=False) + "\n")
    else:
        print(format_text(report))
        print(f"wrote {args.out}/optimize.json, trajectory.png" + (", real/" if args.confirm else ""))
    return 0


def sim_sweep(args: argparse.Namespace) -> int:
    from infralab.agent.rate_grid import parse_numbers
    from infralab.agent.sweep import format_text, run_sweep

    rates = parse_numbers(args.rates, "--rates")
    seeds = (parse_numbers(args.seeds, "--seeds", kind=int, positive=False, at_most=SEED_MAX)
             if args.seeds is not None else None)
    doc = run_sweep([args.config, *args.configs], rates, seeds, args.out, jobs=args.jobs,
                    show_progress=not args.no_progress, execution=_execution(args))
    if args.json:
        sys.stdout.write(json.dumps(doc, sort_keys=True, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(format_text(doc))
        files = sorted(f for fig in doc["figures"].values() for f in fig["files"])
        print(f"wrote {args.out}/: runs.csv, sweep.json, {', '.join(files)}")
    return 0


def sim_capacity(args: argparse.Namespace) -> int:
    from infralab.agent.capacity import format_text, run_capacity
    from infralab.agent.rate_grid import parse_numbers

    seeds = (parse_numbers(args.seeds, "--seeds", kind=int, positive=False, at_most=SEED_MAX)
             if args.seeds is not None else None)
    doc = run_capacity([args.config, *args.configs], seeds, tolerance=args.tolerance, quantile=args.quantile,
                       start=args.start, out=args.out, jobs=args.jobs, show_progress=not args.no_progress,
                       execution=_execution(args))
    if args.json:
        sys.stdout.write(json.dumps(doc, sort_keys=True, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(format_text(doc))
        if args.out is not None:
            print(f"wrote {args.out}/capacity.json, capacity_probes.csv")
    return 0
