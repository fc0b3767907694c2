"""The GIL study's hook: what its hypotheses may say (knobs, metrics, setup), how they are measured
(the sweep of `case.py` for the `sim` rung, the real-threads probe beside the simulator of
`probe.py` for the `real` rung), and the study's report (the simulated degradation table and
figure, the probe vs simulator table and figure, which rung decided and why).

The hypothesis files (kind "hook") name this file as `setup.hook`; the generic validator
(infralab.agent.validators.hook) reads SETUP, KNOBS, REQUIRED, METRICS, MAPPINGS and calls
`check`, `measure_sim`, `measure_real`, `unavailable_real`; `infralab reproduce` calls
`report(results, out)`.

Knobs: dispatch_combine_gil (held | released, required): whether the expert-parallel
dispatch/combine native calls hold the GIL; kv_descriptors (python | native, default: the
experiment's host profile): whether the transfer thread builds its per-page descriptors in its
Python loop (holding the GIL) or inside one native call that releases it.
Metrics: degradation (mapping scenario, or probe schedule "<cores>c-<granularity>", -> 1 - prefill
throughput with KV transfer / without), max_degradation and mean_degradation (over the scenarios;
on the probe over the schedules that replicate the scenario's thread structure: a core per thread,
see REPLICATES), kv_python_over_comm (mapping: fraction of dispatch/combine intervals covered by
the transfer thread's Python), min_kv_python_over_comm, main_gil_wait_s (mapping; simulator only).
The simulator is deterministic; the probe's numbers vary (one sample per probe repeat).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic.dataclasses import dataclass

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import Arm, Hypothesis
from infralab.agent.report import pyplot, save_figure
from infralab.agent.studies import load_hook
from infralab.agent.validators.base import KnobSpec, Measurement, sample_keys
from infralab.agent.validators.ladder import TestResult
from infralab.config_io import STRICT
from infralab.errors import InputError
from infralab.field_types import Int

case = load_hook(Path(__file__).with_name("case.py"))
_why = load_hook(Path(__file__).with_name("why.py"))
explain_worst, explanation_text, sensitivity = _why.explain_worst, _why.explanation_text, _why.sensitivity
KNOB, DESCRIPTORS = "dispatch_combine_gil", "kv_descriptors"
_probe = load_hook(Path(__file__).with_name("probe.py"))
TARGET_REL_ERR = _probe.TARGET_REL_ERR
MODES = case.MODES


THREADS = 2  # the scenario's threads: prefill (main) and KV transfer


# ---- what a hypothesis of this study may say (read by infralab.agent.validators.hook) ----------


@dataclass(frozen=True, config=STRICT)
class Setup:
    hook: str  # this file, relative to the hypothesis file
    experiment: str  # the host experiment file (scenarios, probe schedule), relative to the hypothesis file
    scenarios: tuple[str, ...] = ()  # subset of its scenarios (empty: all)
    probe_repeats: Int(gt=0, le=1000) | None = None  # override the experiment's [probe] repeats
    probe_granularities: tuple[Literal["per_layer", "after_prefill"], ...] = ()


SETUP = Setup
KNOBS = {KNOB: KnobSpec(str, ("held", "released")), DESCRIPTORS: KnobSpec(str, ("python", "native"))}
REQUIRED = (KNOB,)
_REAL = ("degradation", "max_degradation", "mean_degradation", "kv_python_over_comm", "min_kv_python_over_comm")
METRICS = {"sim": (*_REAL, "main_gil_wait_s"), "real": _REAL}
MAPPINGS = ("degradation", "kv_python_over_comm", "main_gil_wait_s")


def scenario_names(experiment: Path) -> list[str]:
    return [s.name for s in case.load_experiment(experiment).scenario]


def check(hyp: Hypothesis, setup: Setup, where: Any) -> None:
    """The experiment file is valid and names the setup's scenarios."""
    try:
        names = scenario_names(hyp.resolve(setup.experiment))
    except InputError as exc:
        raise where.error("setup.experiment", f"{exc.where}: {exc.problem}", exc.expected) from None
    for name in setup.scenarios:
        if name not in names:
            raise where.error("setup.scenarios", f"unknown scenario {name!r}", f"one of {', '.join(names)}",
                              needle=name)


