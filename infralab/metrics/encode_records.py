"""A multimodal request's encode stage as a run record part (`RunRecord.encodes`): what
requests.csv's encode columns hold, for the simulator's encode pool and inline encoder
(infralab.sim.encode_pool) and any run that encodes images.

`encode_s` is the time the encode stage adds to TTFT: with an encode pool (EPD), arrival to
embeddings at the prefill instance (queue + compute + transfer); inline, the encoder's compute
inside the prefill step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# requests.csv's encode columns (multimodal runs only), then the derived `encode_s`.
ENCODE_FIELDS = ("images", "image_tokens", "encode_instance", "encode_start_s", "encode_end_s", "embeddings_ready_s")
ENCODE_DERIVED = ("encode_s",)


@dataclass(slots=True)
class EncodeRecord:
    """One request's encode stage (times in s; NaN when it has no images)."""

    images: int
    image_tokens: int
    encode_instance: str = ""
    encode_start_s: float = math.nan  # the encoder starts on its images
    encode_end_s: float = math.nan
    embeddings_ready_s: float = math.nan  # at the prefill instance (inline: encode_end_s)
    arrival_s: float = math.nan

    @property
    def pooled(self) -> bool:
        """Encoded by an encode pool's instance (EPD), not inline by the prefilling instance."""
        return self.encode_instance.startswith("encode-")

    @property
    def encode_s(self) -> float:
        """Seconds the encode stage adds to TTFT (module docstring); NaN without images."""
        if self.pooled:
            return self.embeddings_ready_s - self.arrival_s
        return self.encode_end_s - self.encode_start_s

    @property
    def queue_s(self) -> float:
        """EPD: seconds waiting for an encode instance (NaN inline or without images)."""
        if not self.pooled:
            return math.nan
        return self.encode_start_s - self.arrival_s

ENCODE_COLUMNS = ENCODE_FIELDS + ENCODE_DERIVED


def encode_values(enc: EncodeRecord) -> list[object]:
    """One request's encode columns (ENCODE_COLUMNS), NaN where undefined."""
    return [*(getattr(enc, name) for name in ENCODE_FIELDS), enc.encode_s if enc.images else math.nan]
