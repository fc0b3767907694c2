"""The GLM-class stack in its own setting (issue 23), run by the rules long_context.toml
pre-registered:

    .venv/bin/python experiments/glm_stack/long_context.py --out results/glm_long_context          (full)
    .venv/bin/python experiments/glm_stack/long_context.py --mode quick --out results/glm_long_quick
    .venv/bin/python experiments/glm_stack/long_context.py --registration experiments/glm_stack/chat.toml --out results/glm_chat

(chat.toml: the chat workload, the study's second setting, under the same rules.) Each arm is the
registration's base config with its `every_arm` changes, the overlays of every arm up to it
(cumulative, in the registered order) and the mode's request count. Its capacity, per seed, is the highest
rate (the trace's own rate x rate_scale) whose run meets the SLO rule (`agent/capacity.py`'s rule
and bisection, at the registered tolerance), divided by its NPUs; the ratio to the baseline is
taken per seed and reported as its mean and min..max. The mechanism table runs every arm at one
rate, the baseline's capacity at seed 0, and reads what the registration names: KV capacity, the
prefix-cache hit rate (cached / prompt tokens), the prompt tokens actually prefilled, p90 TTFT and
TPOT. The full mode also varies each registered assumption low and high on the baseline and the
final arm (seed 0; the final arm keeps its pool sizes). The report prints the registration and
every deviation, and ends with the Ascend path's error on the public Ascend measurements
(ascend_points.toml, evaluation points only).

The pool-size rule (arms with `pools`) reads the previous arm's run at its capacity (seed 0), with
that run's own cost model, as device-seconds of work:
- prefill: each finished request's uncached prompt as one prefill step after its cached tokens;
- decode: the run's decode tokens in steps of its mean decode batch B (the decoding sequences'
  total decode time over the run's span, Little's law) at the mean context (prompt + output / 2);
- encode: every image through the vision encoder on one NPU of the part (tp 1, the encode pool's).
prefill : decode instances = the ratio of integers (each >= 1, sum <= 8) nearest that ratio in log
terms (ties: the smaller deployment); encode instances = max(1, ceil(encode share x (prefill +
decode instances))).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from pathlib import Path
from typing import Any, Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from pydantic.dataclasses import dataclass  # noqa: E402

from infralab.agent.public_points.cli import run_into as score_public_points  # noqa: E402
from infralab.agent.capacity import Overlay, overlay_capacities, overlay_config  # noqa: E402
from infralab.agent.rate_grid import at_rate  # noqa: E402
from infralab.agent.step_causes import binding_constraint, step_causes  # noqa: E402
from infralab.agent.sim_pool import SimJob, run_one  # noqa: E402
from infralab.config_io import validate as validate_doc  # noqa: E402
from infralab.sim.config import SimConfig  # noqa: E402
from infralab.sim.cost import CostModel, StepWork  # noqa: E402
from infralab.sim.encoder_cost import EncoderCost  # noqa: E402
from infralab.sim.run import prepare_run, simulate_config, with_seed  # noqa: E402
from infralab.sim.specs import load_accelerator, load_encoder, load_model  # noqa: E402
from infralab.config_io import STRICT, load_toml, validate  # noqa: E402
from infralab.errors import InputError  # noqa: E402
from infralab.field_types import Int, Number  # noqa: E402
from infralab.results import atomic_output_dir, dump_json  # noqa: E402

HERE = Path(__file__).resolve().parent
MAX_POOL_INSTANCES = 8  # prefill + decode instances at most (the registration's pool rule)
REGISTRATION = HERE / "long_context.toml"
ASCEND_POINTS = HERE / "ascend_points.toml"  # public Ascend serving measurements (issue 23: the Ascend path's error)
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
    every_arm: dict[str, TOML] = dataclasses.field(default_factory=dict)  # set on the base for every arm (the baseline too)
    requests_field: Literal["workload.max_requests", "workload.num_requests"] = "workload.max_requests"  # trace | synthetic
    file: str = REGISTRATION.name  # the file it was read from (set by load_registration; errors name it)
    assumption: tuple[Assumption, ...] = ()
    deviation: tuple[Deviation, ...] = ()


def load_registration(path: Path = REGISTRATION) -> Registration:
    """long_context.toml, validated (one InputError naming the file and field)."""
    reg = dataclasses.replace(validate(Registration, load_toml(path), str(path)), file=Path(path).name)
    if not reg.arm or reg.arm[0].set:
        raise InputError(f"{path}: arm[0]", "the first arm is not the baseline", "a first [[arm]] with set = {}")
    if len({a.name for a in reg.arm}) != len(reg.arm):
        raise InputError(f"{path}: arm", "two arms share a name", "a unique name per [[arm]]")
    for mode in ("quick", "full"):
        if mode not in reg.sizes:
            raise InputError(f"{path}: sizes", f"no [sizes.{mode}]", "[sizes.quick] and [sizes.full]")
    return reg


def runnable_arms(reg: Registration) -> tuple[list[Arm], list[tuple[Arm, str]]]:
    """The arms run here and those not run with the reason (every registered rule is implemented:
    none is left out)."""
    return list(reg.arm), []


def overlays(reg: Registration, arms: list[Arm], sizes: Sizes,
             pools: dict[str, dict[str, int]] | None = None) -> list[Overlay]:
    """Each arm as the cumulative overlay of the arms up to it, at the mode's request count, with
    the pool sizes the rule gave an arm (`pools`: arm -> config field -> instances) and the
    registration's `every_arm` changes under all of them."""
    out, changes = [], {**reg.every_arm, reg.requests_field: sizes.max_requests}
    for i, arm in enumerate(arms):
        changes = {**changes, **arm.set, **(pools or {}).get(arm.name, {})}
        out.append(Overlay(arm.name, dict(changes), f"{reg.file}: arm[{i}].set"))
    return out


