"""Why each step of a stack of config arms moved: `infralab explain`'s first-ranked cause of arm i
against arm i-1, both run at arm i-1's capacity rate (the same requests and arrival times: a
controlled comparison at the highest load both sustain; the first arm alone, at its own). What a
study of cumulative arms (experiments/glm_stack: the chat and long-context settings) reports per
step; the runs are written as run folders under the caller's folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infralab.agent.rate_grid import RateConfig, at_rate


def binding_constraint(rows: Sequence[dict[str, Any]], label: str, fails_at: float | None) -> str | None:
    """Why the lowest failing rate failed (the SLO that binds at capacity), from capacity probe rows."""
    if fails_at is None:
        return None
    return next((r["why"] for r in rows if r["config"] == label and r["rate_rps"] == fails_at and not r["meets"]), None)


def explained_metric(binding: str | None) -> str:
    """`infralab explain --metric` for the SLO that binds: ttft, tpot, else e2e."""
    if binding is not None and "TTFT" in binding:
        return "ttft"
    if binding is not None and "TPOT" in binding:
        return "tpot"
    return "e2e"


def step_causes(configs: Sequence[RateConfig], names: Sequence[str], rates: Sequence[float | None],
                bindings: Sequence[str | None], folder: Path, seed: int, base: Path, workers: int = 2,
                ) -> list[dict[str, Any] | None]:
    """Per arm, explain's first cause against the previous arm (None where a rate is missing);
    `rates[i]`: arm i's capacity (req/s), `bindings[i]`: the SLO that binds there. The runs are
    written under folder/runs/."""
    from infralab.agent.explain import explain
    from infralab.agent.run_dir import load_run
    from infralab.agent.sim_pool import SimJob, run_pool
    from infralab.agent.validators.sim import cluster_details_and_requests, write_run_folder
    from infralab.config_io import validate as check
    from infralab.sim.config import SimConfig, resolved_config_text
    from infralab.sim.run import with_seed

    wanted: list[tuple[str, int, float]] = []  # (run name, arm index, rate)
    for i in range(len(configs)):
        rate = rates[max(i - 1, 0)]
        if rate is None:
            continue
        if i == 0:
            wanted.append((f"{names[0]}-at-{names[0]}", 0, rate))
        else:
            wanted += [(f"{names[i - 1]}-at-{names[i - 1]}", i - 1, rate), (f"{names[i]}-at-{names[i - 1]}", i, rate)]
    wanted = list(dict.fromkeys(wanted))
    jobs, texts = [], []
    for _, index, rate in wanted:
        c = configs[index]
        data = at_rate(c, rate)
        jobs.append(SimJob(config=data, base_dir=str(c.base_dir), source=c.source, seed=seed))
        texts.append(resolved_config_text(with_seed(check(SimConfig, data, c.source), seed), c.base_dir))
    results = run_pool(jobs, workers=workers, inspect=cluster_details_and_requests)
    runs = {}
    for (name, _, _), result, text in zip(wanted, results, texts):
        runs[name] = folder / write_run_folder(folder, name, seed, result.summary, result.details["requests_csv"], base, text)
    causes: list[dict[str, Any] | None] = []
    for i in range(len(configs)):
        metric = explained_metric(bindings[max(i - 1, 0)])
        prev = names[max(i - 1, 0)]
        here = f"{names[i]}-at-{prev}"
        if here not in runs:
            causes.append(None)
            continue
        if i == 0:
            doc, against = explain(load_run(runs[here]), metric=metric), None
        else:
            doc = explain(load_run(runs[here]), load_run(runs[f"{prev}-at-{prev}"]), metric=metric)
            against = f"runs/{prev}-at-{prev}-seed{seed}"
        first = doc["causes"][0] if doc["causes"] else None
        causes.append(None if first is None else {
            "kind": first["kind"], "key": first["key"], "delta_s": first["delta_s"], "run_s": first["run_s"],
            "share_of_metric_delta": first["share_of_metric_delta"], "metric": doc["metric"]["description"],
            "metric_delta_s": doc["metric"]["delta"], "against": against, "run": f"runs/{here}-seed{seed}"})
    return causes
