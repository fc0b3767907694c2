"""The config tables of multimodal requests, the EPD layout and per-pool hardware (docs/sim.md,
"EPD and per-pool hardware"); `sim.config` refers to them, one line each.

- `[workload.multimodal]` is part of the shared workload schema (`infralab.workload.schema.MultimodalConfig`).
- `[cluster.embedding_transfer]` (`EmbeddingTransferConfig`): the link image embeddings cross from
  an encode instance to a prefill instance (layout "epd").
- `[cluster.pool_hardware.<pool>]` (`PoolHardwareConfig`, pools "encode", "prefill", "decode"):
  the pool's accelerator, tp, pp and tp_link instead of `[hardware]`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, TypeAlias

from pydantic import StrictInt
from pydantic.dataclasses import dataclass

from infralab.config_io import STRICT
from infralab.errors import InputError
from infralab.field_types import int_bounds

if TYPE_CHECKING:
    from infralab.sim.config import SimConfig  # which imports this module

Degree: TypeAlias = Annotated[StrictInt, int_bounds(gt=0, le=1024)]  # a parallel degree (ranks), as sim.config's


@dataclass(frozen=True, config=STRICT)
class EmbeddingTransferConfig:
    """Encode -> prefill hand-over of image embeddings (layout "epd")."""

    link: str | None = None  # catalog link or TOML path; None: cluster.transfer.link


@dataclass(frozen=True, config=STRICT)
class PoolHardwareConfig:
    """One pool's hardware where it differs from `[hardware]` (None: `[hardware]`'s value)."""

    accelerator: str | None = None
    tp: Degree | None = None
    pp: Degree | None = None  # not for the encode pool (the encoder is not pipelined)
    tp_link: str | None = None


@dataclass(frozen=True, config=STRICT)
class PoolHardwareSet:
    """`[cluster.pool_hardware]`: per pool of the layout (disaggregated: prefill, decode; epd: and
    encode); a pool the layout lacks is an input error."""

    encode: PoolHardwareConfig | None = None
    prefill: PoolHardwareConfig | None = None
    decode: PoolHardwareConfig | None = None


# The pools each layout has (pool_hardware may name only these).
LAYOUT_POOLS: dict[str, tuple[str, ...]] = {
    "colocated": (),
    "disaggregated": ("prefill", "decode"),
    "epd": ("encode", "prefill", "decode"),
}


def check_epd_fields(cfg: SimConfig, source: str, require_file: Callable[[str, str], None]) -> None:
    """Cross-field checks of the EPD and pool-hardware knobs of a `SimConfig` (before any work);
    `require_file(value, field)` checks a spec named by path exists (a catalog name passes). Each
    error names its field."""
    cluster, multimodal = cfg.cluster, cfg.workload.multimodal
    if cluster.layout == "epd" and multimodal is None:
        raise InputError(f"{source}: cluster.layout", "'epd' without [workload.multimodal] (no request has images "
                         "for the encode pool)", "a [workload.multimodal] table, or layout = 'disaggregated'")
    if (multimodal is not None or cluster.pool_hardware is not None) and cfg.cost.step_table is not None:
        field = "workload.multimodal" if multimodal is not None else "cluster.pool_hardware"
        raise InputError(f"{source}: {field}", "set with cost.step_table (a step table times only the language "
                         "model's steps on one hardware)", f"no {field}, or no cost.step_table")
    paths = []
    if multimodal is not None:
        paths.append(("workload.multimodal.encoder", multimodal.encoder))
    if cluster.layout == "epd" and cluster.embedding_transfer.link is not None:
        paths.append(("cluster.embedding_transfer.link", cluster.embedding_transfer.link))
    pools = cluster.pool_hardware
    for pool in ("encode", "prefill", "decode") if pools is not None else ():
        hw = getattr(pools, pool)
        if hw is None:
            continue
        where = f"cluster.pool_hardware.{pool}"
        if pool not in LAYOUT_POOLS[cluster.layout]:
            has = ", ".join(LAYOUT_POOLS[cluster.layout]) or "none: one kind of instance, set [hardware]"
            raise InputError(f"{source}: {where}", f"the {cluster.layout!r} layout has no {pool} pool",
                             f"pool_hardware only for the layout's pools ({has})")
        if pool == "encode" and hw.pp is not None:
            raise InputError(f"{source}: {where}.pp", "pipeline stages for the encode pool",
                             "no pp for the encode pool (the vision encoder runs unpipelined; set tp)")
        paths += [(f"{where}.{key}", getattr(hw, key)) for key in ("accelerator", "tp_link")]
    for where, value in paths:
        if value is not None:
            require_file(value, where)
