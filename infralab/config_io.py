"""Load TOML files and validate them into frozen dataclasses, with errors that name file and field.

Validation is pydantic's (declare specs as `pydantic.dataclasses.dataclass(frozen=True,
config=STRICT)`); this module only turns its errors into one `InputError` naming the file,
the dotted field path and what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import pydantic

from infralab.errors import InputError
from infralab.input_files import read_toml

T = TypeVar("T")

# Unknown keys are errors: a typo in a config must not silently fall back to a default.
STRICT = pydantic.ConfigDict(extra="forbid")


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file through the one input boundary (`infralab.input_files`): a missing,
    unreadable, binary, oversized or too deeply nested file, or a syntax error, is an InputError
    naming it (and the line)."""
    return read_toml(path)


_UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument")


def _field_path(loc: tuple[Any, ...], data: Any) -> str:
    """Dotted path of an error location as the user wrote it.

    pydantic puts a discriminated union's tag into the location ("workload.synthetic.prompt");
    a step that is not a key of the current table but equals its `kind` is such a tag, and is dropped.
    """
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(node, dict) and item not in node and node.get("kind") == item:
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
        node = node[item] if isinstance(node, (dict, list)) and _has(node, item) else None
    return "".join(parts) or "<top level>"


def _has(node: dict | list, item: Any) -> bool:
    return item in node if isinstance(node, dict) else isinstance(item, int) and 0 <= item < len(node)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validate(cls: type[T], data: Any, source: str, prefix: str = "") -> T:
    """Validate `data` into `cls`; on failure raise InputError('source: field', problem, expected).

    `prefix` is prepended to field paths (e.g. "cluster.prefill" when validating a sub-table).
    """
    try:
        return pydantic.TypeAdapter(cls).validate_python(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = _field_path(tuple(first["loc"]), data)
        if prefix:
            field = f"{prefix}.{field}" if field != "<top level>" else prefix
        problem = {
            "missing": "missing required field",
            "extra_forbidden": "unknown field",
            "unexpected_keyword_argument": "unknown field",
        }.get(first["type"], f"bad value {_short(first.get('input'))}")
        expected = first["msg"] if first["type"] not in _UNKNOWN + ("missing",) else None
        if first["type"] in _UNKNOWN:
            expected = "only the fields this table documents (check the spelling)"
        raise InputError(f"{source}: {field}", problem, expected) from None
