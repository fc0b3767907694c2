"""The KV-transfer thread of a prefill instance (a Mooncake-style transfer engine).

Per chunk (one layer's KV, or one layer of a finished prompt): wait for the KV to be written
(a device event; the wait releases the GIL), build the transfer descriptors in Python (one per KV
page), then a native transfer over the link that releases the GIL until the bytes have arrived.
The Python part needs the GIL, so it can only run when the prefill thread lets it. With
`descriptors_native` the per-page part moves into one native call that takes the page list and
releases the GIL (a batch-transfer API), at the same cost per page: only the fixed per-chunk
Python is left in the loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from infralab.sim.host.thread import HostThread, Segment


@dataclass(frozen=True)
class TransferCosts:
    """Python cost of one chunk: `chunk_python_s` + `descriptor_s` per descriptor (seconds)."""

    chunk_python_s: float
    descriptor_s: float
    holds_gil: bool = False  # Mooncake's transfer call releases the GIL
    descriptors_native: bool = False  # per-page work in a GIL-releasing native call, not Python


@dataclass
class KvChunk:
    step: int
    layer: int
    ready: simpy.Event  # fires when the KV is in memory
    nbytes: float
    descriptors: int
    step_done: simpy.Event | None = None  # succeeded after this chunk if it is the step's last


def kv_transfer_loop(
    thread: HostThread,
    inbox: simpy.Store,
    send,  # Callable[[float, str], simpy.Event]: starts a transfer of n bytes, returns its completion
    costs: TransferCosts,
) -> Segment:
    """Serve chunks from `inbox` until it yields None; then give the GIL back."""
    while True:
        get = inbox.get()
        yield from thread.wait(get, "queue")
        chunk: KvChunk | None = get.value
        if chunk is None:
            thread.finish()
            return
        yield from thread.wait(chunk.ready, "kv-ready")
        if costs.descriptors_native:
            yield from thread.python(costs.chunk_python_s, "descriptors")
            yield from thread.native(chunk.descriptors * costs.descriptor_s, holds_gil=False, label="descriptors")
        else:
            yield from thread.python(costs.chunk_python_s + chunk.descriptors * costs.descriptor_s, "descriptors")
        label = f"kv step{chunk.step} layer{chunk.layer}"
        yield from thread.native_until(lambda: send(chunk.nbytes, label), costs.holds_gil, "transfer")
        if chunk.step_done is not None:
            chunk.step_done.succeed()