def unavailable_real(hyp: Hypothesis, setup: Setup) -> str | None:
    """The probe needs a C compiler for its native calls."""
    from infralab.kernels.host_probe.build import NativeBuildError, compiler

    try:
        compiler()
    except NativeBuildError as exc:
        return str(exc)
    return None


def replicates(v: dict[str, Any]) -> bool:
    """Whether a probe variant replicates the scenario's thread structure: the published servers
    give the prefill and the transfer thread a core each. Only a core pinned per thread does that
    here: with the cores shared, Linux mostly starts the transfer thread on the main thread's CPU
    and keeps them stacked there (docs/gil.md), so 2 shared cores behave as one."""
    return bool(v.get("own_cores")) and v["cores"] >= THREADS


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
    # The probe runs the arms the hypothesis has: its GIL modes and where descriptors are built.
    probe = dataclasses.replace(
        probe,
        modes=tuple(dict.fromkeys(str(arm.config[KNOB]) for arm in hyp.arms)),
        kv_descriptors=tuple(dict.fromkeys(str(arm.config.get(DESCRIPTORS, exp.host.kv_descriptors))
                                           for arm in hyp.arms)),
    )
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


def _descriptor_modes(hyp: Hypothesis, exp) -> list[str]:
    """The kv_descriptors values the arms use, in arm order (default: the experiment's host profile)."""
    return list(dict.fromkeys(str(arm.config.get(DESCRIPTORS, exp.host.kv_descriptors)) for arm in hyp.arms))


def _with_descriptors(exp, value: str):
    return dataclasses.replace(exp, host=dataclasses.replace(exp.host, kv_descriptors=value))


def measure_sim(hyp: Hypothesis, setup: Any, workdir: Path | None, validator: str = "sim") -> Measurement:
    exp = host_experiment(hyp, setup)
    modes = _descriptor_modes(hyp, exp)
    timeline_dir = None
    if workdir is not None:
        timeline_dir = workdir / "timelines"
        timeline_dir.mkdir(parents=True, exist_ok=True)
    # One sweep per kv_descriptors value; the experiment's named timelines come from the first.
    rows_by = {d: case.sweep(_with_descriptors(exp, d), timeline_dir if i == 0 else None) for i, d in enumerate(modes)}
    rows = rows_by[modes[0]]
    limit = case.limit_of(exp.experiment.acceptance)
    if len(modes) == 1:
        table = case.sweep_table(rows, exp.experiment.acceptance)
    else:
        table = "\n".join(f"kv_descriptors = {d} (per-page descriptors built in "
                          f"{'the Python loop' if d == 'python' else 'one GIL-releasing native call'}):\n\n"
                          + case.sweep_table(rows_by[d], exp.experiment.acceptance) for d in modes)
    files: list[str] = []
    if workdir is not None:
        (workdir / "sim_table.md").write_text(table)
        case.degradation_figure(rows, limit, workdir / "figures" / "degradation.png")
        files += ["sim_table.md", "figures/degradation.png"]
        files += sorted(str(p.relative_to(workdir)) for p in timeline_dir.glob("*.json"))
    samples, findings, whys = {}, [], []
    for arm in hyp.arms:
        mode = str(arm.config[KNOB])
        descriptors = str(arm.config.get(DESCRIPTORS, exp.host.kv_descriptors))
        metrics = host_metrics(rows_by[descriptors], mode)
        samples[arm.name] = [dict(metrics) for _ in sample_keys(hyp)]
        why = None
        if metrics["max_degradation"] > limit:  # name why, in explain's words, for the worst scenario
            worst = max(metrics["degradation"], key=metrics["degradation"].get)
            scenario = next(s for s in exp.scenario if s.name == worst)
            why = explain_worst(_with_descriptors(exp, descriptors), scenario, MODES[mode],
                                f"{mode}-{descriptors}", timeline_dir)
            whys.append({"arm": arm.name, "mode": mode, "kv_descriptors": descriptors, **why})
            files += [f"timelines/{name}" for name in why["timelines"]]
        for row in rows_by[descriptors]:
            own_why = why if why is not None and why["scenario"] == row["scenario"]["name"] else None
            findings.append(_sim_finding(validator, arm, mode, row, files, own_why))
    sens = _sensitivity(exp) if exp.experiment.sensitivity_field else None
    return Measurement(validator, samples, tuple(findings), varies=False,
                       extras={"rows": rows, "table_md": table, "acceptance": exp.experiment.acceptance,
                               "why": whys, "sensitivity": sens, "experiment": exp.experiment.name},
                       files=tuple(files), notes=(f"fine-grained host model, {len(rows)} scenarios",))


