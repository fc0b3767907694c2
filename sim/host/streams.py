"""Device streams: work launched by a host thread runs later, in launch order, on the device.

A launch returns at once (its host-side cost is the launching thread's business, see
`launch`); the work starts when the stream's previous work and every event in `after` are done
(cross-stream dependencies, like cudaStreamWaitEvent) and records an interval on the stream's
track, e.g. "stream/gpu0-compute". `Stream.idle_event()` is what a synchronise waits for.
Times are simulated seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Union

import simpy

from infralab.metrics.records import Interval
from infralab.sim.host.thread import HostThread, Segment

# A kernel's duration in seconds, or a callable that starts the work and returns its completion
# event (e.g. `lambda: link.transfer(nbytes)` for communication whose time depends on sharing).
Work = Union[float, Callable[[], simpy.Event]]


class Stream:
    """An in-order queue of device work (one CUDA stream)."""

    def __init__(self, env: simpy.Environment, name: str, intervals: list[Interval]) -> None:
        self.env = env
        self.name = name
        self.track = f"stream/{name}"
        self.intervals = intervals
        self._tail: simpy.Event | None = None  # completion of the last launched work
        self.busy_s = 0.0

    def enqueue(self, work: Work, label: str, after: Iterable[simpy.Event] = ()) -> simpy.Event:
        """Queue `work`; returns the event of its completion."""
        done = self.env.event()
        deps = [e for e in (self._tail, *after) if e is not None]
        self._tail = done
        self.env.process(self._run(deps, work, label, done))
        return done

    def idle_event(self) -> simpy.Event:
        """Fires when everything launched so far has finished (what a synchronise waits for)."""
        if self._tail is None:
            event = self.env.event()
            event.succeed()
            return event
        return self._tail

    def _run(self, deps: list[simpy.Event], work: Work, label: str, done: simpy.Event) -> Generator[simpy.Event, object, None]:
        if deps:
            yield self.env.all_of(deps)
        start = self.env.now
        if callable(work):
            yield work()
        else:
            yield self.env.timeout(work)
        self.busy_s += self.env.now - start
        self.intervals.append(Interval(self.track, label, start, self.env.now))
        done.succeed()


def launch(
    thread: HostThread,
    stream: Stream,
    work: Work,
    label: str,
    launch_s: float,
    after: Iterable[simpy.Event] = (),
) -> Segment:
    """Host side of a kernel launch: `launch_s` of Python/driver work on `thread`, then the work is
    queued on `stream`. Returns (via `yield from`) the completion event."""
    yield from thread.python(launch_s, f"launch {label}")
    return stream.enqueue(work, label, after)


def synchronize(thread: HostThread, stream: Stream, label: str = "synchronize") -> Segment:
    """Block `thread` (GIL released, as torch.cuda.synchronize does) until `stream` is idle."""
    yield from thread.wait(stream.idle_event(), label)
