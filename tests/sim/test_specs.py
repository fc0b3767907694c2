"""Specs: the shipped catalog loads, derived figures match hand counts, bad files fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.errors import InputError
from infralab.sim.specs import (
    DTYPE_BYTES,
    ModelSpec,
    catalog_names,
    load_accelerator,
    load_link,
    load_model,
)

GOOD_MODEL = """
name = "tiny"
source = "made up for a test"
num_layers = 2
hidden_size = 64
num_heads = 4
num_kv_heads = 2
head_dim = 16
vocab_size = 1000
intermediate_size = 128
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


# ---- the catalog -------------------------------------------------------------------------------


def test_catalog_lists_the_required_specs():
    names = catalog_names()
    assert {"H200", "H100", "A100"} <= set(names["accelerators"])
    assert {"nvlink4", "pcie-gen5-x16", "rdma-400g"} <= set(names["links"])
    assert {"llama-3-8b", "llama-3-70b", "mixtral-8x7b", "kimi-linear-48b-a3b"} <= set(names["models"])


def test_every_catalog_entry_loads_and_cites_a_source():
    names = catalog_names()
    loaders = {"accelerators": load_accelerator, "links": load_link, "models": load_model}
    for kind, loader in loaders.items():
        for name in names[kind]:
            spec = loader(name)
            assert spec.name == name
            assert len(spec.source) > 10, f"{kind}/{name} cites no source"


def test_accelerator_figures_are_dense_datasheet_values():
    h100, h200, a100 = load_accelerator("H100"), load_accelerator("H200"), load_accelerator("A100")
    assert h100.peak("bf16") == pytest.approx(989.5e12)  # 1,979 TFLOPS with sparsity / 2
    assert h100.peak("fp8e4m3") == pytest.approx(1979e12)
    assert h100.hbm_bandwidth == pytest.approx(3.35e12) and h100.hbm_capacity == pytest.approx(80e9)
    assert h200.hbm_bandwidth == pytest.approx(4.8e12) and h200.hbm_capacity == pytest.approx(141e9)
    assert h200.peak("bf16") == h100.peak("bf16")  # same compute die
    assert a100.peak("bf16") == pytest.approx(312e12) and a100.hbm_bandwidth == pytest.approx(2.039e12)
    assert h200.calibration_device == "NVIDIA H200"


def test_a100_has_no_fp8_and_says_so():
    with pytest.raises(InputError) as info:
        load_accelerator("A100").peak("fp8e4m3")
    assert "fp8" in str(info.value) and "bf16" in str(info.value)


def test_link_figures():
    assert load_link("nvlink4").bandwidth == pytest.approx(450e9)  # 900 GB/s bidirectional / 2
    assert load_link("rdma-400g").bandwidth == pytest.approx(50e9)  # 400 Gb/s / 8
    assert load_link("pcie-gen5-x16").bandwidth == pytest.approx(63.0e9)
    assert all(load_link(n).latency > 0 for n in ("nvlink4", "rdma-400g", "pcie-gen5-x16"))


def test_names_are_case_blind():
    assert load_accelerator("h100") == load_accelerator("H100")
    assert load_model("Llama-3-8B").name == "llama-3-8b"


# ---- derived figures, by hand ------------------------------------------------------------------


def test_llama_3_8b_by_hand():
    m = load_model("llama-3-8b")
    assert m.kv_bytes_per_token("bf16") == 2 * 32 * 8 * 128 * 2 == 131072
    # 8-bit payloads plus a float32 scale per (token, head) for K and for V (the KV kernels' format)
    assert m.kv_bytes_per_token("fp8e4m3") == 65536 + 32 * 2 * 8 * 4 == m.kv_bytes_per_token("int8")
    # Over tensor-parallel ranks: 8 KV heads split over 8 ranks; over 16, each head is kept twice.
    assert m.kv_bytes_per_token("bf16", tp=8) == 131072
    assert m.kv_bytes_per_token("bf16", tp=16) == 2 * 131072
    embed = 128256 * 4096
    per_layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096
    params = 2 * embed + 32 * per_layer + 4096
    assert m.num_params == params == 8_030_261_248
    assert m.weight_bytes("bf16") == 2 * params
    assert m.weight_bytes("bf16") == pytest.approx(16.06e9, rel=1e-3)
    assert m.active_params_per_token == params - embed
    assert m.linear_state_bytes_per_seq() == 0
    assert (m.num_full_attention_layers, m.num_linear_attention_layers) == (32, 0)


