"""The fidelity study's outputs: `fidelity.json` (schema infralab.fidelity/1), the Markdown table
(`table.md`, also printed) and the figures (`figures/cdf-<case>.png`: predicted vs measured CDFs
of TTFT, TPOT, ITL and E2E; `figures/parity.png`: every metric statistic, simulated vs real).

Times in the JSON are seconds; the table and the figures show milliseconds.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from infralab.agent import figure_style
from infralab.agent.fidelity.compare import METRICS, STATS, TARGET_MAX_LOAD, TARGETS
from infralab.agent.fidelity.runner import CALIBRATION_LOAD, CaseResult, StudyResult, mean_known, probed_spells
from infralab.results import dump_json

SCHEMA = "infralab.fidelity/1"
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}


def _comparison_json(comparison: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
    return None if comparison is None else {metric: {stat: c.as_dict() for stat, c in stats.items()}
                                            for metric, stats in comparison.items()}


# The mirror again at another step speed, kept beside the case's simulation: (the case's factor
# field, the suffix of its `sim_...`, `comparison_...`, `counts_...` and `sign_balance_...` keys,
# what the speed is; `runner._follow_the_machine`, `_follow_the_other_cases`, `_follow_the_calibration`;
# `_follow_the_spells` keeps the mirror as calibrated, `plain_factor` 1.0, where it corrected the verdict's).
SPEEDS_BESIDE = (
    ("speed_factor", "machine_speed", "the machine's speed by the reference steps around each replay"),
    ("others_factor", "others_speed", "the speed the other cases' replays ran their own steps, interleaved with this case's"),
    ("calibration_factor", "calibration_speed",
     "the speed the calibration replays between the rounds ran (the same calibration requests again)"),
    ("plain_factor", "plain_mirror",
     "their calibrated values, without the correction for the machine's slow spells (the verdict's mirror "
     "before 2026-12-07)"),
)


def case_json(case: CaseResult) -> dict[str, Any]:
    """A case's record: its simulation and comparisons, and the same at each speed kept beside
    (`SPEEDS_BESIDE`)."""
    out = {"name": case.name, "setting": case.setting, "shape": case.shape, "load": case.load, "fixed": case.fixed,
           "rate_rps": case.rate_rps, "rate_scale": case.rate_scale, "requests": case.requests,
           "sim": case.sim_stats, "spells_factor": case.spells_factor, "runs": case.runs,
           "comparison": _comparison_json(case.comparison())}
    for factor, suffix, _ in SPEEDS_BESIDE:
        sim = getattr(case, f"sim_{suffix}")
        out |= {factor: getattr(case, factor), f"sim_{suffix}": sim,
                f"comparison_{suffix}": _comparison_json(case.comparison(sim) if sim is not None else None)}
    return out


def sign_balance(cases: list[dict[str, Any]], key: str = "comparison") -> dict[str, int]:
    """How many comparisons (every metric and statistic of every compared case) have the mirror
    above the real mean, below it, or equal: errors of one sign are a finding of their own."""
    errors = [c["error"] for c in _comparisons(cases, key)]
    return {"above": sum(e > 0 for e in errors), "below": sum(e < 0 for e in errors), "equal": sum(e == 0 for e in errors)}


# Which of a run's step-speed figures (`steps_vs_profile`) a metric waits on: a TTFT on the steps
# that compute prompt tokens, a TPOT or ITL on decode-only steps, an E2E on all of them.
METRIC_STEPS = {"ttft": "prefill_step", "tpot": "decode_step", "itl": "decode_step", "e2e": "step"}
# A step-speed difference smaller than this is not offered as the cause of an error.
CAUSE_MIN = 0.02


def failure_cause(case: dict[str, Any], metric: str, error: float) -> str:
    """Why a comparison failed, from the case's own runs: how the replays' steps of the kind the
    metric waits on ran against the step times the mirror charged (`METRIC_STEPS`), whether the
    engine scheduled every step as the mirror does, and the verdict on which it is: step time
    (the steps' speed explains the error's sign: real steps slower than charged and the mirror
    below, or the reverse), or not step time (then queueing or host time between steps)."""
    runs = [r for r in case["runs"] if r.get("error") is None and r.get("steps_vs_profile")]
    speeds = [r["steps_vs_profile"].get(METRIC_STEPS[metric]) for r in runs]
    speeds = [v for v in speeds if v is not None and v == v]
    same = sum(1 for r in runs if r.get("schedule") and r["schedule"]["differing"] == 0)
    schedule = f"the schedule was the mirror's in {same} of {len(runs)} runs"
    if not speeds:
        return f"no step of that kind was observed; {schedule}"
    # Against the step times the verdict's mirror charged: the table's x the case's slow-spell factor.
    speed = (1.0 + sum(speeds) / len(speeds)) / (case.get("spells_factor") or 1.0) - 1.0
    kind = {"prefill_step": "steps with prompt tokens", "decode_step": "decode-only steps", "step": "steps"}[METRIC_STEPS[metric]]
    text = f"the replays' {kind} ran {speed:+.1%} against the step times charged; {schedule}"
    if abs(speed) >= CAUSE_MIN and (speed > 0) == (error < 0):
        return text + ": step time (the machine ran those steps at another speed than calibrated)"
    return text + ": not step time (queueing, or host time between steps)"


def failures(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every comparison that missed its target or fell outside the real range, with its likely
    cause (`failure_cause`), and every case with fewer than two finished real runs."""
    out = []
    for case in cases:
        if case["comparison"] is None:
            out.append({"case": case["name"], "metric": None, "stat": None, "verdict": "not compared",
                        "why": "fewer than 2 real runs finished: " + "; ".join(
                            str(r["error"]) for r in case["runs"] if r["error"])})
            continue
        for metric, stats in case["comparison"].items():
            for stat, c in stats.items():
                if c["verdict"] in ("missed", "out of range"):
                    out.append({"case": case["name"], "metric": metric, "stat": stat, "verdict": c["verdict"],
                                "error": c["error"], "spread": c["spread"],
                                "cause": failure_cause(case, metric, c["error"])})
    return out


