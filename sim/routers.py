"""Routers: which instance of a pool serves a request. Each is a small class with
`choose(request, instances) -> instance`; ties always go to the lowest instance index, so runs are
deterministic.

Each satisfies `infralab.sim.protocols.Router`; instances are read through `RoutedInstance`: `index`,
`outstanding_tokens` (queued + running work left, tokens) and `cached_prefix_tokens(request)`
(prompt tokens their prefix cache holds for it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from infralab.sim.protocols import InstanceT, Router, ServedRequest


class RoundRobin:
    """Instances in turn, regardless of load."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, request: ServedRequest, instances: Sequence[InstanceT]) -> InstanceT:
        chosen = instances[self._next % len(instances)]
        self._next += 1
        return chosen


class LeastOutstandingTokens:
    """The instance with the fewest queued and running tokens of work left."""

    def choose(self, request: ServedRequest, instances: Sequence[InstanceT]) -> InstanceT:
        return min(instances, key=lambda inst: (inst.outstanding_tokens, inst.index))


class PrefixAware:
    """The instance whose prefix cache holds the longest prefix of the request's prompt; ties go to
    the least outstanding tokens."""

    def choose(self, request: ServedRequest, instances: Sequence[InstanceT]) -> InstanceT:
        return min(
            instances,
            key=lambda inst: (-inst.cached_prefix_tokens(request), inst.outstanding_tokens, inst.index),
        )


ROUTERS: dict[str, Callable[[], Router]] = {
    "round_robin": RoundRobin,
    "least_outstanding_tokens": LeastOutstandingTokens,
    "prefix_aware": PrefixAware,
}


def make_router(name: str) -> Router:
    """A fresh router by its config name (`cluster.router`, `cluster.decode_router`)."""
    try:
        return ROUTERS[name]()
    except KeyError:
        raise ValueError(f"unknown router {name!r}; expected one of {sorted(ROUTERS)}") from None