def test_fp8_weights_keep_embeddings_in_bf16():
    m = load_model("llama-3-8b")
    counts = m.param_counts()
    linear = counts["attention"] + counts["dense_mlp"]
    assert m.weight_bytes("fp8e4m3") == linear + 2 * (m.num_params - linear)
    assert m.weight_bytes("bf16") / 2 < m.weight_bytes("fp8e4m3") < m.weight_bytes("bf16")


def test_llama_3_70b_by_hand():
    m = load_model("llama-3-70b")
    assert m.kv_bytes_per_token("bf16") == 2 * 80 * 8 * 128 * 2
    assert m.num_params == pytest.approx(70.55e9, rel=1e-3)


def test_mixtral_by_hand():
    m = load_model("mixtral-8x7b")
    expert = 3 * 4096 * 14336
    attention = 4096 * 4096 * 2 + 4096 * 1024 * 2
    non_expert = 2 * 32000 * 4096 + 32 * (attention + 8 * 4096 + 2 * 4096) + 4096
    assert m.num_params == non_expert + 32 * 8 * expert
    assert m.num_params == pytest.approx(46.70e9, rel=1e-3)
    assert m.active_params_per_token == non_expert - 32000 * 4096 + 32 * 2 * expert
    assert m.num_moe_layers == 32 and m.num_dense_mlp_layers == 0


def test_kimi_linear_by_hand():
    m = load_model("kimi-linear-48b-a3b")
    assert (m.num_full_attention_layers, m.num_linear_attention_layers) == (7, 20)
    assert [i + 1 for i, kind in enumerate(m.layer_types) if kind == "full"] == [4, 8, 12, 16, 20, 24, 27]
    # MLA caches the 512-wide latent plus the 64-wide RoPE key per token and layer
    assert m.kv_bytes_per_token("bf16") == 7 * (512 + 64) * 2 == 8064
    assert m.kv_bytes_per_token("bf16", tp=2) == 2 * 8064  # the latent is kept on every rank
    # KDA: 32 heads x 128 x 128 FP32 state, plus q/k/v conv windows of 3 tokens in bf16, per layer
    assert m.linear_state_bytes_per_seq() == 20 * (32 * 128 * 128 * 4 + 3 * 4096 * 3 * 2) == 43_417_600
    assert m.num_params == pytest.approx(49.1e9, rel=0.01)  # "48B"
    assert 2.8e9 < m.active_params_per_token < 3.5e9  # "A3B"
    assert m.num_moe_layers == 26 and m.num_dense_mlp_layers == 1


def test_mla_attention_params_by_hand():
    m = load_model("kimi-linear-48b-a3b")
    q = 2304 * 32 * 192
    kv_a = 2304 * 576 + 512
    kv_b = 512 * 32 * 256
    o = 32 * 128 * 2304
    assert m.param_counts()["attention"] == 7 * (q + kv_a + kv_b + o)


