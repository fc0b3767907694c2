"""The machine's slow spells in a replay (`speed_spells`, agent/fidelity/sim_side.py) and the speed
probe each real step carries (`StepRecord.probe_s`, real/step_trace.py). Steps on the shipped small
table's grid points, charged exactly, then some marked slow by their probe and made longer by a
known factor: the share and the factors must come back."""

from __future__ import annotations

from pathlib import Path

import pytest

from infralab.agent.fidelity.sim_side import speed_spells, table_predictor
from infralab.calibration_table import read_table
from infralab.real.step_trace import BatchShape, StepRecord, StepTrace, install_step_hooks, speed_probe

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "experiments" / "real" / "small_llama_cpu_steps.csv"
FAST, SLOW = 10e-6, 19e-6  # probe seconds in a fast and a slow spell (1.9x apart, as measured)


def _steps(slow_every: int, prompt_factor: float, decode_factor: float, probes: bool = True) -> list[StepRecord]:
    """Steps on the table's grid, each taking exactly what the table charges (host 0); every
    `slow_every`-th one probed slow and `prompt_factor` / `decode_factor` times longer."""
    rows = [r.shape_dict for r in read_table(TABLE) if r.kernel == "engine_step"]
    predict = table_predictor(TABLE, "fp32", "cpu", 0.0)
    steps, t = [], 0.0
    for i, d in enumerate(rows):
        q, k, s = d["q_tokens"], d["kv_tokens"], d["seqs"]
        forward, prepare = predict(q, k, s)
        prompt = q > s
        slow = i % slow_every == 0
        took = (forward + prepare) * ((prompt_factor if prompt else decode_factor) if slow else 1.0)
        batch = BatchShape(q, k - q, s, 1 if prompt else 0, q - s + 1 if prompt else 0, s)
        steps.append(StepRecord(i, t, t + prepare, t + took, t + took, batch,
                                (SLOW if slow else FAST) if probes else None))
        t += took
    return steps


def test_the_slow_share_and_the_slow_steps_factor_per_kind_come_back():
    steps = _steps(slow_every=4, prompt_factor=1.25, decode_factor=1.4)
    spells = speed_spells(TABLE, steps, "fp32", 0.0)
    assert spells["probed"] == len(steps)
    assert spells["slow_share"] == pytest.approx(sum(1 for i in range(len(steps)) if i % 4 == 0) / len(steps))
    assert spells["prefill_slow_vs_fast"] == pytest.approx(1.25, rel=1e-9)
    assert spells["decode_slow_vs_fast"] == pytest.approx(1.4, rel=1e-9)


def test_steps_without_a_probe_say_nothing():
    spells = speed_spells(TABLE, _steps(4, 1.25, 1.4, probes=False), "fp32", 0.0)
    assert spells == {"probed": 0, "slow_share": None, "prefill_slow_vs_fast": None, "decode_slow_vs_fast": None,
                      "prefill_time_share": None}


def test_a_run_with_no_slow_spell_has_no_slow_factor():
    spells = speed_spells(TABLE, _steps(10**9, 1.0, 1.0)[1:], "fp32", 0.0)  # every step fast
    assert spells["slow_share"] == 0.0 and spells["decode_slow_vs_fast"] is None


def test_a_step_record_keeps_its_probe_and_older_records_read_without_one():
    step = _steps(2, 1.0, 1.0)[0]
    assert StepRecord.from_dict(step.as_dict()) == step
    row = step.as_dict()
    del row["probe_s"]
    assert StepRecord.from_dict(row).probe_s is None


class _Processor:
    """The three methods `install_step_hooks` wraps, doing nothing but build one batch."""

    def __init__(self) -> None:
        self.inputs_and_outputs = None

    def prepare_next_batch(self) -> bool:
        return True

    def _generation_step(self, model: object) -> None:
        pass

    def update_batch(self) -> None:
        pass


def test_every_hooked_step_carries_a_speed_probe():
    trace, processor = StepTrace(), _Processor()
    install_step_hooks(processor, trace)
    for _ in range(3):
        assert processor.prepare_next_batch()
        processor._generation_step(None)
        processor.update_batch()
    steps = trace.steps_since(0.0)
    assert len(steps) == 3 and all(s.probe_s is not None and s.probe_s > 0 for s in steps)
    assert all(s.forward_start_s - s.start_s >= s.probe_s for s in steps)  # inside the step's host time
    assert speed_probe() > 0


