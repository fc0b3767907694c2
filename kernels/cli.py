"""Handlers of the `infralab kernels ...` commands (flags in the command table, infralab/cli.py).

Light on purpose: torch and triton are imported by the handlers, not here."""

from __future__ import annotations

import argparse
import json

from infralab.errors import InputError
from infralab.kernels.interpreter import use_interpreter_without_gpu


def parse_tp_degrees(text: str) -> tuple[int, ...]:
    """`"1,2,4"` -> (1, 2, 4); each a power of two from 1 to 8 (the check shapes divide by up to 8)."""
    try:
        degrees = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise InputError("--tp", f"is {text!r}", "comma-separated integers, e.g. 1,2,4,8") from None
    bad = [d for d in degrees if d not in (1, 2, 4, 8)]
    if bad:
        raise InputError("--tp", f"contains {bad}", "degrees among 1, 2, 4, 8")
    return degrees


def check(args: argparse.Namespace) -> int:
    """`infralab kernels check [--json] [--tp 1,2,4,8] [--kernels NAME,...]`."""
    degrees = parse_tp_degrees(args.tp)
    device = use_interpreter_without_gpu()
    from infralab.kernels.check import run_checks, suites

    known = list(suites())
    selected = known if args.kernels is None else [k.strip() for k in args.kernels.split(",")]
    unknown = [k for k in selected if k not in known]
    if unknown:
        raise InputError("--kernels", f"names {unknown}", f"names among {', '.join(known)}")
    report = run_checks(degrees, selected)
    if args.json:
        print(json.dumps({"device": device, "tp": list(degrees), **report.to_dict()}, indent=1, sort_keys=True))
    else:
        print(format_report(report, device, degrees))
    return 0 if report.passed else 1


def format_report(report, device: str, degrees: tuple[int, ...]) -> str:
    """Plain-text verdict table plus the partition summaries."""
    lines = [f"kernels check on {device}, TP degrees {','.join(map(str, degrees))}", ""]
    width = max([len(v.kernel) for v in report.verdicts] + [6])
    lines.append(f"{'kernel':<{width}}  verdict  checks  failed  finding")
    for v in report.verdicts:
        lines.append(f"{v.kernel:<{width}}  {'PASS' if v.passed else 'FAIL':<7}  {v.checks:>6}  {v.failures:>6}  {v.finding}")
    failures = [f for f in report.findings if not f.passed]
    if failures:
        lines += ["", f"failed comparisons ({len(failures)}):"] + [f"  {f.headline()}" for f in failures]
    lines += _partition_lines(report)
    lines += ["", f"overall: {'PASS' if report.passed else 'FAIL'}"]
    return "\n".join(lines)


def _partition_lines(report) -> list[str]:
    lines = ["", "partition checks (split vs unsplit):",
             f"  {'kernel':<24} {'variant':<8} {'role':<24} {'split':<22} {'bitwise':<7} {'max ulp':>8} "
             f"{'rel_fro vs f64 split/unsplit':>30}"]
    for f in report.findings:
        if f.check != "partition" or f.split == "none":
            continue
        m = f.metrics
        name = f.kernel + (f".{f.output}" if f.output not in ("", "C") else "")
        lines.append(f"  {name:<24} {f.variant:<8} {f.role:<24} {f.split:<22} "
                     f"{str(m['vs_unsplit']['bitwise_equal']):<7} {m['vs_unsplit']['max_ulp']:>8} "
                     f"{m['vs_float64']['rel_fro']:>14.3g} / {m['unsplit_vs_float64']['rel_fro']:<13.3g}")
    drift = report.summaries.get("matmul_k_split_drift", [])
    if drift:
        lines += ["", "matmul K-split drift, TF32 vs 3xTF32 (row-parallel roles):",
                  f"  {'role':<15} {'split':<22} {'precision':<9} {'max abs vs unsplit':>18} "
                  f"{'rel_fro vs unsplit':>18} {'vs unsplit fp32':>15} {'vs f64':>9}"]
        for row in drift:
            lines.append(f"  {row['role']:<15} {row['split']:<22} {row['precision']:<9} "
                         f"{row['max_abs_vs_unsplit']:>18.3g} {row['rel_fro_vs_unsplit']:>18.3g} "
                         f"{row['rel_fro_vs_fp32_unsplit']:>15.3g} {row['rel_fro_vs_float64_split']:>9.3g}")
    return lines


def bench(args: argparse.Namespace) -> int:
    """`infralab kernels bench [--out FILE.csv] [--grid small|full] [--kernels ...] [--no-progress] [--force]`."""
    from infralab.kernels.bench import bench_command

    return bench_command(args.kernels, args.grid, args.out, progress=not args.no_progress, force=args.force)