def fidelity_json(result: StudyResult) -> dict[str, Any]:
    cases = [case_json(case) for case in result.cases]
    beside = {}
    for _, suffix, _ in SPEEDS_BESIDE:
        beside |= {f"counts_{suffix}": _counts(cases, f"comparison_{suffix}"),
                   f"sign_balance_{suffix}": sign_balance(cases, f"comparison_{suffix}")}
    return {"schema": SCHEMA, **result.facts, "targets": {"relative_error": TARGETS, "below_load": TARGET_MAX_LOAD},
            "cases": cases, "counts": _counts(cases, "comparison"), "sign_balance": sign_balance(cases), **beside,
            "failures": failures(cases)}


def _comparisons(cases: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Every metric and statistic's comparison of every compared case, under `key`."""
    return [c for case in cases if case.get(key) for stats in case[key].values() for c in stats.values()]


def _counts(cases: list[dict[str, Any]], key: str) -> dict[str, int]:
    verdicts = [c["verdict"] for c in _comparisons(cases, key)]
    return {v: verdicts.count(v) for v in ("met", "missed", "in range", "out of range")}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}" if math.isfinite(seconds) else "-"


def _pct(value: float) -> str:
    return f"{value:+.1%}" if math.isfinite(value) else "-"


def markdown(doc: dict[str, Any]) -> str:
    """The study as Markdown: facts, the per-setting calibration, the per-case error table, the
    comparisons that fail."""
    m = doc["machine"]
    lines = [f"# {doc['title']}", "",
             f"Study `{doc['source']}`{' (quick)' if doc['quick'] else ''}: model `{doc['model']}`, scheduler "
             f"`{doc['scheduler']}`, {doc['repetitions']} real runs per case; machine: {m['cpus']} CPUs, load "
             f"average {m['load_average_before'][0]:.2f} before and {m['load_average_after'][0]:.2f} after "
             f"(1 min); {doc['wall_s']:.0f} s in all.", "",
             "Calibration: the step profile (synthetic steps) and, per shape, a closed loop of other requests "
             "(another seed) keeping as many in the engine as its KV cache holds, whose steady-state rate is the "
             f"capacity, and a replay of them at {CALIBRATION_LOAD:.0%} of it. Evaluation: open-loop replays of the cases.", "",
             "| setting | token budget | KV cache tokens | profile points | profile drift | shape | capacity req/s "
             "| host ms/step |", "|---|---:|---:|---:|---:|---|---:|---:|"]
    for s in doc["settings"]:
        for shape, facts in s["shapes"].items():
            lines.append(f"| {s['name']} | {s['engine']['max_batch_tokens']} | {s['engine']['cache_tokens']} "
                         f"| {s['profile']['points']} | {_pct(s['profile']['drift'])} | {shape} "
                         f"| {facts['capacity_rps']:.2f} | {facts['host_per_step_s'] * 1e3:.2f} |")
    lines += ["", *step_time_lines(doc), *headline(doc)]
    lines += ["", "Per case (load = fraction of the measured capacity; a `given` case replays its workload's own "
              "arrivals, its load is their rate against the capacity) and metric, ms: real mean ± std over the "
              "runs [min, max], simulated (the mirror with its step times x the case's slow-spell factor, "
              "`spells_factor`, where its steps carried speed probes: \"The machine's two speeds\", docs/fidelity.md), "
              "error = sim / real - 1 and its verdict (met / MISSED: the target, "
              f"means {TARGETS['mean']:.0%} and p90 {TARGETS['p90']:.0%}, applies because the real spread is below "
              f"it and the load below {TARGET_MAX_LOAD:.0%}; in range / OUT: otherwise, whether the simulated value "
              "lies within the real runs' range). Step speed (mean over the runs, + = slower than calibrated): the "
              "reference steps around each replay vs the profile's / the replay's own steps vs what the mirror "
              "charges for steps of their shapes.", "",
              "| case | metric | " + " | ".join(f"{s} real | {s} sim | {s} error" for s in STATS)
              + " | step speed |", "|---|---|" + "---:|" * (3 * len(STATS) + 1)]
    for case in doc["cases"]:
        speed = _speed(case)
        if case["comparison"] is None:
            lines.append(f"| {case['name']} | all | not compared: fewer than 2 finished real runs |" + " |" * 9
                         + f" {speed} |")
            continue
        for metric in METRICS:
            cells = []
            for stat in STATS:
                c = case["comparison"][metric][stat]
                verdict = VERDICT_MARK[c["verdict"]]
                cells.append(f"{_ms(c['real_mean'])} ± {_ms(c['real_std'])} [{_ms(c['real_min'])}, {_ms(c['real_max'])}] "
                             f"| {_ms(c['sim'])} | {_pct(c['error'])} {verdict}")
            lines.append(f"| {case['name']} | {LABELS[metric]} | " + " | ".join(cells) + f" | {speed} |")
    counts = doc["counts"]
    lines += ["", "Verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + ".", "", *speed_lines(doc),
              *contention_lines(doc), *schedule_lines(doc), ""]
    if doc["failures"]:
        lines.append("Failing comparisons (the error beside the real runs' own spread, the coefficient of variation):")
        lines.append("")
        for f in doc["failures"]:
            if f["metric"] is None:
                lines.append(f"- {f['case']}: {f['why']}")
            else:
                lines.append(f"- {f['case']} {LABELS[f['metric']]} {f['stat']}: {f['verdict']}, error "
                             f"{_pct(f['error'])}, real spread {f['spread']:.1%}; {f['cause']}")
    return "\n".join(lines) + "\n"


