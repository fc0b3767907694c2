"""The shape of a Llama-architecture model the real engine builds with random weights.

Field names follow the simulator's model catalog (`sim/catalog/models/*.toml`), so that one shape
can later live in the shared catalog and name the same model on both sides. Weight values do not
change a step's time, but the seed is fixed anyway so that two builds are identical.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A dense Llama-architecture decoder (grouped-query attention, SwiGLU MLP, RMSNorm)."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    intermediate_size: int
    context_length: int
    tie_word_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def parameters(self) -> int:
        """Weights, counted (embedding and LM head included; norms' vectors included)."""
        h, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        attention = h * h * 2 + h * kv * 2  # q, o; k, v
        mlp = 3 * h * self.intermediate_size  # gate, up, down
        per_layer = attention + mlp + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.num_layers * per_layer + self.vocab_size * h + head + h


TINY = ModelShape(name="tiny-llama-test", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                  vocab_size=1000, intermediate_size=128, context_length=2048)
"""For tests: every step is a fraction of a millisecond; says nothing about speed."""

SMALL = ModelShape(name="small-llama-cpu", num_layers=4, hidden_size=256, num_heads=4, num_kv_heads=2,
                   vocab_size=32000, intermediate_size=688, context_length=4096)
"""For measurements on 2 CPU cores: Llama-2's 32000-token vocabulary, head_dim 64, GQA 2:1, the
MLP at ~8/3 of hidden (Llama's ratio). A decode step of a few sequences takes milliseconds."""

SHAPES: dict[str, ModelShape] = {shape.name: shape for shape in (TINY, SMALL)}
