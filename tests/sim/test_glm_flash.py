"""GLM-5.3-Flash in the catalog: the entry matches transformers' Glm5NextTextConfig field by field
(benchmarks/glm_catalog_check.py), its derived counts match hand counts, and the indexer fields
fail clearly when inconsistent."""

from __future__ import annotations

import pytest

from infralab.errors import InputError
from infralab.sim.specs import load_model
from support.scripts import load_benchmark

GLM = load_model("glm-5.3-flash")


def test_catalog_entry_matches_the_transformers_config():
    pytest.importorskip("transformers")
    assert load_benchmark("glm_catalog_check").mismatches() == []


def test_the_check_catches_a_drifted_field():
    pytest.importorskip("transformers")
    import dataclasses

    drifted = dataclasses.replace(GLM, index_topk=1024)
    assert any(line.startswith("index_topk") for line in load_benchmark("glm_catalog_check").mismatches(drifted))


def test_layer_schedule_and_counts_by_hand():
    # idx % 4 != 3 (0-based) is KDA: 34 KDA layers, 11 indexed MLA layers at 0-based 3, 7, ..., 43
    assert GLM.num_full_attention_layers == 11 and GLM.num_linear_attention_layers == 34
    assert [i for i, kind in enumerate(GLM.layer_types) if kind == "full"] == list(range(3, 45, 4))
    assert (GLM.num_moe_layers, GLM.num_dense_mlp_layers) == (42, 3)
    # the indexer of one layer: wq_b 1536 x 32*128, wk 4096 x 128, LayerNorm 2*128, weights_proj
    # 4096 x 32, pool position embedding 16 x 128, pool gate 128 x 4096
    indexer = 1536 * 32 * 128 + 4096 * 128 + 2 * 128 + 4096 * 32 + 16 * 128 + 128 * 4096
    assert GLM.param_counts()["indexer"] == 11 * indexer == 82_207_488
    # MLA layer with q_lora 1536, NoPE heads of 256, latent 512
    q = 4096 * 1536 + 1536 + 1536 * 64 * 256
    kv_a = 4096 * 512 + 512
    kv_b = 512 * 64 * (256 + 256)
    o = 64 * 256 * 4096
    assert GLM.param_counts()["attention"] == 11 * (q + kv_a + kv_b + o)
    # the whole text model without hyper-connections, as a meta-device transformers instance counts it
    assert GLM.num_params == 313_291_424_896
    # KV: the 512-element latent (no RoPE part) in 11 layers; the indexer does not change it
    assert GLM.kv_bytes_per_token("bf16") == 11 * 512 * 2


def test_models_without_an_indexer_count_none():
    assert load_model("deepseek-v3").param_counts()["indexer"] == 0
    assert not load_model("deepseek-v3").is_indexed


MLA = """
name = "tiny-mla"
source = "made up for a test"
num_layers = 2
hidden_size = 64
num_heads = 4
num_kv_heads = 4
head_dim = 16
vocab_size = 1000
intermediate_size = 128
kv_lora_rank = 32
qk_nope_head_dim = 16
v_head_dim = 16
"""


@pytest.mark.parametrize("extra, field", [
    ("index_topk = 64\n", "index_n_heads"),
    ("index_topk = 60\nindex_n_heads = 2\nindex_head_dim = 8\nindex_kpool = 16\n", "index_topk"),
    ("index_n_heads = 2\nindex_head_dim = 8\n", "index_topk"),
    ("index_topk = 64\nindex_n_heads = 2\nindex_head_dim = 8\nindex_kpool = 0\n", "index_kpool"),
])
def test_bad_indexer_fields_name_file_and_field(tmp_path, extra, field):
    path = tmp_path / "m.toml"
    path.write_text(MLA + extra)
    with pytest.raises(InputError) as info:
        load_model(str(path))
    text = str(info.value)
    assert "\n" not in text and "m.toml" in text and field in text


# ---- sparse indexed attention in the cost model ------------------------------------------------

