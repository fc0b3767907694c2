"""Seeded random streams, one per subsystem.

Every part of a run that needs randomness asks for its own named stream, so that adding draws in
one subsystem (say, more arrivals) never shifts the numbers another subsystem sees (say, output
lengths). The stream depends only on the run's seed and the name: no global state.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _stable_name_key(name: str) -> int:
    """A 64-bit integer from `name` that is the same in every process (unlike `hash(str)`)."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "little")


def stream(seed: int, name: str) -> np.random.Generator:
    """An independent, reproducible generator for subsystem `name` (e.g. "workload.arrivals").

    Same (seed, name) -> the same sequence of draws; different names give statistically
    independent streams (NumPy's SeedSequence mixes the seed and the name's key).
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    sequence = np.random.SeedSequence([int(seed), _stable_name_key(name)])
    return np.random.Generator(np.random.PCG64(sequence))
