"""The GLM-class stack in its own setting (issue 23), run by the rules long_context.toml
pre-registered:

    .venv/bin/python experiments/glm_stack/long_context.py --out results/glm_long_context          (full)
    .venv/bin/python experiments/glm_stack/long_context.py --mode quick --out results/glm_long_quick

Each arm is base_long_context.toml with the overlays of every arm up to it (cumulative, in the
registered order) and the mode's `workload.max_requests`. Its capacity, per seed, is the highest
rate (the trace's own rate x rate_scale) whose run meets the SLO rule (`agent/capacity.py`'s rule
and bisection, at the registered tolerance), divided by its NPUs; the ratio to the baseline is
taken per seed and reported as its mean and min..max. The mechanism table runs every arm at one
rate, the baseline's capacity at seed 0, and reads what the registration names: KV capacity, the
prefix-cache hit rate (cached / prompt tokens), the prompt tokens actually prefilled, p90 TTFT and
TPOT. Arms whose pool-size rule (`pools`) is not implemented here are listed as not run, with the
reason; nothing is filled in for them. The report prints the registration and every deviation.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path
from typing import Any, Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from pydantic.dataclasses import dataclass  # noqa: E402

from infralab.agent.capacity import Overlay, overlay_capacities, overlay_config  # noqa: E402
from infralab.agent.rate_grid import at_rate  # noqa: E402
from infralab.agent.sim_pool import SimJob, run_one  # noqa: E402
from infralab.config_io import STRICT, load_toml, validate  # noqa: E402
from infralab.errors import InputError  # noqa: E402
from infralab.field_types import Int, Number  # noqa: E402
from infralab.results import atomic_output_dir, dump_json  # noqa: E402

HERE = Path(__file__).resolve().parent
REGISTRATION = HERE / "long_context.toml"
SCHEMA = "infralab.glm_long_context/1"
JOBS = 2
TOML = Any  # overlay values are checked by the config schema they are set into


@dataclass(frozen=True, config=STRICT)
class Sizes:
    max_requests: Int(gt=1, le=1_000_000)
    seeds: tuple[Int(ge=0, le=2**63 - 1), ...]
    tolerance: Number(gt=0.0, le=0.9)


@dataclass(frozen=True, config=STRICT)
class Arm:
    name: str
    label: str
    adds: str
    set: dict[str, TOML]
    pools: Literal["", "pd", "epd"] = ""  # a pool-size rule of the registration applies


@dataclass(frozen=True, config=STRICT)
class Assumption:
    name: str
    source: str
    low: dict[str, TOML]
    high: dict[str, TOML]


@dataclass(frozen=True, config=STRICT)
class Deviation:
    date: str
    what: str
    why: str
    prompted_by: str


@dataclass(frozen=True, config=STRICT)
class Registration:
    claim: str
    threshold: Number(gt=0.0, le=1000.0)
    published: Number(gt=0.0, le=1000.0)
    base: str
    preregistration: dict[str, str]
    sizes: dict[str, Sizes]
    arm: tuple[Arm, ...]
    quantile: Literal["p50", "p90", "p99"] = "p90"
    start_scale: Number(gt=0.0, le=1e6) = 1.0
    assumption: tuple[Assumption, ...] = ()
    deviation: tuple[Deviation, ...] = ()


def load_registration(path: Path = REGISTRATION) -> Registration:
    """long_context.toml, validated (one InputError naming the file and field)."""
    reg = validate(Registration, load_toml(path), str(path))
    if not reg.arm or reg.arm[0].set:
        raise InputError(f"{path}: arm[0]", "the first arm is not the baseline", "a first [[arm]] with set = {}")
    if len({a.name for a in reg.arm}) != len(reg.arm):
        raise InputError(f"{path}: arm", "two arms share a name", "a unique name per [[arm]]")
    for mode in ("quick", "full"):
        if mode not in reg.sizes:
            raise InputError(f"{path}: sizes", f"no [sizes.{mode}]", "[sizes.quick] and [sizes.full]")
    return reg


def runnable_arms(reg: Registration) -> tuple[list[Arm], list[tuple[Arm, str]]]:
    """The arms run here (up to the first with a pool-size rule) and the rest with the reason."""
    for i, arm in enumerate(reg.arm):
        if arm.pools:
            why = (f"its pool sizes follow the registered rule ({arm.pools}: prefill : decode from the previous "
                   "arm's device-seconds), which this runner does not implement yet")
            return list(reg.arm[:i]), [(a, why if a is arm else f"builds on {arm.name}") for a in reg.arm[i:]]
    return list(reg.arm), []


def overlays(arms: list[Arm], sizes: Sizes) -> list[Overlay]:
    """Each arm as the cumulative overlay of the arms up to it, at the mode's request count."""
    out, changes = [], {"workload.max_requests": sizes.max_requests}
    for i, arm in enumerate(arms):
        changes = {**changes, **arm.set}
        out.append(Overlay(arm.name, dict(changes), f"long_context.toml: arm[{i}].set"))
    return out


