"""Named sets of timeline intervals, chosen by track, interval name and op, for overlap analysis.

A selector is `TRACK[:NAMES[:OPS]]`: TRACK a glob over track names ("thread/main", "link/*"),
NAMES and OPS comma-separated globs over the interval's name ("python", "native-*") and over its
`op` arg (host threads) or, when it has none, its `label` arg (link flows); an empty or "*" part
matches anything. Example: `thread/main:native-*:dispatch,combine`.

The default pairs name the two sets the KV-transfer/GIL case study is about (when a run has the
host threads) and KV flows against prefill batches (when a cluster run has links).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from infralab.errors import InputError
from infralab.metrics.records import Interval
from infralab.sim.host.attribution import COMM_OPS, MAIN_TRACK, TRANSFER_OPS, TRANSFER_TRACK
from infralab.sim.host.thread import NATIVE_HOLD, NATIVE_RELEASE, PYTHON


def op_or_label(iv: Interval) -> str:
    """The interval's `op` arg, else its `label` arg, else ""."""
    args = dict(iv.args)
    return str(args.get("op", args.get("label", "")))


@dataclass(frozen=True)
class IntervalSet:
    """Intervals whose track, name and op (or label) match the globs; None matches anything."""

    name: str
    track: str
    names: tuple[str, ...] | None = None
    ops: tuple[str, ...] | None = None
    where: Callable[[Interval], bool] | None = None  # extra predicate (defaults only)

    @property
    def selector(self) -> str:
        text = self.track
        if self.names is not None or self.ops is not None:
            text += ":" + ",".join(self.names or ("*",))
        if self.ops is not None:
            text += ":" + ",".join(self.ops)
        if self.where is not None:
            text += " (+ " + (self.where.__doc__ or "a predicate").strip() + ")"
        return text

    def matches(self, iv: Interval) -> bool:
        if not fnmatchcase(iv.track, self.track):
            return False
        if self.names is not None and not any(fnmatchcase(iv.name, g) for g in self.names):
            return False
        if self.ops is not None and not any(fnmatchcase(op_or_label(iv), g) for g in self.ops):
            return False
        return self.where is None or self.where(iv)

    def select(self, intervals: Iterable[Interval]) -> list[Interval]:
        return [iv for iv in intervals if self.matches(iv)]


def parse_selector(text: str, where: str = "--overlap") -> IntervalSet:
    """`TRACK[:NAMES[:OPS]]` as an IntervalSet named by the text itself."""
    parts = text.split(":")
    if len(parts) > 3 or not parts[0].strip():
        raise InputError(where, f"bad selector {text!r}", "TRACK[:NAMES[:OPS]], e.g. thread/main:native-*:dispatch,combine")

    def globs(part: str) -> tuple[str, ...] | None:
        items = tuple(p.strip() for p in part.split(",") if p.strip())
        return None if not items or items == ("*",) else items

    names = globs(parts[1]) if len(parts) > 1 else None
    ops = globs(parts[2]) if len(parts) > 2 else None
    return IntervalSet(name=text, track=parts[0].strip(), names=names, ops=ops)


def _has_prefill_tokens(iv: Interval) -> bool:
    """prefill_tokens > 0"""
    return (dict(iv.args).get("prefill_tokens") or 0) > 0


KV_PYTHON = IntervalSet("kv-transfer python", TRANSFER_TRACK, (PYTHON,), TRANSFER_OPS)
KV_WORK = IntervalSet("kv-transfer work", TRANSFER_TRACK, (PYTHON, NATIVE_HOLD, NATIVE_RELEASE), TRANSFER_OPS)
DISPATCH_COMBINE = IntervalSet("dispatch/combine", MAIN_TRACK, (NATIVE_HOLD, NATIVE_RELEASE), COMM_OPS)
KV_FLOWS = IntervalSet("kv flows", "link/*", ("transfer",), ("kv*",))
PREFILL_BATCHES = IntervalSet("prefill batches", "instance/*", ("batch",), None, _has_prefill_tokens)


def default_pairs(intervals: Sequence[Interval]) -> list[tuple[IntervalSet, IntervalSet]]:
    """The default (A, B) pairs whose sets both occur in `intervals` (any run being compared)."""
    candidates = [(KV_PYTHON, DISPATCH_COMBINE), (KV_WORK, DISPATCH_COMBINE), (KV_FLOWS, PREFILL_BATCHES)]
    present = []
    for a, b in candidates:
        if any(a.matches(iv) for iv in intervals) and any(b.matches(iv) for iv in intervals):
            present.append((a, b))
    return present
