"""The encode stage in a multimodal run's results: requests.csv's encode columns and the
summary's "encode" block (docs/sim.md, "EPD and per-pool hardware").

- requests.csv (after ttft_s, tpot_s, e2e_s; infralab.metrics.encode_records): `images`, `image_tokens`, `encode_instance`,
  `encode_start_s`, `encode_end_s`, `embeddings_ready_s` (`EncodeRecord`), and `encode_s`: the
  seconds the encode stage adds to TTFT (EPD: arrival to embeddings at the prefill instance,
  queue + compute + transfer; inline: the encoder's compute inside the prefill step).
- summary.json "encode": whether requests were encoded in an encode pool (`encode_pool`; false:
  inline), counts of image
  requests, images and image tokens, the distributions (s) of `encode_s`, of the encoder's compute
  and, with an encode pool, of the queue and the embedding transfer over the finished image
  requests, and the encode instances' busy fractions (mean, max).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from infralab.metrics.records import RunRecord
from infralab.metrics.run_metrics import distribution, is_finished
from infralab.metrics.summary import ResourceStats


def encode_summary(run: RunRecord, instances: Mapping[str, ResourceStats], qs: Sequence[float]) -> dict[str, Any]:
    """summary.json's "encode" block of a multimodal run (module docstring)."""
    assert run.encodes is not None
    done = [enc for req, enc in zip(run.requests, run.encodes) if enc.images and is_finished(req)]
    pool = any(enc.encode_instance.startswith("encode-") for enc in run.encodes)

    def dist(values: list[float]) -> dict[str, float | None]:
        return distribution(np.array(values, dtype=float), qs).to_json()

    out: dict[str, Any] = {
        "encode_pool": pool,  # false: encoded inline, in the prefill step
        "image_requests": sum(1 for enc in run.encodes if enc.images),
        "images": sum(enc.images for enc in run.encodes),
        "image_tokens": sum(enc.image_tokens for enc in run.encodes),
        "encode_s": dist([enc.encode_s for enc in done]),
        "encode_compute_s": dist([enc.encode_end_s - enc.encode_start_s for enc in done]),
    }
    if pool:
        busy = [s.busy_fraction for s in instances.values() if s.role == "encode"]
        out["encode_queue_s"] = dist([enc.queue_s for enc in done])
        out["embedding_transfer_s"] = dist([enc.embeddings_ready_s - enc.encode_end_s for enc in done])
        out["encode_pool_busy"] = {"mean": float(np.mean(busy)) if busy else 0.0, "max": max(busy, default=0.0)}
    return out
