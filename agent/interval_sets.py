"""Named sets of timeline intervals, chosen by track, interval name and op, for overlap analysis.

A selector is `TRACK[:NAMES[:OPS]]`: TRACK a glob over track names ("thread/main", "link/*"),
NAMES and OPS comma-separated globs over the interval's name ("python", "native-*") and over its
`op` arg (host threads) or, when it has none, its `label` arg (link flows); an empty or "*" part
matches anything. Example: `thread/main:native-*:dispatch,combine`.

The default pairs: those a timeline declares in its metadata (`overlap_pairs`: a list of
[[name A, selector A], [name B, selector B]], as a study writes for the sets it is about), and KV
flows against prefill batches (when a cluster run has links).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from typing import Any

from infralab.errors import InputError
from infralab.metrics.records import Interval


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


KV_FLOWS = IntervalSet("kv flows", "link/*", ("transfer",), ("kv*",))
PREFILL_BATCHES = IntervalSet("prefill batches", "instance/*", ("batch",), None, _has_prefill_tokens)
METADATA_KEY = "overlap_pairs"


def declared_pairs(metadata: dict[str, Any], source: str = "timeline") -> list[tuple[IntervalSet, IntervalSet]]:
    """The pairs a timeline's metadata declares: `overlap_pairs` = [[[name, selector], [name, selector]], ...]."""
    raw = metadata.get(METADATA_KEY)
    if raw is None:
        return []
    where = f"{source}: metadata.{METADATA_KEY}"
    expected = "a list of [[name A, selector A], [name B, selector B]] (selectors TRACK[:NAMES[:OPS]])"
    if not isinstance(raw, list):
        raise InputError(where, f"is {type(raw).__name__}", expected)
    pairs = []
    for i, pair in enumerate(raw):
        ok = (isinstance(pair, list) and len(pair) == 2
              and all(isinstance(x, list) and len(x) == 2 and all(isinstance(y, str) for y in x) for x in pair))
        if not ok:
            raise InputError(f"{where}[{i}]", f"is {pair!r}", expected)
        (name_a, sel_a), (name_b, sel_b) = pair
        a = parse_selector(sel_a, f"{where}[{i}]")
        b = parse_selector(sel_b, f"{where}[{i}]")
        pairs.append((IntervalSet(name_a, a.track, a.names, a.ops), IntervalSet(name_b, b.track, b.names, b.ops)))
    return pairs


def default_pairs(intervals: Sequence[Interval], metadata: Sequence[tuple[str, dict[str, Any]]] = ()
                  ) -> list[tuple[IntervalSet, IntervalSet]]:
    """The default (A, B) pairs whose sets both occur in `intervals` (any run being compared): the
    pairs the runs' timelines declare (`metadata`: (source, trace metadata) per run, first
    declaration of a name wins), then KV flows vs prefill batches."""
    candidates: list[tuple[IntervalSet, IntervalSet]] = []
    for source, meta in metadata:
        for a, b in declared_pairs(meta, source):
            if all((a.name, b.name) != (x.name, y.name) for x, y in candidates):
                candidates.append((a, b))
    candidates.append((KV_FLOWS, PREFILL_BATCHES))
    present = []
    for a, b in candidates:
        if any(a.matches(iv) for iv in intervals) and any(b.matches(iv) for iv in intervals):
            present.append((a, b))
    return present
