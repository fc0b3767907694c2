"""A synthetic multimodal layer on top of any workload (`[workload.multimodal]`): a share of the
requests carry images, whose embeddings are prefilled as prompt tokens.

Assumptions (stated; docs/sim.md, "EPD and per-pool hardware"):
- Whether a request carries images is a Bernoulli draw with probability `image_share`, from its own
  seeded stream ("workload.multimodal"), so the text part (arrivals, lengths) is unchanged and the
  same seed gives the same image requests.
- An image request carries exactly `images_per_request` images of the encoder's native resolution,
  each adding `tokens_per_image` prompt tokens (default: the encoder's patches after merging, 576
  for CLIP ViT-L/14 at 336 px, as LLaVA-1.5 feeds them).
- The image tokens follow the request's text in the prompt, so the text's prefix-cache identity
  (a trace's block hashes) still holds for its whole blocks; a block the image tokens complete
  and the image tokens themselves are never cache hits (no two requests share an image).
"""

from __future__ import annotations

from array import array

from infralab.errors import InputError
from infralab.random_streams import stream
from infralab.workload.request_table import RequestTable
from infralab.workload.schema import MultimodalConfig

STREAM = "workload.multimodal"


def draw_images(spec: MultimodalConfig, n: int, seed: int) -> array[int]:
    """Images per request (0 or `images_per_request`) for requests 0..n-1, from the
    "workload.multimodal" stream of `seed`."""
    carries = stream(seed, STREAM).random(n) < spec.image_share
    return array("q", (spec.images_per_request if c else 0 for c in carries.tolist()))


def with_image_tokens(requests: RequestTable, images: array[int], image_tokens: int, prefix_block_tokens: int,
                      context_length: int | None) -> RequestTable:
    """`requests` with `image_tokens` more prompt tokens on every request that has images, its
    block hashes cut to the text's whole prefix blocks. InputError naming
    `workload.multimodal` when a prompt (with its output) no longer fits the model's `context_length`."""
    prompts, hashes = array("q"), []
    has_hashes = any(r.block_hashes for r in requests)
    for r, count in zip(requests, images):
        prompt, blocks = r.prompt_tokens, r.block_hashes
        if count:
            blocks = blocks[: prompt // prefix_block_tokens]
            prompt += image_tokens
            # The request's KV ends at prompt + output (as build checks for text alone).
            if context_length is not None and prompt + r.output_tokens > context_length:
                raise InputError("workload.multimodal",
                                 f"request {r.id}: {r.prompt_tokens} text + {image_tokens} image + {r.output_tokens} "
                                 f"output tokens exceed the model's context_length {context_length}",
                                 "fewer images_per_request or tokens_per_image, or shorter prompts or outputs")
        prompts.append(prompt)
        hashes.append(blocks)
    arrivals = array("d", (r.arrival_s for r in requests))
    outputs = array("q", (r.output_tokens for r in requests))
    ids = array("q", (r.id for r in requests))  # a trace's own ids stay
    return RequestTable(arrivals, prompts, outputs, hashes if has_hashes else None, ids)
