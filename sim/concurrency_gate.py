"""Closed-loop load: at most N requests in flight, as `vllm bench serve --max-concurrency N`.

A request is in flight from its submission to the cluster until its last token. Requests keep the
order (and earliest times) of their arrivals; one that arrives while N are in flight waits for the
next to finish and is submitted then. Its record's `arrival_s` is its submission time, so TTFT and
E2E latency count from when it was sent, as `vllm bench serve` measures them (the wait for a free
user is not in them). A workload's `max_concurrency` turns this on (`[workload]`, docs/sim.md);
with a very high arrival rate the load is purely closed (N users, each sending its next request
when the previous one ends).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING

import simpy

from infralab.metrics.records import RequestRecord

if TYPE_CHECKING:
    from infralab.sim.engine.instance import Instance
    from infralab.sim.engine.request_state import Seq


class ConcurrencyGate:
    """Counts requests in flight; `enter` waits for a free slot, `leave` frees one."""

    def __init__(self, env: simpy.Environment, limit: int) -> None:
        self.env = env
        self.limit = limit
        self.in_flight = 0
        self.peak = 0
        self._freed: simpy.Event | None = None
        self._held_until = -math.inf  # the latest submission of a request that waited (s)

    def enter(self, rec: RequestRecord) -> Generator[simpy.Event, object, None]:
        """A SimPy generator: returns once fewer than `limit` requests are in flight, and takes a
        slot. A request sent later than it arrived (it waited here, or it arrived while an earlier
        one waited here) gets `rec.arrival_s` = now, its submission time."""
        waited = self.in_flight >= self.limit
        while self.in_flight >= self.limit:
            self._freed = self.env.event()
            yield self._freed
        if waited:
            self._held_until = self.env.now
        if waited or rec.arrival_s < self._held_until:
            rec.arrival_s = self.env.now
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def leave(self, _seq: Seq) -> None:
        """A request finished (an instance's `on_finished`): free its slot."""
        self.in_flight -= 1
        if self._freed is not None and not self._freed.triggered:
            self._freed.succeed()


def concurrency_gate(env: simpy.Environment, max_concurrency: int | None, instances: list[Instance]) -> ConcurrencyGate | None:
    """A gate of `max_concurrency` slots told about every finish on `instances`; None (open loop)
    when `max_concurrency` is None."""
    if max_concurrency is None:
        return None
    gate = ConcurrencyGate(env, max_concurrency)
    for instance in instances:
        instance.on_finished = gate.leave
    return gate
