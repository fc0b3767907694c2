"""Static work of one engine step on a Llama-architecture model: flops and bytes, from its shape alone.

The counts the calibration table carries beside a measured time (docs/calibration.md). They follow
how this engine computes on CPU with `sdpa` attention: the whole batch is one packed sequence and
attention is one masked product over it, so every query token is scored against every KV token of
the batch (its own sequence's and the others', masked), not only its own sequence's; the LM head
runs on one row per sequence (the model takes `logits_to_keep`).
"""

from __future__ import annotations

from infralab.real.model_shape import ModelShape


def step_flops(shape: ModelShape, q_tokens: int, past_tokens: int, seqs: int) -> int:
    """Floating-point operations (a multiply-add is 2) of one step's forward; `past_tokens` are the
    tokens already in the KV cache that the step reads."""
    h, d = shape.hidden_size, shape.head_dim
    kv_width = shape.num_kv_heads * d
    linear_per_token = 2 * (2 * h * h + 2 * h * kv_width + 3 * h * shape.intermediate_size)
    keys = past_tokens + q_tokens  # the packed batch's whole key length
    attention = 2 * 2 * q_tokens * keys * shape.num_heads * d  # QK^T and PV
    lm_head = 2 * seqs * h * shape.vocab_size
    return shape.num_layers * (q_tokens * linear_per_token + attention) + lm_head


def step_bytes(shape: ModelShape, q_tokens: int, past_tokens: int, itemsize: int) -> int:
    """Bytes one step must move at least: every weight matrix once, the embedding rows of its query
    tokens, the KV it reads (past and new) and the KV it writes."""
    h = shape.hidden_size
    kv_width = shape.num_kv_heads * shape.head_dim
    per_layer = 2 * h * h + 2 * h * kv_width + 3 * h * shape.intermediate_size + 2 * h
    weights = shape.num_layers * per_layer + shape.vocab_size * h + h
    kv_per_token = 2 * kv_width * shape.num_layers
    elements = weights + q_tokens * h + (past_tokens + q_tokens) * kv_per_token + q_tokens * kv_per_token
    return elements * itemsize
