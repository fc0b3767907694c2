"""Command-line overrides of a TOML document: `--set dotted.key=value`.

Each assignment sets one key of the parsed document before it is validated, so a value set on the
command line meets exactly the checks a value written in the file meets (an unknown key or a bad
value is an InputError naming the field). The value uses TOML's syntax (`4`, `0.5`, `true`,
`"text"`, `[50, 90, 99]`, `{ kind = "poisson", rate = 2.0 }`); a bare word that is not TOML
(`disaggregated`, `@data/traces/x.jsonl`) is taken as a string, so the shell needs no quotes for one.
Assignments apply in order; a later one to the same key wins. A missing table on the path is
created; a path through a value that is not a table is an error.
"""

from __future__ import annotations

import contextlib
import copy
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from infralab.errors import InputError

EXPECTED = (
    "KEY=VALUE: a dotted key of the config (cluster.instances) and a TOML value "
    '(4, 0.5, true, "text" or a bare word, [50, 99], { kind = "poisson", rate = 2.0 })'
)

# A key part TOML accepts unquoted.
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# A value that is not TOML but reads as one word is a string ("disaggregated", "@data/x.jsonl",
# "H100"); it must not start with a digit, sign or dot, so that a mistyped number stays an error.
_BARE_WORD = re.compile(r"[A-Za-z_@][A-Za-z0-9_.@/+:-]*")


def parse_assignment(assignment: str, source: str) -> tuple[tuple[str, ...], Any]:
    """`"a.b.c=value"` as (("a", "b", "c"), value); a malformed one raises InputError naming
    `source` (the flag, e.g. "--set") and the expected form."""
    where = f"{source} {assignment!r}"
    if "\n" in assignment or "\r" in assignment:
        raise InputError(where, "contains a line break", EXPECTED)
    key_text, sep, value_text = assignment.partition("=")
    if not sep:
        raise InputError(where, "no '=' between key and value", EXPECTED)
    parts = tuple(part.strip() for part in key_text.split("."))
    if not all(_BARE_KEY.fullmatch(part) for part in parts):
        raise InputError(where, f"bad key {key_text.strip()!r}", EXPECTED)
    return parts, _parse_value(value_text.strip(), where)


def _parse_value(text: str, where: str) -> Any:
    if not text:
        raise InputError(where, "no value after '='", EXPECTED)
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        if _BARE_WORD.fullmatch(text):
            return text
        raise InputError(where, f"value {text!r} is not TOML", EXPECTED) from None


def apply_overrides(doc: dict[str, Any], assignments: Sequence[str], source: str) -> dict[str, Any]:
    """A copy of `doc` (a parsed TOML document) with each `dotted.key=value` of `assignments` set,
    in order. `doc` is not changed. Unknown keys are left for the schema's validation to report;
    a malformed assignment, or a path through a value that is not a table, raises InputError
    naming `source` (the flag) and the expected form."""
    result = copy.deepcopy(doc)
    for assignment in assignments:
        parts, value = parse_assignment(assignment, source)
        set_path(result, parts, value, f"{source} {assignment!r}")
    return result


def set_path(doc: dict[str, Any], parts: Sequence[str], value: Any, where: str) -> None:
    """Set `doc[parts[0]][parts[1]]...` to `value` in place, making the tables on the way; a path
    through a value that is not a table raises InputError naming `where`."""
    table = doc
    for depth, part in enumerate(parts[:-1]):
        node = table.setdefault(part, {})
        if not isinstance(node, dict):
            raise InputError(
                where,
                f"{'.'.join(parts[: depth + 1])} is {node!r}, not a table",
                "a key inside a table of the config",
            )
        table = node
    table[parts[-1]] = value


def dotted_keys(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A table of changes keyed by dotted paths: TOML's unquoted `engine.max_num_seqs = 16` arrives
    as a sub-table {"engine": {"max_num_seqs": 16}}, the same change as the quoted key, not a
    replacement of the whole [engine] table; every key inside is then a change of its own (an
    unknown one named in full). Used for hypothesis knobs and config overlays alike."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(dotted_keys(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def blame_override(exc: InputError, source: str, written: Mapping[str, str]) -> InputError:
    """`exc` named where the user wrote the value of its field, when an override set it: `written`
    maps each assignment applied to `source`'s document to the words on the command line that made
    it (`set_flags`, or e.g. "--percentiles '50,99'"); the file's field follows in the message. The
    last assignment to the field, to a table holding it, or to a field inside it wins; `exc` comes
    back unchanged otherwise (a field of the file, or an error located elsewhere)."""
    prefix = f"{source}: "
    if not exc.where.startswith(prefix):
        return exc
    field = re.sub(r"\[\d+\]", "", exc.where[len(prefix):])  # metrics.percentiles[0] was set as a whole
    for assignment, words in reversed(list(written.items())):
        key = ".".join(part.strip() for part in assignment.partition("=")[0].split("."))
        if key == field or field.startswith(key + ".") or key.startswith(field + "."):
            return InputError(words, f"{exc.problem} ({exc.where})", exc.expected)
    return exc


def set_flags(assignments: Sequence[str], flag: str = "--set") -> dict[str, str]:
    """Each assignment with the command-line words that gave it (`flag 'key=value'`)."""
    return {assignment: f"{flag} {assignment!r}" for assignment in assignments}


@contextlib.contextmanager
def overrides_blamed(source: str, written: Mapping[str, str]) -> Iterator[None]:
    """Errors raised inside, re-raised at the override that set their field (`blame_override`)."""
    try:
        yield
    except InputError as exc:
        raise blame_override(exc, source, written) from None
