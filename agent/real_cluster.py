"""The `real` rung of a `cluster` hypothesis: each arm's config replayed on the real engine
(`infralab.real`), repeated, measured with the same flat metrics as the simulator's rung.

An arm's config is the simulator's (the setup's config with the arm's knobs, `sim_pool.arm_config`)
plus the file's `[real]` table, read by the real side (`infralab.real.config`): the engine's
knobs under the mirror's names (`engine.scheduler = "hf_fifo"`, `max_batched_tokens`, ...). A
config the engine cannot run here (a model too large for this machine, a scheduler it does not
have, requests over its cache, no transformers) gives `cannot_confirm` = "cannot confirm here:
...", which the ladder reports as the rung's reason: never a crash.

Samples: one per seed x repetition (`hypothesis.seeds`, `repetitions`), each a fresh engine, warmed
up, replaying the arm's requests open loop. Real timings vary, so the measurement `varies` and the
acceptance criteria are judged with the noise rule (`infralab.agent.acceptance`): >= 2 repetitions.
With a work folder each replay leaves a full real run folder, DIR/real/runs/<arm>-seed<s>-rep<r>/.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from infralab.agent.hypothesis import Arm, Hypothesis
from infralab.agent.validators.base import Measurement, sample_keys
from infralab.config_io import load_toml
from infralab.errors import InputError

CANNOT = "cannot confirm here: "


def arm_real_doc(hyp: Hypothesis, setup: Any, arm: Arm) -> tuple[dict[str, Any], str, Path]:
    """The arm's config document as the real side reads it: the simulator's resolved arm config
    plus the setup file's `[real]` table (which the simulator does not read)."""
    from infralab.agent.sim_pool import arm_config

    cfg, base_dir = arm_config(hyp, setup, arm, where=lambda knob: f"{hyp.source}: {arm.name}.{knob}")
    source = str(hyp.resolve(setup.config))
    doc = dataclasses.asdict(cfg)
    real = load_toml(source).get("real")
    if real is not None:
        doc["real"] = real
    return doc, source, base_dir


def prepared_arm(hyp: Hypothesis, setup: Any, arm: Arm, seed: int) -> Any:
    """The arm's real run at `seed`, read and checked (`infralab.real.run.prepare_real_run`)."""
    from infralab.real.config import real_config_from_doc, with_seed
    from infralab.real.run import prepare_real_run

    doc, source, base_dir = arm_real_doc(hyp, setup, arm)
    return prepare_real_run(with_seed(real_config_from_doc(doc, source, base_dir), seed))


def cannot_confirm(hyp: Hypothesis, setup: Any) -> str | None:
    """Why the real engine cannot run this hypothesis's arms here ("cannot confirm here: ..."), or None."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return CANNOT + "transformers is not installed (the extra infralab[real])"
    for arm in hyp.arms:
        try:
            prepared_arm(hyp, setup, arm, hyp.seeds[0])
        except InputError as exc:
            return CANNOT + f"arm {arm.name}: {exc.where}: {exc.problem} (needs {exc.expected})"
    return None


def measure_real_cluster(hyp: Hypothesis, setup: Any, workdir: Path | None, name: str) -> Measurement:
    """Every arm x seed x repetition on the real engine, one after another (one engine at a time:
    runs that shared the machine would time each other)."""
    from infralab.agent.validators.sim import cluster_metrics
    from infralab.real.fingerprint import drift
    from infralab.real.run import real_run_summary, replay_on_engine, write_real_run_folder

    samples: dict[str, list[dict[str, Any]]] = {}
    rows, files, drifts = [], [], []
    for arm in hyp.arms:
        samples[arm.name] = []
        for seed, rep in sample_keys(hyp):
            prepared = prepared_arm(hyp, setup, arm, seed)
            result, engine = replay_on_engine(prepared)
            config_path = hyp.resolve(setup.config)
            if workdir is not None:
                folder = workdir / "runs" / f"{arm.name}-seed{seed}-rep{rep}"
                folder.mkdir(parents=True)
                summary = write_real_run_folder(folder, prepared, config_path, result, engine)
                files.append(str(folder.relative_to(workdir)))
            else:
                summary, _ = real_run_summary(prepared, config_path, result, engine)
            metrics = cluster_metrics(summary.flat_metrics(instances=1, accelerators=1), hyp.metrics)
            samples[arm.name].append(metrics)
            drifts.append(drift(result.before, result.after))
            contended = result.contention is not None and result.contention.flagged
            rows.append({"arm": arm.name, "change": arm.describe(), "seed": seed, "repetition": rep,
                         "contended": contended, **metrics})
    contended = [f"{r['arm']} seed {r['seed']} rep {r['repetition']}" for r in rows if r["contended"]]
    note = (f"real engine (transformers continuous batching), {len(rows)} replays one after another; "
            f"step-speed fingerprint drift per replay {min(drifts):+.1%} .. {max(drifts):+.1%}; "
            + (f"CONTENDED (other processes held the cores, real/contention.py): {', '.join(contended)}"
               if contended else "no replay contended"))
    return Measurement(name, samples, (), varies=True, extras={"table": rows}, files=tuple(files), notes=(note,))
