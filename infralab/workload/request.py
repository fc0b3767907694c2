"""The unit of work every workload produces and the engine consumes."""

from __future__ import annotations

import numbers
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

    def __post_init__(self) -> None:
        # Python numbers, whatever the caller built it from (numpy scalars): the compiled simulator
        # (infralab.sim.native) takes no numpy int where it declares an int, and the outputs then
        # read the same either way.
        if type(self.id) is int and type(self.prompt_tokens) is int and type(self.output_tokens) is int \
                and type(self.arrival_s) is float:
            return  # the usual case (trace readers and builders give Python numbers)
        for name in ("id", "prompt_tokens", "output_tokens"):
            value = getattr(self, name)
            if type(value) is not int and isinstance(value, numbers.Integral):
                object.__setattr__(self, name, int(value))
        if isinstance(self.arrival_s, numbers.Real) and type(self.arrival_s) is not float:
            object.__setattr__(self, "arrival_s", float(self.arrival_s))
