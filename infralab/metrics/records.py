"""What a simulation run records: the hand-off between the engine (which fills it) and the
metrics, timeline and attribution code (which read it). Times are simulated seconds.

Kept as plain, append-only containers so the engine's hot path does only cheap appends.

Memory: a run's intervals and counter samples go into an `IntervalLog` and a `CounterLog`. Both
fold every item, as it is appended, into the run's `ResourceTally` (what the summary needs: busy
spans merged as they come, bytes per link, counter series as compact arrays), and keep the items
themselves only when the run keeps its timeline (`RunRecord.with_timeline`). A run without a
timeline thus holds a few bytes per counter change instead of an object per step.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast


class TokenTimes:
    """A request's output-token end times (s), in order, as pieces (times, first, last): the
    entries first..last of an array of times. The engine adds the steps a request decoded in as
    one piece that points into the instance's own array of step end times (`add_steps`), so a
    request holds a few references instead of a float per token; `append` and `extend` add
    times of their own. Reads like a sequence of floats (len, index, iteration)."""

    # The last piece is held inline (_times, _first, _last) and earlier ones in _earlier: most
    # requests have one piece, and a million of them should not each hold a list and a tuple.
    __slots__ = ("_earlier", "_times", "_first", "_last", "_len", "_own")

    def __init__(self, times: Iterable[float] = ()) -> None:
        self._earlier: list[tuple[array[float], int, int]] | None = None
        self._times: array[float] | None = None
        self._first = self._last = 0
        self._len = 0
        self._own: array[float] | None = None  # the array `append` and `extend` write to
        if times:  # no empty array of its own for every record the engine fills (80 B each)
            self.extend(times)

    @property
    def pieces(self) -> list[tuple[array[float], int, int]]:
        """The pieces (times, first, last), in order."""
        last = [] if self._times is None else [(self._times, self._first, self._last)]
        return (self._earlier or []) + last

    def add_steps(self, step_ends: array[float], first: int, last: int) -> None:
        """Add the times step_ends[first..last] (inclusive); a piece that continues the last one
        (same array, next index) extends it."""
        if last < first:
            return
        self._len += last - first + 1
        if self._times is step_ends and self._last + 1 == first:
            self._last = last
            return
        if self._times is not None:
            if self._earlier is None:
                self._earlier = []
            self._earlier.append((self._times, self._first, self._last))
        self._times, self._first, self._last = step_ends, first, last

    def append(self, t: float) -> None:
        self.extend((t,))

    def extend(self, times: Iterable[float]) -> None:
        """Add times of the record's own (one array per record, grown while it is the last piece)."""
        own = self._own
        if own is None or self._times is not own:
            own = self._own = array("d")
        start = len(own)
        own.extend(times)
        self.add_steps(own, start, len(own) - 1)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[float]:
        for times, a, b in self.pieces:
            yield from times[a : b + 1]

    def __getitem__(self, index: int) -> float:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("token index out of range")
        for times, a, b in self.pieces:
            if index <= b - a:
                return times[a + index]
            index -= b - a + 1
        raise AssertionError("unreachable")

    def to_array(self) -> array[float]:
        """The times as one array('d') (a copy)."""
        out = array("d")
        for times, a, b in self.pieces:
            out.extend(times[a : b + 1])
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenTimes | array | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"TokenTimes({list(self)!r})"


def token_time_pieces(times: TokenTimes | array[float]) -> list[tuple[array[float], int, int]]:
    """The pieces of a request's token times; plain arrays (records made by hand) are one piece."""
    if isinstance(times, TokenTimes):
        return times.pieces
    return [(times, 0, len(times) - 1)] if len(times) else []