import dataclasses  # noqa: E402

from infralab.sim.config import CostConfig  # noqa: E402
from infralab.sim.cost import CostModel, StepWork  # noqa: E402
from infralab.sim.cost.attention import capped_causal_pairs  # noqa: E402
from infralab.sim.cost.geometry import memory_efficiency  # noqa: E402
from infralab.sim.specs import load_accelerator  # noqa: E402

H100 = load_accelerator("H100")
PLAIN = dataclasses.replace(GLM, index_topk=0, index_n_heads=0, index_head_dim=0, index_kpool=1)


def _costs(tp: int = 1, accel=H100):
    from infralab.sim.specs import load_link

    link = load_link("nvlink4") if tp > 1 else None
    return (CostModel(GLM, accel, CostConfig(), tp=tp, tp_link=link),
            CostModel(PLAIN, accel, CostConfig(), tp=tp, tp_link=link))


@pytest.mark.parametrize("seqs", [1, 8, 64])
@pytest.mark.parametrize("context", [1, 100, 2047, 2048])
def test_indexed_decode_up_to_top_k_is_plain_mla_plus_the_indexer(seqs, context):
    indexed, plain = _costs()
    att = indexed._attention
    total = indexed.decode_attention_layer_s(seqs, context) * 11
    assert att.selected_decode_s(seqs, seqs * context) == plain.step(StepWork.decode(seqs, seqs * context)).by_op["attention"]
    assert total == pytest.approx(plain.decode_attention_layer_s(seqs, context) * 11
                                  + att.indexer_decode_s(seqs, seqs * context), rel=1e-12)


@pytest.mark.parametrize("tp", [1, 8])
def test_indexed_decode_grows_with_context_only_through_the_indexer(tp):
    indexed, plain = _costs(tp)
    att = indexed._attention
    seqs = 16
    contexts = [4096, 65536, 262144, 1 << 20]
    selected = {att.selected_decode_s(seqs, seqs * c) for c in contexts}
    assert len(selected) == 1  # the selected-token part is flat beyond index_topk ...
    assert selected == {att.selected_decode_s(seqs, seqs * 2048)}  # ... at its value at 2048
    totals = [indexed.decode_attention_layer_s(seqs, c) * 11 for c in contexts]
    indexers = [att.indexer_decode_s(seqs, seqs * c) for c in contexts]
    for i in range(1, len(contexts)):
        assert totals[i] - totals[0] == pytest.approx(indexers[i] - indexers[0], rel=1e-9)
        assert indexers[i] > indexers[i - 1]
    # plain MLA reads the whole context: at 1M tokens it is far slower than the indexed layer
    assert plain.decode_attention_layer_s(seqs, 1 << 20) > 10 * indexed.decode_attention_layer_s(seqs, 1 << 20)


def test_indexer_term_by_hand():
    indexed, _ = _costs(tp=8)
    seqs, context = 4, 1 << 20
    eff = CostConfig().efficiency
    keys = seqs * context / 16  # pooled keys: one per 16 tokens
    flops = keys * 2 * 32 * (128 + 1)  # 32 heads x (128-wide dot product + head weight); replicated at tp 8
    nbytes = keys * 128 * 2 + seqs * (32 * 128 + 2 * 128) * 2
    by_hand = 11 * max(flops / (H100.peak("bf16") * eff.attention), nbytes / (H100.hbm_bandwidth * memory_efficiency(CostConfig(), H100)))
    assert indexed._attention.indexer_decode_s(seqs, seqs * context) == pytest.approx(by_hand, rel=1e-12)