def work_seconds(config: Any, rate: float, seed: int) -> dict[str, float]:
    """Device-seconds of prefill, decode and encode work in the config's run at `rate` (module
    docstring: the pool rule's inputs)."""
    cfg = with_seed(validate_doc(SimConfig, at_rate(config, rate), config.source), seed)
    cost = prepare_run(cfg, config.base_dir, config.source).cost
    record = simulate_config(cfg, config.base_dir, config.source, timeline=False)
    done = [r for r in record.requests if not math.isnan(r.finish_s)]
    prefill = sum(cost.step(StepWork.prefill(max(r.prompt_tokens - r.cached_tokens, 1), r.cached_tokens)).device_s
                  for r in done)
    span = max(r.finish_s for r in done) - min(r.arrival_s for r in done)
    batch = max(1, round(sum(r.finish_s - r.first_token_s for r in done) / span))
    context = round(statistics.fmean(r.prompt_tokens + r.output_tokens / 2 for r in done))
    decode_tokens = sum(max(r.output_tokens - 1, 0) for r in done)
    decode = decode_tokens / batch * cost.step(StepWork.decode(batch, batch * context)).device_s
    images = sum(e.images for e in (record.encodes or ()))
    encode = 0.0
    mm = cfg.workload.multimodal
    if images and mm is not None:
        accel = load_accelerator(cfg.hardware.accelerator)
        one_npu = CostModel(load_model(cfg.model), accel, cfg.cost, tp=1)
        spec = load_encoder(mm.encoder)
        encode = images * EncoderCost(spec, one_npu, mm.tokens_per_image or spec.tokens_per_image).images_s(1)
    return {"prefill_s": prefill, "decode_s": decode, "encode_s": encode, "decode_batch": batch, "images": images}


def pool_sizes(work: dict[str, float], rule: str) -> dict[str, int]:
    """The registered rule: prefill : decode instances nearest the work ratio (sum <= 8; ties: the
    smaller), and for EPD max(1, ceil(encode share x (prefill + decode))) encode instances."""
    target = math.log(work["prefill_s"] / work["decode_s"])
    p, d = min(((p, d) for p in range(1, MAX_POOL_INSTANCES) for d in range(1, MAX_POOL_INSTANCES - p + 1)),
               key=lambda pd: (abs(math.log(pd[0] / pd[1]) - target), pd[0] + pd[1]))
    sizes = {"cluster.prefill_instances": p, "cluster.decode_instances": d}
    if rule == "epd":
        share = work["encode_s"] / (work["prefill_s"] + work["decode_s"] + work["encode_s"])
        sizes["cluster.encode_instances"] = max(1, math.ceil(share * (p + d)))
    return sizes


def capacities(reg: Registration, base: Path, arms: list[Arm], sizes: Sizes,
               pools: dict[str, dict[str, int]] | None = None, only: list[str] | None = None,
               ) -> dict[str, dict[int, dict[str, Any]]]:
    """arm -> seed -> capacity.json's per-config entry, one bisection per seed (the registered
    rule), for the arms named in `only` (default all)."""
    chosen = [o for o in overlays(reg, arms, sizes, pools) if only is None or o.label in only]
    out: dict[str, dict[int, dict[str, Any]]] = {o.label: {} for o in chosen}
    for seed in sizes.seeds:
        docs, rows = overlay_capacities(base, chosen, [seed], sizes.tolerance, reg.quantile,
                                        start=None, jobs=JOBS, show_progress=False)
        for overlay, doc in zip(chosen, docs):
            out[overlay.label][seed] = {**doc, "binding": binding_constraint(rows, doc["label"], doc["fails_at_rps"])}
    return out


