"""`real`: the real run this machine offers, to confirm a simulated conclusion.

For `host-concurrency` hypotheses: the real-threads probe (`infralab.kernels.host_probe`): Python
threads, native calls through ctypes that hold (PyDLL) or release (CDLL) the GIL, a transfer thread
copying buffers; the same schedule is also simulated with the host profile measured here, and both
are reported side by side (`infralab.agent.gil_case.probe_vs_sim`).
Metrics per arm (knob dispatch_combine_gil = held | released), one sample per probe repeat:
degradation (mapping schedule granularity -> 1 - prefill without / with transfer), max_degradation,
mean_degradation, kv_python_over_comm (mapping; from the repeat nearest the median),
min_kv_python_over_comm. Real timings vary from run to run: criteria need >= 2 repeats and are
judged with the noise rule (`infralab.agent.acceptance.NOISE_RULE`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import HostConcurrencySetup, Hypothesis, setup_of
from infralab.agent.validators.base import Measurement

NAME = "real"


class Real:
    name = NAME

    def unavailable(self, hyp: Hypothesis) -> str | None:
        if hyp.kind != "host-concurrency":
            return f"no real run for a {hyp.kind!r} hypothesis on this machine"
        from infralab.kernels.host_probe.build import NativeBuildError, compiler

        try:
            compiler()
        except NativeBuildError as exc:
            return str(exc)
        return None

    def measure(self, hyp: Hypothesis, workdir: Path | None) -> Measurement:
        from infralab.agent.gil_probe import probe_table, probe_vs_sim
        from infralab.agent.validators.sim import host_experiment
        from infralab.results import dump_json

        setup = setup_of(hyp)
        assert isinstance(setup, HostConcurrencySetup)
        exp = host_experiment(hyp, setup)
        timeline_dir = None if workdir is None else workdir / "timelines"
        if timeline_dir is not None:
            timeline_dir.mkdir(parents=True, exist_ok=True)
        result = probe_vs_sim(exp.probe, timeline_dir)
        table = probe_table(result)
        files: tuple[str, ...] = ()
        if workdir is not None:
            dump_json(result, workdir / "probe.json")
            (workdir / "probe_table.md").write_text(table)
            files = ("probe.json", "probe_table.md", *sorted(f"timelines/{p.name}" for p in timeline_dir.glob("*.json")))
        samples: dict[str, list[dict[str, Any]]] = {}
        findings = []
        for arm in hyp.arms:
            mode = str(arm.config["dispatch_combine_gil"])
            variants = [v for v in result["variants"] if v["mode"] == mode]
            samples[arm.name] = probe_samples(variants)
            findings += [_finding(arm.name, v, tuple(f for f in files if not f.startswith("timelines/")
                                                     or f"-{v['granularity']}-{mode}" in f)) for v in variants]
        return Measurement(NAME, samples, tuple(findings), varies=True,
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


def _finding(arm: str, v: dict[str, Any], files: tuple[str, ...]) -> Finding:
    p, s = v["probe"], v["sim"]
    rel = v["rel_err"]["degradation"]
    return Finding(
        validator=NAME, arm=arm,
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