@settings(max_examples=40, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["full", "linear"]), min_size=1, max_size=12),
    kv_heads=st.sampled_from([1, 2, 4]),
    dtype=st.sampled_from(sorted(DTYPE_BYTES)),
)
def test_kv_bytes_scale_with_full_layers_only(kinds, kv_heads, dtype):
    m = ModelSpec(
        name="p", source="test", num_layers=len(kinds), hidden_size=64, num_heads=4, num_kv_heads=kv_heads,
        head_dim=16, vocab_size=100, intermediate_size=64, layer_types=tuple(kinds),
        linear_num_heads=2, linear_head_dim=8, linear_conv_kernel=4,
    )
    full = kinds.count("full")
    scales = 2 * kv_heads * 4 if dtype in ("int8", "fp8e4m3") else 0  # a float32 scale per (token, head), K and V
    assert m.kv_bytes_per_token(dtype) == full * (2 * kv_heads * 16 * DTYPE_BYTES[dtype] + scales)
    assert m.linear_state_bytes_per_seq() == (len(kinds) - full) * (2 * 8 * 8 * 4 + 3 * 16 * 3 * 2)
    # weights grow with layers, whichever kind is added
    bigger = ModelSpec(**{**m.__dict__, "num_layers": len(kinds) + 1, "layer_types": tuple(kinds) + ("full",)})
    assert bigger.weight_bytes(dtype) > m.weight_bytes(dtype)


# ---- user files and bad input ------------------------------------------------------------------


def test_user_model_file_resolves_against_base_dir(tmp_path):
    (tmp_path / "models").mkdir()
    write(tmp_path / "models", "tiny.toml", GOOD_MODEL)
    m = load_model("models/tiny.toml", base_dir=tmp_path)
    assert m.name == "tiny" and m.layer_types == ("full", "full")


def test_user_hybrid_via_full_attention_layers(tmp_path):
    text = GOOD_MODEL.replace("num_layers = 2", "num_layers = 4") + (
        "full_attention_layers = [2, 4]\nlinear_num_heads = 2\nlinear_head_dim = 8\n"
    )
    m = load_model(str(write(tmp_path, "h.toml", text)))
    assert m.layer_types == ("linear", "full", "linear", "full")


def one_line_error(loader, path: Path) -> str:
    with pytest.raises(InputError) as info:
        loader(str(path))
    text = str(info.value)
    assert "\n" not in text and path.name in text
    return text


def test_missing_field_names_file_and_field(tmp_path):
    text = one_line_error(load_model, write(tmp_path, "m.toml", GOOD_MODEL.replace("vocab_size = 1000\n", "")))
    assert "vocab_size" in text and "missing" in text


def test_wrong_type_names_field(tmp_path):
    text = one_line_error(load_model, write(tmp_path, "m.toml", GOOD_MODEL.replace("= 64", '= "wide"', 1)))
    assert "hidden_size" in text


def test_unknown_field_is_rejected(tmp_path):
    text = one_line_error(load_model, write(tmp_path, "m.toml", GOOD_MODEL + "hiden_size = 3\n"))
    assert "hiden_size" in text and "unknown" in text


def test_layer_types_must_cover_every_layer(tmp_path):
    text = one_line_error(load_model, write(tmp_path, "m.toml", GOOD_MODEL + 'layer_types = ["full"]\n'))
    assert "layer_types" in text


def test_full_attention_layers_out_of_range(tmp_path):
    text = one_line_error(load_model, write(tmp_path, "m.toml", GOOD_MODEL + "full_attention_layers = [3]\n"))
    assert "full_attention_layers" in text and "1..2" in text


def test_inconsistent_heads(tmp_path):
    text = one_line_error(load_model, write(tmp_path, "m.toml", GOOD_MODEL.replace("num_kv_heads = 2", "num_kv_heads = 3")))
    assert "num_kv_heads" in text


def test_moe_needs_valid_top_k(tmp_path):
    moe = GOOD_MODEL + "num_experts = 4\nexperts_per_token = 5\nmoe_intermediate_size = 32\n"
    text = one_line_error(load_model, write(tmp_path, "m.toml", moe))
    assert "experts_per_token" in text


