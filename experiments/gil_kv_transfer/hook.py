"""The GIL study's hook: how the host model measures a `host-concurrency` hypothesis (the sweep of
`case.py` for the `sim` rung, the real-threads probe beside the simulator of `probe.py` for the
`real` rung), and the study's report (the simulated degradation table and figure, the probe vs
simulator table and figure).

The hypothesis file names this file as `setup.hook`; `infralab.agent.validators.host` calls:
    scenario_names(experiment) -> list[str]
    measure_sim(hyp, setup, workdir) -> Measurement
    measure_real(hyp, setup, workdir) -> Measurement
and `infralab reproduce` calls `report(results, out)`.

Metrics (declared by the host validators): degradation (mapping scenario, or probe schedule, ->
1 - prefill throughput with KV transfer / without), max_degradation, mean_degradation,
kv_python_over_comm (mapping: fraction of dispatch/combine intervals covered by the transfer
thread's Python), min_kv_python_over_comm, main_gil_wait_s (mapping; simulator only). The
simulator is deterministic; the probe's numbers vary (one sample per probe repeat).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import Arm, Hypothesis
from infralab.agent.report import pyplot, save_figure
from infralab.agent.studies import load_hook
from infralab.agent.validators.base import Measurement, sample_keys
from infralab.agent.validators.ladder import TestResult

case = load_hook(Path(__file__).with_name("case.py"))
KNOB = "dispatch_combine_gil"


def scenario_names(experiment: Path) -> list[str]:
    return [s.name for s in case.load_experiment(experiment).scenario]


def host_experiment(hyp: Hypothesis, setup: Any):
    """The experiment of the setup, cut to the setup's scenarios and probe overrides."""
    exp = case.load_experiment(hyp.resolve(setup.experiment))
    if setup.scenarios:
        exp = dataclasses.replace(exp, scenario=tuple(s for s in exp.scenario if s.name in setup.scenarios))
    probe = exp.probe
    if setup.probe_repeats is not None:
        probe = dataclasses.replace(probe, repeats=setup.probe_repeats)
    if setup.probe_granularities:
        probe = dataclasses.replace(probe, granularities=setup.probe_granularities)
    return dataclasses.replace(exp, probe=probe)


# ---- the sim rung ----------------------------------------------------------------------------