@dataclass(slots=True)
class RequestRecord:
    """One request's life. Unset times are NaN."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0  # prompt tokens served from the prefix cache (at the final admission)
    prefill_instance: str = ""
    decode_instance: str = ""
    first_scheduled_s: float = math.nan  # start of the first step that computed any of its prompt
    first_token_s: float = math.nan  # end of the step that produced output token 1 for the client
    # End time of every output token, first included; len == output_tokens once finished. The
    # engine fills a TokenTimes (pieces of its step end times); records made by hand may hold an
    # array('d').
    token_times_s: TokenTimes | array[float] = field(default_factory=TokenTimes)
    kv_transfer_start_s: float = math.nan  # disaggregated layouts only
    kv_transfer_end_s: float = math.nan
    prefill_end_s: float = math.nan  # disaggregated: end of the step that completed its prompt there
    decode_scheduled_s: float = math.nan  # disaggregated: start of its first decode-instance step
    finish_s: float = math.nan
    preemptions: int = 0
    recomputed_tokens: int = 0  # prompt + output tokens computed again after preemptions


@dataclass(frozen=True, slots=True)
class Interval:
    """A span on a timeline track: a batch on an instance, a transfer on a link, a thread state."""

    track: str  # e.g. "instance/prefill-0", "link/nic-prefill-0", "thread/kv-transfer"
    name: str  # e.g. "batch", "prefill", "decode", "transfer", "gil-wait"
    start_s: float
    end_s: float
    args: tuple[tuple[str, Any], ...] = ()  # small key/value details (tokens, bytes, request id)


@dataclass(frozen=True, slots=True)
class CounterSample:
    """A value of a named counter on a track from time `t_s` on (step function)."""

    track: str
    name: str  # e.g. "waiting", "running", "kv_used_blocks", "active_flows"
    t_s: float
    value: float


# Value arrays of a counter series, narrowest first: a series starts as bytes and is widened when a
# value does not fit (counters are small whole numbers), ending at float64, what a value of any
# other kind is stored as (exactly what the summary reads: it converts every value to float64).
_VALUE_TYPECODES = ("B", "H", "i", "d")


class CounterSeries:
    """One counter's samples in recording order: `times` (s, array('d')) and `values` (the
    narrowest array of `_VALUE_TYPECODES` that holds them all, so the summary reads the same
    float64 values as from an array('d')). 9 to 12 bytes per sample instead of 16 for most counters."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times: array[float] = array("d")
        self.values: array[float] = array(_VALUE_TYPECODES[0])  # whole numbers until widened to 'd'

    def add(self, t_s: float, value: float) -> None:
        try:
            self.values.append(value)
        except (OverflowError, TypeError):
            self._widen(value)
        self.times.append(t_s)

    def _widen(self, value: float) -> None:
        start = _VALUE_TYPECODES.index(self.values.typecode) + 1
        for code in _VALUE_TYPECODES[start:]:
            wider = array(code, self.values)
            try:
                wider.append(value)
            except (OverflowError, TypeError):
                continue
            self.values = wider
            return
        raise TypeError(f"a counter value must be a number, not {value!r}")

    def __iter__(self) -> Iterator[array[float]]:
        """(times, values), so a series unpacks like the pair it stands for."""
        return iter((self.times, self.values))


def is_busy_interval(track: str, name: str) -> bool:
    """Does an interval make its resource busy? An instance's "batch" intervals, and every interval
    of a link."""
    return (track.startswith("instance/") and name == "batch") or track.startswith("link/")


