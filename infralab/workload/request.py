"""The unit of work every workload produces and the engine consumes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request.

    `arrival_s` is simulated seconds from the workload's start (the first request arrives at 0).
    `block_hashes` identifies the prompt's prefix per 512-token block (Mooncake `hash_ids`): two
    requests whose first k hashes are equal share their first k*512 prompt tokens. () = unknown.
    """

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...] = ()
