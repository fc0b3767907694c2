"""Report of the partitioning study: every kernel-check row per hypothesis, and for the matmul
hypothesis the error of each arm against float64, coloured by precision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infralab.agent.report import md_table, pyplot, save_figure
from infralab.agent.validators.ladder import TestResult


def report(results: list[TestResult], out: Path) -> tuple[list[str], str]:
    figures, text = [], []
    for result in results:
        rung = result.rung("kernel-check")
        measured = rung.measurement.extras.get("table", []) if rung and rung.measurement else []
        if not measured:
            text.append(f"{result.hypothesis.name}: no kernel-check measurements.\n")
            continue
        rows = [[r["arm"], r["kernel"], r["variant"], r["shape"], r["split"], r["rel_err"], r["rel_err_vs_unsplit"],
                 int(r["max_ulp"]), bool(r["bitwise_equal"])] for r in measured]
        text += [f"`{result.hypothesis.name}` ({result.verdict}):", "",
                 md_table(["arm", "kernel", "variant", "shape", "split", "rel. err vs float64", "rel. err vs unsplit",
                           "max ULP vs unsplit", "bitwise = unsplit"], rows)]
        if all(r["kernel"] == "matmul" for r in measured):
            name = f"figures/{result.hypothesis.name}_rel_err.png"
            _matmul_figure(measured, out / name)
            figures.append(name)
    return figures, "\n".join(text) + "\n"


def _matmul_figure(measured: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    colors = {"fp32": "#4f81bd", "tf32": "#c0504d", "3xtf32": "#9bbb59"}
    ax.bar([r["arm"] for r in measured], [r["rel_err"] for r in measured],
           color=[colors.get(r["variant"], "grey") for r in measured])
    ax.set_yscale("log")
    ax.set_ylabel("relative Frobenius error vs float64")
    ax.set_title("Matmul precision under tensor-parallel splits (green 3xTF32, red TF32, blue FP32)")
    ax.tick_params(axis="x", rotation=30)
    save_figure(fig, path)