class ResourceTally:
    """What the run summary needs of intervals and counter samples, folded in as they are recorded.

    - `spans[track]`: the busy spans of a resource (`is_busy_interval`) as a flat array
      (start0, end0, start1, end1, ...; s). A span that starts within the last kept span (the usual
      case: steps back to back) is merged into it. That keeps the union of the spans, and so its
      maximal periods and their length, exactly the same.
    - `link_bytes[track]`: the sum of the "bytes" arg of a link's intervals, in recording order.
    - `counters[track][name]`: a `CounterSeries`, a counter's samples (times s, values) in
      recording order.
    - `last_end_s`: the latest end of any interval (s).
    """

    def __init__(self) -> None:
        self.spans: dict[str, array[float]] = {}
        self.link_bytes: dict[str, float] = {}
        self.counters: dict[str, dict[str, CounterSeries]] = {}
        self.last_end_s = -math.inf

    def add_interval(self, iv: Interval) -> None:
        track = iv.track
        if not is_busy_interval(track, iv.name):
            if iv.end_s > self.last_end_s:
                self.last_end_s = iv.end_s
            return
        self.add_busy(track, iv.start_s, iv.end_s)
        if track.startswith("link/"):
            self.link_bytes[track] = self.link_bytes.get(track, 0) + dict(iv.args).get("bytes", 0)

    def add_busy(self, track: str, start_s: float, end_s: float) -> None:
        """Fold in a busy interval of `track` (`is_busy_interval`) that carries no bytes: what
        `add_interval` does with it, without the Interval (an instance's steps, when no timeline
        is kept)."""
        if end_s > self.last_end_s:
            self.last_end_s = end_s
        spans = self.spans.get(track)
        if spans is None:
            spans = self.spans[track] = array("d")
        if spans and spans[-2] <= start_s <= spans[-1]:
            if end_s > spans[-1]:
                spans[-1] = end_s
        else:
            spans.append(start_s)
            spans.append(end_s)

    def add_counter(self, c: CounterSample) -> None:
        mine = self.counters.get(c.track)
        found = None if mine is None else mine.get(c.name)
        if found is None:
            found = self.series(c.track, c.name)
        found.add(c.t_s, c.value)

    def series(self, track: str, name: str) -> CounterSeries:
        """The series of counter `name` on `track` (made empty on first use). A recorder that keeps
        no timeline may add its samples to it directly, without a CounterSample each."""
        mine = self.counters.setdefault(track, {})
        found = mine.get(name)
        if found is None:
            found = mine[name] = CounterSeries()
        return found

    @classmethod
    def of(cls, intervals: Iterable[Interval], counters: Iterable[CounterSample]) -> ResourceTally:
        tally = cls()
        for iv in intervals:
            tally.add_interval(iv)
        for c in counters:
            tally.add_counter(c)
        return tally


class EarliestEvents:
    """The earliest `limit` + 1 timeline events of a run (intervals by start time, counter samples
    by time), shared by its IntervalLog and CounterLog, and how many there were.

    The timeline writes at most `limit` events: those before the time of the (limit + 1)-th
    earliest (`infralab.metrics.timeline`). Any limit + 1 earliest events give that time and hold every
    event before it, so the rest need not be kept. Events come nearly in time order, so once
    `limit` + 1 are held a later one is refused at the cost of one comparison."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._heap: list[tuple[float, int, bool, Interval | CounterSample]] = []  # (-time, -order, is interval, event)

    def offer(self, t: float, is_interval: bool, event: Interval | CounterSample) -> None:
        self.total += 1
        heap = self._heap
        if len(heap) <= self.limit:
            heapq.heappush(heap, (-t, -self.total, is_interval, event))
        elif t < -heap[0][0]:
            heapq.heapreplace(heap, (-t, -self.total, is_interval, event))

    def kept(self, is_interval: bool) -> list[Interval | CounterSample]:
        """The kept intervals (or counter samples), in recording order."""
        mine = sorted((-order, event) for _, order, interval, event in self._heap if interval == is_interval)
        return [event for _, event in mine]


_Event = TypeVar("_Event", bound="Interval | CounterSample")


class _EventLog(list[_Event], Generic[_Event]):
    """A run's intervals or counter samples: each appended one is folded into `tally`, and kept
    only when `keep` (all of them, or, with `earliest`, only the earliest; `RunRecord.close`).

    A list, so that the engine and the host model append to it as to any list (their hot path)."""

    IS_INTERVAL = True

    def __init__(self, tally: ResourceTally, keep: bool = True, earliest: EarliestEvents | None = None) -> None:
        super().__init__()
        self.tally = tally
        self.keep = keep
        self.earliest = earliest if keep else None

    def extend(self, items: Iterable[_Event]) -> None:
        for item in items:
            self.append(item)

    def _fold(self, item: _Event) -> float:
        """Fold `item` into the tally; returns its time (s)."""
        raise NotImplementedError

    def append(self, item: _Event) -> None:
        t = self._fold(item)
        if self.earliest is not None:
            self.earliest.offer(t, self.IS_INTERVAL, item)
        elif self.keep:
            super().append(item)

    @property
    def tally_only(self) -> bool:
        """Are appended items only folded into the tally (no timeline kept)?"""
        return not self.keep

    def close(self) -> None:
        """Keep the earliest events (recording order) as the list's items."""
        if self.earliest is not None:
            # the shared heap holds both kinds; those of this log's kind (IS_INTERVAL) are _Event
            list.extend(self, cast(list[_Event], self.earliest.kept(self.IS_INTERVAL)))
            self.earliest = None


