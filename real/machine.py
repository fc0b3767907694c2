"""Whether a model and its engine settings fit this machine, estimated before anything is built.

Bytes the engine holds (itemsize = the dtype's bytes):
- weights: `ModelShape.parameters()` x itemsize;
- KV cache: num_blocks x page_size tokens x layers x 2 (K and V) x KV heads x head_dim x itemsize
  (the engine allocates all of it up front);
- the largest step's buffers: on the general ("varlen") path every step builds an additive
  attention mask of query tokens x keys (keys up to the whole cache plus the step's own tokens),
  the MLP's activations (3 x intermediate per query token) and the logits of the sampling rows
  (up to the request cap, a vocabulary each, fp32).

This is a floor on what the process needs (no allocator slack, no Python), so only runs that
cannot fit are refused. Memory available: `psutil.virtual_memory().available` on "cpu"; torch's
free device memory on "cuda".
"""

from __future__ import annotations

from dataclasses import dataclass

from infralab.errors import InputError
from infralab.real.engine import EngineSettings
from infralab.real.model_shape import ModelShape

ITEMSIZE = {"fp32": 4, "bf16": 2}
GB = 1e9


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    """Bytes the engine needs, by part."""

    weights: int
    kv_cache: int
    step_buffers: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.step_buffers


def memory_need(shape: ModelShape, settings: EngineSettings) -> MemoryNeed:
    """The engine's bytes for `shape` under `settings` (module docstring)."""
    itemsize = ITEMSIZE[settings.dtype]
    cache_tokens = settings.num_blocks * settings.page_size
    kv = cache_tokens * shape.num_layers * 2 * shape.num_kv_heads * shape.head_dim * itemsize
    q_tokens = settings.max_batch_tokens
    mask = q_tokens * (cache_tokens + q_tokens) * itemsize
    mlp = q_tokens * 3 * shape.intermediate_size * itemsize
    logits = min(settings.max_requests_per_batch, q_tokens) * shape.vocab_size * 4
    return MemoryNeed(shape.parameters() * itemsize, kv, mask + mlp + logits)


def available_bytes(device: str, where: str = "real.device") -> int:
    """Memory this process can still use on `device` (bytes); InputError at `where` when there is
    no such device."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError(where, '"cuda" on a machine without a CUDA device', 'device = "cpu"')
        free, _total = torch.cuda.mem_get_info()
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def check_fits_machine(shape: ModelShape, settings: EngineSettings, where: str, available: int | None = None,
                       device_where: str = "real.device") -> MemoryNeed:
    """InputError at `where` when the engine's estimated memory exceeds what is available
    (`available`, bytes; default: this machine's, `available_bytes`, whose errors name
    `device_where`). Returns the estimate."""
    need = memory_need(shape, settings)
    have = available_bytes(settings.device, device_where) if available is None else available
    if need.total > have:
        raise InputError(
            where,
            f"model {shape.name!r} with this engine needs about {need.total / GB:.1f} GB (weights "
            f"{need.weights / GB:.1f}, KV cache {need.kv_cache / GB:.1f}, step buffers {need.step_buffers / GB:.1f}), "
            f"more than the {have / GB:.1f} GB available on this machine's {settings.device}",
            "a smaller model, or fewer engine.num_blocks / a smaller engine.max_batched_tokens",
        )
    return need
