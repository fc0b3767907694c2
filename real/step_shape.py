"""The shape of one engine step: query tokens, keys, sequences (plain data, no torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepShape:
    """Query tokens, keys (past + query tokens) and sequences of one step (tokens, tokens, sequences).

    `kv_tokens` counts the step's own new tokens with the past ones: it is the key length the step's
    attention covers (>= q_tokens >= 1, so it is a valid shape value in the calibration table); the
    scheduler's "KV read" budget counts the past part only (`past_tokens`).
    """

    q_tokens: int
    kv_tokens: int
    seqs: int

    @property
    def past_tokens(self) -> int:
        """Tokens already in the KV cache that the step reads (the scheduler's KV-read budget)."""
        return self.kv_tokens - self.q_tokens

    def per_sequence(self) -> list[tuple[int, int]]:
        """(query, past) of each sequence: the totals split as evenly as whole tokens allow."""
        return [(_share(self.q_tokens, self.seqs, i), _share(self.past_tokens, self.seqs, i))
                for i in range(self.seqs)]


def _share(total: int, parts: int, index: int) -> int:
    return total // parts + (index < total % parts)