def capacities(reg: Registration, base: Path, arms: list[Arm], sizes: Sizes) -> dict[str, dict[int, dict[str, Any]]]:
    """arm -> seed -> capacity.json's per-config entry, one bisection per seed (the registered rule)."""
    out: dict[str, dict[int, dict[str, Any]]] = {a.name: {} for a in arms}
    for seed in sizes.seeds:
        docs, _ = overlay_capacities(base, overlays(arms, sizes), [seed], sizes.tolerance, reg.quantile,
                                     start=None, jobs=JOBS, show_progress=False)
        for arm, doc in zip(arms, docs):
            out[arm.name][seed] = doc
    return out


def _prompt_tokens(record: Any, summary: Any) -> tuple[float, float]:
    """(prompt tokens, of them served from the prefix cache) over the run's requests."""
    return (float(sum(r.prompt_tokens for r in record.requests)), float(sum(r.cached_tokens for r in record.requests)))


def mechanisms(base: Path, arms: list[Arm], sizes: Sizes, rate: float, seed: int) -> list[dict[str, Any]]:
    """Every arm run at one rate (req/s): what its bounds read (the registration's mechanism list)."""
    rows = []
    for overlay in overlays(arms, sizes):
        config = overlay_config(base, overlay)
        job = SimJob(at_rate(config, rate), str(config.base_dir), config.source, seed)
        result = run_one(job, inspect=_prompt_tokens)
        (prompt, cached), m = result.details, result.metrics
        rows.append({"arm": overlay.label, "rate_rps": rate, "kv_tokens": (result.summary.kv_cache or {}).get("kv_tokens"),
                     "hit_rate": cached / prompt if prompt else 0.0, "prefilled_tokens": prompt - cached,
                     "ttft_p90_s": m["ttft_p90_s"], "tpot_p90_s": m["tpot_p90_s"], "completed": m["completed"]})
    return rows


def ratios(caps: dict[str, dict[int, dict[str, Any]]], arms: list[Arm]) -> dict[str, list[float | None]]:
    """arm -> per-seed capacity per NPU over the baseline's (None where either is not bracketed)."""
    base = caps[arms[0].name]
    out = {}
    for arm in arms:
        row = []
        for seed, doc in caps[arm.name].items():
            a, b = doc["capacity_rps_per_accelerator"], base[seed]["capacity_rps_per_accelerator"]
            row.append(a / b if a is not None and b else None)
        out[arm.name] = row
    return out


def verdict(final: list[float | None], threshold: float) -> str:
    if any(r is None for r in final) or not final:
        return "undecided"
    return "accepted" if min(final) >= threshold else ("rejected" if max(final) < threshold else "undecided")


