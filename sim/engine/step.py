"""What a scheduler hands the instance for one step (`StepPlan`) and what it reports after it
(`StepResult`); shared by every scheduler policy (`infralab.sim.protocols.SchedulerPolicy`)."""

from __future__ import annotations

from dataclasses import dataclass

from infralab.sim.cost import StepWork
from infralab.sim.engine.request_state import Seq


@dataclass(slots=True)
class StepPlan:
    """What one step computes: prefill chunks (request, new tokens) and all decoding requests."""

    step_no: int
    chunks: list[tuple[Seq, int]]
    decode_seqs: int
    work: StepWork

    # Spelled out: compiled (sim/native.py), the one dataclasses writes would run as Python, one
    # per step.
    def __init__(self, step_no: int, chunks: list[tuple[Seq, int]], decode_seqs: int, work: StepWork) -> None:
        self.step_no = step_no
        self.chunks = chunks
        self.decode_seqs = decode_seqs
        self.work = work


@dataclass(slots=True)
class StepResult:
    """What changed at the end of a step."""

    finished: list[Seq]
    handed_off: list[Seq]  # prefill-pool instance: prompt done, KV ready to move
    preempted: int  # during this step's planning
    # (step start s, KV blocks in use) after block growth inside a run of quiet steps, in order
    kv_used_at: tuple[tuple[float, int], ...] = ()

    def __init__(self, finished: list[Seq], handed_off: list[Seq], preempted: int,
                 kv_used_at: tuple[tuple[float, int], ...] = ()) -> None:  # spelled out, as StepPlan's
        self.finished = finished
        self.handed_off = handed_off
        self.preempted = preempted
        self.kv_used_at = kv_used_at
