"""The one boundary every input file crosses: read it as text, or parse it as TOML or JSON.

Whatever can go wrong before a file's content is even looked at becomes one `InputError` naming
the file: missing, a folder, not a regular file (`/dev/zero`, a FIFO), unreadable (permissions),
larger than its kind's cap, not UTF-8 (binary, Latin-1), or (TOML/JSON) a syntax error (with the
line) or nesting deeper than `MAX_NESTING`. A UTF-8 byte-order mark is dropped.

Size caps (bytes), per kind of file; a larger file is refused before it is read:
- `config` (simulation configs, hypotheses, study.toml, search spaces, specs): 1 MiB;
- `table` (calibration CSVs): 64 MiB;
- `trace` (Mooncake/Azure/Vidur request traces): 1 GiB;
- `run` (a results folder's summary.json, requests.csv, trace.json; timelines): 1 GiB.
"""

from __future__ import annotations

import csv
import json
import os
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, NoReturn

from infralab.errors import InputError

Kind = Literal["config", "table", "trace", "run"]

MIB = 1 << 20
#: Largest file of each kind read, in bytes (see the module docstring).
SIZE_CAPS: Mapping[str, int] = MappingProxyType(
    {"config": 1 * MIB, "table": 64 * MIB, "trace": 1024 * MIB, "run": 1024 * MIB}
)
#: Deepest nesting of tables/arrays (TOML) or objects/arrays (JSON) accepted; infralab's own
#: files nest at most 5 deep.
MAX_NESTING = 32

_WHAT = {"config": "a TOML file", "table": "a CSV file", "trace": "a trace file", "run": "a run file"}


def read_text(path: str | Path, kind: Kind, what: str | None = None) -> str:
    """The file's text (UTF-8, a leading byte-order mark dropped); every problem an InputError.

    `what` describes the expected file in messages (default: from `kind`).
    """
    path = Path(path)
    what = what or _WHAT[kind]
    data = _read_bytes(path, kind, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"{path}: line {line}", f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            f"{what} in UTF-8",
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_toml(path: str | Path, what: str = "a TOML file") -> dict[str, Any]:
    """A TOML file (kind `config`) as a dict; syntax errors name the line."""
    path = Path(path)
    return parse_toml(read_text(path, "config", what), str(path), what)


def parse_toml(text: str, source: str, what: str = "a TOML file") -> dict[str, Any]:
    """TOML `text` as a dict; `source` names it in errors (syntax with its line, nesting)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # the message names the line: "(at line N, column M)"
        raise InputError(source, f"not valid TOML: {exc}", "TOML syntax") from None
    except RecursionError:
        raise InputError(source, f"nested deeper than {MAX_NESTING} levels", what) from None
    _check_depth(data, source, what)
    return data


def read_json(path: str | Path, kind: Kind = "run", what: str = "a JSON document") -> Any:
    """A JSON file as Python values; syntax errors name the line. NaN/Infinity literals are
    refused: no infralab file writes them."""
    path = Path(path)
    text = read_text(path, kind, what)
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: line {exc.lineno}", f"not valid JSON: {exc.msg}", what) from None
    except _NonFinite as exc:
        raise InputError(str(path), f"non-finite number {exc.args[0]}", f"{what} with finite numbers") from None
    except RecursionError:
        raise InputError(str(path), f"nested deeper than {MAX_NESTING} levels", what) from None
    _check_depth(data, str(path), what)
    return data


def csv_error(where: str, exc: csv.Error) -> InputError:
    """The InputError for a CSV row the csv module cannot read (a field over its size limit, a NUL
    byte), at `where` (the file and line): every CSV reader raises this one, never `_csv.Error`."""
    return InputError(where, f"unreadable CSV line ({exc})",
                      f"fields of at most {csv.field_size_limit()} characters, no NUL bytes")


# ---- the checks ------------------------------------------------------------------------------


def _read_bytes(path: Path, kind: Kind, what: str) -> bytes:
    """The file's bytes, after checking that it is a regular, readable file within the cap."""
    cap = SIZE_CAPS[kind]
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(str(path), "file not found", f"an existing file: {what}") from None
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror}", f"a readable file: {what}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(str(path), "is a folder", f"a file: {what}")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(str(path), "not a regular file (a device, pipe or socket)", f"a file: {what}")
    if info.st_size > cap:
        raise InputError(str(path), f"{info.st_size} bytes, over the {cap} byte limit for this kind of file", what)
    try:
        with path.open("rb") as handle:
            data = handle.read(cap + 1)  # the file may have grown since stat
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror}", f"a readable file: {what}") from None
    if len(data) > cap:
        raise InputError(str(path), f"over the {cap} byte limit for this kind of file", what)
    return data


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str) -> NoReturn:
    raise _NonFinite(name)


def _check_depth(data: object, source: str, what: str) -> None:
    """Nesting of the parsed value (dotted TOML keys nest without brackets), iteratively."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise InputError(source, f"nested deeper than {MAX_NESTING} levels", what)
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)


def is_readable_file(path: str | Path) -> bool:
    """Whether `path` is a regular file this process may open (for existence checks up front)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False