def _sensitivity(exp) -> dict[str, Any]:
    info = exp.experiment
    return {"field": info.sensitivity_field, "cited": getattr(exp.host, info.sensitivity_field),
            "scenario": exp.scenario[0].name,
            "rows": sensitivity(exp, exp.scenario[0], info.sensitivity_field, info.sensitivity_values)}


def _sim_finding(validator: str, arm: Arm, mode: str, row: dict[str, Any], files: list[str],
                 why: dict[str, Any] | None = None) -> Finding:
    """One scenario's finding for one arm; `why`: explain's cause, when this is the arm's worst."""
    name = row["scenario"]["name"]
    result = row["modes"][mode]
    blame = result["attribution"]
    ov = blame["overlaps"]
    waits = ", ".join(f"{track} {seconds * 1e3:.2f} ms" for track, seconds in sorted(blame["gil_wait_s"].items()))
    what = (f"dispatch/combine {mode} the GIL: prefill throughput {-result['degradation']:+.1%} with KV transfer; "
            f"the transfer thread's Python overlaps {ov['kv_python_over_comm']:.0%} of dispatch/combine; "
            f"extra prefill time {blame['extra_s'] * 1e3:.2f} ms, main-thread GIL wait "
            f"{blame['main_gil_wait_s'] * 1e3:.2f} ms (GIL waits: {waits or 'none'})")
    descriptors = arm.config.get(DESCRIPTORS)
    if descriptors is not None:
        what = what.replace("the GIL:", f"the GIL, per-page descriptors in {descriptors} code:", 1)
    own = (f"timelines/{name}-{mode}.json", f"timelines/{name}-{mode}-no-transfer.json")
    timeline = [f for f in files if f in own]
    if why is not None:
        what += f"; why: {explanation_text(why)}"
        timeline += [f"timelines/{t}" for t in why["timelines"]]
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

    probe = _probe
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
        descriptors = str(arm.config.get(DESCRIPTORS, exp.host.kv_descriptors))
        variants = [v for v in result["variants"] if v["mode"] == mode and v["kv_descriptors"] == descriptors]
        samples[arm.name] = probe_samples(variants)
        findings += [_real_finding(validator, arm.name, v, tuple(
            f for f in files if f in ("probe.json", "probe_table.md")
            or f in (f"timelines/probe-{v['name']}.json", f"timelines/probe-sim-{v['name']}.json")))
            for v in variants]
    return Measurement(validator, samples, tuple(findings), varies=True,
                       extras={"probe": result, "table_md": table}, files=files,
                       notes=(f"real threads on this machine, {exp.probe.repeats} repeats per schedule",))


def schedule_key(v: dict[str, Any]) -> str:
    """A probe variant's schedule, as the key of the degradation mapping: "<cores>c[-own]-<granularity>"."""
    return f"{v['cores']}c{'-own' if v.get('own_cores') else ''}-{v['granularity']}"


