"""GLM-5.3-Flash in the catalog: the entry matches transformers' Glm5NextTextConfig field by field
(benchmarks/glm_catalog_check.py), its derived counts match hand counts, and the indexer fields
fail clearly when inconsistent."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from infralab.errors import InputError
from infralab.sim.specs import load_model

ROOT = Path(__file__).resolve().parents[2]
GLM = load_model("glm-5.3-flash")


def _check_module():
    spec = importlib.util.spec_from_file_location("glm_catalog_check", ROOT / "benchmarks" / "glm_catalog_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_catalog_entry_matches_the_transformers_config():
    pytest.importorskip("transformers")
    assert _check_module().mismatches() == []


def test_the_check_catches_a_drifted_field():
    pytest.importorskip("transformers")
    import dataclasses

    drifted = dataclasses.replace(GLM, index_topk=1024)
    assert any(line.startswith("index_topk") for line in _check_module().mismatches(drifted))


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
