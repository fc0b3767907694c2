"""A network link whose bandwidth is shared fairly among the flows crossing it.

Each transfer is a flow: it first waits the link's latency (propagation and setup), then its
bytes move at bandwidth / n, where n is the number of flows in their byte phase at that moment
(processor sharing). A flow's finish time therefore moves whenever another flow starts or ends.

Bookkeeping uses a per-link "virtual byte clock" V: the bytes that any one flow in its byte
phase has received since the link last went idle. It grows at bandwidth / n, so a flow that
enters at V0 with b bytes finishes exactly when V reaches V0 + b. Flows wait in a heap keyed by
that finish value; a start or finish costs O(log n) instead of touching every flow. V restarts at
0 whenever the link is idle, which bounds the rounding that can build up in it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import simpy

from infralab.metrics.records import CounterSample, Interval, RunRecord
from infralab.sim.protocols import LinkRate

# A flow counts as done when what is left of it is below this fraction of its size: the
# virtual clock is a float, and the scheduled finish may land a rounding error short.
_DONE_FRACTION = 1e-9


@dataclass(slots=True)
class _Flow:
    nbytes: float
    start_s: float  # when transfer() was called (the latency phase starts)
    done: simpy.Event
    label: str
    args: tuple[tuple[str, Any], ...]
    entry_v: float = 0.0  # the virtual clock when the byte phase began
    finish_v: float = field(default=0.0)  # entry_v + nbytes


class Link:
    """A link whose bandwidth is shared fairly (processor sharing) among concurrent flows.

    `spec` needs `.bandwidth` (bytes/s) and `.latency` (s). `lanes` identical links side by side
    (e.g. one NIC per accelerator of a TP group) whose every flow is split evenly across them, each
    part moving at the same time: exactly one link of `lanes` x bandwidth with the same latency,
    which is how it is modelled. With a `record`, every flow becomes an Interval on track
    "link/<name>" and every change of the number of flows in their byte phase a CounterSample
    "active_flows" on that track.
    """

    def __init__(
        self, env: simpy.Environment, spec: LinkRate, name: str, record: RunRecord | None = None, lanes: int = 1
    ) -> None:
        if lanes < 1:
            raise ValueError(f"link {name}: lanes must be >= 1, got {lanes!r}")
        if not spec.bandwidth > 0:
            raise ValueError(f"link {name}: bandwidth must be > 0 bytes/s, got {spec.bandwidth!r}")
        if not spec.latency >= 0:
            raise ValueError(f"link {name}: latency must be >= 0 s, got {spec.latency!r}")
        self.env = env
        self.spec = spec
        self.name = name
        self.track = f"link/{name}"
        self._record = record
        self._bandwidth = float(spec.bandwidth) * lanes
        self._latency = float(spec.latency)
        # (finish_v, sequence, flow): the sequence breaks ties in start order.
        self._heap: list[tuple[float, int, _Flow]] = []
        self._sequence = itertools.count()
        self._v = 0.0  # virtual byte clock, see the module docstring
        self._v_time = env.now  # when _v was last brought up to date
        self._entry_v_sum = 0.0  # sum of entry_v over active flows (for bytes_delivered)
        self._generation = 0  # bumps on every change; a completion timer from an older one is stale
        self._completed_bytes = 0.0
        self._busy_s = 0.0
        if record is not None:
            facts = {"kind": "link", "bandwidth_Bps": self._bandwidth, "latency_s": self._latency}
            if lanes > 1:
                facts["lanes"] = lanes
            record.resources.setdefault(self.track, facts)

    # ---- public ------------------------------------------------------------------------------

    def transfer(self, nbytes: float, label: str = "", args: tuple[tuple[str, Any], ...] = ()) -> simpy.Event:
        """Send `nbytes` bytes; the event succeeds with the time (s) its last byte arrives.

        The flow waits `spec.latency`, then shares the bandwidth with the other flows in their byte
        phase. `label` and `args` (key/value pairs) go into the recorded Interval.
        """
        if not 0 <= nbytes < math.inf:
            raise ValueError(f"link {self.name}: nbytes must be finite and >= 0, got {nbytes!r}")
        flow = _Flow(float(nbytes), self.env.now, self.env.event(), label, args)
        wait = self.env.timeout(self._latency)
        wait.callbacks.append(lambda _event: self._begin_bytes(flow))
        return flow.done

    @property
    def active_flows(self) -> int:
        """Flows in their byte phase now (flows still in their latency phase are not counted)."""
        return len(self._heap)

    @property
    def bytes_delivered(self) -> float:
        """Bytes that have crossed the link so far, partial progress of active flows included."""
        in_flight = len(self._heap) * self._current_v() - self._entry_v_sum
        return self._completed_bytes + in_flight

    @property
    def busy_s(self) -> float:
        """Seconds during which at least one flow was in its byte phase (the link was moving bytes)."""
        ongoing = self.env.now - self._v_time if self._heap else 0.0
        return self._busy_s + ongoing

    # ---- flow life cycle ---------------------------------------------------------------------

    def _begin_bytes(self, flow: _Flow) -> None:
        if flow.nbytes == 0:
            self._finish(flow)
            return
        self._advance()
        flow.entry_v = self._v
        flow.finish_v = self._v + flow.nbytes
        heapq.heappush(self._heap, (flow.finish_v, next(self._sequence), flow))
        self._entry_v_sum += flow.entry_v
        self._on_change()

    def _on_completion_timer(self, generation: int) -> None:
        if generation != self._generation:
            return  # the set of flows changed after this timer was set; a newer one is pending
        self._advance()
        # The timer was set for the first flow's finish; land the clock exactly there so rounding
        # in (elapsed * rate) can neither leave a sliver nor overshoot.
        self._v = max(self._v, self._heap[0][0])
        while self._heap and self._heap[0][0] - self._v <= _DONE_FRACTION * self._heap[0][2].nbytes:
            _, _, flow = heapq.heappop(self._heap)
            self._entry_v_sum -= flow.entry_v
            self._completed_bytes += flow.nbytes
            self._finish(flow)
        if not self._heap:
            # Idle: restart the virtual clock so its rounding never accumulates across busy periods.
            self._v = 0.0
            self._entry_v_sum = 0.0
        self._on_change()

    def _finish(self, flow: _Flow) -> None:
        now = self.env.now
        if self._record is not None:
            nbytes = int(flow.nbytes) if flow.nbytes.is_integer() else flow.nbytes
            args = (("bytes", nbytes), ("label", flow.label), *flow.args)
            self._record.add_interval(Interval(self.track, "transfer", flow.start_s, now, args))
        flow.done.succeed(now)

    # ---- the shared clock ----------------------------------------------------------------------

    def _current_v(self) -> float:
        if not self._heap:
            return self._v
        return self._v + (self.env.now - self._v_time) * self._bandwidth / len(self._heap)

    def _advance(self) -> None:
        """Bring the virtual clock and busy time up to now, at the rate of the current flow count."""
        now = self.env.now
        if self._heap:
            self._v += (now - self._v_time) * self._bandwidth / len(self._heap)
            self._busy_s += now - self._v_time
        self._v_time = now

    def _on_change(self) -> None:
        """Record the new flow count and set one timer for the next completion."""
        self._generation += 1
        n = len(self._heap)
        if self._record is not None:
            self._record.add_counter(CounterSample(self.track, "active_flows", self.env.now, n))
        if n:
            delay = max(self._heap[0][0] - self._v, 0.0) * n / self._bandwidth
            generation = self._generation
            timer = self.env.timeout(delay)
            timer.callbacks.append(lambda _event: self._on_completion_timer(generation))