def probe_samples(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One metrics mapping per probe repeat (repeats are paired across schedules by index). The
    mapping `degradation` has every schedule; max_ and mean_degradation (what the claim is judged
    on) only the schedules that replicate the scenario's thread structure (`replicates`: a core
    per thread), or all when none does."""
    repeats = min(len(v["probe_runs_s"]["with"]) for v in variants)
    judged = {schedule_key(v) for v in variants if replicates(v)} or {schedule_key(v) for v in variants}
    out = []
    for i in range(repeats):
        degradation = {}
        for v in variants:
            without, with_ = v["probe_runs_s"]["without"][i], v["probe_runs_s"]["with"][i]
            degradation[schedule_key(v)] = 1.0 - without / with_
        overlap = {schedule_key(v): v["probe"]["kv_python_over_comm"] for v in variants}
        claim = [d for k, d in degradation.items() if k in judged]
        out.append({
            "degradation": degradation,
            "max_degradation": max(claim),
            "mean_degradation": sum(claim) / len(claim),
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
                       schedule=v["granularity"], cores=v["cores"], machine="this host (real threads)"),
        what=(f"probe ({_layout_words(v['cores'], v.get('own_cores', False))}, {_probe.arm_text(v)}): prefill "
              f"{-p['degradation']:+.1%} with KV transfer, its Python overlapping "
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
    """The study's story (cause, fix, where the fix stops being enough), then per hypothesis its
    simulated table, explanations and sensitivity, and the probe-vs-simulator table and figure."""
    figures: list[str] = []
    text = [story(results), ""]
    for i, result in enumerate(results):
        name = result.hypothesis.name
        text += [f"### Hypothesis `{name}`", "", f"Claim: {result.hypothesis.claim} → **{result.verdict}**", ""]
        sim = result.rung("sim")
        if sim is not None and sim.measurement is not None:
            extras = sim.measurement.extras
            src = out / "studies" / name / "sim" / "figures" / "degradation.png"
            target = "figures/gil_degradation.png" if i == 0 else f"figures/{name}_degradation.png"
            if src.exists():
                shutil.copyfile(src, out / target)
                figures.append(target)
            text += [f"Simulated degradation ({extras['experiment']}; per scenario, dispatch/combine holding vs "
                     "releasing the GIL; overlap = share of dispatch/combine covered by the transfer thread's Python):",
                     "", extras.get("table_md", "")]
            text += [f"- Why ({w['arm']}): {explanation_text(w)}." for w in extras.get("why", [])]
            if extras.get("sensitivity"):
                text += ["", sensitivity_table(extras["sensitivity"])]
        real = result.rung("real")
        if real is not None and real.measurement is not None:
            text += ["", "Confirmation on this machine: the real-threads probe at 1 and 2 shared cores (and 2 cores "
                     "pinned one per thread, the published layout, where the experiment asks) beside the simulator "
                     "on the same schedule and cores:", "", real.measurement.extras.get("table_md", "")]
            probe_figure(real.measurement.extras["probe"]["variants"], out / "figures" / "gil_probe_vs_sim.png")
            figures.append("figures/gil_probe_vs_sim.png")
        elif "real" in result.hypothesis.validators:
            text.append("The real-threads probe did not run (see the ladder above).")
        text.append("")
    return figures, "\n".join(text) + "\n"


def _max_of(result: TestResult, arm: str) -> tuple[float, str] | None:
    sim = result.rung("sim")
    if sim is None or sim.measurement is None or arm not in sim.measurement.samples:
        return None
    degradation = sim.measurement.samples[arm][0]["degradation"]
    worst = max(degradation, key=degradation.get)
    return degradation[worst], worst


def story(results: list[TestResult]) -> str:
    """The seed's story as the results tell it: per hypothesis, each arm's worst degradation and the
    explanation of the arms above the acceptance limit, then the probe's agreement."""
    lines = ["**The story, as the model and the probe tell it.**", ""]
    for result in results:
        hyp = result.hypothesis
        arms = []
        for arm in hyp.arms:
            found = _max_of(result, arm.name)
            if found is not None:
                arms.append(f"{arm.name} ({arm.describe()}): worst {found[0]:.1%} ({found[1]})")
        lines.append(f"- `{hyp.name}` **{result.verdict}**: " + "; ".join(arms) + ".")
        sim = result.rung("sim")
        for w in (sim.measurement.extras.get("why", []) if sim is not None and sim.measurement is not None else []):
            lines.append(f"  - cause ({w['arm']}): {explanation_text(w)}.")
            if len(w["timelines"]) == 2:
                run, base = (f"studies/{hyp.name}/sim/timelines/{t}" for t in w["timelines"])
                lines.append(f"    (reproduce: `infralab explain {run} --against {base}`, in this folder)")
        sens = sim.measurement.extras.get("sensitivity") if sim is not None and sim.measurement is not None else None
        if sens:
            lines.append(f"  - how far: {sensitivity_sentence(sens)}")
        lines.append(f"  - {rung_sentence(result)}")
        real = result.rung("real")
        if real is not None and real.measurement is not None:
            lines.append(f"  - probe vs simulator: {probe_agreement(real.measurement.extras['probe'])}")
    return "\n".join(lines)


