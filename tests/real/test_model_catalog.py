"""The real engine's measurement model and the simulator's catalog entry are one file
(`sim/catalog/models/small-llama-cpu.toml`, read by both sides): same numbers, and the real side
reads it without importing the simulator."""

from __future__ import annotations

import subprocess
import sys

from infralab.real.model_shape import SMALL
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