def host_metrics(rows: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    degradation = {r["scenario"]["name"]: r["modes"][mode]["degradation"] for r in rows}
    overlap = {r["scenario"]["name"]: r["modes"][mode]["attribution"]["overlaps"]["kv_python_over_comm"] for r in rows}
    return {
        "degradation": degradation,
        "max_degradation": max(degradation.values()),
        "mean_degradation": sum(degradation.values()) / len(degradation),
        "kv_python_over_comm": overlap,
        "min_kv_python_over_comm": min(overlap.values()),
        "main_gil_wait_s": {r["scenario"]["name"]: r["modes"][mode]["attribution"]["main_gil_wait_s"] for r in rows},
    }


def measure_sim(hyp: Hypothesis, setup: Any, workdir: Path | None, validator: str = "sim") -> Measurement:
    exp = host_experiment(hyp, setup)
    timeline_dir = None
    if workdir is not None:
        timeline_dir = workdir / "timelines"
        timeline_dir.mkdir(parents=True, exist_ok=True)
    rows = case.sweep(exp, timeline_dir)
    files: list[str] = []
    table = case.sweep_table(rows, exp.experiment.acceptance)
    if workdir is not None:
        (workdir / "sim_table.md").write_text(table)
        case.degradation_figure(rows, case.limit_of(exp.experiment.acceptance), workdir / "figures" / "degradation.png")
        files += ["sim_table.md", "figures/degradation.png"]
        files += sorted(str(p.relative_to(workdir)) for p in timeline_dir.glob("*.json"))
    samples, findings = {}, []
    for arm in hyp.arms:
        mode = str(arm.config[KNOB])
        metrics = host_metrics(rows, mode)
        samples[arm.name] = [dict(metrics) for _ in sample_keys(hyp)]
        for row in rows:
            findings.append(_sim_finding(validator, arm, mode, row, files))
    return Measurement(validator, samples, tuple(findings), varies=False,
                       extras={"rows": rows, "table_md": table, "acceptance": exp.experiment.acceptance},
                       files=tuple(files), notes=(f"fine-grained host model, {len(rows)} scenarios",))


def _sim_finding(validator: str, arm: Arm, mode: str, row: dict[str, Any], files: list[str]) -> Finding:
    name = row["scenario"]["name"]
    result = row["modes"][mode]
    blame = result["attribution"]
    ov = blame["overlaps"]
    waits = ", ".join(f"{track} {seconds * 1e3:.2f} ms" for track, seconds in sorted(blame["gil_wait_s"].items()))
    what = (f"dispatch/combine {mode} the GIL: prefill throughput {-result['degradation']:+.1%} with KV transfer; "
            f"the transfer thread's Python overlaps {ov['kv_python_over_comm']:.0%} of dispatch/combine; "
            f"extra prefill time {blame['extra_s'] * 1e3:.2f} ms, main-thread GIL wait "
            f"{blame['main_gil_wait_s'] * 1e3:.2f} ms (GIL waits: {waits or 'none'})")
    timeline = [f for f in files if f.startswith(f"timelines/{name}-{mode}")]
    return Finding(
        validator=validator, arm=arm.name,
        where=Where.of("thread", thread="thread/kv-transfer", intervals="dispatch/combine on thread/main",
                       scenario=name),
        what=what,
        evidence=Evidence(
            numbers={"degradation": result["degradation"], "throughput_without_tok_s": result["throughput_without_tok_s"],
                     "throughput_with_tok_s": result["throughput_with_tok_s"], **ov,
                     "main_gil_wait_s": blame["main_gil_wait_s"], "extra_s": blame["extra_s"],
                     "kv_slot_wait_s": blame["kv_slot_wait_s"], "link_critical_s": blame["link_critical_s"]},
            reference="the same scenario and GIL mode without the KV-transfer thread (identical prefill work)",
            files=tuple(timeline),
        ),
    )


# ---- the real rung: the probe beside the simulator -------------------------------------------


def measure_real(hyp: Hypothesis, setup: Any, workdir: Path | None, validator: str = "real") -> Measurement:
    from infralab.results import dump_json

    probe = load_hook(Path(__file__).with_name("probe.py"))
    exp = host_experiment(hyp, setup)
    timeline_dir = None if workdir is None else workdir / "timelines"
    if timeline_dir is not None:
        timeline_dir.mkdir(parents=True, exist_ok=True)
    result = probe.probe_vs_sim(exp.probe, timeline_dir)
    table = probe.probe_table(result)
    files: tuple[str, ...] = ()
    if workdir is not None:
        dump_json(result, workdir / "probe.json")
        (workdir / "probe_table.md").write_text(table)
        files = ("probe.json", "probe_table.md", *sorted(f"timelines/{p.name}" for p in timeline_dir.glob("*.json")))
    samples: dict[str, list[dict[str, Any]]] = {}
    findings = []
    for arm in hyp.arms:
        mode = str(arm.config[KNOB])
        variants = [v for v in result["variants"] if v["mode"] == mode]
        samples[arm.name] = probe_samples(variants)
        findings += [_real_finding(validator, arm.name, v, tuple(f for f in files if not f.startswith("timelines/")
                                                                 or f"-{v['granularity']}-{mode}" in f))
                     for v in variants]
    return Measurement(validator, samples, tuple(findings), varies=True,
                       extras={"probe": result, "table_md": table}, files=files,
                       notes=(f"real threads on this machine, {exp.probe.repeats} repeats per schedule",))


def probe_samples(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One metrics mapping per probe repeat (repeats are paired across granularities by index)."""
    repeats = min(len(v["probe_runs_s"]["with"]) for v in variants)
    out = []
    for i in range(repeats):
        degradation = {}
        for v in variants:
            without, with_ = v["probe_runs_s"]["without"][i], v["probe_runs_s"]["with"][i]
            degradation[v["granularity"]] = 1.0 - without / with_
        overlap = {v["granularity"]: v["probe"]["kv_python_over_comm"] for v in variants}
        out.append({
            "degradation": degradation,
            "max_degradation": max(degradation.values()),
            "mean_degradation": sum(degradation.values()) / len(degradation),
            "kv_python_over_comm": overlap,
            "min_kv_python_over_comm": min(overlap.values()),
        })
    return out


def _real_finding(validator: str, arm: str, v: dict[str, Any], files: tuple[str, ...]) -> Finding:
    p, s = v["probe"], v["sim"]
    rel = v["rel_err"]["degradation"]
    return Finding(
        validator=validator, arm=arm,
        where=Where.of("thread", thread="thread/kv-transfer", intervals="dispatch/combine on thread/main",
                       schedule=v["granularity"], machine="this host (real threads)"),
        what=(f"probe: prefill {-p['degradation']:+.1%} with KV transfer, its Python overlapping "
              f"{p['kv_python_over_comm']:.0%} of dispatch/combine; simulator on the same schedule: "
              f"{-s['degradation']:+.1%}, overlap {s['kv_python_over_comm']:.0%}"
              + ("" if rel is None else f" (relative error {rel:+.0%})")),
        evidence=Evidence(
            numbers={"probe_degradation": p["degradation"], "sim_degradation": s["degradation"],
                     "probe_kv_python_over_comm": p["kv_python_over_comm"],
                     "sim_kv_python_over_comm": s["kv_python_over_comm"],
                     "probe_prefill_without_s": p["prefill_without_s"], "probe_prefill_with_s": p["prefill_with_s"],
                     "runs_without_s": tuple(v["probe_runs_s"]["without"]),
                     "runs_with_s": tuple(v["probe_runs_s"]["with"])},
            reference="the same schedule without the transfer thread (runs alternate), and the simulator on it",
            files=files,
        ),
    )


# ---- the study's report ----------------------------------------------------------------------


def report(results: list[TestResult], out: Path) -> tuple[list[str], str]:
    result = results[0]
    figures, text = [], []
    sim = result.rung("sim")
    if sim is not None and sim.measurement is not None:
        src = out / "studies" / result.hypothesis.name / "sim" / "figures" / "degradation.png"
        if src.exists():
            shutil.copyfile(src, out / "figures" / "gil_degradation.png")
            figures.append("figures/gil_degradation.png")
        text += ["Simulated degradation table (fine-grained host model; per scenario, dispatch/combine "
                 "holding vs releasing the GIL; overlap = share of dispatch/combine covered by the "
                 "transfer thread's Python):", "", sim.measurement.extras.get("table_md", "")]
    real = result.rung("real")
    if real is not None and real.measurement is not None:
        text += ["Confirmation on this machine (real threads; probe vs the simulator on the same schedule):", "",
                 real.measurement.extras.get("table_md", "")]
        _probe_figure(real.measurement.extras["probe"]["variants"], out / "figures" / "gil_probe_vs_sim.png")
        figures.append("figures/gil_probe_vs_sim.png")
    elif result.rung("sim") is not None:
        text.append("The real-threads probe did not run (see the ladder above).")
    return figures, "\n".join(text) + "\n"


def _probe_figure(variants: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    labels = [f"{v['granularity']}\n{v['mode']}" for v in variants]
    x = range(len(variants))
    ax.bar([i - 0.2 for i in x], [100 * v["probe"]["degradation"] for v in variants], width=0.4,
           label="probe (real threads)", color="#c0504d")
    ax.bar([i + 0.2 for i in x], [100 * v["sim"]["degradation"] for v in variants], width=0.4,
           label="simulator, same schedule", color="#4f81bd")
    ax.axhline(5, color="black", linestyle="--", linewidth=1, label="acceptance 5 %")
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel("prefill lost to KV transfer (%)")
    ax.set_title("KV transfer vs prefill on this machine")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def run_experiment(path: str | Path, out: str | Path, with_probe: bool = False) -> dict[str, Any]:
    """`infralab gil run`: the sweep of an experiment file (and the probe), see case.py."""
    return case.run_experiment(path, out, with_probe=with_probe)