def _arm_medians(rung, metric: str = "max_degradation") -> dict[str, float]:
    import statistics

    m = rung.measurement
    return {arm: statistics.median(sample[metric] for sample in samples) for arm, samples in m.samples.items() if samples}


def rung_sentence(result: TestResult) -> str:
    """Which rung decided the hypothesis and why; the simulator's numbers at the published scale
    are a labelled prediction when the probe decided."""
    sim, real = result.rung("sim"), result.rung("real")
    predicted = ""
    if sim is not None and sim.measurement is not None:
        numbers = ", ".join(f"{arm} {value:.1%}" for arm, value in _arm_medians(sim).items())
        predicted = (f"the simulator's worst degradation at the scenario's scale ({sim.measurement.extras.get('experiment')}: "
                     f"{numbers}) is a prediction for that system, not a measurement")
    if result.decided_by == "real" and real is not None and real.measurement is not None:
        cores = sorted({v["cores"] for v in real.measurement.extras["probe"]["variants"] if replicates(v)})
        numbers = ", ".join(f"{arm} {value:.1%}" for arm, value in _arm_medians(real).items())
        where = (f"{'/'.join(map(str, cores))} cores pinned one per thread" if cores
                 else "every layout (none pins a core per thread)")
        return (f"decided by the real rung (**{real.verdict}**): the probe runs the scenario's thread structure "
                f"(prefill and transfer threads, dispatch/combine holding or releasing the GIL) on real threads, "
                f"judged where it replicates it ({where}: a core per thread); median over repeats of the worst "
                f"schedule: {numbers}. The published numbers are tested on this rung; {predicted or 'no simulation ran'}.")
    if result.decided_by == "sim":
        why = ("the probe did not run here: " + real.reason) if real is not None and real.status != "ran" else (
            f"the probe did not decide ({real.verdict}: {real.reason})" if real is not None else
            "no real rung is named")
        return (f"decided by the simulator (**{sim.verdict if sim else result.verdict}**), because {why}; "
                "its numbers are the model's for the scenario's scale.")
    return "no rung decided: " + "; ".join(f"{r.validator} {r.verdict or r.status} ({r.reason})" for r in result.rungs) + "."


def sensitivity_table(sens: dict[str, Any]) -> str:
    field = sens["field"]
    head = (f"How far the cited numbers are from the published result ({sens['scenario']}; {field} varied around "
            f"the cited {sens['cited'] * 1e6:.2f} µs; a sensitivity, not a fit):\n\n"
            f"| {field} (µs) | held | released |\n|---|---|---|\n")
    rows = [f"| {r[field] * 1e6:.2f}{' (cited)' if r[field] == sens['cited'] else ''} "
            f"| {r['held']:.1%} | {r['released']:.1%} |" for r in sens["rows"]]
    return head + "\n".join(rows) + "\n"


def sensitivity_sentence(sens: dict[str, Any]) -> str:
    field, rows = sens["field"], sens["rows"]
    cited = next((r for r in rows if r[field] == sens["cited"]), None)
    text = ""
    if cited is not None:
        text = (f"with the cited {field} = {sens['cited'] * 1e6:.2f} µs, holding the GIL costs {cited['held']:.1%} "
                f"(the published > 20 % is {0.20 / cited['held']:.1f}x that) and releasing it "
                f"{cited['released']:.1%}; ")
    both = [r for r in rows if r["held"] > 0.20 and r["released"] <= 0.05]
    above = [r for r in rows if r["held"] > 0.20]
    if both:
        text += f"both published numbers hold at {field} = {both[0][field] * 1e6:.2f} µs."
    elif above:
        r = above[0]
        text += (f"held passes 20 % from {field} = {r[field] * 1e6:.2f} µs ({r['held']:.1%}), but released is then "
                 f"{r['released']:.1%}: no value in the sweep gives both published numbers.")
    else:
        text += "no value in the sweep makes holding the GIL cost > 20 %."
    return text


