"""The GLM-class stack study (docs/glm_stack.md), decided by this hook from stack.toml's data.

    infralab reproduce --study glm_stack [--quick]                 (sizes.reproduce / sizes.quick)
    .venv/bin/python experiments/glm_stack/hook.py --out DIR        (sizes.full: the full study)

Each arm is base.toml with the overlays of every arm up to it (cumulative, in the published
order) and the multimodal share; its capacity is the highest Poisson rate (req/s) whose runs meet
the SLO rule at every seed (`agent/capacity.py`, the rule and bisection of `infralab sim
capacity`), divided by the arm's accelerators (over all its pools). An arm with `choose` (the
last one: EPD's pool sizes) is measured once per candidate and is the candidate with the highest
capacity per accelerator, by the rule its `choose_rule` states. The cause of each step is what `infralab explain`
ranks first for the arm against the previous one, both run at the previous arm's capacity rate
(the same requests and arrival times: a controlled comparison at the highest load both sustain).
Sections marked `needs = "epd"` that the config schema rejects are skipped, with the reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any, Literal

from pydantic.dataclasses import dataclass

from infralab.agent.capacity import Overlay, overlay_capacities, overlay_config
from infralab.agent.step_causes import binding_constraint, step_causes
from infralab.agent.findings import ACCEPTED, REJECTED
from infralab.agent.studies import HookRun
from infralab.config_io import STRICT, load_toml, validate
from infralab.errors import InputError
from infralab.field_types import Int, Number

HERE = Path(__file__).resolve().parent
STACK_FILE = HERE / "stack.toml"
STUDY = "glm_stack"
SCHEMA = "infralab.glm_stack/1"
MODES = ("quick", "reproduce", "full")
FULL_COMMAND = ".venv/bin/python experiments/glm_stack/hook.py --out results/glm_stack_full"
JOBS = 2
TOML = Any  # a TOML value (overlay values are checked by the config schema they are set into)


# ---- stack.toml ------------------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class Sizes:
    num_requests: Int(gt=0, le=1_000_000)  # requests per run of the rate search
    seeds: tuple[Int(ge=0, le=2**63 - 1), ...]
    tolerance: Number(gt=0.0, le=0.9)  # the bisection's relative bracket (capacity.Bisection)
    sensitivity: tuple[str, ...] = ()  # assumption names, or ["all"]


@dataclass(frozen=True, config=STRICT)
class ArmSpec:
    name: str
    label: str  # on the figure's axis
    adds: str  # the technique, in words
    source: str  # where its values come from
    set: dict[str, TOML]
    needs: Literal["", "epd"] = ""
    # Candidates (overlays on top of `set`), e.g. pool sizes: the arm is the one with the highest
    # capacity per accelerator; `choose_rule` says why these candidates (fixed before measuring).
    choose: tuple[dict[str, TOML], ...] = ()
    choose_rule: str = ""


@dataclass(frozen=True, config=STRICT)
class MultimodalSpec:
    set: dict[str, TOML]
    source: str
    needs: Literal["", "epd"] = ""


@dataclass(frozen=True, config=STRICT)
class Assumption:
    name: str
    label: str
    source: str
    low: dict[str, TOML] | None = None
    high: dict[str, TOML] | None = None
    low_label: str = "low"
    high_label: str = "high"
    needs: Literal["", "epd"] = ""


@dataclass(frozen=True, config=STRICT)
class StackFile:
    claim: str
    threshold: Number(gt=0.0, le=1000.0)
    base: str
    sizes: dict[str, Sizes]
    arm: tuple[ArmSpec, ...]
    quantile: Literal["p50", "p90", "p99"] = "p90"
    start_rps: Number(gt=0.0, le=1e6) = 1.0
    multimodal: MultimodalSpec | None = None
    assumption: tuple[Assumption, ...] = ()


@dataclasses.dataclass(frozen=True)
class Stack:
    spec: StackFile
    source: str  # the file, for errors
    base: Path  # the base config, absolute

    def sizes(self, mode: str) -> Sizes:
        return self.spec.sizes[mode]


def load_stack(path: Path = STACK_FILE) -> Stack:
    """stack.toml, validated: every error is one InputError naming the file and field."""
    source = str(path)
    spec = validate(StackFile, load_toml(path), source)
    for mode in MODES:
        if mode not in spec.sizes:
            raise InputError(f"{source}: sizes", f"no [sizes.{mode}]", f"[sizes.{'], [sizes.'.join(MODES)}]")
    if not spec.arm or spec.arm[0].set:
        raise InputError(f"{source}: arm[0]", "the first arm is not the baseline", "a first [[arm]] with set = {}")
    names = [a.name for a in spec.arm]
    if len(set(names)) != len(names):
        raise InputError(f"{source}: arm", "two arms share a name", "a unique name per [[arm]]")
    for i, arm in enumerate(spec.arm):
        if arm.choose and i != len(spec.arm) - 1:
            raise InputError(f"{source}: arm[{i}].choose", "candidates on an arm that later arms build on",
                             "choose only on the last [[arm]]")
        if arm.choose and not arm.choose_rule:
            raise InputError(f"{source}: arm[{i}].choose_rule", "missing", "the rule that fixed the candidates")
    known = {a.name for a in spec.assumption}
    for mode, sizes in spec.sizes.items():
        for name in sizes.sensitivity:
            if name != "all" and name not in known:
                raise InputError(f"{source}: sizes.{mode}.sensitivity", f"unknown assumption {name!r}",
                                 f"\"all\" or names of [[assumption]]: {', '.join(sorted(known))}")
    base = (path.parent / spec.base).resolve()
    if not base.is_file():
        raise InputError(f"{source}: base", f"{spec.base!r} is not a file", "a simulation config, relative to stack.toml")
    return Stack(spec, source, base)


# ---- the arms as overlays ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
    """What runs: each measured arm's overlay (cumulative), the multimodal table used (or None),
    and notes on what was skipped and why. An arm with candidates (`choose`) has them in
    `candidates[arm name]`, and its overlay in `arms` is the first until `measure_arms` picks."""

    arms: tuple[tuple[ArmSpec, Overlay], ...]
    multimodal: dict[str, TOML] | None
    skipped: tuple[str, ...]
    candidates: dict[str, tuple[Overlay, ...]] = dataclasses.field(default_factory=dict)


def _requests(sizes: Sizes) -> dict[str, TOML]:
    return {"workload.num_requests": sizes.num_requests}


def _accepted(stack: Stack, overlays: list[Overlay], needs: str, what: str, notes: list[str]) -> bool:
    """True when the base config takes every overlay. When it rejects one and the section is marked
    `needs` (a schema it waits for), the reason goes into `notes` and the section is skipped
    (False); any other rejection is raised."""
    try:
        for overlay in overlays:
            overlay_config(stack.base, overlay)
    except InputError as exc:
        if not needs:
            raise
        notes.append(f"{what} (needs {needs}): {exc}")
        return False
    return True


def plan_arms(stack: Stack, sizes: Sizes) -> Plan:
    """The cumulative overlay of every arm the schema accepts. A section marked `needs` that the
    config rejects is skipped (with the error); any other error is raised."""
    skipped: list[str] = []
    multimodal = None
    mm = stack.spec.multimodal
    if mm is not None and _accepted(stack, [Overlay("multimodal", {**mm.set, **_requests(sizes)},
                                                       f"{stack.source}: multimodal.set")],
                                    mm.needs, "multimodal share", skipped):
        multimodal = dict(mm.set)
    arms: list[tuple[ArmSpec, Overlay]] = []
    candidates: dict[str, tuple[Overlay, ...]] = {}
    changes: dict[str, TOML] = {**(multimodal or {}), **_requests(sizes)}
    for i, arm in enumerate(stack.spec.arm):
        changes = {**changes, **arm.set}
        overlays = [Overlay(arm.name, dict(changes), f"{stack.source}: arm[{i}].set")]
        if arm.choose:
            overlays = [Overlay(f"{arm.name}[{k}]", {**changes, **pick}, f"{stack.source}: arm[{i}].choose[{k}]")
                        for k, pick in enumerate(arm.choose)]
        if not _accepted(stack, overlays, arm.needs, f"arm {arm.name!r}", skipped):
            changes = {k: v for k, v in changes.items() if k not in arm.set}
            continue
        arms.append((arm, overlays[0]))
        if arm.choose:
            candidates[arm.name] = tuple(overlays)
    return Plan(tuple(arms), multimodal, tuple(skipped), candidates)


# ---- measuring ----------------------------------------------------------------------------------


def ratio(capacity: float | None, baseline: float | None) -> float | None:
    """capacity / baseline (both req/s per accelerator); None when either is unknown or baseline 0."""
    if capacity is None or baseline is None or baseline <= 0:
        return None
    return capacity / baseline


def best_candidate(docs: list[dict[str, Any]]) -> int:
    """The index of the candidate with the highest capacity per accelerator (an unbracketed one
    counts as none; ties: the first listed)."""
    scores = [d["capacity_rps_per_accelerator"] for d in docs]
    return max(range(len(docs)), key=lambda k: (-1.0 if scores[k] is None else scores[k], -k))


def measure_arms(stack: Stack, plan: Plan, sizes: Sizes) -> tuple[list[dict[str, Any]], Plan]:
    """Per arm: its capacity document (capacity.json's), ratio to the baseline and to the
    previous arm, and the binding SLO; an arm with candidates also lists each candidate's
    capacity and which was chosen. Returns the plan with each such arm's chosen overlay."""
    groups = [plan.candidates.get(arm.name, (overlay,)) for arm, overlay in plan.arms]
    flat = [o for group in groups for o in group]
    all_docs, rows = overlay_capacities(stack.base, flat, sizes.seeds, sizes.tolerance,
                                        stack.spec.quantile, stack.spec.start_rps, JOBS, show_progress=False)
    docs, chosen_arms, picks = [], [], []
    start = 0
    for (arm, _), group in zip(plan.arms, groups):
        mine = all_docs[start:start + len(group)]
        start += len(group)
        k = best_candidate(mine)
        docs.append(mine[k])
        chosen_arms.append((arm, group[k]))
        picks.append(None if len(group) == 1 else
                     {"rule": arm.choose_rule, "chosen": k,
                      "candidates": [{"set": dict(arm.choose[j]), "label": d["label"],
                                      "accelerators": d["accelerators"], "capacity_rps": d["capacity_rps"],
                                      "per_accelerator": d["capacity_rps_per_accelerator"]}
                                     for j, d in enumerate(mine)]})
    base = docs[0]["capacity_rps_per_accelerator"]
    out = []
    for i, ((arm, _), doc) in enumerate(zip(plan.arms, docs)):
        per_acc = doc["capacity_rps_per_accelerator"]
        prev = docs[i - 1]["capacity_rps_per_accelerator"] if i else None
        out.append({"arm": arm.name, "label": arm.label, "adds": arm.adds, "source": arm.source,
                    "capacity": doc, "per_accelerator": per_acc, "ratio": ratio(per_acc, base),
                    "step_gain": ratio(per_acc, prev) if i else None,
                    "binding": binding_constraint(rows, doc["label"], doc["fails_at_rps"]),
                    **({"pools_chosen": picks[i]} if picks[i] is not None else {})})
    return out, dataclasses.replace(plan, arms=tuple(chosen_arms))


def explain_steps(stack: Stack, plan: Plan, arms: list[dict[str, Any]], sizes: Sizes, folder: Path) -> None:
    """Adds `cause` to each arm: `infralab explain`'s first-ranked cause of the arm against the
    previous arm, both run at the previous arm's capacity rate (agent/step_causes.py)."""
    configs = [overlay_config(stack.base, o) for _, o in plan.arms]
    causes = step_causes(configs, [a["arm"] for a in arms], [a["capacity"]["capacity_rps"] for a in arms],
                         [a["binding"] for a in arms], folder, sizes.seeds[0], stack.base, JOBS)
    for arm, cause in zip(arms, causes):
        arm["cause"] = cause


def sensitivity(stack: Stack, plan: Plan, sizes: Sizes) -> tuple[list[dict[str, Any]], list[str]]:
    """Per chosen assumption, the final ratio with its low and high values (applied to the
    baseline and the final arm alike); and notes on the assumptions skipped."""
    names = sizes.sensitivity
    chosen = [a for a in stack.spec.assumption if "all" in names or a.name in names]
    base_overlay, final_overlay = plan.arms[0][1], plan.arms[-1][1]
    overlays, keys, notes = [], [], []
    for k, a in enumerate(stack.spec.assumption):
        if a not in chosen:
            continue
        sides = [(side, changes) for side, changes in (("low", a.low), ("high", a.high)) if changes]
        pending = [Overlay(f"{a.name}-{side}-{which.label}", {**which.changes, **changes},
                           f"{stack.source}: assumption[{k}].{side}")
                   for side, changes in sides for which in (base_overlay, final_overlay)]
        if not _accepted(stack, pending, a.needs, f"assumption {a.name!r}", notes):
            continue
        overlays += pending
        keys += [(a, side) for side, _ in sides]
    if not overlays:
        return [], notes
    docs, _ = overlay_capacities(stack.base, overlays, sizes.seeds, sizes.tolerance, stack.spec.quantile,
                                 stack.spec.start_rps, JOBS, show_progress=False)
    rows: dict[str, dict[str, Any]] = {}
    for j, (a, side) in enumerate(keys):
        base_doc, final_doc = docs[2 * j], docs[2 * j + 1]
        row = rows.setdefault(a.name, {"name": a.name, "label": a.label, "source": a.source,
                                       "low": None, "high": None,
                                       "low_label": a.low_label, "high_label": a.high_label})
        row[side] = ratio(final_doc["capacity_rps_per_accelerator"], base_doc["capacity_rps_per_accelerator"])
    return list(rows.values()), notes


# ---- writing ------------------------------------------------------------------------------------


def fmt_number(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}g}"


