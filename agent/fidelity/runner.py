"""Run a fidelity study: per engine setting, profile (calibration), measure capacity, simulate
every case with the mirror, then replay every case on the real engine, repetitions interleaved.

Order per setting, all in one process and close in time (machines drift: docs/fidelity.md):
1. build the engine and check every shape's requests can be replayed on it;
2. profile its step over the study's grid (synthetic steps: the calibration table);
3. start the engine's loop and warm it up; per workload shape:
   a. capacity: up to `capacity.requests` other requests of the shape (a synthetic shape drawn
      with seed + 1, a trace's requests after the evaluated ones), as many as the KV cache holds at
      once (the burst), kept in the engine by a closed loop going round them 3 times (a new
      request each time one finishes); capacity = the steady-state completion rate (req/s,
      `real.load_generator.SteadyState`); then a calibration replay of the burst's requests at
      their drawn pattern, at CALIBRATION_LOAD
      of the capacity. Their steps choose the mirror's step times (`step_times`: the profile or
      the model fitted on them, whichever predicts held-apart calibration steps better) and give
      the host time per step outside the forward and the batch building (calibration of
      `[cost.host] per_step_s`, on data that is not evaluated);
   b. each load level: the shape's requests (the study's seed) with their arrival times scaled so
      that their mean rate is `load x capacity`; the mirror simulates them (deterministic: once);
   c. the repetitions: for rep in 1..R, for each load: an open-loop replay of the same requests,
      fingerprinted before and after (`real.load_generator.replay`);
      After each round (rep k of every load) the calibration replay again (`_recalibrate`: the same
      non-evaluated requests at the same load), so the calibration also spans the evaluated runs;
   d. the mirror again at the speed the reference steps say the machine ran each case's replays
      (`_follow_the_machine`), at the speed the OTHER cases' replays ran their own steps against
      the step times the mirror charges (`_follow_the_other_cases`: replays interleaved with this
      case's, so the same hour of the machine, but not the replays being predicted), and at the
      speed the calibration replays between the rounds ran against them (`_follow_the_calibration`),
      each kept beside the case's simulation.
A replay the engine cannot finish as recorded (a soft reset drops token stamps) is kept as a
failed run with its reason; the comparison uses the runs that finished.

Units: seconds, requests per second, tokens.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infralab.agent.fidelity.compare import Comparison, compare
from infralab.agent.fidelity.sim_side import (
    TraceWorkload,
    build_requests,
    host_per_step_s,
    latency_samples,
    latency_stats,
    mirror_config_doc,
    mirror_policy,
    model_for_sim,
    simulate_mirror,
    speed_spells,
    steps_vs_profile,
)
from infralab.agent.fidelity.schedule_check import loop_gaps, schedule_vs_mirror
from infralab.agent.fidelity.spec import FidelityStudy, Setting, Shape
from infralab.agent.fidelity.step_times import choose_step_times, score_on
from infralab.errors import InputError
from infralab.real.engine import RealEngine
from infralab.real.fingerprint import Fingerprint, drift, midpoint
from infralab.real.load_generator import Replay, ReplayRequest, check_replayable, closed_loop, replay, warm_up
from infralab.real.machine import check_fits_machine
from infralab.real.profile import Profile, profile, write_profile
from infralab.results import dump_json

Say = Callable[[str], None]

CLOSED_LOOP_WAVES = 3
"""The capacity run submits this many times the concurrency of requests: the first wave fills the
engine, the second is the steady window, the third keeps the engine full while the second finishes."""

CALIBRATION_LOAD = 0.6
"""The calibration replay's load (a fraction of the measured capacity): between the study's usual
levels, so its steps mix prefill and decode with a queue that forms and drains."""


@dataclass
class CaseResult:
    """One case (setting x shape x load): the mirror's result and the real runs'."""

    setting: str
    shape: str
    load: float
    rate_rps: float
    rate_scale: float
    requests: int
    sim_stats: dict[str, dict[str, float]]
    sim_samples: dict[str, np.ndarray]
    runs: list[dict[str, Any]] = field(default_factory=list)
    run_samples: list[dict[str, np.ndarray]] = field(default_factory=list)
    fixed: bool = False  # the workload's own arrivals (a fixed case), not a load level
    speed_factor: float | None = None  # the machine's speed by the reference steps (cost.step_table_speed)
    sim_machine_speed: dict[str, dict[str, float]] | None = None  # the mirror at that speed (kept beside)
    # the machine's speed by the other cases' replays' own steps (`_follow_the_other_cases`)
    others_factor: float | None = None
    sim_others_speed: dict[str, dict[str, float]] | None = None  # the mirror at that speed (kept beside)
    # the machine's speed by the calibration replays between the rounds (`_follow_the_calibration`)
    calibration_factor: float | None = None
    sim_calibration_speed: dict[str, dict[str, float]] | None = None  # the mirror at that speed (kept beside)
    # the machine's slow spells during the case's replays against the calibration's (`_follow_the_spells`):
    # the verdict's mirror where the case has one; the mirror as calibrated is then kept beside.
    spells_factor: float | None = None
    plain_factor: float | None = None  # 1.0 where the slow-spell mirror replaced the plain one
    sim_plain_mirror: dict[str, dict[str, float]] | None = None  # the mirror as calibrated (kept beside)

    @property
    def name(self) -> str:
        return case_name(self.setting, self.shape, self.load, self.fixed)

    def comparison(self, sim: dict[str, dict[str, float]] | None = None) -> dict[str, dict[str, Comparison]] | None:
        """The real runs against the mirror (`sim`, default the case's simulation)."""
        finished = [run["stats"] for run in self.runs if run["error"] is None]
        return compare(finished, sim or self.sim_stats, self.load) if len(finished) >= 2 else None


def case_name(setting: str, shape: str, load: float, fixed: bool = False) -> str:
    return f"{setting}-{shape}-" + ("given" if fixed else f"load{round(load * 100):02d}")


def mean_rate(requests: Sequence[ReplayRequest]) -> float:
    """Mean arrival rate of a workload (req/s): (n - 1) / the last arrival (> 0: `_workloads` checks)."""
    return (len(requests) - 1) / max(r.arrival_s for r in requests)


@dataclass(frozen=True)
class StudyResult:
    """What a study measured: `facts` (the study, machine, settings with their profiles and
    capacities) and every case."""

    facts: dict[str, Any]
    cases: list[CaseResult]


def run_study(study: FidelityStudy, folder: Path, say: Say) -> StudyResult:
    """Run `study`, writing its raw files (profiles, replays) into `folder`."""
    # The mirror's config names files in `folder` (model spec, profiles) and is resolved against its
    # own folder: absolute paths, so that a relative output folder (`infralab reproduce`'s default
    # results/...) is not joined twice.
    folder = folder.resolve()
    started = time.perf_counter()
    load_before = os.getloadavg()
    model = model_for_sim(study.model, folder)
    for setting in study.settings:  # a model too large, or "cuda" without a GPU: one line, before any build
        check_fits_machine(study.model, setting.engine, f"{study.source}: study.model (setting {setting.name!r})",
                           device_where=f"{study.source}: study.device")
    engines = [RealEngine(study.model, setting.engine) for setting in study.settings]
    try:
        # Every setting's inputs are checked before the first profile: bad input never costs minutes.
        workloads = [{shape.name: _workloads(study, shape, engine) for shape in study.shapes} for engine in engines]
        for engine, chosen in zip(engines, workloads):
            _check_grid_covers(study, engine, [requests for requests, _ in chosen.values()])
        settings, cases = [], []
        for setting, engine, chosen in zip(study.settings, engines, workloads):
            record, setting_cases = _run_setting(study, setting, engine, chosen, model, folder, say)
            settings.append(record)
            cases.extend(setting_cases)
    finally:
        for engine in engines:
            engine.close()
    facts = {"title": study.title, "source": study.source, "quick": study.quick, "model": study.model.name,
             "scheduler": study.scheduler, "loads": list(study.loads), "repetitions": study.repetitions,
             "seed": study.seed, "machine": {"cpus": os.cpu_count(), "load_average_before": list(load_before),
                                             "load_average_after": list(os.getloadavg())},
             "wall_s": time.perf_counter() - started, "settings": settings}
    return StudyResult(facts, cases)


def _run_setting(study: FidelityStudy, setting: Setting, engine: RealEngine,
                 workloads: dict[str, tuple[list[ReplayRequest], list[ReplayRequest]]], model: str, folder: Path,
                 say: Say) -> tuple[dict[str, Any], list[CaseResult]]:
    """Profile `engine`, then run every shape's capacity burst, simulations and real runs on it."""
    say(f"{setting.name}: profiling the step ({len(study.grid.points(engine))} grid points) ...")
    t0 = time.perf_counter()
    measured = profile(engine, study.grid)
    (folder / "profiles").mkdir(exist_ok=True)
    profile_csv = write_profile(engine, measured, folder / "profiles" / f"{setting.name}.csv")
    record: dict[str, Any] = {
        "name": setting.name, "engine": engine.resolved(), "profile": {
            "file": str(profile_csv.relative_to(folder)), "points": len(measured.points),
            "wall_s": time.perf_counter() - t0, "fingerprint_before_s": list(measured.before.forward_s),
            "fingerprint_after_s": list(measured.after.forward_s),
            "drift": drift(measured.before, measured.after)},
        "shapes": {}}
    cases: list[CaseResult] = []
    with engine:
        warm_up(engine, requests=study.warmup_requests)
        for shape in study.shapes:
            evaluated, burst = workloads[shape.name]
            shape_record, shape_cases = _run_shape(study, setting, shape, engine, model, measured, profile_csv,
                                                   evaluated, burst, folder, say)
            record["shapes"][shape.name] = shape_record
            cases.extend(shape_cases)
    return record, cases


def _workloads(study: FidelityStudy, shape: Shape, engine: RealEngine) -> tuple[list[ReplayRequest], list[ReplayRequest]]:
    """The shape's evaluated requests (seed) and its capacity burst (seed + 1, all at 0 s),
    checked replayable on `engine` before anything runs."""
    where = f"{study.source}: shape {shape.name!r}"
    context = min(study.model.context_length, engine.cache_tokens)
    evaluated = build_requests(shape.workload, study.base_dir, study.seed, context)
    drawn = _burst_candidates(study, shape, context, len(evaluated))
    check_replayable(evaluated, study.model.context_length, engine.cache_tokens, where)
    check_replayable(drawn, study.model.context_length, engine.cache_tokens, where)
    if len(evaluated) < 2 or max(r.arrival_s for r in evaluated) <= 0:
        raise InputError(f"{where}.workload", f"{len(evaluated)} request(s), the last arriving at "
                         f"{max((r.arrival_s for r in evaluated), default=0.0)} s",
                         "at least 2 requests, not all at 0 s (a load level rescales their arrival times; a "
                         "fixed case's load is their rate against the capacity)")
    burst = _burst(drawn, engine)
    if len(burst) < 2:
        raise InputError(f"{study.source}: capacity", f"the KV cache ({engine.cache_tokens} tokens) holds fewer than "
                         f"2 of the {shape.name!r} requests at once", "more num_blocks: the capacity burst runs at "
                         "least 2 requests together, never preempted")
    return evaluated, burst


def _burst_candidates(study: FidelityStudy, shape: Shape, context: int, evaluated: int) -> list[ReplayRequest]:
    """Requests for the capacity burst that are not the evaluated ones: a synthetic shape drawn
    with seed + 1; a trace shape's next `capacity.requests` requests after the evaluated window
    (a trace does not depend on the seed)."""
    if isinstance(shape.workload, TraceWorkload):
        longer = dataclasses.replace(shape.workload, max_requests=evaluated + study.capacity_requests)
        drawn = build_requests(longer, study.base_dir, study.seed, context)[evaluated:]
        if len(drawn) < 2:
            raise InputError(f"{study.source}: shape {shape.name!r}.workload.max_requests",
                             f"the trace holds {len(drawn)} request(s) after the {evaluated} evaluated ones",
                             "a max_requests that leaves at least 2 of the trace's requests for the capacity burst "
                             "(it takes the next capacity.requests: calibration never replays evaluated requests)")
        return drawn
    return build_requests(shape.workload, study.base_dir, study.seed + 1, context)[: study.capacity_requests]


def cycled(requests: Sequence[ReplayRequest], total: int) -> list[ReplayRequest]:
    """`total` requests going round `requests` in order, with new ids (1, 2, ...; a new id draws a
    new prompt of the same length)."""
    return [dataclasses.replace(requests[i % len(requests)], id=i + 1) for i in range(total)]


def _burst(drawn: list[ReplayRequest], engine: RealEngine) -> list[ReplayRequest]:
    """The capacity burst's requests: the longest prefix of `drawn` whose requests fit the KV cache
    all at once (whole blocks), so that the engine never preempts one; their drawn arrivals kept
    (the burst queues them all at 0 s; the calibration replay uses the pattern)."""
    page, blocks, burst = engine.settings.page_size, engine.resolved()["num_blocks"], []
    for request in drawn:
        blocks -= -(-(request.prompt_tokens + request.output_tokens) // page)
        if blocks < 0:
            break
        burst.append(request)
    return burst


def _check_grid_covers(study: FidelityStudy, engine: RealEngine, workloads: list[list[ReplayRequest]]) -> None:
    """InputError naming the study's [profile] unless the grid points this engine can run span
    every step the mirror will time (the step table's rule, `sim.step_table_cost`), checked
    before minutes of profiling: from 1 up to the token budget, min(KV cache, a workload's
    tokens) keys and min(request cap, a workload's requests) sequences."""
    resolved = engine.resolved()
    needed = {"q_tokens": resolved["max_batch_tokens"],
              "kv_tokens": max(min(engine.cache_tokens, sum(r.prompt_tokens + r.output_tokens - 1 for r in requests))
                               for requests in workloads),
              "seqs": max(min(resolved["max_requests_per_batch"], len(requests)) for requests in workloads)}
    points = study.grid.points(engine)
    for name, top in needed.items():
        values = [getattr(point, name) for point in points]
        if not values or min(values) > 1 or max(values) < top:
            profiled = f"{min(values)}-{max(values)}" if values else "nothing"
            raise InputError(f"{study.source}: profile.{name}", f"the grid points engine setting {engine.settings} "
                             f"can run span {profiled}", f"points from 1 up to {top} (the steps the mirror will time)")


def _run_shape(study: FidelityStudy, setting: Setting, shape: Shape, engine: RealEngine, model: str,
               measured: Profile, profile_csv: Path, evaluated: list[ReplayRequest], burst: list[ReplayRequest],
               folder: Path, say: Say) -> tuple[dict[str, Any], list[CaseResult]]:
    loop_requests = cycled(burst, CLOSED_LOOP_WAVES * len(burst))
    say(f"{setting.name}/{shape.name}: capacity, a closed loop of {len(loop_requests)} requests, "
        f"{len(burst)} at a time ...")
    saturated, steady = closed_loop(engine, loop_requests, len(burst), seed=study.seed + 1)
    capacity = steady.rate_rps
    calibration_steps, calibration, calibration_scale = list(saturated.steps), None, None
    if len(burst) >= 2 and max(r.arrival_s for r in burst) > 0:  # the same requests, now at their own pattern
        calibration_scale = CALIBRATION_LOAD * capacity / mean_rate(burst)
        say(f"{setting.name}/{shape.name}: calibration replay of those requests at {CALIBRATION_LOAD:.0%} of capacity ...")
        calibration = replay(engine, burst, rate_scale=calibration_scale, seed=study.seed + 1)
        calibration_steps += calibration.steps
    kept = _keep_calibration(folder, f"{setting.name}-{shape.name}", saturated, calibration)
    table, host, choice, predictors = choose_step_times(
        engine, measured, profile_csv, calibration_steps, folder / "profiles", f"{setting.name}-{shape.name}",
        f"the capacity burst and a calibration replay of shape {shape.name!r}, setting {setting.name!r}")
    # The calibration steps (closed loop and replay) in the machine's slow spells.
    calibration_spells = speed_spells(table, calibration_steps, engine.settings.dtype, host, engine.settings.device)
    doc = mirror_config_doc(model, engine.resolved(), study.scheduler, table, host)
    natural = mean_rate(evaluated)
    cases = []
    # A fixed case replays the workload's own arrivals; its load is what they offer, against the capacity.
    levels = [(natural / capacity, 1.0)] if shape.fixed else [(load, load * capacity / natural) for load in study.loads]
    for load, rate_scale in levels:
        sim = simulate_mirror(doc, evaluated, rate_scale, folder)
        cases.append(CaseResult(setting.name, shape.name, load, natural * rate_scale, rate_scale, len(evaluated),
                                latency_stats(sim), latency_samples(sim), fixed=shape.fixed))
    profiled = midpoint(measured.before, measured.after)  # the profile's own speed
    rounds: list[dict[str, Any]] = []
    for rep in range(study.repetitions):
        for case in cases:
            say(f"{case.name}: real run {rep + 1}/{study.repetitions} ({case.requests} requests at "
                f"{case.rate_rps:.2f} req/s) ...")
            _real_run(study, engine, case, evaluated, profiled, folder, rep,
                      lambda result: {**_step_checks(result, table, engine, host),
                                      "step_models": score_on(predictors, result.steps)})
        if calibration_scale is not None:
            say(f"{setting.name}/{shape.name}: calibration replay again after round {rep + 1} ...")
            rounds.append(_recalibrate(engine, burst, calibration_scale, study.seed + 1, table, host,
                                       folder / "replays" / f"calibration-{setting.name}-{shape.name}-round{rep + 1}.json",
                                       folder))
    for case in cases:
        _follow_the_machine(case, doc, evaluated, folder)
    _follow_the_other_cases(cases, doc, evaluated, folder)
    _follow_the_calibration(cases, rounds, doc, evaluated, folder)
    _follow_the_spells(cases, calibration_spells, doc, evaluated, folder)
    record = {"capacity_rps": capacity, "capacity_run": {**steady.as_dict(), "makespan_s": saturated.wall_s,
                                                          "burst_rate_rps": len(loop_requests) / saturated.wall_s,
                                                          "steps": len(saturated.steps),
                                                          "drift": drift(saturated.before, saturated.after)},
              "calibration_replay": None if calibration is None else {
                  "requests": len(burst), "rate_rps": CALIBRATION_LOAD * capacity, "steps": len(calibration.steps),
                  "wall_s": calibration.wall_s},
              "step_times": choice, "calibration_files": kept, "calibration_rounds": rounds,
              "calibration_speed_spells": calibration_spells,
              "host_per_step_s": host, "mean_rate_at_scale_1_rps": natural, "requests": len(evaluated),
              "mirror_config": doc}
    return record, cases


def _keep_calibration(folder: Path, name: str, burst: Replay, calibration: Replay | None) -> list[str]:
    """The calibration replays written beside the evaluated ones (`replays/calibration-<name>-*.json`),
    so that the step-time choice can be re-examined; returns their paths relative to `folder`."""
    paths = []
    for kind, replayed in (("closed-loop", burst), ("replay", calibration)):
        if replayed is not None:
            path = folder / "replays" / f"calibration-{name}-{kind}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            dump_json(replayed.as_dict(), path)
            paths.append(str(path.relative_to(folder)))
    return paths


def _follow_the_machine(case: CaseResult, doc: dict[str, Any], requests: list[ReplayRequest], folder: Path) -> None:
    """The mirror again at the speed the reference steps say the machine ran the case's replays
    (`cost.step_table_speed` = 1 + the mean over its finished runs of `speed_vs_profile`), kept
    beside the case's simulation (`sim_machine_speed`), not in place of it: on this machine the
    reference steps moved 10-14 % while the replays' own steps did not (docs/fidelity.md), so the
    correction is reported, not trusted. The reference steps are not the evaluated replay's steps."""
    speeds = [run["speed_vs_profile"] for run in case.runs if run["error"] is None]
    if not speeds:
        return
    factor = 1.0 + sum(speeds) / len(speeds)
    case.speed_factor, case.sim_machine_speed = factor, _mirror_at_speed(doc, factor, requests, case, folder)


def _mirror_at_speed(doc: dict[str, Any], factor: float, requests: list[ReplayRequest], case: CaseResult,
                     folder: Path) -> dict[str, dict[str, float]]:
    """The latency statistics of `case` simulated by the mirror with every step-table time x `factor`."""
    return latency_stats(_mirror_records(doc, factor, requests, case, folder))


def _mirror_records(doc: dict[str, Any], factor: float, requests: list[ReplayRequest], case: CaseResult,
                    folder: Path) -> list[Any]:
    """The mirror's finished request records for `case` with every step-table time x `factor`."""
    scaled = {**doc, "cost": {**doc["cost"], "step_table_speed": factor}}
    return simulate_mirror(scaled, requests, case.rate_scale, folder)


def _follow_the_other_cases(cases: list[CaseResult], doc: dict[str, Any], requests: list[ReplayRequest],
                            folder: Path) -> None:
    """Each case's mirror again at the speed the other cases' replays ran: `cost.step_table_speed` =
    1 + the mean over their finished runs of `steps_vs_profile["step"]` (their own steps against the
    step times this mirror charges for steps of those shapes). The repetitions interleave the
    cases, so those replays ran in the same stretch of the machine's time; none of them is one of
    the replays the case is compared with. Kept beside (`sim_others_speed`); a case with no other
    case (one shape, one load) gets none."""
    for case in cases:
        factor = _step_speed([run for other in cases if other is not case for run in other.runs])
        if factor is None:
            continue
        case.others_factor = factor
        case.sim_others_speed = _mirror_at_speed(doc, factor, requests, case, folder)


def _step_speed(replays: list[dict[str, Any]]) -> float | None:
    """1 + the mean of `steps_vs_profile["step"]` over the replays' records that finished, were not
    contended and observed a step (None if none did): the speed they ran the steps at against the
    step times the mirror charges, as `cost.step_table_speed`."""
    ratios = [r["steps_vs_profile"]["step"] for r in replays if r.get("error") is None and r.get("steps_vs_profile")
              and r["steps_vs_profile"].get("step") is not None]
    ratios = [r for r in ratios if r == r]  # NaN: a replay with no observed step
    return 1.0 + sum(ratios) / len(ratios) if ratios else None


def _recalibrate(engine: RealEngine, burst: list[ReplayRequest], rate_scale: float, seed: int, table: Path,
                 host: float, path: Path, folder: Path) -> dict[str, Any]:
    """The calibration replay again (the same non-evaluated requests, load and seed), written to
    `path`; its steps against the step times the mirror charges (`steps_vs_profile`), or why it is
    not used (contended: left out, never averaged in)."""
    again = replay(engine, burst, rate_scale=rate_scale, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    dump_json(again.as_dict(), path)
    record: dict[str, Any] = {"file": str(path.relative_to(folder)), "steps": len(again.steps), "wall_s": again.wall_s,
                              "steps_vs_profile": steps_vs_profile(table, again.steps, engine.settings.dtype, host,
                                                                   engine.settings.device),
                              "speed_spells": speed_spells(table, again.steps, engine.settings.dtype, host,
                                                           engine.settings.device)}
    if again.contention is not None and again.contention.flagged:
        record["error"] = f"contention: {'; '.join(again.contention.reasons)}"
    return record


def _follow_the_calibration(cases: list[CaseResult], rounds: list[dict[str, Any]], doc: dict[str, Any],
                            requests: list[ReplayRequest], folder: Path) -> None:
    """Every case's mirror again at the speed the calibration replays between the rounds ran:
    `cost.step_table_speed` = 1 + the mean over them of `steps_vs_profile["step"]` (their steps
    against the step times the mirror charges, which were chosen on the first calibration replay of
    the same requests at the same load, so what moves is the machine). Calibration data only: none
    of them is an evaluated replay. Kept beside (`sim_calibration_speed`)."""
    factor = _step_speed(rounds)
    if factor is None:
        return
    for case in cases:
        case.calibration_factor = factor
        case.sim_calibration_speed = _mirror_at_speed(doc, factor, requests, case, folder)


def _follow_the_spells(cases: list[CaseResult], calibration: dict[str, Any], doc: dict[str, Any],
                       requests: list[ReplayRequest], folder: Path) -> None:
    """Each case's mirror at the machine's slow spells during its replays against the calibration
    steps' (`speed_spells`: each step's speed probe), which becomes the case's simulation (the
    verdict), the mirror as calibrated kept beside (`sim_plain_mirror`). `cost.step_table_speed` =
    `spells_factor(...)` with the case's slow share (mean over its finished runs), the calibration
    steps' slow share, and per kind of step how much longer a step in a slow spell took than a
    fast one, from the OTHER cases' replays (the calibration steps' own where there is no other
    case). The share is a measure of the machine, not of the case's step times. A case or a
    calibration with no probed step keeps the mirror as calibrated."""
    cal_share = calibration.get("slow_share")
    if cal_share is None:
        return
    for case in cases:
        own = probed_spells(case.runs)
        others = probed_spells([run for other in cases if other is not case for run in other.runs]) or [calibration]
        share = mean_known(own, "slow_share")
        if share is None:
            continue
        factor = spells_factor(
            share, cal_share, mean_known(own, "prefill_time_share"),
            mean_known(others, "prefill_slow_vs_fast"), mean_known(others, "decode_slow_vs_fast"))
        served = _mirror_records(doc, factor, requests, case, folder)
        # The verdict's mirror (pre-registered rule met on 2026-12-07; docs/fidelity.md): the mirror
        # as calibrated is kept beside.
        case.spells_factor, case.plain_factor, case.sim_plain_mirror = factor, 1.0, case.sim_stats
        case.sim_stats, case.sim_samples = latency_stats(served), latency_samples(served)


def spells_factor(share: float, calibration_share: float, prefill_time_share: float | None,
                  prefill_slow: float | None, decode_slow: float | None) -> float:
    """The step-time factor of replays that spent `share` of their steps in slow spells against a
    calibration that spent `calibration_share` there, a step in a slow spell taking `prefill_slow`
    (`decode_slow`) times a fast one: per kind (1 + (x - 1) share) / (1 + (x - 1) calibration_share),
    weighted by the replays' share of time in steps with prompt tokens. A kind with no factor (None)
    or no weight counts as unchanged."""
    def kind(slow: float | None) -> float:
        if slow is None:
            return 1.0
        return (1.0 + (slow - 1.0) * share) / (1.0 + (slow - 1.0) * calibration_share)
    weight = 0.5 if prefill_time_share is None else prefill_time_share
    return weight * kind(prefill_slow) + (1.0 - weight) * kind(decode_slow)


def probed_spells(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `speed_spells` of the finished runs that probed some step."""
    return [run["speed_spells"] for run in runs
            if run.get("error") is None and (run.get("speed_spells") or {}).get("probed")]


def mean_known(rows: list[dict[str, Any]], key: str) -> float | None:
    """Mean of the rows' `key`, leaving out the rows without it (None); None when none has it."""
    values = [row[key] for row in rows if row.get(key) is not None]
    return sum(values) / len(values) if values else None


def _real_run(study: FidelityStudy, engine: RealEngine, case: CaseResult, requests: list[ReplayRequest],
              reference: Fingerprint, folder: Path, rep: int,
              step_check: Callable[[Replay], dict[str, Any]]) -> None:
    """One repetition of `case` on the running engine, appended to `case.runs` (with its error, if
    the replay could not be recorded). A replay that other work contended (`real.contention`) is
    repeated once; if the repeat is contended too, it is kept with that as its error, so the
    comparison leaves it out. `step_check`: the run's steps against the calibration and
    the mirror's schedule (`_step_checks`)."""
    run: dict[str, Any] = {"rep": rep + 1, "error": None}
    try:
        result = replay(engine, requests, rate_scale=case.rate_scale, seed=study.seed)
        if result.contention is not None and result.contention.flagged:  # repeated once, the first kept aside
            run["contended_attempt"] = result.contention.as_dict()
            result = replay(engine, requests, rate_scale=case.rate_scale, seed=study.seed)
    except RuntimeError as exc:  # e.g. a soft reset dropped token stamps: kept, not invented
        run["error"] = str(exc)
        case.runs.append(run)
        return
    if result.contention is not None and result.contention.flagged:  # still contended: recorded, not compared
        run["error"] = f"contention (twice): {'; '.join(result.contention.reasons)}"
    run["contention"] = None if result.contention is None else result.contention.as_dict()
    path = folder / "replays" / f"{case.name}-rep{rep + 1}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    dump_json(result.as_dict(), path)
    run.update(_run_facts(result, reference))
    run["file"] = str(path.relative_to(folder))
    run["stats"] = latency_stats(result.requests)
    run.update(step_check(result))
    case.runs.append(run)
    if run["error"] is None:
        case.run_samples.append(latency_samples(result.requests))


def _step_checks(result: Replay, profile_csv: Path, engine: RealEngine, host: float) -> dict[str, Any]:
    """A replay's steps against what the mirror charges for their shapes (`steps_vs_profile`),
    against the mirror's own schedule for the same arrivals in steps (`schedule`), and the host
    time between them that the mirror has no step for (`loop`; `schedule_check`)."""
    return {"steps_vs_profile": steps_vs_profile(profile_csv, result.steps, engine.settings.dtype, host,
                                                         engine.settings.device),
            "speed_spells": speed_spells(profile_csv, result.steps, engine.settings.dtype, host, engine.settings.device),
            "schedule": schedule_vs_mirror(mirror_policy(engine.resolved()), result.requests, result.steps),
            "loop": loop_gaps(result.requests, result.steps)}


def _run_facts(result: Replay, reference: Fingerprint) -> dict[str, Any]:
    """The run's wall time, the generator's lag and the step speed around it, relative to the
    profile's fingerprint (`reference`: the mean of the profile's before and after; 0.1 = the
    reference steps ran 10 % slower than when profiled)."""
    return {"wall_s": result.wall_s, "max_submit_lag_s": result.max_submit_lag_s, "steps": len(result.steps),
            "busy_fraction": sum(s.duration_s for s in result.steps) / result.wall_s if result.wall_s > 0 else 0.0,
            "drift": drift(result.before, result.after),
            "speed_vs_profile": drift(reference, midpoint(result.before, result.after))}
