"""The real-threads probe beside the simulator, on the same host schedule, at each core count.

The probe (infralab.kernels.host_probe) runs the schedule on real threads of this machine, pinned
to 1 and then 2 cores (CPU affinity, set before its threads start); the simulator runs the same
schedule with `cores` set to the same count (sim/host/cpu.py). What is calibrated and what is
predicted:
- calibrated, from single-thread measurements only: the cost of a unit of Python work, the
  transfer thread's GIL hold and copy per chunk, its own loop run alone as each schedule feeds it
  (`threads.chunk_costs`), and the main thread's segment durations from the runs WITHOUT the
  transfer thread (one thread, nothing to contend with); the GIL's switch interval and its
  hand-off latency after a blocking release (sampled beside every repeat at the same core count:
  it swings with the machine's load); the OS's wake-up delay of a thread woken on a busy core
  (a microbenchmark on one core, also sampled beside every repeat) and its quantum (`quantum_us`,
  stated: the 4 ms tick of a HZ=250 kernel);
- predicted: everything about the runs WITH the transfer thread, in particular the degradation
  and how it changes from 2 cores to 1 (the core effect). Nothing is fitted to it.
The probe repeats each variant (`repeats`) to show its run-to-run spread (per-repeat degradation
from the paired runs, min..max). The probe's numbers are measurements of this machine at this
moment (a benchmark); the simulator's are deterministic given them.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from pathlib import Path
from typing import Any

from infralab.agent.studies import load_hook
from infralab.metrics.records import Interval, RunRecord
from infralab.metrics.timeline import save_trace
from infralab.sim.host.cpu import Placement
from infralab.sim.host.gil import GilParams
from infralab.sim.host.overlap import op_of

_case = load_hook(Path(__file__).with_name("case.py"))
attribution = load_hook(Path(__file__).with_name("attribution.py"))
_schedule = load_hook(Path(__file__).with_name("host_schedule.py"))
HostSchedule, run_host_schedule = _schedule.HostSchedule, _schedule.run_host_schedule
threads = load_hook(Path(__file__).with_name("threads.py"))
MODES, ProbeConfig = _case.MODES, _case.ProbeConfig
HANDOFF_TRIALS = 4  # hand-off samples of each kind taken after every probe repeat
START_TRIALS = 2  # thread-start placements taken after every probe repeat (each after a run alone)


def _probe_intervals(probe_run) -> list[Interval]:
    """Probe intervals in the simulator's form, seconds from the run's start."""
    t0 = probe_run.start_ns
    return [
        Interval(iv.track, iv.name, (iv.start_ns - t0) * 1e-9, (iv.end_ns - t0) * 1e-9, (("op", iv.op),))
        for iv in probe_run.intervals
    ]


@dataclasses.dataclass(frozen=True)
class ProbeSegments:
    """Mean segment durations the probe itself recorded in its runs WITHOUT transfer (seconds):
    one thread, so no GIL or core contention in them."""

    launch_s: float  # one Python launch segment (stalls included: they happen without transfer too)
    dispatch_s: float
    combine_s: float
    gap_s: float  # main-thread time outside any recorded segment, per Python segment (bookkeeping)


def _dispatch_count(main: list[Interval]) -> int:
    """Layers x steps of a probe run: its count of dispatch calls."""
    return sum(1 for iv in main if iv.name.startswith("native") and op_of(iv) == "dispatch")


def probe_segments(without: list[list[Interval]], prefill_s: list[float]) -> ProbeSegments:
    def mean_of(runs, track, name, op):
        found = [iv.end_s - iv.start_s for ivs in runs for iv in ivs if iv.track == track and iv.name == name and op_of(iv) == op]
        return statistics.fmean(found) if found else 0.0

    def sum_of(runs, track, names, op):
        return sum(iv.end_s - iv.start_s for ivs in runs for iv in ivs if iv.track == track and iv.name in names and op_of(iv) == op)

    main = [[iv for iv in ivs if iv.track == "thread/main"] for ivs in without]
    launches = 2 * _dispatch_count(main[0])
    # Time outside Python and native segments (loop bookkeeping, wake-ups), spread over the
    # Python segments; with no transfer thread there is nobody to wait for the GIL for.
    gaps = [
        (span - sum(iv.end_s - iv.start_s for iv in ivs if iv.name != "gil-wait")) / max(launches, 1)
        for ivs, span in zip(main, prefill_s)
    ]
    native = "native-hold-gil" if any(iv.name == "native-hold-gil" for iv in main[0]) else "native-release-gil"
    return ProbeSegments(
        launch_s=sum_of(without, "thread/main", ("python", "stalled"), "launch") / max(launches * len(without), 1),
        dispatch_s=mean_of(without, "thread/main", native, "dispatch"),
        combine_s=mean_of(without, "thread/main", native, "combine"),
        gap_s=max(statistics.fmean(gaps), 0.0),
    )


def placement_of(rule) -> Placement:
    """sim/host/cpu.py's placement rule from the micro-probe's measurement (`PlacementRule`): the
    measured share in each state; a state no trial saw keeps Placement's default (the kernel's rule
    read literally)."""
    if rule is None:
        return Placement()
    return Placement(
        stay_with_waker=1.0 if rule.stay_with_waker is None else rule.stay_with_waker,
        to_idle_previous=1.0 if rule.to_idle_previous is None else rule.to_idle_previous,
        pull_delay_samples_s=tuple(rule.pull_delay_samples_s),
        stay_on_busy_previous=0.0 if rule.stay_on_busy_previous is None else rule.stay_on_busy_previous,
        new_on_parent=0.0 if rule.new_on_parent is None else rule.new_on_parent,
    )


def _chunk_python_s(cfg: ProbeConfig, m, seg: ProbeSegments, descriptors: str, granularity: str) -> float:
    """The transfer thread's Python per chunk (GIL held): its measured hold per chunk in the
    schedule's pattern (`chunk_cost(granularity).hold_s`: descriptors, their recording, the copy
    call's setup, timed alone), else the descriptors at the unit cost plus the main thread's
    bookkeeping gap; with native descriptors only the gap (the descriptors are the GIL-releasing
    call)."""
    if descriptors == "native":
        return seg.gap_s
    cost = m.chunk_cost(granularity)
    return cost.hold_s if cost is not None else seg.gap_s + cfg.blocks_per_chunk * m.python_unit_s


def _copy_s(cfg: ProbeConfig, m, granularity: str) -> float:
    """One chunk's copy (GIL released): timed alone in the schedule's pattern where measured
    (`chunk_cost(granularity).copy_s`), else the chunk at the cold-cache memcpy rate."""
    cost = m.chunk_cost(granularity)
    return cost.copy_s if cost is not None else cfg.chunk_kib * 1024 / m.copy_cold_bytes_per_s


def host_schedule(cfg: ProbeConfig, m, seg: ProbeSegments, granularity: str, holds: bool,
                  cores: int, descriptors: str = "python") -> HostSchedule:
    """The probe's schedule for the simulator on `cores` cores: the main thread's segments as the
    probe recorded them alone, the transfer thread's Python and copy from the single-thread
    microbenchmarks (`m`: HostMeasurements), the GIL's switch interval and the hand-off latency
    after a blocking release as measured (drawn from the samples). A release by a thread that
    goes on computing uses the same latency: whether the woken thread then finds a free core is
    the core model's business, not the GIL's. `descriptors` "native": the descriptor work is the
    same length but in a GIL-releasing native call, as the probe then runs it."""
    def measured(value: float) -> float:
        return 0.0 if value != value else value  # NaN: not measurable here
    return HostSchedule(
        steps=cfg.steps,
        layers=cfg.layers,
        launch_s=seg.launch_s + seg.gap_s,
        dispatch_s=seg.dispatch_s,
        combine_s=seg.combine_s,
        chunk_python_s=_chunk_python_s(cfg, m, seg, descriptors, granularity),
        native_descriptors_s=cfg.blocks_per_chunk * m.python_unit_s if descriptors == "native" else 0.0,
        copy_s=_copy_s(cfg, m, granularity),
        granularity=granularity,
        holds_gil=holds,
        gil=GilParams(m.switch_interval_s, measured(m.handoff_s), handoff_samples_s=tuple(m.handoff_samples_s)),
        native_busy=cfg.native_wait == "spin",
        cores=cores,
        quantum_s=cfg.quantum_us * 1e-6,
        wake_delay_samples_s=tuple(m.wake_delay_samples_s),
        slice_s=cfg.slice_us * 1e-6,
        wake_delays_by_held_s=tuple((held, tuple(samples)) for held, samples in m.wake_delays_by_held_s),
        waker_delay_samples_s=tuple(m.waker_delay_samples_s),
        placement=placement_of(m.placement),
    )


def _main_breakdown(intervals: list[Interval], prefill_s: float) -> dict[str, float]:
    """Main thread's time by what it did: Python, native calls, and the rest (GIL waits, OS)."""
    main = [iv for iv in intervals if iv.track == "thread/main" and iv.end_s <= prefill_s + 1e-9]
    python = sum(iv.end_s - iv.start_s for iv in main if iv.name == "python")
    native = sum(iv.end_s - iv.start_s for iv in main if iv.name.startswith("native"))
    return {"main_python_s": python, "main_native_s": native, "main_other_s": prefill_s - python - native}


