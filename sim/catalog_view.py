"""What `infralab sim catalog` shows: the shipped specs, and one spec's derived figures.

A model's figures (parameters, weight bytes, KV bytes per token, linear-attention state bytes per
sequence, context length) depend on the dtypes only; its KV capacity depends on the accelerator,
TP degree, dtypes, memory utilisation and the batch limits, so it is shown for a configuration
(`CostModel.memory_plan`, the one sizing rule runs use). Bytes are plain integers; GiB figures are
for reading.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from infralab.errors import InputError
from infralab.sim.config import CostConfig, EngineConfig, HardwareConfig
from infralab.sim.cost_model import CostModel
from infralab.sim.specs import catalog_names, load_accelerator, load_link, load_model

GIB = 2**30


def catalog_listing() -> dict[str, list[str]]:
    """Shipped spec names by kind."""
    return catalog_names()


def spec_figures(
    name: str,
    *,
    accelerator: str | None = None,
    tp: int = 1,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    gpu_memory_utilization: float = 0.9,
    max_num_seqs: int | None = None,
    max_batched_tokens: int | None = None,
    block_size: int = 16,
) -> dict[str, Any]:
    """One spec's figures: a model's derived figures (with `accelerator`: its memory plan there),
    or an accelerator's or link's fields. InputError when `name` is none of them."""
    kind = _kind_of(name)
    if kind == "accelerators":
        accel = load_accelerator(name)
        return {"accelerator": dataclasses.asdict(accel), "usable_memory_bytes": accel.usable_memory}
    if kind == "links":
        return {"link": dataclasses.asdict(load_link(name))}
    model = load_model(name)
    kv_dtype = kv_dtype or ("bf16" if dtype == "fp8" else dtype)
    out: dict[str, Any] = {
        "model": model.name,
        "source": model.source,
        "context_length": model.context_length,
        "params": model.num_params,
        "active_params_per_token": model.active_params_per_token,
        "dtype": dtype,
        "kv_dtype": kv_dtype,
        "weight_bytes": model.weight_bytes(dtype),
        "kv_bytes_per_token": model.kv_bytes_per_token(kv_dtype),
        "state_bytes_per_seq": model.linear_state_bytes_per_seq(),
    }
    if accelerator is not None:
        out["kv_capacity"] = _kv_capacity(model, accelerator, tp, dtype, kv_dtype, gpu_memory_utilization,
                                          max_num_seqs, max_batched_tokens, block_size)
    return out


def _kind_of(name: str) -> str:
    if "/" in name or name.endswith(".toml"):
        return "models"  # a path: read as a model spec
    for kind, names in catalog_names().items():
        if name.lower() in (n.lower() for n in names):
            return kind
    every = ", ".join(n for names in catalog_names().values() for n in names)
    raise InputError(f"catalog {name!r}", "unknown name", f"one of {every}, or a model spec TOML path")


def _kv_capacity(model, accelerator: str, tp: int, dtype: str, kv_dtype: str, utilization: float,
                 max_num_seqs: int | None, max_batched_tokens: int | None, block_size: int) -> dict[str, Any]:
    accel = load_accelerator(accelerator)
    link = load_link(HardwareConfig(accelerator=accelerator).tp_link) if tp > 1 else None
    cost = CostModel(model, accel, CostConfig(dtype=dtype, kv_dtype=kv_dtype), tp=tp, tp_link=link)
    engine = EngineConfig(max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens, block_size=block_size,
                          gpu_memory_utilization=utilization)
    engine = engine.with_vllm_defaults(accel.usable_memory, accel.calibration_device, model.context_length)
    plan = cost.memory_plan(utilization, engine.max_num_seqs, engine.max_batched_tokens)
    return {
        "accelerator": accel.name,
        "tp": tp,
        "gpu_memory_utilization": utilization,
        "max_num_seqs": engine.max_num_seqs,
        "max_batched_tokens": engine.max_batched_tokens,
        "reported_memory_bytes_per_gpu": accel.usable_memory,
        **plan.to_json(block_size),
        "kv_gib": round(plan.kv_bytes / GIB, 2),
        "max_concurrency_at_context_length": (
            None if not model.context_length else round(plan.kv_tokens / model.context_length, 2)
        ),
    }
