"""Per-pool hardware (`[cluster.pool_hardware.<pool>]`) and what a run's pools need beyond its one
cost model: a cost model per pool whose hardware differs, the image encoder's cost where requests
are encoded, and the multimodal requests (`ClusterPools`, built by `prepare_pools`).

A pool's hardware is `[hardware]` with the pool's `accelerator`, `tp`, `pp` and `tp_link` put in
(as DistServe and Splitwise size and place prefill and decode separately). The encode pool runs
only the vision encoder: its hardware is the accelerator, tp and tp_link (no pipeline stages, none
of the language model's per-layer-class knobs).

Accelerators of a cluster (`cluster_accelerators`): the sum over its pools of instances x tp x pp.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from infralab.errors import InputError
from infralab.sim.config import HardwareConfig, SimConfig
from infralab.sim.encoder_cost import EncoderCost
from infralab.sim.protocols import StepCostModel
from infralab.sim.specs import AcceleratorSpec, LinkSpec, load_accelerator, load_encoder, load_link
from infralab.workload.multimodal import draw_images, with_image_tokens
from infralab.workload.request_table import RequestTable

if TYPE_CHECKING:
    from infralab.sim.cost import CostModel

POOLS = ("encode", "prefill", "decode")
HARDWARE_KNOBS = ("accelerator", "tp", "pp", "tp_link")


def pool_hardware(cfg: SimConfig, pool: str) -> HardwareConfig:
    """The hardware of one pool ("encode", "prefill", "decode"; "colocated": `[hardware]`)."""
    hw = cfg.hardware
    sets = cfg.cluster.pool_hardware
    over = getattr(sets, pool, None) if sets is not None and pool in POOLS else None
    changes = {k: getattr(over, k) for k in HARDWARE_KNOBS if over is not None and getattr(over, k) is not None}
    if pool == "encode":  # the encoder alone: no pipeline, none of the language model's layer-class knobs
        return HardwareConfig(accelerator=changes.get("accelerator", hw.accelerator), tp=changes.get("tp", hw.tp),
                              tp_link=changes.get("tp_link", hw.tp_link))
    return dataclasses.replace(hw, **changes) if changes else hw


def pool_sizes(cfg: SimConfig) -> dict[str, int]:
    """Instances per pool of the layout ("colocated" for the colocated layout)."""
    c = cfg.cluster
    if c.layout == "colocated":
        return {"colocated": c.instances}
    sizes = {"prefill": c.prefill_instances, "decode": c.decode_instances}
    return {"encode": c.encode_instances, **sizes} if c.layout == "epd" else sizes


def cluster_accelerators(cfg: SimConfig) -> int:
    """Accelerators the cluster uses: over its pools, instances x tp x pp (the pool's hardware)."""
    total = 0
    for pool, n in pool_sizes(cfg).items():
        hw = pool_hardware(cfg, pool)
        total += n * hw.tp * (hw.pp or 1)
    return total


def pool_facts(cfg: SimConfig) -> dict[str, dict[str, Any]]:
    """Per pool: instances, accelerator, tp, pp (summary.json's run facts)."""
    out = {}
    for pool, n in pool_sizes(cfg).items():
        hw = pool_hardware(cfg, pool)
        out[pool] = {"instances": n, "accelerator": hw.accelerator, "tp": hw.tp, "pp": hw.pp or 1}
    return out


def reports_pools(cfg: SimConfig) -> bool:
    """Does the summary list pools and accelerators? Only with the knobs of this module (a config
    without them writes exactly the summary it always did)."""
    return cfg.cluster.layout == "epd" or cfg.cluster.pool_hardware is not None or cfg.workload.multimodal is not None


@dataclasses.dataclass(frozen=True)
class ClusterPools:
    """What `simulate` needs beyond the run's cost model.

    `costs`: role ("prefill", "decode") -> its cost model, where the pool's hardware differs
    (others use the run's); `encoder`: the encoder's cost where requests are encoded (the encode
    pool's instances in "epd", else the front instances'); `images`: request id -> images (only
    requests that have any); `embedding_link`: the encode -> prefill link spec ("epd")."""

    costs: Mapping[str, StepCostModel]
    encoder: EncoderCost | None = None
    images: Mapping[int, int] = dataclasses.field(default_factory=dict)
    image_tokens: int = 0
    embedding_link: LinkSpec | None = None


_Spec = TypeVar("_Spec")


class LoadSpec(Protocol):
    def __call__(self, loader: Callable[[str, Path], _Spec], value: str, base_dir: Path, source: str, field: str) -> _Spec: ...


MakeCost = Callable[[SimConfig, AcceleratorSpec, LinkSpec], StepCostModel]  # (cfg with a pool's hardware, accel, tp_link)


def prepare_pools(cfg: SimConfig, base_dir: Path, source: str, requests: RequestTable, context_length: int | None,
                  load_spec: LoadSpec, make_cost: MakeCost,
                  run_cost: StepCostModel) -> tuple[RequestTable, ClusterPools | None]:
    """The run's requests (image tokens added) and its pools, or (requests, None) for a config
    without multimodal requests or pool hardware. `load_spec(loader, value, base_dir, source,
    field)` reads a spec and names the field on a bad name; `make_cost` builds a cost model."""
    if not reports_pools(cfg):
        return requests, None

    def cost_on(pool: str) -> StepCostModel:
        hw = pool_hardware(cfg, pool)
        # only a run timed by cost.step_table leaves it unset, and such a run has no pools (check_epd_fields)
        assert hw.accelerator is not None
        where = f"cluster.pool_hardware.{pool}"
        accel = load_spec(load_accelerator, hw.accelerator, base_dir, source, f"{where}.accelerator")
        link = load_spec(load_link, hw.tp_link, base_dir, source, f"{where}.tp_link")
        try:
            return make_cost(dataclasses.replace(cfg, hardware=hw), accel, link)
        except InputError as exc:
            if exc.where.startswith("hardware."):
                raise InputError(f"{source}: {where} ({exc.where})", exc.problem, exc.expected) from None
            raise

    sets = cfg.cluster.pool_hardware
    costs = {pool: cost_on(pool) for pool in ("prefill", "decode") if sets is not None and getattr(sets, pool)}
    multimodal = cfg.workload.multimodal
    if multimodal is None:
        return requests, ClusterPools(costs)
    spec = load_spec(load_encoder, multimodal.encoder, base_dir, source, "workload.multimodal.encoder")
    image_tokens = multimodal.image_tokens(spec.tokens_per_image)
    counts = draw_images(multimodal, len(requests), cfg.run.seed)
    requests = with_image_tokens(requests, counts, image_tokens, cfg.engine.prefix_block_tokens, context_length)
    images = {r.id: n for r, n in zip(requests, counts) if n}
    per_image = image_tokens // multimodal.images_per_request
    # The encoder's heads are split over the ranks of the instances that run it.
    encoding = {"epd": "encode", "disaggregated": "prefill"}.get(cfg.cluster.layout, "colocated")
    tp = pool_hardware(cfg, encoding).tp
    if spec.num_heads % tp:
        field = f"cluster.pool_hardware.{encoding}.tp" if getattr(sets, encoding, None) else "hardware.tp"
        raise InputError(f"{source}: {field}", f"{tp} ranks do not divide the encoder's {spec.num_heads} heads",
                         f"a tp that divides {spec.num_heads} where images are encoded")
    if cfg.cluster.layout == "epd":
        # the roofline: a run with images has no cost.step_table (check_epd_fields)
        encoder = EncoderCost(spec, cast("CostModel", cost_on("encode")), per_image)
        link_name = cfg.cluster.embedding_transfer.link or cfg.cluster.transfer.link
        field = "cluster.embedding_transfer.link" if cfg.cluster.embedding_transfer.link else "cluster.transfer.link"
        link = load_spec(load_link, link_name, base_dir, source, field)
        return requests, ClusterPools(costs, encoder, images, image_tokens, link)
    front = costs.get("prefill", run_cost)
    if not hasattr(front, "accel"):
        raise InputError(f"{source}: workload.multimodal", "needs the roofline cost model (the encoder is costed "
                         "on the instance's accelerator)", "no cost.step_table")
    return requests, ClusterPools(costs, EncoderCost(spec, cast("CostModel", front), per_image), images, image_tokens)