def test_unknown_peak_dtype(tmp_path):
    accel = (
        'name = "x"\ncalibration_device = "X"\nhbm_bandwidth = 1e12\nhbm_capacity = 1e10\n'
        "[peak_flops]\nbf16 = 1e14\nfp4 = 2e14\n"
    )
    text = one_line_error(load_accelerator, write(tmp_path, "a.toml", accel))
    assert "peak_flops" in text and "fp4" in text


def test_negative_link_bandwidth(tmp_path):
    text = one_line_error(load_link, write(tmp_path, "l.toml", 'name = "l"\nbandwidth = -1\nlatency = 0\n'))
    assert "bandwidth" in text


def test_unknown_names_list_the_known_ones():
    with pytest.raises(InputError) as info:
        load_model("llama-9-9000b")
    assert "llama-9-9000b" in str(info.value) and "llama-3-8b" in str(info.value)
    with pytest.raises(InputError) as info:
        load_accelerator("Z9000")
    assert "H100" in str(info.value)
    with pytest.raises(InputError):
        load_link("carrier-pigeon")


def test_missing_file(tmp_path):
    with pytest.raises(InputError) as info:
        load_model(str(tmp_path / "nope.toml"))
    assert "not found" in str(info.value)


def test_catalog_models_carry_their_public_context_length():
    expected = {"llama-2-7b": 4096, "llama-2-70b": 4096, "llama-3-8b": 8192, "llama-3-70b": 8192,
                "mixtral-8x7b": 32768, "kimi-linear-48b-a3b": 1048576, "small-llama-cpu": 4096,
                "llama-3.1-8b": 131072, "llama-3.1-70b": 131072, "llama-3.1-405b": 131072, "mistral-7b": 32768,
                "dbrx": 32768, "qwen2.5-32b": 131072, "qwen2.5-72b": 131072, "qwen3-235b-a22b": 40960, "qwen3-30b-a3b": 40960,
                "deepseek-v3": 163840, "glm-5.3-flash": 1048576}
    assert {name: load_model(name).context_length for name in expected} == expected
    assert set(expected) == set(catalog_names()["models"])


def test_context_length_is_optional_and_hugging_face_names_are_not_fields(tmp_path):
    assert load_model(str(write(tmp_path, "m.toml", GOOD_MODEL))).context_length is None
    path = write(tmp_path, "hf.toml", GOOD_MODEL + "max_position_embeddings = 4096\n")
    with pytest.raises(InputError, match="max_position_embeddings: unknown field"):
        load_model(str(path))


@pytest.mark.parametrize("field, value", [("num_layers", "true"), ("num_heads", "2.0"), ("context_length", "0"),
                                          ("tie_word_embeddings", "1"), ("hidden_size", str(2**63))])
def test_model_fields_are_strict_and_bounded(tmp_path, field, value):
    text = "\n".join(line for line in GOOD_MODEL.splitlines() if not line.startswith(f"{field} ="))
    path = write(tmp_path, "m.toml", text + f"\n{field} = {value}\n")
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert err.value.where == f"{path}: {field}"


@pytest.mark.parametrize("text, field", [
    ('name = "a"\npeak_flops = { bf16 = inf }\nhbm_bandwidth = 1e12\nhbm_capacity = 8e10\ncalibration_device = "a"\n', "peak_flops.bf16"),
    ('name = "a"\npeak_flops = { bf16 = 1e15 }\nhbm_bandwidth = 1e12\nhbm_capacity = nan\ncalibration_device = "a"\n', "hbm_capacity"),
])
def test_accelerator_numbers_are_finite(tmp_path, text, field):
    path = write(tmp_path, "a.toml", text)
    with pytest.raises(InputError) as err:
        load_accelerator(str(path))
    assert err.value.where == f"{path}: {field}"


def test_link_latency_is_finite(tmp_path):
    path = write(tmp_path, "l.toml", 'name = "l"\nbandwidth = 1e9\nlatency = inf\n')
    with pytest.raises(InputError, match="finite") as err:
        load_link(str(path))
    assert err.value.where == f"{path}: latency"