def measure_arms(reg: Registration, base: Path, arms: list[Arm], sizes: Sizes,
                 ) -> tuple[dict[str, dict[int, dict[str, Any]]], dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """Capacities of every arm; an arm with a pool rule is sized from the previous arm's run at
    its capacity (seed 0) first. Returns the capacities, the pool sizes and the work each read."""
    caps: dict[str, dict[int, dict[str, Any]]] = {}
    pools: dict[str, dict[str, int]] = {}
    works: dict[str, dict[str, float]] = {}
    i = 0
    while i < len(arms):
        j = i
        while j < len(arms) and (j == i or not arms[j].pools):
            j += 1  # a run of arms that need no pool rule (the first may carry one, already sized)
        caps.update(capacities(reg, base, arms, sizes, pools, only=[a.name for a in arms[i:j]]))
        if j < len(arms):
            previous = arms[j - 1].name
            rate = caps[previous][sizes.seeds[0]]["capacity_rps"]
            if rate is None:
                raise InputError(f"{reg.file}: arm[{j}].pools", f"the previous arm ({previous}) has no capacity",
                                 "a previous arm whose capacity was bracketed")
            config = overlay_config(base, overlays(reg, arms, sizes, pools)[j - 1])
            works[arms[j].name] = work_seconds(config, rate, sizes.seeds[0])
            pools[arms[j].name] = pool_sizes(works[arms[j].name], arms[j].pools)
        i = j
    return caps, pools, works


def _prompt_tokens(record: Any, summary: Any) -> tuple[float, float]:
    """(prompt tokens, of them served from the prefix cache) over the run's requests."""
    return (float(sum(r.prompt_tokens for r in record.requests)), float(sum(r.cached_tokens for r in record.requests)))


def mechanisms(reg: Registration, base: Path, arms: list[Arm], sizes: Sizes, rate: float, seed: int,
               pools: dict[str, dict[str, int]] | None = None) -> list[dict[str, Any]]:
    """Every arm run at one rate (req/s): what its bounds read (the registration's mechanism list)."""
    rows = []
    for overlay in overlays(reg, arms, sizes, pools):
        config = overlay_config(base, overlay)
        job = SimJob(at_rate(config, rate), str(config.base_dir), config.source, seed)
        result = run_one(job, inspect=_prompt_tokens)
        (prompt, cached), m = result.details, result.metrics
        rows.append({"arm": overlay.label, "rate_rps": rate, "kv_tokens": (result.summary.kv_cache or {}).get("kv_tokens"),
                     "hit_rate": cached / prompt if prompt else 0.0, "prefilled_tokens": prompt - cached,
                     "ttft_p90_s": m["ttft_p90_s"], "tpot_p90_s": m["tpot_p90_s"], "completed": m["completed"]})
    return rows


def sensitivity(reg: Registration, base: Path, arms: list[Arm], sizes: Sizes,
                pools: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Each registered assumption at its low and high value, applied to the baseline and the final
    arm alike (the final arm keeps the pool sizes the main run's rule gave it), at the first seed:
    the final ratio on each side."""
    every = overlays(reg, arms, sizes, pools)
    first, final = every[0], every[-1]
    rows = []
    for a in reg.assumption:
        row: dict[str, Any] = {"assumption": a.name, "source": a.source}
        for side, changes in (("low", a.low), ("high", a.high)):
            pair = [Overlay(f"{o.label}-{a.name}-{side}", {**o.changes, **changes}, f"{reg.file}: assumption {a.name}")
                    for o in (first, final)]
            docs, _ = overlay_capacities(base, pair, [sizes.seeds[0]], sizes.tolerance, reg.quantile,
                                         start=None, jobs=JOBS, show_progress=False)
            b, f = (d["capacity_rps_per_accelerator"] for d in docs)
            row[side] = {"changes": changes, "ratio": f / b if b and f is not None else None}
        rows.append(row)
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


def against_published(final: list[float | None], published: float) -> str:
    """Whether the final ratio's range over seeds contains the published figure (the registration's
    promise), said plainly, with the gap."""
    vals = [v for v in final if v is not None]
    if not vals:
        return f"No final ratio was bracketed, so nothing is said against the published ~{published:g}x."
    lo, hi, mean = min(vals), max(vals), statistics.fmean(vals)
    where = "contains" if lo <= published <= hi else "does not contain"
    return (f"The final ratio, {mean:.2f}x ({lo:.2f}..{hi:.2f}x over seeds), {where} the published ~{published:g}x"
            + ("." if where == "contains" else f": its mean is {mean / published - 1:+.0%} from it."))


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
           mech: list[dict[str, Any]], pools: dict[str, dict[str, int]] | None = None,
           works: dict[str, dict[str, float]] | None = None,
           causes: list[dict[str, Any] | None] | None = None,
           sens: list[dict[str, Any]] | None = None, ascend: dict[str, Any] | None = None) -> str:
    sizes = reg.sizes[mode]
    final = rat[arms[-1].name]
    lines = [f"# {reg.claim}", "",
             f"Mode `{mode}`: {sizes.max_requests} requests per run, seeds {list(sizes.seeds)}, bisection to "
             f"{sizes.tolerance:.0%}, SLO rule {reg.quantile} (simulated numbers).", "",
             f"## The registration ({reg.file}; `git log` shows when it was committed)", ""]
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
        lines += ["", f"Verdict: **{verdict(final, reg.threshold)}** (final arm {arms[-1].label}). "
                      f"{against_published(final, reg.published)}", ""]
    if causes:
        lines += ["## Why each step moved (seed 0)", "",
                  "Each arm against the previous one, both at the previous arm's capacity: the SLO that binds there "
                  "and `infralab explain`'s first-ranked cause (runs under `runs/`).", "",
                  "| arm | binds at capacity | metric | first cause | its share of the metric's change |",
                  "|---|---|---|---|---|"]
        for arm, cause in zip(arms, causes):
            binding = caps[arm.name][reg.sizes[mode].seeds[0]].get("binding") or "-"
            if cause is None:
                lines.append(f"| {arm.label} | {binding} | - | - | - |")
                continue
            share, delta = cause["share_of_metric_delta"], cause["delta_s"]
            moved = f"{delta:+.4g} s" if delta is not None else f"{cause['run_s']:.4g} s"
            lines.append(f"| {arm.label} | {binding} | {cause['metric']} | {cause['kind']} `{cause['key']}`: "
                         f"{moved} | {'-' if share is None else f'{share:.0%}'} |")
        lines.append("")
    if pools:
        lines += ["## Pool sizes by the registered rule", "",
                  "| arm | previous arm's work (device-s): prefill / decode / encode | decode batch | pools |",
                  "|---|---|---|---|"]
        for name, sizes_of in pools.items():
            w = (works or {})[name]
            shown = ", ".join(f"{k.split('.')[-1]} {v}" for k, v in sizes_of.items())
            lines.append(f"| {name} | {w['prefill_s']:.4g} / {w['decode_s']:.4g} / {w['encode_s']:.4g} | "
                         f"{w['decode_batch']} | {shown} |")
        lines.append("")
    if sens:
        lines += [f"## Sensitivity of the final ratio (seed {reg.sizes[mode].seeds[0]}; baseline and final arm alike)", "",
                  "| assumption | low | final ratio | high | final ratio | source |", "|---|---|---|---|---|---|"]
        for r in sens:
            cells = []
            for side in ("low", "high"):
                ratio = r[side]["ratio"]
                cells += [", ".join(f"{k} = {v}" for k, v in r[side]["changes"].items()),
                          "-" if ratio is None else f"{ratio:.2f}x"]
            lines.append(f"| {r['assumption']} | {' | '.join(cells)} | {r['source']} |")
        lines.append("")
    elif mode != "full":
        lines += ["Sensitivity: the full study varies each registered assumption.", ""]
    if mech:
        lines += [f"## Bounds at one rate ({mech[0]['rate_rps']:.4g} req/s: the baseline's capacity, seed 0)", "",
                  "| arm | KV capacity (tokens) | prefix hit rate | prompt tokens prefilled | p90 TTFT (s) | p90 TPOT (s) | completed |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['arm']} | {r['kv_tokens']:,} | {r['hit_rate']:.1%} | {r['prefilled_tokens']:,.0f} | "
                  f"{r['ttft_p90_s']:.3g} | {r['tpot_p90_s']:.3g} | {r['completed']} |" for r in mech]
    if ascend:
        lines += ["", *ascend_section(ascend)]
    return "\n".join(lines) + "\n"


def ascend_section(doc: dict[str, Any]) -> list[str]:
    """The Ascend path's error on the public Ascend measurements: evaluation points only (the
    scorer's own rule), each with its setting and source; the whole report is under `ascend/`."""
    lines = ["## The Ascend path against public Ascend measurements (evaluation points only)", "",
             f"`{Path(doc['points_file']).name}` scored by `infralab fidelity public` (full report: "
             "`ascend/public_points.md`). Error = (simulated - measured) / measured.", "",
             "| family | scored points | median abs error | worst abs error | sim above / below |", "|---|---|---|---|---|"]
    lines += [f"| {f['family']} | {f['n']} | {f['median_abs']:.1%} | {f['worst_abs']:.1%} | {f['over']} / {f['under']} |"
              for f in doc["families"]]
    lines += ["", "| point | setting | metric | measured | simulated | error | engine |", "|---|---|---|---|---|---|---|"]
    for p in doc["points"]:
        if not p["scored"] or p["error"] is None:
            continue
        lines.append(f"| {p['id']} | {p['model']} {p['dtype']} {p['accelerator']} tp{p['tp']} | {p['metric']} | "
                     f"{p['measured']:.4g} | {p['simulated']:.4g} | {p['error']:+.1%} | {p['engine']} |")
    return lines


def run(mode: str, out: Path, path: Path = REGISTRATION, atomic: bool = True) -> dict[str, Any]:
    """The setting's study at `mode`'s sizes; writes report.md, long_context.json, the figure and
    the explained runs (runs/) into `out` (atomically; `atomic=False`: into a folder the caller
    makes atomic)."""
    if atomic:
        with atomic_output_dir(out) as tmp:
            return _study(mode, tmp, path)
    out.mkdir(parents=True, exist_ok=True)
    return _study(mode, out, path)


def _study(mode: str, folder: Path, path: Path) -> dict[str, Any]:
    reg = load_registration(path)
    base = (path.parent / reg.base).resolve()
    sizes = reg.sizes[mode]
    seed = sizes.seeds[0]
    arms, skipped = runnable_arms(reg)
    caps, pools, works = measure_arms(reg, base, arms, sizes)
    rat = ratios(caps, arms)
    first = caps[arms[0].name][seed]["capacity_rps"]
    mech = mechanisms(reg, base, arms, sizes, first, seed, pools) if first else []
    sens = sensitivity(reg, base, arms, sizes, pools) if mode == "full" else []
    configs = [overlay_config(base, o) for o in overlays(reg, arms, sizes, pools)]
    causes = step_causes(configs, [a.name for a in arms], [caps[a.name][seed]["capacity_rps"] for a in arms],
                         [caps[a.name][seed]["binding"] for a in arms], folder, seed, base, JOBS)  # runs under folder/runs
    doc = {"schema": SCHEMA, "mode": mode, "sizes": dataclasses.asdict(sizes), "claim": reg.claim,
           "threshold": reg.threshold, "published": reg.published,
           "arms": [{"name": a.name, "label": a.label, "capacity": {str(s): d for s, d in caps[a.name].items()},
                     "ratio_by_seed": rat[a.name], "cause": cause} for a, cause in zip(arms, causes)],
           "not_run": [{"name": a.name, "why": why} for a, why in skipped],
           "pools": pools, "work_seconds": works,
           "mechanisms": mech, "sensitivity": sens,
           # The registered final arm decides; where it was not run the study is undecided.
           "verdict": "undecided" if skipped else verdict(rat[arms[-1].name], reg.threshold),
           "last_arm_run_verdict": verdict(rat[arms[-1].name], reg.threshold),
           "deviations": [dataclasses.asdict(d) for d in reg.deviation]}
    (folder / "ascend").mkdir()
    ascend, _, _ = score_public_points(ASCEND_POINTS, folder / "ascend", lambda _: None)
    doc["ascend_public_points"] = {"families": ascend["families"], "verdict": ascend["verdict"]}
    dump_json(doc, folder / "long_context.json")
    markdown = report(reg, mode, arms, skipped, caps, rat, mech, pools, works, causes, sens, ascend)
    (folder / "report.md").write_text(markdown, encoding="utf-8")
    figure(arms, rat, reg, folder / "evolution.png")
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("quick", "full"), default="full")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--registration", type=Path, default=REGISTRATION,
                        help="the registration file (default long_context.toml; chat.toml: the chat workload under its rules)")
    args = parser.parse_args(argv)
    try:
        doc = run(args.mode, args.out, args.registration)
    except InputError as exc:
        print(f"error: {exc}")
        return 2
    print((args.out / "report.md").read_text(encoding="utf-8"))
    return 0 if doc["verdict"] != "undecided" else 3


if __name__ == "__main__":
    raise SystemExit(main())
