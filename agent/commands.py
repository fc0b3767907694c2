"""`infralab test` and `infralab reproduce`: `register(commands)` adds them to the CLI hub.

    infralab test HYPOTHESIS.toml [--confirm] [--quick] [--json] [--out DIR]
    infralab reproduce [--out results/<timestamp>] [--quick] [--study NAME ...]

`test` exit status: 0 accepted, 1 rejected, 3 not decided (inconclusive, partial, unmeasured),
2 bad input. `reproduce` exits 0 when every study ran (its verdicts are results, not failures).
"""

from __future__ import annotations

import argparse
import json
import sys

EXIT = {"accepted": 0, "rejected": 1}
EXIT_UNDECIDED = 3


def register(commands: argparse._SubParsersAction) -> None:
    """Add `test` and `reproduce`; each sets `handler=` to a function(args) -> exit code."""
    test = commands.add_parser(
        "test", help="decide a hypothesis file with the cheapest validator that can (docs/agent.md)")
    test.add_argument("hypothesis", help="hypothesis TOML, e.g. experiments/partition_correctness.toml")
    test.add_argument("--confirm", action="store_true",
                      help="after the first decision, also run the next (more real) validator allowed")
    test.add_argument("--quick", action="store_true", help="use the file's [quick] table (smoke-test sizes)")
    test.add_argument("--json", action="store_true", help="print the result as JSON (schema infralab.test/1)")
    test.add_argument("--out", help="also write result.json, report.md and raw files here (atomically)")
    test.set_defaults(handler=_test)

    rep = commands.add_parser("reproduce", help="run the studies under experiments/ and write results/<timestamp>/report.md")
    rep.add_argument("--out", help="result folder (default results/<UTC timestamp>)")
    rep.add_argument("--quick", action="store_true", help="smoke-test sizes (each hypothesis file's [quick] table)")
    rep.add_argument("--study", action="append", metavar="NAME",
                     help="run only this study (repeatable): a folder of experiments/ holding a study.toml")
    rep.set_defaults(handler=_reproduce)


def _test(args: argparse.Namespace) -> int:
    from pathlib import Path

    from infralab.agent.hypothesis import load_hypothesis
    from infralab.agent.report import test_text, write_test_result
    from infralab.agent.validators.ladder import run_test, test_json
    from infralab.results import atomic_output_dir

    hyp = load_hypothesis(args.hypothesis, quick=args.quick)
    if args.out:
        with atomic_output_dir(args.out) as tmp:
            result = run_test(hyp, confirm=args.confirm, workdir=Path(tmp))
            write_test_result(result, Path(tmp))
    else:
        result = run_test(hyp, confirm=args.confirm)
    if args.json:
        print(json.dumps(test_json(result), sort_keys=True, indent=2, allow_nan=False))
    else:
        sys.stdout.write(test_text(result))
    return EXIT.get(result.verdict, EXIT_UNDECIDED)


def _reproduce(args: argparse.Namespace) -> int:
    from infralab.agent.reproduce import reproduce, study_names
    from infralab.errors import InputError

    if args.study:
        unknown = [s for s in args.study if s not in study_names()]
        if unknown:
            raise InputError("--study", f"unknown study {unknown[0]!r}", f"one of {', '.join(study_names())}")
    report = reproduce(args.out, quick=args.quick, studies=tuple(args.study) if args.study else None)
    for study in report["studies"]:
        print(f"{study['verdict'].upper():>13}  {study['title']}")
    return 0