def _nearest_run(runs: list, target: float):
    return min(runs, key=lambda r: abs(r.prefill_s - target))


def _nearest(runs: list[tuple[list[Interval], float]], target: float) -> tuple[list[Interval], float]:
    return min(runs, key=lambda r: abs(r[1] - target))


def _summary(without: list[tuple[list[Interval], float]], with_: list[tuple[list[Interval], float]]) -> dict[str, Any]:
    """Medians over repeats; overlap and breakdowns from the runs nearest the medians."""
    median_without = statistics.median(s for _, s in without)
    median_with = statistics.median(s for _, s in with_)
    typical_with = _nearest(with_, median_with)
    ov = attribution.overlaps(typical_with[0])
    return {
        "prefill_without_s": median_without,
        "prefill_with_s": median_with,
        "degradation": 1.0 - median_without / median_with,
        "kv_python_over_comm": ov.kv_python_over_comm,
        "kv_activity_over_comm": ov.kv_activity_over_comm,
        "kv_python_inside_comm": ov.kv_python_inside_comm,
        "without": _main_breakdown(*_nearest(without, median_without)),
        "with": _main_breakdown(*typical_with),
    }


def _rel_err(sim: float, real: float) -> float | None:
    return None if real == 0 else (sim - real) / abs(real)