def step_time_lines(doc: dict[str, Any]) -> list[str]:
    """Per setting and shape: which step times the mirror charged (`step_times`: the profile, the
    profile scaled per kind or per kind and batch size, or the fitted model), the errors that chose
    it, and every candidate's on the evaluated replays' steps (predicted / measured total time - 1,
    steps with prompt tokens / decode-only, and the worst batch-size class's |error|; means over
    runs)."""
    lines = []
    for setting in doc["settings"]:
        for shape, facts in setting["shapes"].items():
            choice = facts.get("step_times")
            if not choice:
                continue
            runs = [r for case in doc["cases"] if case["setting"] == setting["name"] and case["shape"] == shape
                    for r in case["runs"] if r.get("error") is None and r.get("step_models")]

            def on_runs(name: str) -> str:
                kinds = [[r["step_models"][name].get(k, math.nan) for r in runs if name in r["step_models"]]
                         for k in ("prefill_total", "decode_total", "worst_class_total")]
                return (" / ".join(_pct(_nanmean(v)) for v in kinds[:2]) + f" (worst class {_nanmean(kinds[2]):.1%})"
                        if runs else "-")

            names = [k for k in ("profile", "scaled", "scaled_by_batch", "fitted") if k == "profile" or choice.get(k)]
            cal = {k: choice[k] if k == "profile" else choice[k]["cross_validated"] for k in names}
            text = (f"Step times, {setting['name']}/{shape}: the mirror charged the **{choice['chosen']}** ("
                    f"{choice['why']}). Total time by kind (prompt / decode-only), predicted / measured - 1, on the "
                    f"{choice['calibration_steps']} calibration steps: "
                    + ", ".join(f"{k} {_pct(cal[k]['prefill_total'])} / {_pct(cal[k]['decode_total'])}" for k in names)
                    + "; on the evaluated replays' steps: " + ", ".join(f"{k} {on_runs(k)}" for k in names) + ".")
            lines += [text, ""]
    return lines


