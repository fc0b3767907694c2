"""Load TOML files and validate them into frozen dataclasses, with errors that name file and field.

Validation is pydantic's (declare specs as `pydantic.dataclasses.dataclass(frozen=True,
config=STRICT)`); this module only turns its errors into one `InputError` naming the file,
the dotted field path and what was expected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

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


def _has(node: dict[object, object] | list[object], item: object) -> bool:
    return item in node if isinstance(node, dict) else isinstance(item, int) and 0 <= item < len(node)


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _expected_text(message: str) -> str:
    """pydantic's message as the expected form: "Input should be greater than 0" -> "greater than 0"."""
    for lead in ("Value error, ", "Input should be "):
        if message.startswith(lead):
            message = message[len(lead):]
    return message


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
        expected = _expected_text(first["msg"]) if first["type"] not in _UNKNOWN + ("missing",) else None
        if first["type"] == "missing":
            expected = expected_form(cls, tuple(first["loc"]), data)
        if first["type"] in ("union_tag_not_found", "union_tag_invalid"):  # a tagged table's `kind`
            field = f"{field}.kind" if field != "<top level>" else "kind"
            tag = first.get("ctx", {}).get("tag")
            problem = "missing required field" if tag is None else f"bad value {tag!r}"
            expected = expected_form(cls, tuple(first["loc"]), data)
        if first["type"] in _UNKNOWN:
            expected = "only the fields this table documents (check the spelling)"
        raise InputError(f"{source}: {field}", problem, expected) from None


# ---- what a missing field expects --------------------------------------------------------------


def expected_form(cls: type, loc: tuple[Any, ...], data: Any) -> str:
    """What the field at `loc` of `cls` takes, in words ("an integer > 0 and <= 10000000"), found by
    walking the dataclass fields (and, in a tagged union, the member the table's `kind` names)."""
    try:
        annotation, metadata = cls, []
        node = data
        for item in loc:
            if isinstance(node, dict) and item not in node and node.get("kind") == item:
                continue  # a tagged union's tag in the location (see _field_path)
            annotation = _member(annotation, node)
            fields = getattr(annotation, "__pydantic_fields__", None)
            if fields is None or item not in fields:
                return "a value for this field (see the table's documentation)"
            annotation, metadata = fields[item].annotation, fields[item].metadata
            node = node.get(item) if isinstance(node, dict) else None
        return _describe(_member(annotation, node), metadata)
    except Exception:  # a description is a courtesy: never let it hide the error itself
        return "a value for this field (see the table's documentation)"


def _member(annotation: Any, node: Any) -> Any:
    """The union member a table's `kind` selects (or the one non-None member of an optional)."""
    members = [m for m in get_args(annotation) if m is not type(None)] if get_origin(annotation) in (Union, UnionType) else []
    if not members:
        return annotation
    if len(members) == 1:
        return members[0]
    kind = node.get("kind") if isinstance(node, dict) else None
    for member in members:
        tag = getattr(member, "__pydantic_fields__", {}).get("kind")
        if tag is not None and kind in get_args(tag.annotation):
            return member
    return annotation


def _describe(annotation: Any, metadata: list[Any]) -> str:
    if get_origin(annotation) in (Union, UnionType):
        tags = [get_args(m.__pydantic_fields__["kind"].annotation)[0] for m in get_args(annotation)
                if "kind" in getattr(m, "__pydantic_fields__", {})]
        if tags:
            return "kind = " + " | ".join(repr(t) for t in tags)
    if getattr(annotation, "__pydantic_fields__", None) is not None:
        kinds = getattr(annotation.__pydantic_fields__.get("kind"), "annotation", None)
        return "a table" + (f" with kind = {get_args(kinds)[0]!r}" if kinds is not None else "")
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(v) for v in get_args(annotation))
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(annotation)
    if words is None:
        return f"a value of type {getattr(annotation, '__name__', annotation)}"
    bounds = []
    for item in metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if getattr(item, attr, None) is not None:
                bounds.append(f"{sign} {getattr(item, attr)}")
    return words + (" " + " and ".join(bounds) if bounds else "")


# ---- writing TOML ------------------------------------------------------------------------------

_BARE_TOML_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(key: str) -> str:
    return key if _BARE_TOML_KEY.fullmatch(key) else _toml_string(key)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return {math.inf: "inf", -math.inf: "-inf"}.get(value, "nan")
        return repr(value)  # shortest round-trip form, valid TOML ("0.7", "1e-06", "5.0")
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}: {value!r}")


def dump_toml(doc: Mapping[str, Any]) -> str:
    """`doc` (nested dicts of str, int, float, bool and lists of them; None values are left out,
    TOML has no null) as TOML text, keys in the dict's order: a table's plain keys first, then its
    sub-tables as `[a.b]` sections. `tomllib.loads(dump_toml(d))` gives `d` back without its Nones."""
    lines: list[str] = []

    def table(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        plain = [(k, v) for k, v in node.items() if v is not None and not isinstance(v, Mapping)]
        subtables = [(k, v) for k, v in node.items() if isinstance(v, Mapping)]
        if path and (plain or not subtables):
            lines.append(("\n" if lines else "") + "[" + ".".join(_toml_key(p) for p in path) + "]")
        lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in plain)
        for key, sub in subtables:
            table(sub, (*path, key))

    table(doc, ())
    return "\n".join(lines) + "\n"