def probe_agreement(result: dict[str, Any]) -> str:
    """How the simulator agrees with the probe, on the probe's footing (probe.row_verdict)."""
    variants = result["variants"]
    if not variants:
        return "no comparable variant ran."
    counts = _probe.agreement(variants)
    per_core = {}
    for v in variants:
        per_core.setdefault((v["cores"], bool(v.get("own_cores"))), []).append(v.get("verdict", {}).get("agree"))
    detail = ", ".join(f"{_layout_words(c, own)}: {sum(1 for a in a_s if a)} of {len(a_s)}"
                       for (c, own), a_s in sorted(per_core.items()))
    skipped = "; ".join(f"{_layout_words(s['cores'], s.get('own_cores', False))} skipped ({s['reason']})"
                        for s in result.get("skipped", []))
    return (f"the simulator agrees with the probe (held: within {_probe.TARGET_REL_ERR:.0%}, released: within "
            f"{_probe.TARGET_ABS_POINTS * 100:.0f} points) on {counts['agree']} of {counts['schedules']} schedules "
            f"({detail}); {counts['differ']} differ, {counts['no_verdict']} have no verdict (the probe's pairs were "
            "noisy, or its own spread is wider than the tolerance)" + (f"; {skipped}" if skipped else "") + "."
            + noise_sentence(variants))


def _layout_words(cores: int, own: bool = False) -> str:
    return f"{cores} core{'s' if cores > 1 else ''}" + (", one per thread" if own else "")


def noise_sentence(variants: list[dict[str, Any]]) -> str:
    """How many schedules were measured while other processes used the probe's cores."""
    noisy = [v for v in variants if not v["probe"].get("noise", {}).get("quiet", True)]
    if not noisy:
        return ""
    shares = sorted(v["probe"]["noise"]["foreign_share_median"] for v in noisy
                    if v["probe"]["noise"]["foreign_share_median"] is not None)
    share = f" (median {shares[len(shares) // 2]:.0%} of the cores)" if shares else ""
    return (f" {len(noisy)} of {len(variants)} schedules had too few quiet repeats: other processes ran on the "
            f"probe's cores{share}, which the model does not know about, so those rows do not test it.")


def probe_figure(variants: list[dict[str, Any]], path: Path) -> None:
    """Probe (median, with its min..max over repeats) and simulator degradation per schedule."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(7.0, 0.9 * len(variants) + 2), 3.8))
    labels = [f"{_layout_words(v['cores'], v.get('own_cores', False))}\n{v['granularity']}\n{v['mode']}"
              + ("\nnative desc." if v.get("kv_descriptors") == "native" else "") for v in variants]
    x = range(len(variants))
    probe = [100 * v["probe"]["degradation"] for v in variants]
    low = [p - 100 * v["probe"]["spread"]["min"] for p, v in zip(probe, variants)]
    high = [100 * v["probe"]["spread"]["max"] - p for p, v in zip(probe, variants)]
    ax.bar([i - 0.2 for i in x], probe, width=0.4, yerr=[low, high], capsize=3,
           label="probe (real threads), median and min..max over repeats", color="#c0504d")
    ax.bar([i + 0.2 for i in x], [100 * v["sim"]["degradation"] for v in variants], width=0.4,
           label="simulator, same schedule and cores", color="#4f81bd")
    ax.axhline(5, color="black", linestyle="--", linewidth=1, label="acceptance 5 %")
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylabel("prefill lost to KV transfer (%)")
    ax.set_title("KV transfer vs prefill on this machine, by core count")
    ax.legend(fontsize=7)
    save_figure(fig, path)