def cause_text(cause: dict[str, Any] | None) -> str:
    if cause is None:
        return "—"
    if cause["against"] is None:
        return f"{cause['kind']} `{cause['key']}`: {cause['run_s']:.3g} s of the {cause['metric']}"
    return f"{cause['kind']} `{cause['key']}`: {cause['delta_s']:+.3g} s of the {cause['metric']}"


def table_markdown(arms: list[dict[str, Any]]) -> str:
    from infralab.agent.report import md_table

    rows = [[a["label"], a["adds"], fmt_number(a["capacity"]["capacity_rps"]), a["capacity"]["accelerators"],
             fmt_number(a["per_accelerator"]), "—" if a["ratio"] is None else f"{a['ratio']:.2f}x",
             "—" if a["step_gain"] is None else f"{a['step_gain']:.2f}x", a["binding"] or "—",
             cause_text(a.get("cause"))] for a in arms]
    return md_table(["arm", "adds", "capacity (req/s)", "accelerators", "req/s per accelerator", "vs baseline",
                     "step gain", "fails above capacity because", "first-ranked cause (explain)"], rows)


def evolution_figure(arms: list[dict[str, Any]], stem: Path) -> list[Path]:
    """Bars of each arm's capacity per accelerator, annotated with the ratio to the baseline."""
    from infralab.agent import figure_style

    with figure_style.styled() as plt:
        fig, ax = plt.subplots(figsize=(5.0, 2.8))
        values = [a["per_accelerator"] or 0.0 for a in arms]
        bars = ax.bar(range(len(arms)), values, color=figure_style.colour(0))
        for bar, a in zip(bars, arms):
            text = "not bracketed" if a["ratio"] is None else f"{a['ratio']:.2f}x"
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=7)
        ax.set_xticks(range(len(arms)), [a["label"] for a in arms], rotation=25, ha="right")
        ax.set_ylabel("sustained req/s per accelerator")
        ax.set_title("GLM-class stack on ascend-910b: throughput evolution (simulated)")
        ax.set_ylim(0, max(values + [1e-9]) * 1.18)
        return figure_style.save(fig, stem)


