"""The real engine's measurement model and the simulator's catalog entry are one file
(`sim/catalog/models/small-llama-cpu.toml`, read by both sides): same numbers, and the real side
reads it without importing the simulator."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from infralab.errors import InputError
from infralab.real.model_shape import SMALL, ModelShape, model_shape
from infralab.sim.specs import load_model


def test_the_real_and_the_simulated_small_model_have_one_shape() -> None:
    spec = load_model("small-llama-cpu")
    fields = ("name", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "vocab_size", "intermediate_size",
              "context_length", "tie_word_embeddings")
    assert {f: getattr(SMALL, f) for f in fields} == {f: getattr(spec, f) for f in fields}
    assert SMALL.head_dim == spec.head_dim


def test_reading_the_catalog_does_not_import_the_simulator() -> None:
    code = ("import sys; from infralab.model_catalog import model_table; model_table('small-llama-cpu'); "
            "print(any(m.startswith('infralab.sim') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


# ---- a model shape from a transformers config.json ---------------------------------------------

LLAMA_CONFIG = {"model_type": "llama", "_name_or_path": "someone/tiny-wide-llama", "num_hidden_layers": 3,
                "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 3, "vocab_size": 500,
                "intermediate_size": 200, "max_position_embeddings": 1024, "tie_word_embeddings": True,
                "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}


def test_a_transformers_llama_config_json_is_a_model_shape(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    assert model_shape("config.json", tmp_path, "model") == ModelShape(
        name="tiny-wide-llama", num_layers=3, hidden_size=96, num_heads=6, num_kv_heads=3, vocab_size=500,
        intermediate_size=200, context_length=1024, tie_word_embeddings=True)
    mha = {k: v for k, v in LLAMA_CONFIG.items() if k != "num_key_value_heads"}
    (tmp_path / "mha.json").write_text(json.dumps(mha))
    assert model_shape("mha.json", tmp_path, "model").num_kv_heads == 6  # transformers' default: the heads


@pytest.mark.parametrize("change, field, expected", [
    ({"model_type": "qwen3_moe"}, "model_type", "one of llama, mistral"),
    ({"head_dim": 32}, "head_dim", "hidden_size / num_attention_heads"),
    ({"sliding_window": 4096}, "sliding_window", "null"),
    ({"num_hidden_layers": 0}, "num_hidden_layers", "a positive integer"),
    ({"intermediate_size": None}, "intermediate_size", "a positive integer"),
])
def test_a_config_json_the_engine_cannot_build_names_its_field(tmp_path, change, field, expected) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_CONFIG, **change}))
    with pytest.raises(InputError) as err:
        model_shape("config.json", tmp_path, "model")
    assert err.value.where == f"{path}: {field}" and expected in str(err.value)