def test_indexed_layers_keep_the_whole_latent_kv():
    indexed, plain = _costs(tp=8, accel=load_accelerator("H200"))  # 627 GB of bf16 weights fit 8 x 141 GB
    assert indexed.kv_bytes_per_token() == plain.kv_bytes_per_token() == 8 * 11 * 512 * 2  # latent on every rank
    # the indexer's weights (82 M parameters) are the only difference in what fits
    assert indexed.weight_bytes() - plain.weight_bytes() == 2 * 82_207_488
    room = indexed.kv_capacity_tokens(0.9) * indexed.kv_bytes_per_token()
    assert room == pytest.approx(plain.kv_capacity_tokens(0.9) * plain.kv_bytes_per_token() - 2 * 82_207_488,
                                 abs=2 * indexed.kv_bytes_per_token() + 1e6)
    assert indexed.kv_transfer_bytes(100_000) == plain.kv_transfer_bytes(100_000)


@pytest.mark.parametrize("cached, new, cap", [(0, 10, 4), (0, 4096, 2048), (100, 3000, 2048), (5000, 7, 2048),
                                              (0, 2048, 2048), (10, 5, 100)])
def test_capped_causal_pairs_by_brute_force(cached, new, cap):
    assert capped_causal_pairs(cached, new, cap) == sum(min(p, cap) for p in range(cached + 1, cached + new + 1))


def test_indexed_prefill_short_prompt_is_plain_attention_plus_the_indexer():
    indexed, plain = _costs()
    # a 2,000-token prompt: every query attends its whole causal context (<= index_topk)
    work = StepWork.prefill(2000)
    att = indexed._attention
    g = indexed._g
    pairs = work.prefill_attn_pairs
    idx = max(g.roofline(pairs / 16 * 2 * 32 * 129, 2000 / 16 * 256 + 2000 * (32 * 128 + 256) * 2, g.attn_rate), g.launch)
    assert att.time(work) == pytest.approx(plain._attention.time(work) + 11 * idx, rel=1e-12)
    # a long prompt: attention work capped at index_topk keys per query
    long_work = StepWork.prefill_chunk(8192, 1 << 19)
    assert att.time(long_work) < plain._attention.time(long_work) / 50


def test_decode_runs_of_an_indexed_model_are_step_by_step_exact():
    from infralab.sim.cost.model import decode_run_ends_stepwise

    indexed, _ = _costs()
    fast = indexed.decode_run_ends(8, 8 * 2000, 0.0, 50, 1e9)
    assert fast == decode_run_ends_stepwise(indexed.decode_step_s, 8, 8 * 2000, 0.0, 50, 1e9)


# ---- the Atlas 800I parts (Huawei's msmodeling tables, sim/catalog/accelerators/atlas-800i-*.toml) ----


def test_atlas_parts_by_hand():
    from infralab.sim.specs import load_link

    a2, a3 = load_accelerator("atlas-800i-a2"), load_accelerator("atlas-800i-a3")
    for part in (a2, a3):  # A2 NPU = one A3 die in msmodeling's tables (376T / 752T-card SKUs)
        assert part.hbm_capacity == 64 * 1024**3 and part.hbm_bandwidth == pytest.approx(1.6 * 1024**4)
        assert (part.peak("fp16"), part.peak("bf16"), part.peak("int8")) == (376e12, 353.9e12, 752e12)
        assert part.peak("fp32") == 11e12  # the vector units' FP32 (the KDA recurrence)
        with pytest.raises(InputError):
            part.peak("fp8e4m3")  # no FP8 on 910B/910C
    hccs = load_link("hccs")
    assert (hccs.bandwidth, hccs.latency) == (196e9, 0.5e-6)
    assert load_accelerator("ascend-910b").peak("fp32") == 9e12


def test_glm_w8a8_weights_fit_one_a3_node_of_16_dies():
    # vLLM-Ascend's GLM-5.3-Flash guide serves W8A8 at tp 16 on one Atlas 800 A3 node (16 dies)
    from infralab.sim.specs import load_link

    cost = CostModel(GLM, load_accelerator("atlas-800i-a3"), CostConfig(dtype="int8"), tp=16, tp_link=load_link("hccs"))
    assert cost.kv_capacity_tokens(0.9) > 1 << 20  # room for more than one full 1M-token window