def _spread(without: list[float], with_: list[float]) -> dict[str, Any]:
    """Per-repeat degradation of the paired runs (without, then with, back to back), its range and
    quartiles."""
    per_repeat = [1.0 - a / b for a, b in zip(without, with_)]
    q = statistics.quantiles(per_repeat, n=4, method="inclusive") if len(per_repeat) > 1 else per_repeat * 3
    return {"per_repeat": per_repeat, "min": min(per_repeat), "max": max(per_repeat), "p25": q[0], "p75": q[2]}


# A pair of runs is "quiet" when other processes used at most this share of its cores' capacity
# (kernels/host_probe/contention.py; /proc/stat counts in 10 ms ticks, so a 0.2 s pair on one core
# cannot resolve much less). Stated, not tuned to any comparison.
QUIET_FOREIGN_SHARE = 0.10
# The probe's median is taken over the quiet pairs when there are at least this many of them
# (and at least a third of the repeats); otherwise over all pairs, and the variant is marked noisy.
MIN_QUIET = 3


@dataclasses.dataclass(frozen=True)
class ProbePair:
    """One repeat of a variant: the run without the transfer thread, then the run with it."""

    without: list[Interval]
    without_s: float
    with_: list[Interval]
    with_s: float
    foreign_share: float | None  # other processes' share of the cores over both runs
    runqueue_wait_s: dict[str, float | None]  # per thread of the run with transfer
    chunks_on_mains_cpu: float | None = None  # the run with transfer: threads.chunks_on_mains_cpu

    @property
    def quiet(self) -> bool:
        return self.foreign_share is not None and self.foreign_share <= QUIET_FOREIGN_SHARE


def _probe_pair(sched, libs) -> ProbePair:
    r0 = threads.run_probe(sched, False, libs)
    r1 = threads.run_probe(sched, True, libs)
    both = r0.contention + r1.contention if r0.contention and r1.contention else None
    return ProbePair(_probe_intervals(r0), r0.prefill_s, _probe_intervals(r1), r1.prefill_s,
                     None if both is None else both.foreign_share, dict(r1.runqueue_wait_s),
                     threads.chunks_on_mains_cpu(r1))


