"""The text form of an explanation (`infralab explain` without --json): the top of the JSON
document of `infralab.agent.explain`, for people. Times in seconds, fractions as percentages."""

from __future__ import annotations

from typing import Any


def percent(x: float | None) -> str:
    """A fraction as a whole percentage ("-" for None)."""
    return "-" if x is None else f"{100 * x:.0f}%"


def _s(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def format_text(doc: dict[str, Any], top: int = 8) -> str:
    """The explanation for people (the JSON holds everything; this shows the top of it)."""
    lines = []
    run, base, m = doc["run"], doc["baseline"], doc["metric"]
    lines.append(f"explain {run['source']}" + (f"  against {base['source']}" if base else ""))
    for info in (run, base):
        if info and info["timeline_truncated"]:
            lines.append(f"  note: the timeline of {info['source']} is truncated after "
                         f"{info['timeline_truncated_after_s']} s; interval analysis covers only that part")
    rel = f" ({100 * m['relative']:+.1f}%)" if m.get("relative") is not None else ""
    lines.append(f"metric: {m['name']} ({m['description']}): run {_s(m['run'])} s"
                 + (f", baseline {_s(m['baseline'])} s, delta {_s(m['delta'], True)} s{rel}" if base else ""))
    lines.append("")
    lines.append("Causes, ranked (those moving with the metric first, then by |delta_s|; see ranking_rule in --json):")
    if not doc["causes"]:
        lines.append("  (nothing differs by more than 1 ns)" if base else "  (no intervals or requests)")
    for c in doc["causes"][:top]:
        share = f", {100 * c['share_of_metric_delta']:.0f}% of the metric change" if c["share_of_metric_delta"] is not None else ""
        value = (f"{_s(c['delta_s'], True)} s (run {_s(c['run_s'])}, baseline {_s(c['baseline_s'])})"
                 if c["delta_s"] is not None else f"{_s(c['run_s'])} s")
        crit = "critical path" if c["on_critical_path"] else "off the critical path"
        if c["agrees_with_metric"] is False:
            crit += "; goes against the metric change"
        lines.append(f"{c['rank']:>3}. [{c['kind']}] {c['key']}: {value}; {crit}{share}")
        lines.append(f"       {c['description']}")
        for blk in c["details"].get("blocked_by", [])[:3]:
            what = blk["thread"] + (f" {blk['state']} {blk['op']!r}" if blk["state"] else "")
            val = _s(blk["delta_s"], True) if blk["delta_s"] is not None else _s(blk["run_s"])
            lines.append(f"       GIL held by {what}: {val} s")
        for req in c["details"].get("top_requests", [])[:3]:
            lines.append(f"       request {req['id']}: run {_s(req['run_s'])} s, baseline {_s(req['baseline_s'])} s")
        for iv in c["intervals"][:2]:
            lines.append(f"       e.g. {iv['track']} {iv['name']} {iv['op']!r} at {iv['start_s']:.6f} s for {iv['duration_s']:.6f} s")
    bd = doc["breakdown"]
    if bd["categories"]:
        lines.append("")
        where = f" of {bd['critical_track']}" if bd["critical_track"] else " (request phases, summed)"
        lines.append(f"Breakdown{where} (s):  run  baseline  delta")
        for cat in bd["categories"]:
            lines.append(f"  {cat['name']:<24}{_s(cat['run_s']):>10}{_s(cat['baseline_s']):>10}{_s(cat['delta_s'], True):>10}")
    units = doc["units"]
    if units["top"]:
        lines.append("")
        lines.append(f"{units['kind'].capitalize()}s with the largest {'change' if base else 'time'}:")
        for u in units["top"][:5]:
            val = f"{_s(u['delta_s'], True)} s" if u["delta_s"] is not None else f"{_s(u['run_s'])} s"
            lines.append(f"  {units['kind']} {u['id']} [{u['start_s']:.4f}, {u['end_s']:.4f}] s: {val}, "
                         f"mostly {u['dominant_phase']}")
    if doc["overlaps"]:
        lines.append("")
        lines.append("Overlaps (fraction of B covered by A | of A inside B | A exposed s):")
        for o in doc["overlaps"]:
            r, b = o["run"], o["baseline"]
            was = f"{percent(b['b_covered_by_a'])} | {percent(b['a_covered_by_b'])} | {_s(b['a_exposed_s'])} -> " if b else ""
            lines.append(f"  {o['name']}: {was}{percent(r['b_covered_by_a'])} | {percent(r['a_covered_by_b'])} | {_s(r['a_exposed_s'])}")
    if doc["resources"]:
        lines.append("")
        lines.append("Resources (busy fraction):")
        for res in doc["resources"]:
            was = f"{percent(res['baseline']['busy_fraction'])} -> " if res["baseline"] else ""
            lines.append(f"  {res['track']:<28}{was}{percent(res['run']['busy_fraction'])}")
    changed = [x for x in doc["metrics"] if x["delta"] is not None and abs(x["delta"]) > 0]
    if base and changed:
        lines.append("")
        lines.append("Summary metrics that changed (run, baseline, delta):")
        for x in changed:
            lines.append(f"  {x['name']:<28}{x['run']:>14.6g}{x['baseline']:>14.6g}{x['delta']:>+14.6g}")
    return "\n".join(lines) + "\n"