def figure(arms: list[Arm], rat: dict[str, list[float | None]], reg: Registration, path: Path) -> None:
    xs, means, lows, highs = [], [], [], []
    for i, arm in enumerate(arms):
        vals = [v for v in rat[arm.name] if v is not None]
        if vals:
            xs.append(i)
            means.append(statistics.fmean(vals))
            lows.append(means[-1] - min(vals))
            highs.append(max(vals) - means[-1])
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.errorbar(xs, means, yerr=[lows, highs], fmt="o-", capsize=4)
    ax.axhline(reg.threshold, ls="--", c="grey", lw=1, label=f"claim {reg.threshold:g}x")
    ax.axhline(reg.published, ls=":", c="grey", lw=1, label=f"published ~{reg.published:g}x")
    ax.set_xticks(range(len(arms)), [a.label for a in arms], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("capacity per NPU / baseline")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(reg: Registration, mode: str, arms: list[Arm], skipped: list[tuple[Arm, str]],
           caps: dict[str, dict[int, dict[str, Any]]], rat: dict[str, list[float | None]],
           mech: list[dict[str, Any]]) -> str:
    sizes = reg.sizes[mode]
    final = rat[arms[-1].name]
    lines = [f"# {reg.claim}", "",
             f"Mode `{mode}`: {sizes.max_requests} requests per run, seeds {list(sizes.seeds)}, bisection to "
             f"{sizes.tolerance:.0%}, SLO rule {reg.quantile} (simulated numbers).", "",
             "## The registration (long_context.toml, committed before any result)", ""]
    lines += [f"- **{key}**: {' '.join(text.split())}" for key, text in reg.preregistration.items()]
    lines += ["", "## Deviations", ""]
    lines += [f"- {d.date}: {d.what} (why: {d.why}; prompted by: {d.prompted_by})" for d in reg.deviation] or ["- none"]
    lines += ["", "## Capacity per NPU, per seed, and the ratio to the baseline", "",
              "| arm | adds | NPUs | capacity per NPU (req/s) by seed | ratio mean | ratio min..max |",
              "|---|---|---|---|---|---|"]
    for arm in arms:
        docs = caps[arm.name]
        per = ", ".join("-" if d["capacity_rps_per_accelerator"] is None else f"{d['capacity_rps_per_accelerator']:.4g}"
                        for d in docs.values())
        vals = [v for v in rat[arm.name] if v is not None]
        mean = f"{statistics.fmean(vals):.2f}x" if vals else "-"
        span = f"{min(vals):.2f}..{max(vals):.2f}x" if vals else "-"
        npus = next(iter(docs.values()))["accelerators"]
        lines.append(f"| {arm.label} | {arm.adds} | {npus} | {per} | {mean} | {span} |")
    for arm, why in skipped:
        lines.append(f"| {arm.label} | {arm.adds} | - | not run: {why} | - | - |")
    if skipped:
        lines += ["", f"Verdict: **undecided**: the registered final arm ({reg.arm[-1].label}) was not run. The last arm "
                      f"run ({arms[-1].label}) would be {verdict(final, reg.threshold)} against the claim's "
                      f"{reg.threshold:g}x on its own.", ""]
    else:
        lines += ["", f"Verdict: **{verdict(final, reg.threshold)}** (final arm {arms[-1].label}).", ""]
    if mech:
        lines += [f"## Bounds at one rate ({mech[0]['rate_rps']:.4g} req/s: the baseline's capacity, seed 0)", "",
                  "| arm | KV capacity (tokens) | prefix hit rate | prompt tokens prefilled | p90 TTFT (s) | p90 TPOT (s) | completed |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['arm']} | {r['kv_tokens']:,} | {r['hit_rate']:.1%} | {r['prefilled_tokens']:,.0f} | "
                  f"{r['ttft_p90_s']:.3g} | {r['tpot_p90_s']:.3g} | {r['completed']} |" for r in mech]
    return "\n".join(lines) + "\n"


def run(mode: str, out: Path, path: Path = REGISTRATION) -> dict[str, Any]:
    """The setting's study at `mode`'s sizes; writes report.md, long_context.json and the figure."""
    reg = load_registration(path)
    base = (path.parent / reg.base).resolve()
    sizes = reg.sizes[mode]
    arms, skipped = runnable_arms(reg)
    caps = capacities(reg, base, arms, sizes)
    rat = ratios(caps, arms)
    first = caps[arms[0].name][sizes.seeds[0]]["capacity_rps"]
    mech = mechanisms(base, arms, sizes, first, sizes.seeds[0]) if first else []
    doc = {"schema": SCHEMA, "mode": mode, "sizes": dataclasses.asdict(sizes), "claim": reg.claim,
           "threshold": reg.threshold, "published": reg.published,
           "arms": [{"name": a.name, "label": a.label, "capacity": {str(s): d for s, d in caps[a.name].items()},
                     "ratio_by_seed": rat[a.name]} for a in arms],
           "not_run": [{"name": a.name, "why": why} for a, why in skipped],
           "mechanisms": mech,
           # The registered final arm decides; where it was not run the study is undecided.
           "verdict": "undecided" if skipped else verdict(rat[arms[-1].name], reg.threshold),
           "last_arm_run_verdict": verdict(rat[arms[-1].name], reg.threshold),
           "deviations": [dataclasses.asdict(d) for d in reg.deviation]}
    with atomic_output_dir(out) as tmp:
        dump_json(doc, tmp / "long_context.json")
        (tmp / "report.md").write_text(report(reg, mode, arms, skipped, caps, rat, mech), encoding="utf-8")
        figure(arms, rat, reg, tmp / "evolution.png")
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("quick", "full"), default="full")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        doc = run(args.mode, args.out)
    except InputError as exc:
        print(f"error: {exc}")
        return 2
    print((args.out / "report.md").read_text(encoding="utf-8"))
    return 0 if doc["verdict"] != "undecided" else 3


if __name__ == "__main__":
    raise SystemExit(main())