def probe_vs_sim(cfg: ProbeConfig, timeline_dir: Path | None = None) -> dict[str, Any]:
    """Run the probe on this machine at each of `cfg.cores` and the simulator on the same
    schedule and core count; compare. The variants (granularity x GIL mode x descriptors) run in
    interleaved rounds: each round runs every variant once (without, then with the transfer
    thread), in an order rotated from round to round, so that a burst of load from other processes
    hits all variants alike. Every pair records how much other processes ran on its cores; the
    probe's median is over the quiet pairs (see QUIET_FOREIGN_SHARE). With `timeline_dir`, the
    probe's typical run with transfer and the simulator's are written there as Perfetto timelines
    (`probe-<cores>c-<granularity>-<mode>.json`, `probe-sim-...`)."""
    from infralab.kernels.host_probe.affinity import skip_reason
    from infralab.kernels.host_probe.build import load

    libs = load()
    load_before = os.getloadavg()
    m = threads.microbenchmarks(chunk_bytes=cfg.chunk_kib * 1024, native_wait=cfg.native_wait, libs=libs,
                                blocks_per_chunk=cfg.blocks_per_chunk,
                                layer_ns=(cfg.dispatch_us + cfg.combine_us) * 1000, layers=cfg.layers)
    variants, skipped = [], []
    arms = [(g, mode, d) for g in cfg.granularities for mode in cfg.modes for d in cfg.kv_descriptors]
    for cores, own in layouts(cfg):
        reason = skip_reason(cores)
        if reason is not None:
            skipped.append({"cores": cores, "own_cores": own, "reason": reason})
            continue
        pairs, here = _interleaved_rounds(cfg, libs, m, cores, arms, own)
        for arm in arms:
            variants.append(_variant(cfg, here, cores, *arm, pairs[arm], timeline_dir, own))
    measured = {k: _finite_or_none(v) for k, v in dataclasses.asdict(m).items()}
    # Other processes take cores the model does not know about: say how loaded the machine was.
    load = {"before": list(load_before), "after": list(os.getloadavg()), "cpus": os.cpu_count()}
    return {"measurements": measured, "config": dataclasses.asdict(cfg), "variants": variants, "skipped": skipped,
            "load_average": load, "quiet_foreign_share": QUIET_FOREIGN_SHARE}


def layouts(cfg: ProbeConfig) -> list[tuple[int, bool]]:
    """(cores, own_cores) the probe runs: each core count with the cores shared, then, with
    `own_cores`, the largest count >= 2 with a core pinned per thread."""
    out = [(c, False) for c in cfg.cores]
    if cfg.own_cores and max(cfg.cores) >= 2:
        out.append((max(cfg.cores), True))
    return out


def layout_text(cores: int, own: bool = False) -> str:
    """A layout as the tables print it: "2" (shared), "2, a core each" (pinned per thread)."""
    return f"{cores}, a core each" if own else str(cores)


def variant_name(cores: int, granularity: str, mode: str, descriptors: str, own: bool = False) -> str:
    """A probe variant's name in file names: "<cores>c[-own]-<granularity>-<mode>[-native]"."""
    return f"{cores}c{'-own' if own else ''}-{granularity}-{mode}" + ("-native" if descriptors == "native" else "")


def _schedule(cfg: ProbeConfig, m, cores: int, granularity: str, mode: str, descriptors: str, own: bool = False):
    return threads.ProbeSchedule(
        steps=cfg.steps, layers=cfg.layers, launch_units=cfg.launch_units,
        dispatch_ns=cfg.dispatch_us * 1000, combine_ns=cfg.combine_us * 1000,
        blocks_per_chunk=cfg.blocks_per_chunk, chunk_bytes=cfg.chunk_kib * 1024,
        granularity=granularity, holds_gil=MODES[mode], native_wait=cfg.native_wait, cores=cores, own_cores=own,
        native_descriptors_ns=round(cfg.blocks_per_chunk * m.python_unit_s * 1e9) if descriptors == "native" else 0,
    )