def _nanmean(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def speed_lines(doc: dict[str, Any]) -> list[str]:
    """The errors' sign balance, and what the verdicts would be with the mirror's step times at each
    speed kept beside (`SPEEDS_BESIDE`): the machine's speed by the reference steps (not trusted:
    `_follow_the_machine`), the speed the other cases' replays ran (`_follow_the_other_cases`), the
    speed the calibration replays between the rounds ran (`_follow_the_calibration`), and the step
    times as calibrated, where the verdict's mirror was corrected for slow spells (`_follow_the_spells`)."""
    now = doc["sign_balance"]
    lines = [f"Sign balance (mirror above / below the real mean, every comparison): {now['above']} / {now['below']}.", ""]
    for factor, suffix, what in SPEEDS_BESIDE:
        factors = [f"{case['name']} x{case[factor]:.3f}" for case in doc["cases"] if case.get(factor)]
        if factors:
            alt, alt_sign = doc[f"counts_{suffix}"], doc[f"sign_balance_{suffix}"]
            lines += [f"With the step times at {what} ({', '.join(factors)}; reported, not used): verdicts "
                      + ", ".join(f"{n} {v}" for v, n in alt.items())
                      + f", sign balance {alt_sign['above']} / {alt_sign['below']}.", ""]
    return lines


def contention_lines(doc: dict[str, Any]) -> list[str]:
    """How many replays other work contended (`real.contention`): repeated once, left out if the
    repeat was contended too."""
    runs = [(case["name"], r) for case in doc["cases"] for r in case["runs"]]
    repeated = [name for name, r in runs if r.get("contended_attempt")]
    left_out = [name for name, r in runs if str(r.get("error") or "").startswith("contention")]
    seen = [r["contention"]["other_share"] for _, r in runs if r.get("contention")]
    if not seen:
        return []
    text = (f"Contention (other processes' share of the cores during each replay, /proc): at most {max(seen):.0%}; "
            f"{len(repeated)} of {len(runs)} replays contended and repeated once")
    text += f", {len(left_out)} contended again and left out ({', '.join(left_out)})." if left_out else "."
    return [text, ""]


def schedule_lines(doc: dict[str, Any]) -> list[str]:
    """What the replays' schedules say (`schedule_check`): how many real runs scheduled every step as
    the mirror does for the same arrivals in steps, and the host time between steps that no step has."""
    runs = [r for case in doc["cases"] for r in case["runs"] if r.get("schedule") is not None]
    if not runs:
        return []
    same = sum(r["schedule"]["differing"] == 0 for r in runs)
    gaps = [r["loop"]["busy_gap_s"] for r in runs if r["loop"]["busy_gap_s"] is not None]
    wakes = [r["loop"]["wake_up_s"] for r in runs if r["loop"]["wake_up_s"] is not None]
    line = (f"Schedule: in {same} of {len(runs)} real runs every step (query tokens, past tokens, sequences, "
            f"sampling sequences) equals the mirror's for the same arrivals counted in steps.")
    if gaps:
        line += f" Between busy steps the loop spent {sum(gaps) / len(gaps) * 1e3:.3f} ms on average"
        line += (f"; after an idle spell, {_ms(sum(wakes) / len(wakes))} ms went from a submission to its step "
                 f"(mean over {len(wakes)} runs)." if wakes else ".")
    lines = [line, "", "Step speed by kind (the replays' own steps vs what the mirror charges for their shapes, "
                       "mean over the runs; + = slower than calibrated): steps with prompt tokens / decode-only steps:"]
    for case in doc["cases"]:
        speeds = [r["steps_vs_profile"] for r in case["runs"] if r.get("error") is None and "prefill_step" in r["steps_vs_profile"]]
        if speeds:
            lines.append(f"- {case['name']}: {_pct(_mean_of(speeds, 'prefill_step'))} / {_pct(_mean_of(speeds, 'decode_step'))}")
    return lines + spell_lines(doc)


def spell_lines(doc: dict[str, Any]) -> list[str]:
    """The machine's slow spells (`speed_spells`; docs/fidelity.md, "The machine's two speeds"):
    per setting and shape the calibration steps' slow share, per case its runs' (mean), and how
    much longer a step in a slow spell took than a fast one against the same charge (prompt /
    decode-only, means over the runs). Empty when no step carries a speed probe."""
    rows = []
    for setting in doc["settings"]:
        for shape, facts in setting["shapes"].items():
            spells = facts.get("calibration_speed_spells") or {}
            if spells.get("slow_share") is not None:
                rows.append(f"- {setting['name']}/{shape} calibration steps: {spells['slow_share']:.0%} slow")
    for case in doc["cases"]:
        runs = probed_spells(case["runs"])
        if runs:
            rows.append(f"- {case['name']}: {_mean_of(runs, 'slow_share'):.0%} slow; a slow step x"
                        f"{_mean_of(runs, 'prefill_slow_vs_fast'):.2f} / x{_mean_of(runs, 'decode_slow_vs_fast'):.2f}")
    if not rows:
        return []
    return ["", "Steps in the machine's slow spells (each step's speed probe above 1.4 x its run's fast one; "
                "the verdict's mirror is corrected for them, `spells_factor`; docs/fidelity.md, \"The machine's two "
                "speeds\"): the share of steps, and a step in a slow spell against a fast one, both against the same "
                "charge (prompt / decode-only):",
            *rows]


def _mean_of(rows: list[dict[str, Any]], key: str) -> float:
    """`mean_known` of the rows' `key` (None: no step of that kind), nan when none has it."""
    mean = mean_known(rows, key)
    return math.nan if mean is None else mean


VERDICT_MARK = {"met": "met", "missed": "MISSED", "in range": "in range", "out of range": "OUT"}


def headline(doc: dict[str, Any]) -> list[str]:
    """The claims of issue 9 at a glance: mean and p90 of TTFT and TPOT per case, ms (real mean ±
    std, simulated, error and verdict), and the real runs' step speed against the calibration."""
    chosen = [("ttft", "mean"), ("ttft", "p90"), ("tpot", "mean"), ("tpot", "p90")]
    lines = ["| case | req/s | " + " | ".join(f"{LABELS[m]} {s} real | sim | error" for m, s in chosen)
             + " | step speed |", "|---|---:|" + "---:|" * (3 * len(chosen) + 1)]
    for case in doc["cases"]:
        cells = []
        for metric, stat in chosen:
            c = (case["comparison"] or {}).get(metric, {}).get(stat)
            cells.append("- | - | not compared" if c is None else
                         f"{_ms(c['real_mean'])} ± {_ms(c['real_std'])} | {_ms(c['sim'])} "
                         f"| {_pct(c['error'])} {VERDICT_MARK[c['verdict']]}")
        lines.append(f"| {case['name']} | {case['rate_rps']:.2f} | " + " | ".join(cells) + f" | {_speed(case)} |")
    return lines


def _speed(case: dict[str, Any]) -> str:
    finished = [r for r in case["runs"] if r["error"] is None]
    if not finished:
        return "-"
    return (f"{_pct(float(np.mean([r['speed_vs_profile'] for r in finished])))} / "
            f"{_pct(float(np.mean([r['steps_vs_profile']['step'] for r in finished])))}")


def cdf_figure(case: CaseResult, folder: Path) -> Path:
    """Predicted (the mirror) vs measured (each real run) CDFs of the four latencies of one case."""
    with figure_style.styled() as plt:
        fig, axes = plt.subplots(1, len(METRICS), figsize=(7.2, 2.1))
        for ax, metric in zip(axes, METRICS):
            real_values: list[float] = []
            for i, samples in enumerate(case.run_samples):
                values = np.sort(samples[metric]) * 1e3
                real_values.extend(values.tolist())
                ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", color=figure_style.colour(0),
                        alpha=0.6, linewidth=0.8, label="real runs" if i == 0 else None)
            sim = np.sort(case.sim_samples[metric]) * 1e3
            ax.step(sim, np.arange(1, len(sim) + 1) / len(sim), where="post", color=figure_style.colour(1),
                    linewidth=1.6, label="simulated")
            figure_style.scale_axes(ax, real_values + sim.tolist(), [])
            ax.xaxis.set_minor_formatter(plt.NullFormatter())  # log axes: decade labels only, no overlaps
            ax.set_xlabel(f"{LABELS[metric]} (ms)")
            ax.set_ylim(0, 1)
        axes[0].set_ylabel("fraction")
        axes[-1].legend(loc="lower right")
        fig.suptitle(f"{case.name}: {case.requests} requests at {case.rate_rps:.2f} req/s", fontsize=8)
        (path,) = figure_style.save(fig, folder / f"cdf-{case.name}", formats=("png",))
    return path


