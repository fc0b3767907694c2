"""Seconds to run a vision encoder over a request's images on one instance: the roofline of the
encoder spec's work on that instance's accelerator, with the instance's cost-model efficiencies
and TP collectives (`CostModel.all_reduce_s`).

The model (docs/sim.md, "EPD and per-pool hardware"), for n images of p patches each, width h,
L blocks, P parameters, on t TP ranks (weights sharded, as vLLM shards a ViT's linear layers):
- matrix products: 2 x P x p x n FLOPs at the GEMM rate (BF16 peak x `efficiency.gemm`) / t,
  at least the weights read once (P x 2 bytes at HBM bandwidth x the memory efficiency) / t;
- attention: 4 x L x p^2 x h x n FLOPs (full, bidirectional, per image) at the attention rate / t;
- with t > 1, two all-reduces per block of the block's output (n x p x h x 2 bytes).
The encoder runs in BF16 whatever the language model's dtype (W8A8 checkpoints keep the vision
tower in 16 bits). A request's images run as one batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from infralab.sim.cost import CostModel
from infralab.sim.cost.geometry import memory_efficiency
from infralab.sim.specs import VisionEncoderSpec

ENCODER_DTYPE = "bf16"
ACTIVATION_BYTES = 2  # BF16 activations


@dataclass(frozen=True)
class EncoderCost:
    """The encoder `spec` on the instance whose step costs `cost` gives (its accelerator, TP
    degree, efficiencies and TP link); `tokens_per_image` is what one image adds to a prompt."""

    spec: VisionEncoderSpec
    cost: CostModel
    tokens_per_image: int

    def images_s(self, images: int) -> float:
        """Seconds to encode `images` images in one batch on this instance (0 for none)."""
        if images <= 0:
            return 0.0
        spec, cost = self.spec, self.cost
        eff, tp = cost.cfg.efficiency, cost.tp
        peak = cost.accel.peak(ENCODER_DTYPE)
        patches = spec.patches_per_image * images
        gemm = 2.0 * spec.num_params * patches / (peak * eff.gemm * tp)
        weights = spec.num_params * ACTIVATION_BYTES / (cost.accel.hbm_bandwidth * memory_efficiency(cost.cfg, cost.accel) * tp)
        attention = 4.0 * spec.num_layers * spec.patches_per_image ** 2 * spec.hidden_size * images / (
            peak * eff.attention * tp)
        collectives = 2 * spec.num_layers * cost.all_reduce_s(patches * spec.hidden_size * ACTIVATION_BYTES)
        return max(gemm, weights) + attention + collectives

    def embedding_bytes(self, images: int) -> float:
        """Bytes of the embeddings `images` images hand to the language model: tokens x the
        projector's output width x 2 (BF16)."""
        return images * self.tokens_per_image * self.spec.out_hidden_size * ACTIVATION_BYTES