def test_the_spells_factor_moves_a_kind_by_the_slow_share_it_gained():
    from infralab.agent.fidelity.runner import spells_factor

    # the same share as the calibration's: no correction, whatever a slow step costs
    assert spells_factor(0.3, 0.3, 0.4, 1.2, 1.5) == pytest.approx(1.0)
    # all decode-only time, slow steps 1.2x: from 10 % to 60 % slow is (1 + 0.2 x 0.6) / (1 + 0.2 x 0.1)
    assert spells_factor(0.6, 0.1, 0.0, 1.9, 1.2) == pytest.approx(1.12 / 1.02)
    # half the time in each kind: the mean of the two kinds' factors
    both = spells_factor(0.5, 0.0, 0.5, 1.1, 1.3)
    assert both == pytest.approx(0.5 * 1.05 + 0.5 * 1.15)
    # fewer slow spells than the calibration: faster than charged
    assert spells_factor(0.0, 0.5, 0.5, 1.2, 1.2) == pytest.approx(1 / 1.1)
    # a kind with no measured factor counts as unchanged
    assert spells_factor(0.9, 0.0, 1.0, None, 1.5) == pytest.approx(1.0)


def test_the_slow_spell_mirror_becomes_the_cases_simulation_and_the_plain_one_is_kept(monkeypatch):
    """`_follow_the_spells`: the case's share from its own runs, the slow-step factors from the other
    cases' runs; the corrected mirror replaces the case's simulation (the verdict's), the mirror as
    calibrated kept beside; a case without probed steps keeps its simulation."""
    from infralab.agent.fidelity import runner

    seen = []
    monkeypatch.setattr(runner, "simulate_mirror", lambda doc, requests, scale, folder: seen.append(
        doc["cost"]["step_table_speed"]) or [])
    monkeypatch.setattr(runner, "latency_stats", lambda records: {"ttft": {"mean": 2.0}})
    monkeypatch.setattr(runner, "latency_samples", lambda records: {"ttft": "corrected"})

    def case(load, spells):
        c = runner.CaseResult("s", "chat", load, 1.0, load, 4, {"ttft": {"mean": 1.0}}, {"ttft": "plain"})
        c.runs = [{"error": None, "speed_spells": s} for s in spells]
        return c

    def spells(share, prompt=1.2, decode=1.4, time_share=0.25):
        return {"probed": 10, "slow_share": share, "prefill_slow_vs_fast": prompt, "decode_slow_vs_fast": decode,
                "prefill_time_share": time_share}

    a = case(0.3, [spells(0.5), spells(0.7)])
    b = case(0.8, [spells(0.2, prompt=1.1, decode=1.3)])
    quiet = case(0.5, [{"probed": 0, "slow_share": None}])
    runner._follow_the_spells([a, b, quiet], {"slow_share": 0.1}, {"cost": {"step_table_speed": 1.0}}, [], Path("."))
    # a: its share 0.6 against 0.1, b's factors (1.1, 1.3), a's time weights (0.25 prompt)
    expected = runner.spells_factor(0.6, 0.1, 0.25, 1.1, 1.3)
    assert a.spells_factor == pytest.approx(expected) and seen[0] == pytest.approx(expected)
    assert a.sim_stats == {"ttft": {"mean": 2.0}} and a.sim_samples == {"ttft": "corrected"}
    assert a.sim_plain_mirror == {"ttft": {"mean": 1.0}} and a.plain_factor == 1.0
    assert b.spells_factor == pytest.approx(runner.spells_factor(0.2, 0.1, 0.25, 1.2, 1.4))  # a's factors
    assert quiet.spells_factor is None and quiet.sim_stats == {"ttft": {"mean": 1.0}} and quiet.sim_plain_mirror is None
    # a calibration without probed steps: nothing changes
    c = case(0.3, [spells(0.5)])
    runner._follow_the_spells([c], {"slow_share": None}, {"cost": {}}, [], Path("."))
    assert c.spells_factor is None and c.sim_samples == {"ttft": "plain"}
