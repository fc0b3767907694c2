"""Why a scenario degrades, in `infralab explain`'s words, and how far a scenario is from a target.

- `explain_worst`: for an arm's worst scenario, simulate it with and without the transfer thread,
  write both timelines (so `infralab explain A --against B` reproduces it) and return explain's
  top cause on the critical path, with the thread and op that held the GIL meanwhile.
- `sensitivity`: the degradation, held and released, as one host cost is varied around its cited
  value: how far the cited numbers are from a published result. A sensitivity, never a fit: the
  scenario's own value is the one the hypothesis is decided with.
Seconds throughout.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from infralab.agent.explain import explain
from infralab.agent.run_dir import LoadedRun
from infralab.metrics.timeline import save_trace
from infralab.agent.studies import load_hook

_scenario = load_hook(Path(__file__).with_name("scenario.py"))
_attribution = load_hook(Path(__file__).with_name("attribution.py"))
build, run = _scenario.build, _scenario.run


def explain_worst(exp, scenario, holds: bool, label: str, timeline_dir: Path | None) -> dict[str, Any]:
    """explain's leading critical-path cause for `scenario` (with vs without the transfer thread)."""
    built = build(exp.setup, exp.host, scenario)
    without, with_ = run(built, scenario, holds, with_transfer=False), run(built, scenario, holds, with_transfer=True)
    files = []
    if timeline_dir is not None:
        timeline_dir.mkdir(parents=True, exist_ok=True)
        for record, suffix in ((with_.record, ""), (without.record, "-no-transfer")):
            path = timeline_dir / f"{scenario.name}-{label}{suffix}.json"
            save_trace(record, path, metadata=_attribution.timeline_metadata(scenario=scenario.name, arm=label, kv_transfer=not suffix))
            files.append(path)
    meta = _attribution.timeline_metadata()
    doc = explain(LoadedRun(f"{scenario.name}-{label}", "timeline", tuple(with_.record.intervals), trace_metadata=meta),
                  LoadedRun(f"{scenario.name}-{label}-no-transfer", "timeline", tuple(without.record.intervals),
                            trace_metadata=meta))
    critical = [c for c in doc["causes"] if c["on_critical_path"] and c["agrees_with_metric"]]
    top = critical[0] if critical else (doc["causes"][0] if doc["causes"] else None)
    blocker = None
    if top is not None and top["kind"] == "gil_wait":
        held = [b for b in top["details"].get("blocked_by", []) if b["thread"] != "(hand-off)"]
        blocker = held[0] if held else None
    return {
        "scenario": scenario.name,
        "extra_s": doc["metric"]["delta_total_s"],
        "cause": None if top is None else {k: top[k] for k in ("kind", "key", "description", "delta_s",
                                                               "share_of_metric_delta")},
        "blocked_by": blocker,
        "timelines": [p.name for p in files],
    }


def explanation_text(why: dict[str, Any]) -> str:
    cause = why["cause"]
    if cause is None:
        return f"`infralab explain` finds no cause in {why['scenario']} (no extra time)"
    share = cause["share_of_metric_delta"]
    text = (f"`infralab explain` on {why['scenario']}: {why['extra_s'] * 1e3:.1f} ms extra prefill time, "
            f"{'' if share is None else f'{share:.0%} of it '}{cause['description']}")
    blocker = why["blocked_by"]
    if blocker is not None:
        text += (f", the GIL held by {blocker['thread']} in {blocker['state']} '{blocker['op']}' "
                 f"({blocker['delta_s'] * 1e3:.1f} ms)")
    return text


def sensitivity(exp, scenario, field: str, values: tuple[float, ...]) -> list[dict[str, float]]:
    """Degradation held and released with the host profile's `field` set to each of `values`."""
    rows = []
    for value in values:
        built = build(exp.setup, dataclasses.replace(exp.host, **{field: value}), scenario)
        row = {field: value}
        for mode, holds in (("held", True), ("released", False)):
            without = run(built, scenario, holds, with_transfer=False)
            with_ = run(built, scenario, holds, with_transfer=True)
            row[mode] = 1.0 - with_.throughput / without.throughput
        rows.append(row)
    return rows
