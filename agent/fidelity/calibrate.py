"""`infralab fidelity calibrate CONFIG.toml --run RUN_DIR --out TABLE.csv`: a `real run` config's
step table scaled to the steps of a real run of it (docs/fidelity.md, "Calibrating a config on
its own run").

The fidelity study chooses the mirror's step times on calibration replays (`step_times`): on every
study so far the synthetic profile scaled per kind of step to the replays' totals predicted
held-apart replay steps best. This is that calibration for a plain config: the run in RUN_DIR
(`infralab real run CONFIG.toml`, a calibration run: not the run you evaluate) gives the host time
per step outside the forward and the batch building, and a factor per kind of step (steps that
carry prompt tokens, decode-only steps) and batch-size class (`step_times.batch_factors`: the
study's `scaled_by_batch`, which predicted the evaluated replays' steps better than the factors per
kind alone in 4 of 4 setting/shape pairs of the full study, docs/fidelity.md); the table at
`[cost] step_table` x those factors is written to TABLE.csv with its comment lines (provenance
included) and one line saying what scaled it. Both sets of factors' errors on the run's steps are
cross-validated (k folds by step index) and printed beside the profile's own.

Units: seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from infralab.agent.fidelity.sim_side import host_per_step_s, table_predictor
from infralab.agent.fidelity.step_times import (batch_factors, class_factor, kind_factors, named_class_factors,
                                                scaled_cv)
from infralab.calibration_table import CalibrationRow, read_table, render_table
from infralab.errors import InputError
from infralab.input_files import read_text
from infralab.real.config import load_real_config
from infralab.real.profile import PREPARE_KERNEL, STEP_KERNEL
from infralab.real.step_fit import FOLDS, observed, predict_steps, step_errors
from infralab.real.step_trace import StepRecord
from infralab.results import atomic_output_file, check_new_file


def scale_rows(rows: list[CalibrationRow], factor: Callable[[int, int], float], host_s: float) -> list[CalibrationRow]:
    """The step table's rows x `factor(q_tokens, seqs)` of each grid point, the host time inside the
    prepare rows: the file form of `step_times.scaled_profile`. Other rows are kept as they are."""
    out = []
    for row in rows:
        if row.kernel not in (STEP_KERNEL, PREPARE_KERNEL):
            out.append(row)
            continue
        shape = row.shape_dict
        f = factor(shape["q_tokens"], shape["seqs"])
        if row.kernel == STEP_KERNEL:
            out.append(dataclasses.replace(row, median_s=f * row.median_s, achieved_gbps=row.achieved_gbps / f,
                                           achieved_tflops=row.achieved_tflops / f,
                                           roofline_fraction=row.roofline_fraction / f))
        else:
            out.append(dataclasses.replace(row, median_s=f * (row.median_s + host_s)))
    return out


def read_run_steps(run_dir: Path) -> list[StepRecord]:
    """The observed steps of a `real run` folder's replay.json (InputError naming the file)."""
    path = run_dir / "replay.json"
    expected = "the folder of an `infralab real run` of this config (it holds replay.json)"
    try:
        doc = json.loads(read_text(path, "run", expected))
        steps = [StepRecord.from_dict(row) for row in doc["steps"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(str(path), f"is not a real run's replay ({exc})", expected) from None
    return observed(steps)


def calibrate(config: Path, run_dir: Path, out: Path) -> dict[str, Any]:
    """Write the scaled table to `out`; return what was measured (factors, host, errors)."""
    loaded = load_real_config(config)
    table = loaded.step_table
    if table is None:
        raise InputError(f"{loaded.source}: cost.step_table", "is not set",
                         "the step table this config's runs are simulated with (`infralab real profile`)")
    steps = read_run_steps(run_dir)
    if len(steps) < FOLDS:
        raise InputError(f"{run_dir / 'replay.json'}", f"holds {len(steps)} observed steps",
                         f"at least {FOLDS} (a longer calibration run)")
    dtype, device = loaded.cfg.real.dtype, loaded.cfg.real.device
    host = host_per_step_s(table, steps, dtype, device)
    predicted = np.array(predict_steps(table_predictor(table, dtype, device, host), steps))
    factors = kind_factors(predicted, steps)
    classes = batch_factors(predicted, steps)
    record = {"table": str(table), "run": str(run_dir), "steps": len(steps), "host_per_step_s": host,
              "factors": {"prefill": factors[0], "decode": factors[1]},
              "class_factors": named_class_factors(classes),
              "profile": step_errors(predicted, steps), "scaled_cross_validated": scaled_cv(predicted, steps),
              "scaled_by_batch_cross_validated": scaled_cv(predicted, steps, by_batch=True)}
    comments = [line.lstrip()[1:].removeprefix(" ") for line in read_text(table, "table", "a step table").splitlines()
                if line.lstrip().startswith("#")]
    note = (f"infralab step table: {table.name} x a factor per kind and batch-size class ("
            + ", ".join(f"{k} {v:.4f}" for k, v in record["class_factors"].items())
            + f"; kinds {factors[0]:.4f} / {factors[1]:.4f} where a class had no step), host {host * 1e3:.3f} ms/step "
            f"inside engine_prepare, from the {len(steps)} steps of {run_dir} (infralab fidelity calibrate)")
    rows = scale_rows(read_table(table), lambda q, s: class_factor(q > s, s, classes, factors), host)
    with atomic_output_file(out) as handle:
        handle.write(render_table(rows, [note, *comments]))
    return record


def run(args: argparse.Namespace) -> int:
    check_new_file(args.out, args.force)
    record = calibrate(Path(args.config), Path(args.run), Path(args.out))
    print(f"{record['steps']} steps of {args.run}: host {record['host_per_step_s'] * 1e3:.3f} ms/step; factors "
          f"per kind {record['factors']['prefill']:.4f} (steps with prompt tokens) / {record['factors']['decode']:.4f} "
          "(decode-only); per kind and batch-size class (written) "
          + ", ".join(f"{k} {v:.4f}" for k, v in record["class_factors"].items()))
    print("total by kind (prompt / decode-only) and the worst batch-size class, predicted / measured - 1: " + "; ".join(
        f"{name} {e['prefill_total']:+.1%} / {e['decode_total']:+.1%} (class {e['worst_class_total']:.1%})"
        for name, e in (("profile", record["profile"]), ("per kind, cross-validated", record["scaled_cross_validated"]),
                        ("per class, cross-validated", record["scaled_by_batch_cross_validated"]))))
    print(f"wrote {args.out}; simulate with [cost] step_table = \"{args.out}\"")
    return 0