class IntervalLog(_EventLog["Interval"]):
    """A run's intervals (see `_EventLog`)."""

    def _fold(self, iv: Interval) -> float:
        self.tally.add_interval(iv)
        return iv.start_s


class CounterLog(_EventLog["CounterSample"]):
    """A run's counter samples (see `_EventLog`)."""

    IS_INTERVAL = False

    def _fold(self, c: CounterSample) -> float:
        self.tally.add_counter(c)
        return c.t_s


@dataclass(slots=True)
class RunRecord:
    """Everything a run produced, in order of occurrence within each list.

    `intervals` and `counters` are an `IntervalLog` and a `CounterLog` sharing one `ResourceTally`
    unless the caller passes plain lists (`tally()` then folds them on demand)."""

    requests: list[RequestRecord] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=lambda: IntervalLog(ResourceTally()))
    counters: list[CounterSample] = field(default_factory=list)
    # Static facts per resource, e.g. {"instance/prefill-0": {"role": "prefill", "kv_capacity_blocks": 1234}}
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    end_s: float = 0.0  # simulated time when the last event happened
    # Set when only the earliest events were kept (`with_timeline`): how many were recorded, and
    # the most a timeline of this record may show.
    events_total: int | None = None
    max_events: int | None = None
    # Multimodal runs: one EncodeRecord per request, in `requests`' order (infralab.sim.encode_pool).
    encodes: list[Any] | None = None

    def __post_init__(self) -> None:
        # Counters share the intervals' tally when both are logs made here.
        if isinstance(self.intervals, IntervalLog) and type(self.counters) is list and not self.counters:
            self.counters = CounterLog(self.intervals.tally, self.intervals.keep)

    @classmethod
    def with_timeline(cls, keep: bool, max_events: int | None = None) -> RunRecord:
        """An empty record that keeps its intervals and counter samples only when `keep`, and
        then, when `max_events` is given, only those a timeline of at most `max_events` events
        shows (`EarliestEvents`; call `close` when the run is over). The summary's figures (its
        `tally`) are the same either way."""
        tally = ResourceTally()
        earliest = EarliestEvents(max_events) if keep and max_events is not None else None
        return cls(intervals=IntervalLog(tally, keep, earliest), counters=CounterLog(tally, keep, earliest))

    def add_interval(self, iv: Interval) -> None:
        """Record `iv`: its log folds it into the tally (and keeps it if it keeps a timeline).
        Compiled code (infralab.sim.native) must call this rather than `intervals.append`: mypyc
        types the field as a list and would call list.append, skipping the log's own."""
        self.intervals.append(iv)

    def add_counter(self, sample: CounterSample) -> None:
        """Record a counter sample, as `add_interval` records an interval."""
        self.counters.append(sample)

    def close(self) -> None:
        """The run is over: a record that kept only its earliest events lists them now, and
        `events_total` says how many there were."""
        logs = [log for log in (self.intervals, self.counters) if isinstance(log, _EventLog)]
        for log in logs:
            if log.earliest is not None:
                self.events_total = log.earliest.total
                self.max_events = log.earliest.limit
            log.close()

    @property
    def keeps_timeline(self) -> bool:
        return not isinstance(self.intervals, IntervalLog) or self.intervals.keep

    def tally(self) -> ResourceTally:
        """What the summary needs of this run's intervals and counters (see `ResourceTally`)."""
        iv, cs = self.intervals, self.counters
        if isinstance(iv, IntervalLog) and isinstance(cs, CounterLog) and iv.tally is cs.tally:
            return iv.tally
        return ResourceTally.of(iv, cs)
