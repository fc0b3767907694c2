"""CPU affinity for the probe: run its threads on a given number of this machine's cores.

Linux applies `sched_setaffinity(0, ...)` to the calling thread, and a new thread inherits its
creator's mask, so the probe pins its main thread BEFORE it starts the transfer thread (and the
GIL hand-off trial's waiter); both then share the same `cores` cores. The mask is restored after.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager

# libc through PyDLL: sched_getcpu keeps the GIL (a Python file read would release it and let
# another thread of a probe run in between).
_LIBC = ctypes.PyDLL(None)


def current_cpu() -> int:
    """The CPU the calling thread runs on now (sched_getcpu; the GIL kept; about a microsecond)."""
    return int(_LIBC.sched_getcpu())


def usable_cores() -> tuple[int, ...]:
    """The cores this process may run on now (its affinity mask), sorted."""
    return tuple(sorted(os.sched_getaffinity(0)))


def skip_reason(cores: int) -> str | None:
    """Why the probe cannot run on `cores` cores here (None: it can)."""
    usable = usable_cores()
    if cores > len(usable):
        return f"asked for {cores} cores, but this process may use {len(usable)} (os.sched_getaffinity)"
    return None


@contextmanager
def pinned(cores: int | None) -> Iterator[tuple[int, ...]]:
    """The calling thread (and every thread it starts meanwhile) runs on the first `cores` usable
    cores; None leaves the mask alone. Yields the cores used. ValueError if there are too few."""
    before = usable_cores()
    if cores is None:
        yield before
        return
    reason = skip_reason(cores)
    if reason is not None:
        raise ValueError(reason)
    chosen = before[:cores]
    os.sched_setaffinity(0, chosen)
    try:
        yield chosen
    finally:
        os.sched_setaffinity(0, before)