def _interleaved_rounds(cfg: ProbeConfig, libs, m, cores: int, arms: list[tuple[str, str, str]], own: bool = False):
    """`cfg.repeats` rounds over the arms at `cores`; returns the pairs per arm and the
    measurements with the hand-off and wake-up latencies sampled beside the rounds."""
    from infralab.kernels.host_probe.affinity import skip_reason
    from infralab.kernels.host_probe.micro import (
        handoff_samples,
        placement_rule,
        wake_delay_samples,
        wake_delays_by_held,
        waker_delay_samples,
        start_placements,
        waker_placements,
    )

    scheds = {arm: _schedule(cfg, m, cores, *arm, own=own) for arm in arms}
    pairs: dict[tuple[str, str, str], list[ProbePair]] = {arm: [] for arm in arms}
    blocking: list[float] = []
    wake: list[float] = []
    by_held: dict[float, list[float]] = {}
    waker: list[float] = []
    placements: list = []
    starts: list = []
    for r in range(cfg.repeats):
        for arm in arms[r % len(arms):] + arms[:r % len(arms)]:
            pairs[arm].append(_probe_pair(scheds[arm], libs))
        # Hand-off latencies swing with the machine's load: sample them beside the runs.
        blocking += handoff_samples(libs, HANDOFF_TRIALS, "sleep", cores=cores)
        if skip_reason(1) is None:
            wake += wake_delay_samples(libs, 2 * HANDOFF_TRIALS)
            for held, samples in wake_delays_by_held(libs, HANDOFF_TRIALS):
                by_held.setdefault(held, []).extend(samples)
            waker += waker_delay_samples(libs, HANDOFF_TRIALS)
        if cores > 1 and not own:  # where a thread woken by a computing waker runs (wake-affine placement)
            placements += waker_placements(libs, HANDOFF_TRIALS, cores=cores)
            # Where the transfer thread starts: Linux's choice depends on the CPUs' recent load, so
            # each trial follows a run of the schedule without transfer, as a pair's start does.
            alone = scheds[arms[r % len(arms)]]
            starts += start_placements(libs, START_TRIALS, cores=cores,
                                       before=lambda alone=alone: threads.run_probe(alone, False, libs))
    here = dataclasses.replace(
        m,
        handoff_s=statistics.median(blocking) if blocking else m.handoff_s,
        handoff_samples_s=tuple(sorted(blocking)) or m.handoff_samples_s,
        wake_delay_s=statistics.median(wake) if wake else m.wake_delay_s,
        wake_delay_samples_s=tuple(sorted(wake)) or m.wake_delay_samples_s,
        wake_delays_by_held_s=(tuple((h, tuple(sorted(v))) for h, v in sorted(by_held.items()))
                               or m.wake_delays_by_held_s),
        waker_delay_samples_s=tuple(sorted(waker)) or m.waker_delay_samples_s,
        placement=placement_rule(tuple(placements), tuple(starts)) if placements else m.placement,
    )
    return pairs, here


def _used_pairs(pairs: list[ProbePair]) -> tuple[list[ProbePair], bool]:
    """The pairs the probe's numbers come from, and whether they are quiet ones."""
    quiet = [p for p in pairs if p.quiet]
    if len(quiet) >= max(MIN_QUIET, len(pairs) / 3):
        return quiet, True
    return pairs, False


