"""The requests of a workload held as columns: what `build_workload` and `read_trace` return.

A million-request trace as a list of `Request` objects costs about 80 bytes per request beyond
the numbers themselves (the object and its list slot), for the whole run. A `RequestTable` keeps
the numbers in arrays (8 bytes each) and reads like a list of requests: `len`, indexing (a slice
gives a list), iteration and `==` against any sequence of requests. Each access builds the
`Request` (id = its position, or the trace's own id where the file gives one), so holding one
keeps only that one alive.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterator, Sequence
from typing import overload

from infralab.workload.request import Request


class RequestTable(Sequence[Request]):
    """Requests in arrival order: arrival (s), prompt and output tokens, prompt block hashes (None:
    none), ids 0..n-1 unless the trace gave its own (`ids`)."""

    __slots__ = ("_arrival_s", "_prompt", "_output", "_hashes", "_ids")

    def __init__(
        self,
        arrival_s: array[float],
        prompt_tokens: array[int],
        output_tokens: array[int],
        block_hashes: list[tuple[int, ...]] | None,
        ids: array[int] | None = None,
    ) -> None:
        n = len(arrival_s)
        lengths = {len(prompt_tokens), len(output_tokens), n if block_hashes is None else len(block_hashes),
                   n if ids is None else len(ids)}
        if lengths != {n}:
            raise ValueError("the columns of a RequestTable must have one entry per request")
        self._arrival_s = arrival_s  # array('d')
        self._prompt = prompt_tokens  # array('q')
        self._output = output_tokens  # array('q')
        self._hashes = block_hashes
        self._ids = ids  # array('q'): a trace's own ids (the plain CSV); None: the position

    @classmethod
    def of(cls, requests: Sequence[Request]) -> RequestTable:
        """A table of `requests`, whose ids must be 0..n-1 in order."""
        if any(r.id != i for i, r in enumerate(requests)):
            raise ValueError("a RequestTable numbers its requests 0..n-1 in order")
        hashes = [r.block_hashes for r in requests]
        return cls(
            array("d", (r.arrival_s for r in requests)),
            array("q", (r.prompt_tokens for r in requests)),
            array("q", (r.output_tokens for r in requests)),
            hashes if any(hashes) else None,
        )

    def __len__(self) -> int:
        return len(self._arrival_s)

    @overload
    def __getitem__(self, index: int) -> Request: ...

    @overload
    def __getitem__(self, index: slice) -> list[Request]: ...

    def __getitem__(self, index: int | slice) -> Request | list[Request]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self._arrival_s)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("request index out of range")
        hashes = self._hashes[index] if self._hashes is not None else ()
        request_id = index if self._ids is None else self._ids[index]
        return Request(request_id, self._arrival_s[index], self._prompt[index], self._output[index], hashes)

    def __iter__(self) -> Iterator[Request]:
        hashes = self._hashes if self._hashes is not None else itertools.repeat(())
        ids = self._ids if self._ids is not None else itertools.count()
        for i, t, p, o, h in zip(ids, self._arrival_s, self._prompt, self._output, hashes):
            yield Request(i, t, p, o, h)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # mutable columns, like a list

    def __repr__(self) -> str:
        return f"RequestTable({len(self)} requests)"