def parity_figure(doc: dict[str, Any], folder: Path) -> Path | None:
    """Every compared metric statistic: simulated vs real mean, the real runs' range as a bar."""
    points = [(metric, stat, c) for case in doc["cases"] if case["comparison"]
              for metric, stats in case["comparison"].items() for stat, c in stats.items()]
    if not points:
        return None
    with figure_style.styled() as plt:
        fig, ax = plt.subplots(figsize=(3.5, 3.3))
        for i, metric in enumerate(METRICS):
            for j, stat in enumerate(STATS):
                chosen = [c for m, s, c in points if m == metric and s == stat]
                xs = np.array([c["real_mean"] for c in chosen]) * 1e3
                low = xs - np.array([c["real_min"] for c in chosen]) * 1e3
                high = np.array([c["real_max"] for c in chosen]) * 1e3 - xs
                ax.errorbar(xs, np.array([c["sim"] for c in chosen]) * 1e3, xerr=[low, high], fmt=figure_style.marker(j),
                            color=figure_style.colour(i), elinewidth=0.5, markersize=3,
                            label=f"{LABELS[metric]} {stat}")
        values = [c[k] * 1e3 for _, _, c in points for k in ("real_min", "real_max", "sim") if c[k] > 0]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        line = np.geomspace(lo, hi, 50)
        ax.plot(line, line, color="black", linewidth=0.6)
        for factor in (0.9, 1.1):
            ax.plot(line, line * factor, color="grey", linewidth=0.4, linestyle="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("real (ms; mean of the runs, bar: min-max)")
        ax.set_ylabel("simulated (ms)")
        ax.legend(fontsize=5, ncol=2, loc="upper left")
        (path,) = figure_style.save(fig, folder / "parity", formats=("png",))
    return path


def write_outputs(result: StudyResult, folder: Path) -> tuple[dict[str, Any], str, list[Path]]:
    """fidelity.json, table.md and the figures into `folder`; returns the document, the table and
    the figures written."""
    doc = fidelity_json(result)
    table = markdown(doc)
    figures = folder / "figures"
    figures.mkdir(exist_ok=True)
    paths = [cdf_figure(case, figures) for case in result.cases if case.run_samples]
    parity = parity_figure(doc, figures)
    paths += [parity] if parity is not None else []
    doc["figures"] = [str(p.relative_to(folder)) for p in paths]
    dump_json(doc, folder / "fidelity.json")
    (folder / "table.md").write_text(table)
    return doc, table, paths
