"""The text form of an explanation (`infralab explain` without --json): the top of the JSON
document of `infralab.agent.explain`, for people. Times in seconds, fractions as percentages."""

from __future__ import annotations

from typing import Any


def percent(x: float | None) -> str:
    """A fraction as a whole percentage ("-" for None)."""
    return "-" if x is None else f"{100 * x:.0f}%"


def _s(x: float | None, signed: bool = False) -> str:
    """Seconds to 4 decimals ("-" for None)."""
    if x is None:
        return "-"
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Rows of text cells as aligned columns: the first left-aligned, the others right-aligned,
    each as wide as its widest cell, two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        return (indent + "  ".join([first, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:]))])).rstrip()

    return [line(header), *(line(r) for r in rows)]


def _alone(header: list[str], rows: list[list[str]], keep: tuple[int, ...]) -> list[str]:
    """`table` of the first column and the columns `keep`: a run explained alone has no baseline
    or delta columns to show."""
    cols = (0, *keep)
    return table([header[i] for i in cols], [[r[i] for i in cols] for r in rows])


def format_text(doc: dict[str, Any], top: int = 8) -> str:
    """The explanation for people (the JSON holds everything; this shows the top of it)."""
    lines = []
    run, base, m = doc["run"], doc["baseline"], doc["metric"]
    per_request = doc["breakdown"]["unit"] == "request"
    unit = f"s per {m.get('per', 'request')}" if per_request else "s"
    lines.append(f"explain {run['source']}" + (f"  against {base['source']}" if base else ""))
    for info in (run, base):
        if info and info["timeline_truncated"]:
            lines.append(f"  note: the timeline of {info['source']} is truncated after "
                         f"{info['timeline_truncated_after_s']} s; interval analysis covers only that part")
        for gap in (info or {}).get("missing", []):
            lines.append(f"  note: {info['source']}: {gap}")
    rel = f" ({100 * m['relative']:+.1f}%)" if m.get("relative") is not None else ""
    lines.append(f"metric: {m['name']} ({m['description']}): run {_s(m['run'])} s"
                 + (f", baseline {_s(m['baseline'])} s, delta {_s(m['delta'], True)} s{rel}" if base else ""))
    if per_request:
        lines.append(f"  {m['units']} requests; figures in {unit} below are each phase's part of the metric "
                     f"(they add up to it); totals over the requests are labelled as such")
    lines.append("")
    lines.append("Causes, ranked (those moving with the metric first, then by |delta|; see ranking_rule in --json):")
    if not doc["causes"]:
        lines.append("  (nothing differs by more than 1 ns)" if base else "  (no intervals or requests)")
    rows = []
    for c in doc["causes"][:top]:
        share = f"{100 * c['share_of_metric_delta']:.0f}%" if c["share_of_metric_delta"] is not None else "-"
        where = "critical path" if c["on_critical_path"] else "off the critical path"
        if c["agrees_with_metric"] is False:
            where += "; against the metric change"
        cause_unit = unit if c["kind"] == "phase" else "s"
        rows.append([f"{c['rank']:>2}. [{c['kind']}] {c['key']}", _s(c["run_s"]), _s(c["baseline_s"]),
                     _s(c["delta_s"], True), cause_unit, share, where])
    if rows:
        header = ["cause", "run", "baseline", "delta", "unit", "share", "where"]
        lines += table(header, rows) if base else _alone(header, rows, (1, 4, 6))
    for c in doc["causes"][:top]:
        details = []
        if c["kind"] == "phase" and "run_total_s" in c["details"]:
            d = c["details"]
            details.append(f"total over the {d['requests']} requests: "
                           + (f"{_s(d['delta_total_s'], True)} s" if base else f"{_s(d['run_total_s'])} s"))
        for blk in c["details"].get("blocked_by", [])[:3]:
            what = blk["thread"] + (f" {blk['state']} {blk['op']!r}" if blk["state"] else "")
            val = _s(blk["delta_s"], True) if blk["delta_s"] is not None else _s(blk["run_s"])
            details.append(f"GIL held by {what}: {val} s")
        for req in c["details"].get("top_requests", [])[:3]:
            details.append(f"request {req['id']}: {c['key']} {_s(req['run_s'])} s"
                           + (f" (baseline {_s(req['baseline_s'])} s)" if base else ""))
        for iv in c["intervals"][:2]:
            details.append(f"e.g. {iv['track']} {iv['name']} {iv['op']!r} at {iv['start_s']:.6f} s for {iv['duration_s']:.6f} s")
        if details:
            lines.append(f"  {c['rank']:>2}. {c['description']}")
            lines += [f"        {d}" for d in details]
    bd = doc["breakdown"]
    if bd["categories"]:
        lines.append("")
        if per_request:
            lines.append(f"Breakdown of the metric by request phase ({unit}; totals: s summed over the requests):")
            rows = [[cat["name"], _s(cat["run_s"]), _s(cat["baseline_s"]), _s(cat["delta_s"], True),
                     _s(cat.get("run_total_s")), _s(cat.get("delta_total_s"), True)] for cat in bd["categories"]]
            header = ["phase", "run", "baseline", "delta", "run total", "delta total"]
            lines += table(header, rows) if base else _alone(header, rows, (1, 4))
        else:
            lines.append(f"Breakdown of {bd['critical_track']} (s):")
            rows = [[cat["name"], _s(cat["run_s"]), _s(cat["baseline_s"]), _s(cat["delta_s"], True)]
                    for cat in bd["categories"]]
            header = ["activity", "run", "baseline", "delta"]
            lines += table(header, rows) if base else _alone(header, rows, (1,))
    units = doc["units"]
    if units["top"]:
        lines.append("")
        lines.append(f"{units['kind'].capitalize()}s with the largest {'change' if base else 'time'}:")
        rows = [[f"{units['kind']} {u['id']}", f"{u['start_s']:.4f}", f"{u['end_s']:.4f}",
                 _s(u["delta_s"], True) if u["delta_s"] is not None else _s(u["run_s"]), u["dominant_phase"] or "-"]
                for u in units["top"][:5]]
        lines += table([units["kind"], "start s", "end s", "delta s" if base else "value s", "mostly"], rows)
    if doc["overlaps"]:
        lines.append("")
        lines.append("Overlaps (B covered by A | A inside B | A exposed s):")
        rows = []
        for o in doc["overlaps"]:
            r, b = o["run"], o["baseline"]
            rows.append([o["name"], *((percent(b["b_covered_by_a"]), percent(b["a_covered_by_b"]), _s(b["a_exposed_s"]))
                                      if b else ("", "", "")),
                         percent(r["b_covered_by_a"]), percent(r["a_covered_by_b"]), _s(r["a_exposed_s"])])
        header = ["pair", "base B|A", "base A|B", "base exposed", "run B|A", "run A|B", "run exposed"]
        lines += table(header if base else [header[0], *header[4:]], rows if base else [[r[0], *r[4:]] for r in rows])
    if doc["resources"]:
        lines.append("")
        lines.append("Resources (busy fraction):")
        rows = [[res["track"], percent(res["baseline"]["busy_fraction"]) if res["baseline"] else "",
                 percent(res["run"]["busy_fraction"])] for res in doc["resources"]]
        lines += table(["track", "baseline", "run"] if base else ["track", "run"],
                       rows if base else [[r[0], r[2]] for r in rows])
    changed = [x for x in doc["metrics"] if x["delta"] is not None and abs(x["delta"]) > 0]
    if base and changed:
        lines.append("")
        lines.append("Summary metrics that changed:")
        rows = [[x["name"], f"{x['run']:.6g}", f"{x['baseline']:.6g}", f"{x['delta']:+.6g}"] for x in changed]
        lines += table(["metric", "run", "baseline", "delta"], rows)
    return "\n".join(lines) + "\n"
