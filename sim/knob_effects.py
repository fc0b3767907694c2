"""What each tunable knob of a simulation config acts on: the declarations an optimiser reads to map
a run's feedback (where its requests' time went, which bound is tight) to the knobs worth moving.

A declaration says, for a config field given by its dotted path, which causes go down (-1) or up
(+1) when the field's value goes up. The causes are the request phases `infralab explain` splits a
request's latency into (queue, prefill, kv_wait, kv_transfer, decode; encode for multimodal runs)
and `accelerators`, the count a per-accelerator objective divides by. The signs are the first-order
mechanics of the simulator, not a fit: more instances of a pool shorten the queue in front of it and
cost accelerators; a larger token budget per step moves prompt tokens through faster and makes each
decode step that shares the budget longer; more running sequences per instance admit sooner and
slow each step; more HBM for the KV cache admits more sequences before they wait for blocks.

`KNOB_EFFECTS[path]` is the lookup and `knob_value(path, value)` the number a value stands for
(names such as a dtype by their bytes per element); a knob without a declaration acts on nothing known, and an
optimiser may still try it blindly. Plain data: importing this module imports nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

CAUSES: tuple[str, ...] = ("encode", "queue", "prefill", "kv_wait", "kv_transfer", "decode", "accelerators")

KNOB_EFFECTS: Mapping[str, Mapping[str, int]] = MappingProxyType({
    # colocated instances: each serves prefill and decode
    "cluster.instances": MappingProxyType({"queue": -1, "accelerators": +1}),
    # disaggregated pools: prompts queue for the prefill pool, finished prefills for decode slots
    "cluster.prefill_instances": MappingProxyType({"queue": -1, "accelerators": +1}),
    "cluster.decode_instances": MappingProxyType({"kv_wait": -1, "decode": -1, "accelerators": +1}),
    # tensor parallelism inside one instance: faster steps, more accelerators per instance
    "hardware.tp": MappingProxyType({"prefill": -1, "decode": -1, "accelerators": +1}),
    # the token budget per step (chunked prefill): prompts finish in fewer steps, shared steps grow
    "engine.max_batched_tokens": MappingProxyType({"queue": -1, "prefill": -1, "decode": +1}),
    # running sequences per instance: admitted sooner, each step carries more of them
    "engine.max_num_seqs": MappingProxyType({"queue": -1, "kv_wait": -1, "decode": +1}),
    # HBM given to the KV cache: more sequences fit before admission waits for blocks
    "engine.gpu_memory_utilization": MappingProxyType({"queue": -1, "kv_wait": -1}),
    # a parallel degree per layer class (docs/sim.md): KDA heads / the vocabulary over more ranks
    "hardware.linear_tp": MappingProxyType({"prefill": -1, "decode": -1}),
    "hardware.lm_head_tp": MappingProxyType({"prefill": -1, "decode": -1}),
    # Layer Split: up to g times the full-attention KV capacity, a KV broadcast per layer and step
    "hardware.layer_split": MappingProxyType({"queue": -1, "kv_wait": -1, "prefill": +1, "decode": +1}),
    # bytes per element (KNOB_SCALES): weights and GEMMs (W8A8), or the KV cache
    "cost.dtype": MappingProxyType({"queue": +1, "kv_wait": +1, "prefill": +1, "decode": +1}),
    "cost.kv_dtype": MappingProxyType({"queue": +1, "kv_wait": +1, "decode": +1}),
})
"""Dotted config path -> {cause: -1 (goes down) or +1 (goes up) when the field's value goes up}."""

_BYTES = MappingProxyType({"fp32": 4, "bf16": 2, "fp16": 2, "fp8e4m3": 1, "int8": 1})

KNOB_SCALES: Mapping[str, Mapping[str, float]] = MappingProxyType({
    "cost.dtype": _BYTES,
    "cost.kv_dtype": _BYTES,
})
"""Fields whose values are names: the number each name stands for (bytes per element), so that a
change of them has a direction."""


def knob_value(path: str, value: object,
               scales: Mapping[str, Mapping[str, float]] = KNOB_SCALES) -> float | None:
    """The number a field's value stands for: itself when numeric, its scale when a name with a
    declared scale (`scales`, by default the simulator's `KNOB_SCALES`), else None (no direction)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    scale = scales.get(path, {})
    return float(scale[value]) if isinstance(value, str) and value in scale else None