def _variant(cfg: ProbeConfig, here, cores: int, granularity: str, mode: str, descriptors: str,
             pairs: list[ProbePair], timeline_dir: Path | None, own: bool = False) -> dict[str, Any]:
    used, quiet = _used_pairs(pairs)
    without = [(p.without, p.without_s) for p in used]
    with_ = [(p.with_, p.with_s) for p in used]
    probe = _summary(without, with_)
    probe["spread"] = _spread([w[1] for w in without], [w[1] for w in with_])
    shares = [p.foreign_share for p in pairs if p.foreign_share is not None]
    probe["noise"] = {
        "quiet": quiet,
        "pairs": len(pairs),
        "quiet_pairs": sum(1 for p in pairs if p.quiet),
        "foreign_share_median": statistics.median(shares) if shares else None,
        "foreign_share_max": max(shares) if shares else None,
    }
    probe["runqueue_wait_s"] = {track: _median_or_none([p.runqueue_wait_s.get(track) for p in used])
                                for track in ("thread/main", "thread/kv-transfer")}
    # Where the threads ran: the share of chunks built on the CPU main last ran on (stacked).
    probe["chunks_on_mains_cpu"] = _median_or_none([p.chunks_on_mains_cpu for p in used])
    # The main thread's segments from the run without transfer nearest the median one: a mean over
    # all runs would carry the rare long stalls other processes cause into the model's input.
    typical_without = _nearest(without, probe["prefill_without_s"])
    seg = probe_segments([typical_without[0]], [typical_without[1]])
    # A core pinned per thread: the simulator's threads each have a core (cores=None), as there.
    hs = host_schedule(cfg, here, seg, granularity, MODES[mode], cores, descriptors)
    if own:
        hs = dataclasses.replace(hs, cores=None)
    # As many simulated repeats as real ones: hand-off latencies are drawn from the samples.
    seeds = range(max(len(used), 1))
    sim_without = [run_host_schedule(hs, False, seed) for seed in seeds]
    sim_with = [run_host_schedule(hs, True, seed) for seed in seeds]
    sim = _summary([(r.record.intervals, r.prefill_s) for r in sim_without],
                   [(r.record.intervals, r.prefill_s) for r in sim_with])
    # The same without the waker rules (sim/host/cpu.py: the waker delay, the wake-affine placement):
    # how much the prediction rests on them.
    plain = dataclasses.replace(hs, waker_delay_samples_s=(), placement=None)
    sim["degradation_without_waker_rule"] = _summary(
        [(r.record.intervals, r.prefill_s) for r in sim_without],
        [(r.record.intervals, r.prefill_s) for r in (run_host_schedule(plain, True, seed) for seed in seeds)],
    )["degradation"]
    sim["runqueue_wait_s"] = {f"thread/{t}": statistics.median(r.core_wait_s.get(t, 0.0) for r in sim_with)
                              for t in ("main", "kv-transfer")}
    sim["chunks_on_mains_core"] = _median_or_none([r.chunks_on_mains_core for r in sim_with])
    if timeline_dir is not None:
        meta = {"granularity": granularity, "dispatch_combine": mode, "kv_transfer": True, "cores": cores,
                "own_cores": own, "kv_descriptors": descriptors}
        typical = _nearest(with_, probe["prefill_with_s"])[0]
        name = variant_name(cores, granularity, mode, descriptors, own)
        save_trace(RunRecord(intervals=typical), timeline_dir / f"probe-{name}.json",
                   metadata=attribution.timeline_metadata(**meta, source="real threads (probe), seconds from the run's start"))
        save_trace(_nearest_run(sim_with, sim["prefill_with_s"]).record, timeline_dir / f"probe-sim-{name}.json",
                   metadata=attribution.timeline_metadata(**meta, source="simulator on the probe's schedule"))
    return {
        "name": variant_name(cores, granularity, mode, descriptors, own),
        "cores": cores,
        "own_cores": own,
        "granularity": granularity,
        "mode": mode,
        "kv_descriptors": descriptors,
        "probe": probe,
        "sim": sim,
        "probe_runs_s": {"without": [w[1] for w in without], "with": [w[1] for w in with_]},
        "probe_pairs": [{"without_s": p.without_s, "with_s": p.with_s, "foreign_share": p.foreign_share,
                         "quiet": p.quiet} for p in pairs],
        "sim_inputs": {
            **dataclasses.asdict(seg),
            "chunk_python_s": hs.chunk_python_s,
            "copy_s": hs.copy_s,
            "handoff_median_s": _finite_or_none(here.handoff_s),
            "handoff_samples": len(here.handoff_samples_s),
            "wake_delay_median_s": _finite_or_none(here.wake_delay_s),
            "wake_delay_samples": len(here.wake_delay_samples_s),
            "waker_delay_median_s": _median_or_none(list(here.waker_delay_samples_s)),
            "placement": None if here.placement is None else dataclasses.asdict(here.placement),
            "wake_delay_by_held_median_s": {f"{held * 1e3:g} ms": statistics.median(samples)
                                            for held, samples in here.wake_delays_by_held_s},
            "quantum_s": hs.quantum_s,
        },
        "rel_err": {k: _rel_err(sim[k], probe[k]) for k in ("prefill_without_s", "prefill_with_s", "degradation")},
        "verdict": row_verdict(mode, probe, sim),
        "abs_err": {
            k: sim[k] - probe[k]
            for k in ("degradation", "kv_python_over_comm", "kv_activity_over_comm", "kv_python_inside_comm")
        },
    }


def _median_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _finite_or_none(value: Any) -> Any:
    """NaN (not measurable on this machine) as None, so that results stay valid JSON."""
    return None if isinstance(value, float) and value != value else value


