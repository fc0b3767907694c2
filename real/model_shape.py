"""The shape of a Llama-architecture model the real engine builds with random weights.

Field names follow the simulator's model catalog (`sim/catalog/models/*.toml`); the measurement
model `small-llama-cpu` is read from that catalog (`catalog_shape`), so that one file names the
same model on both sides. `tiny-llama-test` (tests only) stays here. Weight values do not
change a step's time, but the seed is fixed anyway so that two builds are identical.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infralab import locations
from infralab.errors import InputError
from infralab.input_files import read_json, read_toml
from infralab.model_catalog import model_table


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

def catalog_shape(name: str) -> ModelShape:
    """The shape of a model of the shared catalog (`sim/catalog/models/<name>.toml`, read through
    `infralab.model_catalog`: the simulator names the same model with the same numbers)."""
    return shape_from_table(model_table(name), f"model {name!r}")


def shape_from_table(table: dict[str, Any], source: str) -> ModelShape:
    """A model TOML's table (the catalog's field names) as a shape; InputError naming `source` and
    the field when one is missing or not a positive integer, or when its widths are not a Llama's
    (`check_head_dim`). Other fields are ignored."""
    fields = {f.name: f for f in dataclasses.fields(ModelShape)}
    values: dict[str, Any] = {}
    for name, field in fields.items():
        if name not in table:
            if field.default is dataclasses.MISSING:
                raise InputError(f"{source}: {name}", "missing", "the model catalog's fields (docs/fidelity.md)")
            continue
        value = table[name]
        if name == "tie_word_embeddings":
            ok = isinstance(value, bool)
        elif name == "name":
            ok = isinstance(value, str)
        else:
            ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
        if not ok:
            raise InputError(f"{source}: {name}", f"bad value {value!r}",
                             "a string" if name == "name" else "true or false" if name == "tie_word_embeddings"
                             else "a positive integer")
        values[name] = value
    shape = ModelShape(**values)
    names = {"hidden_size": "hidden_size", "num_heads": "num_heads"}
    check_head_dim(table.get("head_dim"), shape.hidden_size, shape.num_heads, source, names)
    return shape


def check_head_dim(head_dim: Any, hidden: Any, heads: Any, source: str, names: dict[str, str]) -> None:
    """The engine builds a Llama whose head_dim is hidden / heads: heads must divide hidden, and a
    head_dim the file gives (the simulator reads it: its projections are heads x head_dim wide)
    must be that one, or the two sides would run different models. `names` are the file's own
    names of hidden_size and num_heads, for messages."""
    hidden_name, heads_name = names["hidden_size"], names["num_heads"]
    if not (isinstance(hidden, int) and isinstance(heads, int) and heads > 0):
        return  # a missing or bad width is its own field's error
    if hidden % heads:
        raise InputError(f"{source}: {heads_name}", f"{heads} heads do not divide {hidden_name} {hidden}",
                         f"a divisor of {hidden_name} (the engine's head_dim is {hidden_name} / {heads_name})")
    if head_dim is not None and head_dim != hidden // heads:
        raise InputError(f"{source}: head_dim", f"{head_dim!r}, not {hidden_name} / {heads_name} ({hidden} / {heads})",
                         f"a model whose head_dim is {hidden_name} / {heads_name}")


HF_FIELDS = {"num_layers": "num_hidden_layers", "hidden_size": "hidden_size", "num_heads": "num_attention_heads",
             "num_kv_heads": "num_key_value_heads", "vocab_size": "vocab_size",
             "intermediate_size": "intermediate_size", "context_length": "max_position_embeddings",
             "tie_word_embeddings": "tie_word_embeddings"}
"""ModelShape's fields and the names a transformers Llama `config.json` gives them (`LlamaConfig`'s
attributes, transformers 5.23.0 as pinned: models/llama/configuration_llama.py)."""

HF_MODEL_TYPES = ("llama", "mistral")
"""Architectures the engine's random-weight Llama reproduces step for step (Mistral's config is
Llama's plus a sliding window, refused below when set)."""


def shape_from_hf_config(doc: Any, source: str) -> ModelShape:
    """A transformers `config.json` of a Llama-architecture model as a shape (fields: HF_FIELDS; the
    name from `_name_or_path`, else the file's folder). InputError naming `source` and the field
    for another architecture, a head_dim apart from hidden_size / heads, a sliding window, or a
    missing or bad field. `num_key_value_heads` defaults to the heads (transformers' rule)."""
    if not isinstance(doc, dict):
        raise InputError(source, "is not a JSON object", "a transformers config.json")
    kind = doc.get("model_type")
    if kind not in HF_MODEL_TYPES:
        raise InputError(f"{source}: model_type", f"{kind!r}", f"one of {', '.join(HF_MODEL_TYPES)} "
                         "(the engine builds a Llama-architecture model)")
    heads, hidden = doc.get("num_attention_heads"), doc.get("hidden_size")
    check_head_dim(doc.get("head_dim"), hidden, heads, source,
                   {"hidden_size": "hidden_size", "num_heads": "num_attention_heads"})
    if doc.get("sliding_window") is not None:
        raise InputError(f"{source}: sliding_window", f"{doc['sliding_window']!r}", "null (full attention)")
    table = {ours: doc[theirs] for ours, theirs in HF_FIELDS.items() if theirs in doc}
    table.setdefault("num_kv_heads", heads)
    name = doc.get("_name_or_path") or Path(source).parent.name or "config"
    table["name"] = str(name).rstrip("/").split("/")[-1] if isinstance(name, str) else "config"
    try:
        return shape_from_table(table, source)
    except InputError as exc:  # name the file's own field, not ours
        field = exc.where.rsplit(": ", 1)[-1]
        raise InputError(f"{source}: {HF_FIELDS.get(field, field)}", exc.problem,
                         exc.expected.replace("the model catalog's fields", "a transformers Llama config")) from None


def is_model_path(value: str) -> bool:
    """Whether a config's `model` names a file (a separator, or a .toml / .json suffix), not a
    catalog entry."""
    return "/" in value or "\\" in value or value.endswith((".toml", ".json"))


def model_shape(value: str, base_dir: Path, where: str) -> ModelShape:
    """The model a config's `model` names: a catalog name, or a path (a separator, or a .toml /
    .json suffix) resolved against `base_dir` to a model TOML with the catalog's fields or a
    transformers `config.json` (`shape_from_hf_config`). `where` names the field in errors."""
    if is_model_path(value):
        locations.require_file(value, base_dir, where, "model TOML or transformers config.json")
        path = locations.resolve_path(value, base_dir)
        if path.suffix == ".json":
            return shape_from_hf_config(read_json(path, "config", "a transformers config.json"), str(path))
        return shape_from_table(read_toml(path, "a model TOML"), str(path))
    if value in SHAPES:  # the catalog's small-llama-cpu, read once; tiny-llama-test, the tests' own
        return SHAPES[value]
    try:
        return catalog_shape(value)
    except InputError as exc:
        raise InputError(where, f"{exc.problem} ({exc.where})", exc.expected) from None


SMALL = catalog_shape("small-llama-cpu")
"""For measurements on 2 CPU cores: Llama-2's 32000-token vocabulary, head_dim 64, GQA 2:1, the
MLP at ~8/3 of hidden (Llama's ratio). A decode step of a few sequences takes milliseconds."""

SHAPES: dict[str, ModelShape] = {shape.name: shape for shape in (TINY, SMALL)}