def tornado_figure(rows: list[dict[str, Any]], final_ratio: float, stem: Path) -> list[Path]:
    """One bar per assumption from its low to its high final ratio, widest at the top."""
    from infralab.agent import figure_style

    ordered = sorted(rows, key=lambda r: spread(r, final_ratio))
    with figure_style.styled() as plt:
        fig, ax = plt.subplots(figsize=(5.0, 0.8 + 0.4 * len(ordered)))
        for y, r in enumerate(ordered):
            for side, colour in (("low", 0), ("high", 1)):
                if r[side] is not None:
                    ax.barh(y, r[side] - final_ratio, left=final_ratio, color=figure_style.colour(colour), height=0.6,
                            label=f"{side} value" if y == len(ordered) - 1 else None)
        ticks = [f"{r['label']}\n" + ", ".join(f"{r[s + '_label']}: {fmt_number(r[s])}x" for s in ("low", "high")
                                               if r[s] is not None) for r in ordered]
        ax.set_yticks(range(len(ordered)), ticks, fontsize=6)
        ax.axvline(final_ratio, color="black", linewidth=0.8)
        ax.margins(x=0.15)
        ax.set_xlabel(f"final ratio to the baseline (all assumptions as stated: {final_ratio:.2f}x)")
        ax.set_title("What moves the final ratio (simulated)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(ordered) < 4 else -0.12), ncols=2)
        return figure_style.save(fig, stem)


def spread(row: dict[str, Any], centre: float) -> float:
    """How far an assumption moves the ratio: the largest |side - centre| (0 when unmeasured)."""
    return max((abs(row[s] - centre) for s in ("low", "high") if row[s] is not None), default=0.0)


def sensitivity_markdown(rows: list[dict[str, Any]], final_ratio: float | None) -> str:
    from infralab.agent.report import md_table

    if not rows or final_ratio is None:
        return ""
    ordered = sorted(rows, key=lambda r: -spread(r, final_ratio))
    return md_table(["assumption", "low", "ratio", "high", "ratio", "source"],
                    [[r["label"], r["low_label"], fmt_number(r["low"]), r["high_label"], fmt_number(r["high"]),
                      r["source"]] for r in ordered])


def choice_lines(arms: list[dict[str, Any]]) -> list[str]:
    """The report's lines on an arm chosen among candidates: the rule, and each candidate."""
    lines = []
    for a in arms:
        pick = a.get("pools_chosen")
        if pick is None:
            continue
        lines += [f"{a['label']}: {pick['rule']}", ""]
        for j, c in enumerate(pick["candidates"]):
            knobs = ", ".join(f"{k.rsplit('.', 1)[-1]} {v}" for k, v in c["set"].items())
            mark = " (chosen)" if j == pick["chosen"] else ""
            lines.append(f"- {knobs}: {c['accelerators']} accelerators, {fmt_number(c['capacity_rps'])} req/s, "
                         f"{fmt_number(c['per_accelerator'])} req/s per accelerator{mark}")
        lines.append("")
    return lines


def verdict_of(final_ratio: float | None, threshold: float) -> str:
    from infralab.agent.findings import INCONCLUSIVE

    if final_ratio is None:
        return INCONCLUSIVE
    return ACCEPTED if final_ratio >= threshold else REJECTED


def run_study(out: Path, mode: str, stack: Stack | None = None) -> HookRun:
    """Everything the study does at `mode`'s sizes; files under out/figures and
    out/studies/glm_stack (the caller makes `out` atomic)."""
    stack = stack if stack is not None else load_stack()
    sizes = stack.sizes(mode)
    folder = out / "studies" / STUDY
    folder.mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    plan = plan_arms(stack, sizes)
    arms, plan = measure_arms(stack, plan, sizes)
    explain_steps(stack, plan, arms, sizes, folder)
    final_ratio = arms[-1]["ratio"]
    rows, sens_notes = sensitivity(stack, plan, sizes) if sizes.sensitivity else ([], [])
    figures = [str(p.relative_to(out)) for p in evolution_figure(arms, out / "figures" / "glm_stack_evolution")
               if p.suffix == ".png"]
    if rows and final_ratio is not None:
        figures += [str(p.relative_to(out)) for p in tornado_figure(rows, final_ratio, out / "figures" / "glm_stack_sensitivity")
                    if p.suffix == ".png"]
    verdict = verdict_of(final_ratio, stack.spec.threshold)
    measured = [a["arm"] for a in arms]
    claim = stack.spec.claim + ("" if len(measured) == len(stack.spec.arm) else
                                f" (measured arms: {', '.join(measured)})")
    table = table_markdown(arms)
    sens = sensitivity_markdown(rows, final_ratio)
    doc = {"schema": SCHEMA, "mode": mode, "claim": stack.spec.claim, "threshold": stack.spec.threshold,
           "verdict": verdict, "final_ratio": final_ratio, "sizes": dataclasses.asdict(sizes),
           "quantile": stack.spec.quantile, "multimodal": plan.multimodal, "skipped": list(plan.skipped) + sens_notes,
           "arms": arms, "sensitivity": rows}
    (folder / "glm_stack.json").write_text(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n")
    (folder / "table.md").write_text(table)
    command = FULL_COMMAND if mode == "full" else f"infralab reproduce --study {STUDY}" + (" --quick" if mode == "quick" else "")
    lines = [f"Final ratio (last measured arm / baseline, req/s per accelerator): "
             f"**{'—' if final_ratio is None else f'{final_ratio:.2f}'}x** against the claim's {stack.spec.threshold:g}x; "
             f"sizes `{mode}`: {sizes.num_requests} requests per run, seeds {list(sizes.seeds)}, bisection "
             f"tolerance {sizes.tolerance:g}, SLO rule on {stack.spec.quantile} (simulated numbers, docs/glm_stack.md).",
             "", table, ""]
    lines += choice_lines(arms)
    if sens:
        lines += ["Sensitivity of the final ratio (each assumption low/high, others as stated):", "", sens, ""]
    elif mode != "full":
        lines += [f"Sensitivity: the full study (`{FULL_COMMAND}`) varies every assumption.", ""]
    lines += [f"- not measured: {note}" for note in doc["skipped"]]
    lines += ["", f"Files: `studies/{STUDY}/glm_stack.json`, `studies/{STUDY}/table.md`, the runs explained under "
              f"`studies/{STUDY}/runs/`."]
    return HookRun(verdict, claim, command, tuple(figures), "\n".join(lines) + "\n")


def run(out: Path, quick: bool) -> HookRun:
    """`infralab reproduce`'s entry (agent/studies.py): the study at its reproduce or quick sizes."""
    return run_study(out, "quick" if quick else "reproduce")


def main(argv: list[str] | None = None) -> int:
    from infralab.results import atomic_output_dir

    parser = argparse.ArgumentParser(description="the full GLM-class stack study (docs/glm_stack.md)")
    parser.add_argument("--out", required=True, help="results folder (written atomically)")
    parser.add_argument("--mode", choices=MODES, default="full", help="stack.toml's sizes to use (default full)")
    args = parser.parse_args(argv)
    with atomic_output_dir(args.out) as tmp:
        decided = run_study(tmp, args.mode)
        (tmp / "report.md").write_text(f"# {decided.claim}\n\nVerdict: **{decided.verdict}** (`{decided.command}`)\n\n"
                                       + "".join(f"![{Path(f).stem}]({f})\n\n" for f in decided.figures)
                                       + decided.markdown)
    print(f"{decided.verdict.upper()}: report {Path(args.out) / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