def _us(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "not measurable"
    return f"{seconds * 1e6:.0f} µs"


def arm_text(v: dict[str, Any]) -> str:
    """The variant's arm: its GIL mode, and where descriptors are built when not in Python."""
    return v["mode"] + (", descriptors native" if v.get("kv_descriptors") == "native" else "")


TARGET_REL_ERR = 0.20  # held rows: |sim - probe| / probe of the degradation
TARGET_ABS_POINTS = 0.03  # released rows: |sim - probe| in points (a relative error on ~4 % is ill-conditioned)


def row_verdict(mode: str, probe: dict[str, Any], sim: dict[str, Any]) -> dict[str, Any]:
    """Whether the simulator agrees with the probe on one schedule, on the probe's footing.

    Held rows are judged on the relative error (within TARGET_REL_ERR of the probe's median),
    released rows on absolute points (within TARGET_ABS_POINTS). A row gets a verdict only where
    the probe can give one: its pairs are quiet, and its own spread (half the interquartile range
    of the per-pair degradation) is within that tolerance; otherwise it says whether the simulator
    lies within the probe's min..max ("in range" / "out of range", no verdict), as the fidelity
    study does where the real spread is wider than the target. `agree`: True / False, or None
    without a verdict."""
    median, spread = probe["degradation"], probe["spread"]
    if mode == "held":
        tolerance, basis = TARGET_REL_ERR * abs(median), f"within {TARGET_REL_ERR:.0%}"
    else:
        tolerance, basis = TARGET_ABS_POINTS, f"within {TARGET_ABS_POINTS * 100:.0f} points"
    error = sim["degradation"] - median
    half_iqr = (spread["p75"] - spread["p25"]) / 2
    noise = probe.get("noise", {})
    out = {"basis": basis, "tolerance": tolerance, "error": error, "probe_half_iqr": half_iqr}
    in_range = spread["min"] <= sim["degradation"] <= spread["max"]
    if noise and not noise.get("quiet", True):
        return {**out, "agree": None, "verdict": "noisy (" + ("in range" if in_range else "out of range") + ")"}
    if half_iqr > tolerance:
        return {**out, "agree": None, "verdict": ("in range" if in_range else "out of range") + " (probe spread wider)"}
    agree = abs(error) <= tolerance
    return {**out, "agree": agree, "verdict": "agrees" if agree else "differs"}


def agreement(variants: list[dict[str, Any]]) -> dict[str, int]:
    """How many schedules agree, differ, and have no verdict (noisy, or the probe's spread wider)."""
    verdicts = [v.get("verdict", {}).get("agree") for v in variants]
    return {"agree": sum(1 for a in verdicts if a is True), "differ": sum(1 for a in verdicts if a is False),
            "no_verdict": sum(1 for a in verdicts if a is None), "schedules": len(verdicts)}


def _plain_text(s: dict[str, Any]) -> str:
    plain = s.get("degradation_without_waker_rule")
    return "" if plain is None else f" ({plain:.1%})"


def _placement_text(rule: dict[str, Any] | None) -> str:
    if not rule:
        return ""
    return (f"; stays with waker {_share(rule['stay_with_waker'])} ({rule['trials_prev_waker']}), to idle prev "
            f"{_share(rule['to_idle_previous'])} ({rule['trials_prev_other']}), pulled {rule['pulled']}; "
            f"new thread on parent's {_share(rule.get('new_on_parent'))} ({rule.get('trials_start', 0)}), "
            f"timer wake on busy prev {_share(rule.get('stay_on_busy_previous'))} ({rule.get('trials_prev_busy', 0)})")


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _noise_text(noise: dict[str, Any]) -> str:
    if not noise:
        return "n/a"
    share = noise["foreign_share_median"]
    return f"{noise['quiet_pairs']}/{noise['pairs']} ({'n/a' if share is None else f'{share:.0%}'})"


def _wait_text(p: dict[str, Any], s: dict[str, Any]) -> str:
    probe = p.get("runqueue_wait_s", {}).get("thread/main")
    sim = s.get("runqueue_wait_s", {}).get("thread/main")
    return f"{'n/a' if probe is None else f'{probe * 1e3:.1f}'} / {'n/a' if sim is None else f'{sim * 1e3:.1f}'}"


def _chunk_costs_text(m: dict[str, Any]) -> str:
    costs = m.get("chunk_costs") or []
    if not costs:
        return "the transfer thread's chunk not timed alone (its copy at the cold rate: used)"
    each = "; ".join(f"{c['granularity']} {c['hold_s'] * 1e6:.0f} µs / {c['copy_s'] * 1e6:.0f} µs ({c['samples']} chunks)"
                     for c in costs)
    return f"the transfer thread's GIL hold / copy per chunk, its loop alone as each schedule feeds it (used): {each}"


def probe_table(result: dict[str, Any]) -> str:
    m = result["measurements"]
    load = result.get("load_average")
    lines = [] if load is None else [
        f"Machine load during the probe: 1-minute load average {load['before'][0]:.1f} before, {load['after'][0]:.1f} "
        f"after, on {load['cpus']} CPUs (other processes take cores the model does not know about). A pair of runs "
        f"(without, with transfer) is quiet when other processes used at most "
        f"{result.get('quiet_foreign_share', QUIET_FOREIGN_SHARE):.0%} of its cores (/proc/stat); the probe's median "
        f"is over the quiet pairs when there are at least {MIN_QUIET}, else over all and marked noisy.", ""]
    lines += [
        "Calibration (single-thread measurements on this machine): "
        f"Python unit {m['python_unit_s'] * 1e9:.0f} ns, ctypes call {m['native_call_hold_s'] * 1e6:.2f} µs (PyDLL) / "
        f"{m['native_call_release_s'] * 1e6:.2f} µs (CDLL), memcpy {m['copy_bytes_per_s'] / 1e9:.1f} GB/s hot / "
        f"{m['copy_cold_bytes_per_s'] / 1e9:.1f} GB/s cold, {_chunk_costs_text(m)}, "
        f"switch interval {m['switch_interval_s'] * 1e3:.1f} ms, "
        f"loop overhead {m['layer_overhead_s'] * 1e6:.1f} µs/layer; "
        "the main thread's segments from the probe's runs without transfer; the GIL hand-off and the OS's wake-up "
        "delays on a busy core (by how long the holder has had it, and for a thread woken by the holder itself: the "
        "waker rule), and where a woken thread runs by its previous core (sim/host/cpu.py's placement rule) from "
        "micro-probes beside every round. Predicted, not fitted: the runs with transfer at each core count. Held rows "
        f"are judged on the relative error (within {TARGET_REL_ERR:.0%}), released rows on absolute points (within "
        f"{TARGET_ABS_POINTS * 100:.0f}: a relative error on a degradation of a few % is ill-conditioned); a row gets a "
        "verdict only where its pairs are quiet and the probe's own spread (half its interquartile range) is within "
        "that tolerance, else it says whether the simulator lies in the probe's min..max.",
        "",
        "| cores | schedule | dispatch/combine | GIL hand-off / core wake-up (medians; placement by previous core: shares, trials) | prefill w/o: probe / sim (s) "
        "| degradation: probe median [min..max over repeats] | sim (without the waker and placement rules) | error "
        "| verdict (held: within 20 %, released: within 3 points; only where the probe's spread allows) "
        "| quiet pairs (others' CPU share, median) | main's core wait (ms): probe / sim "
        "| KV chunks on main's CPU: probe / sim "
        "| dispatch/combine covered by KV Python: probe / sim |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in result["variants"]:
        p, s, e = v["probe"], v["sim"], v["rel_err"]["degradation"]
        noise = p.get("noise", {})
        verdict = v.get("verdict") or row_verdict(v["mode"], p, s)
        if v["mode"] == "held":
            rel = "n/a" if e is None else f"{e:+.0%}"
        else:
            rel = f"{verdict['error'] * 100:+.1f} pt"
        ok = verdict["verdict"]
        lines.append(
            f"| {layout_text(v['cores'], v.get('own_cores', False))} | {v['granularity']} | {arm_text(v)} | {_us(v['sim_inputs']['handoff_median_s'])} / "
            f"{_us(v['sim_inputs']['wake_delay_median_s'])}{_placement_text(v['sim_inputs'].get('placement'))} "
            f"| {p['prefill_without_s']:.4f} / {s['prefill_without_s']:.4f} "
            f"| {p['degradation']:.1%} [{p['spread']['min']:.1%}..{p['spread']['max']:.1%}] "
            f"| {s['degradation']:.1%}{_plain_text(s)} | {rel} | {ok} | {_noise_text(noise)} | {_wait_text(p, s)} "
            f"| {_share(p.get('chunks_on_mains_cpu'))} / {_share(s.get('chunks_on_mains_core'))} "
            f"| {p['kv_python_over_comm']:.0%} / {s['kv_python_over_comm']:.0%} |"
        )
    for skip in result.get("skipped", []):
        lines.append(f"| {layout_text(skip['cores'], skip.get('own_cores', False))} | skipped: {skip['reason']} | | | | | | | | | | | |")
    lines += [
        "",
        "Where the main thread's extra prefill time went (with minus without transfer, seconds): Python and "
        "native segments running longer is CPU-core contention (modelled: sim/host/cpu.py); 'other' is time "
        "outside any segment: waiting for the GIL, and for the OS to run the thread.",
        "",
        "| cores | schedule | dispatch/combine | probe: Δ Python | probe: Δ native | probe: Δ other "
        "| sim: Δ Python | sim: Δ native | sim: Δ other |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in result["variants"]:
        p, s = v["probe"], v["sim"]

        def delta(side, key):
            return side["with"][key] - side["without"][key]

        lines.append(
            f"| {layout_text(v['cores'], v.get('own_cores', False))} | {v['granularity']} | {arm_text(v)} | {delta(p, 'main_python_s'):+.4f} "
            f"| {delta(p, 'main_native_s'):+.4f} | {delta(p, 'main_other_s'):+.4f} | {delta(s, 'main_python_s'):+.4f} "
            f"| {delta(s, 'main_native_s'):+.4f} | {delta(s, 'main_other_s'):+.4f} |"
        )
    return "\n".join(lines) + "\n"
