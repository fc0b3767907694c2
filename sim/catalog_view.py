"""What `infralab sim catalog` shows: the shipped specs, and one spec's derived figures.

A model's figures (parameters, weight bytes, KV bytes per token, linear-attention state bytes per
sequence, context length) depend on the dtypes only; its KV capacity depends on the accelerator,
TP degree, dtypes, memory utilisation and the batch limits, so it is shown for a configuration
(`CostModel.memory_plan`, the one sizing rule runs use), with the GLM-class knobs (per-layer-class
TP, EP, Layer Split, pp, ReplaySSM, KV dtypes per layer) and their derived figures under
"techniques". A vision encoder shows its tokens, parameters and FLOPs per image. W8A8's numerical
error comes from a `kernels check --json` report (`w8a8_numerics`). Bytes are plain integers; GiB
figures are for reading.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, TypeVar

from infralab.config_io import validate
from infralab.errors import InputError
from infralab.sim.config import CostConfig, EngineConfig, HardwareConfig
from infralab.sim.cost import W8A8_DTYPES, CostModel
from infralab.sim.specs import ModelSpec, catalog_names, load_accelerator, load_encoder, load_link, load_model

T = TypeVar("T")

# HardwareConfig's GLM-class knobs that `spec_figures` passes through (None: off).
HARDWARE_KNOBS = ("linear_tp", "lm_head_tp", "moe_ep", "layer_split", "pp", "pp_micro_batches")

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
    kv_layer_dtypes: tuple[str, ...] | None = None,
    replay_ssm_ring: int | None = None,
    w8a8_check: str | Path | None = None,
    **hardware_knobs: int | None,
) -> dict[str, Any]:
    """One spec's figures: a model's derived figures (with `accelerator`: its memory plan there,
    under the GLM-class knobs given: `kv_layer_dtypes`, `replay_ssm_ring` and HARDWARE_KNOBS), a
    vision encoder's, or an accelerator's or link's fields. With W8A8 weights (dtype int8 or
    fp8e4m3) and `w8a8_check` (a `kernels check --json` report), the kernel's measured error is
    shown beside. InputError when `name` is none of them."""
    unknown = sorted(set(hardware_knobs) - set(HARDWARE_KNOBS))
    if unknown:
        raise InputError("spec_figures", f"unknown knob(s) {unknown}", f"some of {HARDWARE_KNOBS}")
    kind = _kind_of(name)
    if kind == "encoders":
        return _encoder_figures(name)
    if kind == "accelerators":
        accel = load_accelerator(name)
        return {"accelerator": dataclasses.asdict(accel), "usable_memory_bytes": accel.usable_memory}
    if kind == "links":
        return {"link": dataclasses.asdict(load_link(name))}
    model = load_model(name)
    kv_dtype = kv_dtype or ("bf16" if dtype in W8A8_DTYPES else dtype)
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
        cost_cfg = _from_flags(CostConfig, dict(dtype=dtype, kv_dtype=kv_dtype, kv_layer_dtypes=kv_layer_dtypes,
                                                replay_ssm_ring=replay_ssm_ring))
        out["kv_capacity"] = _kv_capacity(model, accelerator, tp, cost_cfg, gpu_memory_utilization,
                                          max_num_seqs, max_batched_tokens, block_size, hardware_knobs)
    if dtype in W8A8_DTYPES and w8a8_check is not None:
        out["w8a8_numerics"] = w8a8_numerics(w8a8_check)
    return out


def _encoder_figures(name: str) -> dict[str, Any]:
    vit = load_encoder(name)
    return {"encoder": dataclasses.asdict(vit), "patches_per_image": vit.patches_per_image,
            "tokens_per_image": vit.tokens_per_image, "params": vit.num_params,
            "flops_per_image": vit.flops_per_image()}


def w8a8_numerics(report: str | Path) -> dict[str, Any]:
    """W8A8's numerical error as `infralab kernels check --json` measured it (its "w8a8" summary):
    per data set, the relative Frobenius error against the FP32 matmul (the quantisation error),
    the largest relative error against the exact dequantised product and its stated bound, and
    whether the Triton kernel matched its integer reference bit for bit."""
    path = Path(report)
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["summaries"]["w8a8"]
        return {row["data"]: {"rel_fro_vs_fp32": row["rel_fro_vs_fp32"], "max_rel_vs_exact": row["max_rel_vs_exact"],
                              "rel_bound": row["rel_bound"], "kernel_vs_ref_bitwise": row["kernel_vs_ref_bitwise"],
                              "shape": {"M": row["m"], "N": row["n"], "K": row["k"]}}
                for row in rows}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}", f"not a kernels check report with W8A8 rows ({exc!r})",
                         "the output of `infralab kernels check --json --kernels w8a8_matmul`") from None


def _from_flags(cls: type[T], fields: dict[str, Any]) -> T:
    """`cls` from the command's flags (field `x_y` is flag `--x-y`); a value the field refuses is
    one InputError naming the flag and the field's bound, as a config file's would be."""
    try:
        return validate(cls, fields, "sim catalog")
    except InputError as exc:
        field = exc.where.removeprefix("sim catalog: ").split(".")[0]
        raise InputError(f"sim catalog: --{field.replace('_', '-')}", exc.problem, exc.expected) from None


def _kind_of(name: str) -> str:
    if "/" in name or name.endswith(".toml"):
        return "models"  # a path: read as a model spec
    for kind, names in catalog_names().items():
        if name.lower() in (n.lower() for n in names):
            return kind
    every = ", ".join(n for names in catalog_names().values() for n in names)
    raise InputError(f"catalog {name!r}", "unknown name", f"one of {every}, or a model spec TOML path")


def _kv_capacity(model: ModelSpec, accelerator: str, tp: int, cost_cfg: CostConfig, utilization: float,
                 max_num_seqs: int | None, max_batched_tokens: int | None, block_size: int,
                 knobs: dict[str, int | None]) -> dict[str, Any]:
    accel = load_accelerator(accelerator)
    hardware = _from_flags(HardwareConfig, dict(accelerator=accelerator, tp=tp, **knobs))
    link = load_link(hardware.tp_link) if tp > 1 or (hardware.pp or 1) > 1 else None
    cost = CostModel(model, accel, cost_cfg, tp=tp, tp_link=link, hardware=hardware)
    engine = _from_flags(EngineConfig, dict(max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens,
                                            block_size=block_size, gpu_memory_utilization=utilization))
    engine = engine.with_vllm_defaults(accel.usable_memory, accel.calibration_device, model.context_length)
    assert engine.max_num_seqs is not None and engine.max_batched_tokens is not None  # with_vllm_defaults sets both
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
        **({"techniques": _technique_figures(cost)} if _any_technique(cost_cfg, knobs) else {}),
    }


def _any_technique(cost_cfg: CostConfig, knobs: dict[str, int | None]) -> bool:
    return (any(v is not None for v in knobs.values()) or cost_cfg.kv_layer_dtypes is not None
            or cost_cfg.replay_ssm_ring is not None or cost_cfg.dtype in W8A8_DTYPES)


def _technique_figures(cost: CostModel) -> dict[str, Any]:
    """The derived figures of the GLM-class knobs on one instance (bytes, ranks, fractions)."""
    return {
        "devices": cost.devices,
        "linear_tp": cost.linear_tp,
        "lm_head_tp": cost.lm_head_tp,
        "moe_ep": cost.moe_ep,
        "layer_split": cost.layer_split,
        "pp": cost.pp,
        "pp_micro_batches": cost.micro_batches,
        "pipeline_bubble_fraction": round(cost.pipeline_bubble(), 4),
        "replay_ssm_ring": cost.replay_ring,
        "linear_state_bytes_per_rank": cost.linear_state_bytes_per_rank(),
        "kv_bytes_per_token": cost.kv_bytes_per_token(),
        "kv_transfer_bytes_per_token": cost.model_kv_bytes_per_token(),
        "kv_layer_dtypes": list(cost.cfg.kv_layer_dtypes or ()),
        "weight_dtype": cost.cfg.dtype,
    }
