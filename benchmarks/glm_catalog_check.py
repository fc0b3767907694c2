"""Check the catalog's GLM-5.3-Flash entry against transformers' config, field by field, so the
entry cannot drift from the public config it cites (sim/catalog/models/glm-5.3-flash.toml).

    .venv/bin/python benchmarks/glm_catalog_check.py            # fields only (seconds)
    .venv/bin/python benchmarks/glm_catalog_check.py --params   # + parameter counts on the meta device

Source of truth: `Glm5NextConfig().text_config` (transformers' Glm5NextTextConfig defaults, the
pinned transformers 5.23.0, checkpoint "zai-org/GLM-5.3-Flash"). `sim` never imports transformers;
this script and tests/sim/test_glm_flash.py do. Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from infralab.sim.specs import ModelSpec, load_model

CATALOG_NAME = "glm-5.3-flash"


def expected_fields(text: Any) -> dict[str, Any]:
    """ModelSpec fields as the transformers text config gives them (the mapping of names)."""
    full = tuple("full" if kind == "indexed_attention" else "linear" for kind in text.layer_types)
    kinds = set(text.layer_types)
    assert kinds <= {"linear_attention", "indexed_attention"}, f"unknown layer types {kinds}"
    dense = [kind == "dense" for kind in text.mlp_layer_types]
    first_dense = dense.index(False) if False in dense else len(dense)
    assert not any(dense[first_dense:]), "dense MLP layers after the first MoE layer"
    return {
        "num_layers": text.num_hidden_layers,
        "hidden_size": text.hidden_size,
        "num_heads": text.num_attention_heads,
        "num_kv_heads": text.num_key_value_heads,
        "vocab_size": text.vocab_size,
        "context_length": text.max_position_embeddings,
        "intermediate_size": text.intermediate_size,
        "num_experts": text.n_routed_experts,
        "experts_per_token": text.num_experts_per_tok,
        "moe_intermediate_size": text.moe_intermediate_size,
        "num_shared_experts": text.n_shared_experts,
        "first_k_dense_layers": first_dense,
        "tie_word_embeddings": text.tie_word_embeddings,
        "layer_types": full,
        "kv_lora_rank": text.kv_lora_rank,
        "q_lora_rank": text.q_lora_rank,
        "qk_nope_head_dim": text.qk_nope_head_dim,
        "qk_rope_head_dim": text.qk_rope_head_dim,
        "v_head_dim": text.v_head_dim,
        "linear_num_heads": text.linear_num_heads,
        "linear_head_dim": text.linear_head_dim,
        "linear_conv_kernel": text.linear_conv_kernel_dim,
        "index_topk": text.index_topk,
        "index_n_heads": text.index_n_heads,
        "index_head_dim": text.index_head_dim,
        "index_kpool": text.index_kpool,
    }


def mismatches(spec: ModelSpec | None = None) -> list[str]:
    """Every field of the catalog entry that differs from the transformers config ('' list: none),
    plus the config features the entry cannot express and must not silently gain."""
    from transformers import Glm5NextConfig

    text = Glm5NextConfig().text_config
    spec = spec if spec is not None else load_model(CATALOG_NAME)
    out = [f"{name}: catalog {getattr(spec, name)!r}, config {value!r}"
           for name, value in expected_fields(text).items() if getattr(spec, name) != value]
    if any(kind != "full" for kind in text.indexer_types):
        out.append(f"indexer_types: config has shared indexers {text.indexer_types}; the cost model runs one per layer")
    if not text.index_kpool_always_select_tail:
        out.append("index_kpool_always_select_tail: False in the config")
    if text.hc_mult != 4:
        out.append(f"hc_mult: config {text.hc_mult}; the file's note on hyper-connections assumes 4")
    return out


def meta_param_counts() -> dict[str, int]:
    """Parameters of Glm5NextForConditionalGeneration built on the meta device (no memory), split
    into the vision tower, the hyper-connections and the rest (what ModelSpec counts)."""
    import torch
    from transformers import Glm5NextConfig
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextForConditionalGeneration

    with torch.device("meta"):
        model = Glm5NextForConditionalGeneration(Glm5NextConfig())
    counts = {"total": 0, "vision": 0, "hyper_connections": 0}
    for name, param in model.named_parameters():
        counts["total"] += param.numel()
        if ".visual." in f".{name}":
            counts["vision"] += param.numel()
        elif "_hc." in name:
            counts["hyper_connections"] += param.numel()
    counts["text_without_hc"] = counts["total"] - counts["vision"] - counts["hyper_connections"]
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", action="store_true", help="also count parameters on the meta device")
    args = parser.parse_args()
    spec = load_model(CATALOG_NAME)
    bad = mismatches(spec)
    for line in bad:
        print("MISMATCH", line)
    print(f"{CATALOG_NAME}: {len(bad)} mismatches")
    print(f"ModelSpec: {spec.num_params:,} parameters, {spec.active_params_per_token:,} active per token")
    if args.params:
        counts = meta_param_counts()
        print("transformers (meta device): " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        if counts["text_without_hc"] != spec.num_params:
            print(f"MISMATCH parameters: ModelSpec {spec.num_params:,}, transformers {counts['text_without_hc']:,}")
            return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
