"""Where a prefill run's extra time went when KV transfer was added (same workload, same GIL mode).

Inputs are the recorded intervals of two runs (without and with the transfer thread), so the same
code serves the simulator and the real-threads probe (whose intervals the agent converts):
- `extra_s`: prefill time with minus without;
- `main_gil_wait_s`: extra time the prefill thread waited for the GIL;
- `compute_idle_s`: extra idle time of the compute stream inside the prefill span (simulator only);
- `comm_extra_s`: extra busy time of the comm stream, i.e. all-to-all slowed down by KV flows on a
  shared NIC (simulator only);
- `kv_slot_wait_s`: time the prefill thread was blocked because earlier prompts' KV had not been
  sent yet; split into `link_critical_s` (the NIC was moving KV meanwhile: link time on the
  critical path) and the rest (the transfer thread itself was late, e.g. waiting for the GIL);
- per-thread GIL wait of the run with transfer;
- overlap fractions of the transfer thread's activity with the dispatch/combine intervals.
Seconds throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from infralab.metrics.records import Interval
from infralab.sim.host.overlap import intersection, op_of, overlap_fraction, spans, total
from infralab.sim.host.thread import GIL_WAIT, NATIVE_HOLD, NATIVE_RELEASE, PYTHON

MAIN_TRACK, TRANSFER_TRACK = "thread/main", "thread/kv-transfer"
COMM_OPS = ("dispatch", "combine")
TRANSFER_OPS = ("descriptors", "transfer", "copy")
# The interval sets this study is about, declared in its timelines' metadata so that `infralab
# explain` compares them by default (agent/interval_sets.py: [[name, selector], [name, selector]]).
_OPS = ",".join(TRANSFER_OPS)
OVERLAP_PAIRS = [
    [["kv-transfer python", f"{TRANSFER_TRACK}:{PYTHON}:{_OPS}"],
     ["dispatch/combine", f"{MAIN_TRACK}:{NATIVE_HOLD},{NATIVE_RELEASE}:{','.join(COMM_OPS)}"]],
    [["kv-transfer work", f"{TRANSFER_TRACK}:{PYTHON},{NATIVE_HOLD},{NATIVE_RELEASE}:{_OPS}"],
     ["dispatch/combine", f"{MAIN_TRACK}:{NATIVE_HOLD},{NATIVE_RELEASE}:{','.join(COMM_OPS)}"]],
]


def timeline_metadata(**fields) -> dict:
    """A timeline's metadata: `fields` and the overlap pairs explain compares by default."""
    return {**fields, "overlap_pairs": OVERLAP_PAIRS}


@dataclass(frozen=True)
class Overlaps:
    """Fractions of the dispatch/combine native intervals covered by the transfer thread's work."""

    kv_python_over_comm: float  # its Python (descriptor building): the case study's telltale
    kv_activity_over_comm: float  # its Python or native transfer calls
    kv_python_inside_comm: float  # the other way round: share of its Python run inside them


@dataclass(frozen=True)
class Attribution:
    extra_s: float
    main_gil_wait_s: float
    compute_idle_s: float
    comm_extra_s: float  # extra busy time of the comm stream (all-to-all slowed by KV on a shared NIC)
    kv_slot_wait_s: float
    link_critical_s: float
    transfer_late_s: float
    gil_wait_s: dict[str, float]
    overlaps: Overlaps

    def as_dict(self) -> dict:
        return asdict(self)


def comm_spans(intervals: Sequence[Interval]) -> list[tuple[float, float]]:
    """The main thread's dispatch/combine native calls."""
    return spans(intervals, MAIN_TRACK, names=(NATIVE_HOLD, NATIVE_RELEASE), where=lambda iv: op_of(iv) in COMM_OPS)


def transfer_spans(intervals: Sequence[Interval], python_only: bool) -> list[tuple[float, float]]:
    """The transfer thread at work (not waiting): its Python, and unless `python_only` its calls."""
    names = (PYTHON,) if python_only else (PYTHON, NATIVE_HOLD, NATIVE_RELEASE)
    return spans(intervals, TRANSFER_TRACK, names=names, where=lambda iv: op_of(iv) in TRANSFER_OPS)


def overlaps(intervals: Sequence[Interval]) -> Overlaps:
    comm = comm_spans(intervals)
    kv_python = transfer_spans(intervals, python_only=True)
    return Overlaps(
        kv_python_over_comm=overlap_fraction(comm, kv_python),
        kv_activity_over_comm=overlap_fraction(comm, transfer_spans(intervals, python_only=False)),
        kv_python_inside_comm=overlap_fraction(kv_python, comm),
    )


def gil_wait(intervals: Sequence[Interval], track: str, until_s: float | None = None) -> float:
    """Seconds the thread on `track` waited for the GIL (up to `until_s` if given)."""
    found = spans(intervals, track, names=(GIL_WAIT,))
    if until_s is not None:
        found = intersection(found, [(float("-inf"), until_s)])
    return total(found)


def stream_idle(intervals: Sequence[Interval], stream_track: str, start_s: float, end_s: float) -> float:
    """Seconds in [start_s, end_s] during which `stream_track` ran nothing."""
    busy = intersection(spans(intervals, stream_track), [(start_s, end_s)])
    return (end_s - start_s) - total(busy)


def attribute(
    without: Sequence[Interval],
    without_prefill_s: float,
    with_: Sequence[Interval],
    with_prefill_s: float,
    stream_track: str = "stream/gpu0-compute",
    comm_track: str = "stream/gpu0-comm",
    link_track: str = "link/nic0",
    start_s: float = 0.0,
) -> Attribution:
    """Attribute `with_prefill_s - without_prefill_s` (prefill spans start at `start_s`)."""
    slot = spans(with_, MAIN_TRACK, names=(NATIVE_RELEASE,), where=lambda iv: op_of(iv) == "wait-kv-slot")
    kv_flows = spans(with_, link_track, where=lambda iv: dict(iv.args).get("label", "").startswith("kv "))
    link_critical = total(intersection(slot, kv_flows))
    threads = sorted({iv.track for iv in with_ if iv.track.startswith("thread/")})
    return Attribution(
        extra_s=with_prefill_s - without_prefill_s,
        main_gil_wait_s=gil_wait(with_, MAIN_TRACK, start_s + with_prefill_s)
        - gil_wait(without, MAIN_TRACK, start_s + without_prefill_s),
        compute_idle_s=stream_idle(with_, stream_track, start_s, start_s + with_prefill_s)
        - stream_idle(without, stream_track, start_s, start_s + without_prefill_s),
        comm_extra_s=total(spans(with_, comm_track)) - total(spans(without, comm_track)),
        kv_slot_wait_s=total(slot),
        link_critical_s=link_critical,
        transfer_late_s=total(slot) - link_critical,
        gil_wait_s={t.removeprefix("thread/"): gil_wait(with_, t) for t in threads},
        overlaps=overlaps(with_),
    )
