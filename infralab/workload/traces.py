"""Readers for request traces: Mooncake JSONL, Azure LLM-inference CSV, Vidur CSV and a plain CSV.

Each format is parsed into the same columns (arrival seconds, prompt tokens, output tokens,
prefix block hashes), then one shared step applies the time window, truncation, prompt clip and
rate scaling and numbers the requests (0.. in arrival order; the plain CSV keeps its own ids).

Formats (one request per line/row, in arrival order):
- mooncake: JSON objects with `timestamp` (ms from trace start), `input_length`,
  `output_length` (tokens) and optionally `hash_ids` (ids of the prompt's 512-token blocks).
- azure: CSV with header `TIMESTAMP,ContextTokens,GeneratedTokens`; TIMESTAMP is wall clock,
  `2023-11-16 18:15:46.6805900` (any number of fractional digits).
- csv: infralab's plain CSV, header `request_id,arrival_s,prompt_tokens,output_tokens` (other
  columns ignored): a non-negative integer id, unique, kept as the request's id everywhere (run
  folders, replays); arrival in seconds from any origin; tokens.
- vidur: CSV in the columns Vidur's trace-replay generator reads: `arrived_at` (s),
  `num_prefill_tokens`, `num_decode_tokens`; the older names `Time`, `PromptTokenCount`,
  `CompletionTokenCount` are accepted too. Vidur's processed length traces (no arrival column)
  can feed an `empirical` length distribution but not a trace workload.

Token counts of 0 are counted as 1 (every request has at least one prompt token and generates at
least one token, as Vidur also does); a reader that does so warns once per file with the count
(`ZeroLengthWarning`). Negative or non-integer counts, missing fields and timestamps that go
backwards are errors.
"""

from __future__ import annotations

import bisect
import csv
import datetime
import functools
import json
import math
import re
import warnings
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from infralab.errors import InputError
from infralab.field_types import MAX_TOKENS
from infralab.input_files import csv_error, read_text
from infralab.workload.request_table import RequestTable
from infralab.workload.schema import TRACE_FORMATS, TraceFormat

if TYPE_CHECKING:
    from _csv import Reader as CsvReader  # what csv.reader returns


# Mooncake's hash_ids each cover this many prompt tokens.
MOONCAKE_BLOCK_TOKENS = 512

_LENGTH_EXPECTED = f"a non-negative integer number of tokens, at most {MAX_TOKENS}"
_ORDER_EXPECTED = "requests in non-decreasing arrival order"

_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# Vidur column names, current first; each role accepts any of its names.
_VIDUR_ARRIVAL = ("arrived_at", "Time")
_VIDUR_PROMPT = ("num_prefill_tokens", "PromptTokenCount")
_VIDUR_OUTPUT = ("num_decode_tokens", "CompletionTokenCount")


class ZeroLengthWarning(UserWarning):
    """A trace had requests with 0 prompt or output tokens; they were counted as 1."""


@dataclass(slots=True)
class TraceColumns:
    """A parsed trace, one entry per request in file order. Times are seconds, unshifted.

    Numbers are kept in arrays (8 bytes each, not an object per value): a million-request trace
    is parsed without a million floats and ints that outlive their line."""

    arrival_s: array[float] | None  # array('d'); None: no arrival times (a length-only trace)
    prompt_tokens: array[int]  # array('q')
    output_tokens: array[int]  # array('q')
    block_hashes: list[tuple[int, ...]] | None  # None: the format carries no prefix identity
    lines: array[int]  # array('q'): the file line of each request, for errors found after parsing
    prompt_field: str  # the prompt-length column's name in this file, for those errors
    output_field: str  # likewise the output-length column's
    ids: array[int] | None = None  # array('q'): the file's own request ids (the plain CSV); None: numbered 0..


# ---- public API ------------------------------------------------------------------------------


def read_trace(
    path: str | Path,
    format: TraceFormat,
    *,
    rate_scale: float = 1.0,
    start_s: float = 0.0,
    end_s: float | None = None,
    max_requests: int | None = None,
    max_prompt_tokens: int | None = None,
    context_length: int | None = None,
) -> RequestTable:
    """Read a trace file into requests with ids 0..n-1 in arrival order (ties keep file order; the
    plain CSV's own ids are kept), held as columns (a `RequestTable`, which reads like a list of
    `Request`).

    Steps, in order: keep requests whose arrival, in seconds from the trace's first request, is in
    [start_s, end_s); keep the first `max_requests`; shift arrivals so the first kept request
    arrives at 0; divide arrival times by `rate_scale` (>1 means more load); clip prompts to
    `max_prompt_tokens` (dropping the block hashes beyond the clipped prompt).
    Raises InputError naming file, line and field for a bad file, an empty selection, or a kept
    prompt (after the clip) longer than `context_length` tokens (the model's context).
    """
    path = Path(path)
    _check_options(rate_scale, start_s, end_s, max_requests, max_prompt_tokens)
    columns = parse_trace(path, format)
    if columns.arrival_s is None:
        raise InputError(
            str(path),
            "the trace has no arrival-time column",
            f"one of the columns {' / '.join(_VIDUR_ARRIVAL)} (a length-only trace can feed an "
            "'empirical' length distribution instead)",
        )
    kept = _window(path, columns.arrival_s, start_s, end_s, max_requests)
    if context_length is not None:
        _check_context(path, columns, kept, context_length, max_prompt_tokens)
    return _requests(columns, kept, rate_scale, max_prompt_tokens)


def read_trace_column(
    path: str | Path, format: TraceFormat, column: Literal["input", "output"]
) -> np.ndarray:
    """One length column of a trace (tokens, int64, file order, read-only): `input` = prompt,
    `output`. A file unchanged since it was last read here (same size and modification time) is
    not parsed again in this process: a sweep or a rate search draws every run's lengths from the
    same trace, and parsing it took most of a small run's time."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        return _parse_column(str(path), -1, -1, format, column)  # parse_trace names the problem
    return _parse_column(str(path), stat.st_size, stat.st_mtime_ns, format, column)


@functools.lru_cache(maxsize=8)
def _parse_column(path: str, size: int, mtime_ns: int, format: TraceFormat,
                  column: Literal["input", "output"]) -> np.ndarray:
    """`read_trace_column`'s parse, memoised on the file's identity (`size`, `mtime_ns`: part of
    the key only); an InputError is raised each time, never cached."""
    columns = parse_trace(Path(path), format)
    values = np.asarray(columns.prompt_tokens if column == "input" else columns.output_tokens, dtype=np.int64)
    values.setflags(write=False)  # shared by every caller: nobody may change it
    return values


def parse_trace(path: Path, format: TraceFormat) -> TraceColumns:
    """Parse a whole trace file into columns; every problem is an InputError naming the line."""
    parsers = {"mooncake": _parse_mooncake, "azure": _parse_azure, "vidur": _parse_vidur, "csv": _parse_csv}
    if format not in parsers:
        raise InputError("trace format", f"unknown format {format!r}", " / ".join(TRACE_FORMATS))
    # The one input boundary reads it (missing, folder, device, size cap, UTF-8, a BOM dropped).
    text = read_text(path, "trace", f"a {format} trace file")
    columns = parsers[format](path, text_lines(text))
    if not columns.prompt_tokens:
        raise InputError(str(path), "the trace has no requests", "at least one request row")
    _warn_zero_lengths(path, columns)
    return columns


# Lines as `io.StringIO(text, newline="")` splits them (after "\r\n", "\r" or "\n", ends kept).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def text_lines(text: str) -> Iterator[str]:
    """The lines of `text`, one at a time, exactly as `io.StringIO(text, newline="")` gives them
    (what the csv module expects), without the copy of the whole text that StringIO makes (four
    bytes per character)."""
    return (match.group() for match in _LINE.finditer(text))


# ---- windowing, scaling, numbering ------------------------------------------------------------


def _check_options(
    rate_scale: float, start_s: float, end_s: float | None, max_requests: int | None, max_prompt_tokens: int | None
) -> None:
    if not rate_scale > 0 or not math.isfinite(rate_scale):
        raise InputError("rate_scale", f"bad value {rate_scale!r}", "a positive number")
    if not start_s >= 0:
        raise InputError("start_s", f"bad value {start_s!r}", "seconds >= 0")
    if end_s is not None and not end_s > start_s:
        raise InputError("end_s", f"bad value {end_s!r}", f"seconds > start_s ({start_s})")
    for name, value in (("max_requests", max_requests), ("max_prompt_tokens", max_prompt_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(name, f"bad value {value!r}", "a positive integer")


def _window(
    path: Path, times: array[float] | None, start_s: float, end_s: float | None, max_requests: int | None
) -> range:
    """Indices of the requests in [start_s, end_s) from the first, at most `max_requests`.

    Times never decrease (the parsers check), and neither does t - first, so the window is one
    run of indices: its ends are found by bisection, with the same comparisons a scan makes."""
    assert times is not None
    first = times[0]
    stop = math.inf if end_s is None else end_s
    def since_first(t: float) -> float:
        return t - first

    lo = bisect.bisect_left(times, start_s, key=since_first)
    kept = range(lo, bisect.bisect_left(times, stop, lo, key=since_first))
    if max_requests is not None:
        kept = kept[:max_requests]
    if not kept:
        span = times[-1] - first
        raise InputError(
            str(path),
            f"no requests in the window [{start_s}, {end_s}) s",
            f"a window inside the trace's span of 0 to {span:.3f} s",
        )
    return kept


def _requests(
    columns: TraceColumns, kept: range, rate_scale: float, max_prompt_tokens: int | None
) -> RequestTable:
    """The kept rows as requests numbered 0.., the first arriving at 0, prompts clipped."""
    times = columns.arrival_s
    assert times is not None
    origin = times[kept[0]]
    hashes = columns.block_hashes
    arrivals, prompts = array("d"), array("q")
    clipped_hashes: list[tuple[int, ...]] | None = [] if hashes is not None else None
    for i in kept:
        prompt = columns.prompt_tokens[i]
        blocks = hashes[i] if hashes is not None else ()
        if max_prompt_tokens is not None and prompt > max_prompt_tokens:
            prompt = max_prompt_tokens
            blocks = blocks[: -(-prompt // MOONCAKE_BLOCK_TOKENS)]
        arrivals.append((times[i] - origin) / rate_scale)
        prompts.append(prompt)
        if clipped_hashes is not None:
            clipped_hashes.append(blocks)
    outputs = columns.output_tokens[kept.start : kept.stop]
    ids = None if columns.ids is None else columns.ids[kept.start : kept.stop]
    return RequestTable(arrivals, prompts, outputs, clipped_hashes, ids)


def _check_context(
    path: Path, columns: TraceColumns, kept: range, context_length: int, max_prompt_tokens: int | None
) -> None:
    """The first kept request whose (clipped) prompt, or prompt + output, exceeds the model's
    context, by its file line (an engine refuses a request whose prompt + max tokens exceed it)."""
    clip = max_prompt_tokens if max_prompt_tokens is not None else math.inf
    for i in kept:
        prompt = min(columns.prompt_tokens[i], clip)
        if prompt > context_length:
            raise InputError(
                _where(path, columns.lines[i], columns.prompt_field),
                f"a prompt of {prompt} tokens, longer than the model's context_length {context_length}",
                "prompts that fit the model's context (set workload.max_prompt_tokens to clip them)",
            )
        if prompt + columns.output_tokens[i] > context_length:
            raise InputError(
                _where(path, columns.lines[i], columns.output_field),
                f"{int(prompt)} prompt + {columns.output_tokens[i]} output tokens, more than the model's "
                f"context_length {context_length}",
                "requests that fit the model's context (set workload.max_prompt_tokens below context_length "
                "minus the longest output)",
            )


def _warn_zero_lengths(path: Path, columns: TraceColumns) -> None:
    """Count 0-token prompts/outputs as 1 token, in place, and say so once."""
    for name, values in (("prompt", columns.prompt_tokens), ("output", columns.output_tokens)):
        zeros = values.count(0)
        if zeros:
            for i, value in enumerate(values):
                if value == 0:
                    values[i] = 1
            warnings.warn(
                f"{path}: {zeros} request(s) with 0 {name} tokens counted as 1 token",
                ZeroLengthWarning,
                stacklevel=4,
            )


# ---- field parsing -----------------------------------------------------------------------------


def _where(path: Path, line: int, field: str) -> str:
    return f"{path}:{line}: {field}"


def _token_count(value: object, path: Path, line: int, field: str) -> int:
    """A token count from JSON (int, integral float) or CSV text ("12", "12.0")."""
    if type(value) is int:
        count = value
    elif type(value) is float and value.is_integer():
        count = int(value)
    elif isinstance(value, str):
        try:
            count = int(value)
        except ValueError:
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not number.is_integer():
                where = _where(path, line, field)
                raise InputError(where, f"bad value {value!r}", _LENGTH_EXPECTED) from None
            count = int(number)
    else:
        raise InputError(_where(path, line, field), f"bad value {value!r}", _LENGTH_EXPECTED)
    if count < 0:
        raise InputError(_where(path, line, field), f"negative value {count}", _LENGTH_EXPECTED)
    if count > MAX_TOKENS:
        raise InputError(_where(path, line, field), f"{count} tokens, over the limit", _LENGTH_EXPECTED)
    return count


def _number(value: object, path: Path, line: int, field: str, expected: str) -> float:
    if type(value) in (int, float):
        number = float(value)  # type: ignore[arg-type]
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise InputError(_where(path, line, field), f"bad value {value!r}", expected) from None
    else:
        raise InputError(_where(path, line, field), f"bad value {value!r}", expected)
    if not math.isfinite(number):
        raise InputError(_where(path, line, field), f"bad value {value!r}", expected)
    return number


def _check_order(
    path: Path, line: int, field: str, t: float, previous: float, previous_line: int,
    shown: Callable[[float], str],
) -> None:
    """Times may repeat but never decrease; `shown` formats a time for the message."""
    if t < previous:
        raise InputError(
            _where(path, line, field),
            f"time goes backwards: {shown(t)} after {shown(previous)} on line {previous_line}",
            _ORDER_EXPECTED,
        )


# ---- Mooncake JSONL ------------------------------------------------------------------------------

_MOONCAKE_EXPECTED = "one JSON object per line with timestamp, input_length, output_length (Mooncake JSONL)"


def _parse_mooncake(path: Path, handle: Iterable[str]) -> TraceColumns:
    times, prompts, outputs, lines = array("d"), array("q"), array("q"), array("q")
    hashes: list[tuple[int, ...]] = []
    previous_ms, previous_line = -math.inf, 0
    for line_no, line in enumerate(handle, 1):
        if not line.strip():
            continue
        record = _json_object(path, line_no, line)
        try:
            raw_ms, raw_in, raw_out = record["timestamp"], record["input_length"], record["output_length"]
        except KeyError as missing:
            where = _where(path, line_no, missing.args[0])
            raise InputError(where, "missing field", _MOONCAKE_EXPECTED) from None
        ms = _number(raw_ms, path, line_no, "timestamp", "a number of milliseconds from the trace start")
        _check_order(path, line_no, "timestamp", ms, previous_ms, previous_line, lambda v: f"{v:g} ms")
        previous_ms, previous_line = ms, line_no
        times.append(ms / 1000.0)
        prompt = _token_count(raw_in, path, line_no, "input_length")
        prompts.append(prompt)
        outputs.append(_token_count(raw_out, path, line_no, "output_length"))
        ids = _hash_ids(record.get("hash_ids", ()), path, line_no)
        blocks = -(-max(prompt, 1) // MOONCAKE_BLOCK_TOKENS)
        if len(ids) > blocks:  # a hash names one 512-token block of this prompt: more ids than blocks is no prompt
            raise InputError(_where(path, line_no, "hash_ids"),
                             f"{len(ids)} block ids for a prompt of {prompt} tokens ({blocks} blocks of "
                             f"{MOONCAKE_BLOCK_TOKENS})", f"at most one id per {MOONCAKE_BLOCK_TOKENS}-token block")
        hashes.append(ids)
        lines.append(line_no)
    return TraceColumns(times, prompts, outputs, hashes, lines, "input_length", "output_length")


def _json_object(path: Path, line_no: int, line: str) -> dict[str, object]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        hint = ""
        if line_no == 1 and not line.lstrip().startswith("{") and "," in line:
            hint = "; this looks like a CSV file: use format 'azure' or 'vidur'"
        problem = f"not valid JSON ({exc.msg}){hint}"
        raise InputError(f"{path}:{line_no}", problem, _MOONCAKE_EXPECTED) from None
    except RecursionError:
        raise InputError(f"{path}:{line_no}", "nested too deeply", _MOONCAKE_EXPECTED) from None
    if not isinstance(record, dict):
        problem = f"a JSON {type(record).__name__}, not an object"
        raise InputError(f"{path}:{line_no}", problem, _MOONCAKE_EXPECTED)
    return record


def _hash_ids(value: object, path: Path, line_no: int) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)) and all(type(h) is int for h in value):
        return tuple(value)
    where = _where(path, line_no, "hash_ids")
    raise InputError(where, f"bad value {str(value)[:60]!r}", "a list of integers")


# ---- CSV (Azure, Vidur) --------------------------------------------------------------------------


def _next_row(path: Path, reader: CsvReader) -> list[str] | None:
    """The reader's next row (None at the end); a row the csv module cannot read (a field over its
    size limit, a NUL byte) is an InputError at its line."""
    try:
        return next(reader, None)
    except csv.Error as exc:
        raise csv_error(f"{path}:{reader.line_num}", exc) from None


def _csv_header(path: Path, reader: CsvReader, format: str) -> list[str]:
    header = _next_row(path, reader)
    while header is not None and not any(cell.strip() for cell in header):
        header = _next_row(path, reader)  # leading blank lines
    if header is None:
        raise InputError(str(path), "the trace is empty", f"a {format} CSV with a header line")
    return [cell.strip().lstrip("\ufeff") for cell in header]


def _column(path: Path, line: int, header: list[str], names: tuple[str, ...], expected: str) -> int:
    for name in names:
        if name in header:
            return header.index(name)
    hint = ""
    if header and header[0].startswith("{"):
        hint = "; this looks like JSONL: use format 'mooncake'"
    raise InputError(
        f"{path}:{line}: header",
        f"missing column {' / '.join(names)} (found {', '.join(header)[:120]}){hint}",
        expected,
    )


def _cells(path: Path, reader: CsvReader, width: int) -> Iterator[tuple[int, list[str]]]:
    """Yield (line number, row) for each non-blank row; a short row is an error."""
    while (row := _next_row(path, reader)) is not None:
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) < width:
            problem = f"{len(row)} column(s), header has {width}"
            raise InputError(f"{path}:{reader.line_num}", problem, f"{width} columns")
        yield reader.line_num, row


_AZURE_EXPECTED = "an Azure LLM-inference CSV with columns TIMESTAMP, ContextTokens, GeneratedTokens"
_WALLCLOCK_EXPECTED = "a wall-clock time like 2023-11-16 18:15:46.6805900"


def _parse_azure(path: Path, handle: Iterable[str]) -> TraceColumns:
    reader = csv.reader(handle)
    header = _csv_header(path, reader, "azure")
    line = reader.line_num
    t_col, in_col, out_col = (
        _column(path, line, header, (name,), _AZURE_EXPECTED) for name in _AZURE_COLUMNS
    )
    times, prompts, outputs, lines = array("d"), array("q"), array("q"), array("q")
    day_cache: dict[str, int] = {}
    origin: tuple[int, float] | None = None
    previous, previous_line = -math.inf, 0
    for line_no, row in _cells(path, reader, len(header)):
        day, second = _wallclock(row[t_col], path, line_no, day_cache)
        if origin is None:
            origin = (day, second)
        # Day and second-of-day kept apart until here so the sub-microsecond digits survive.
        t = (day - origin[0]) * 86400.0 + (second - origin[1])
        _check_order(path, line_no, "TIMESTAMP", t, previous, previous_line, lambda v: f"{v:.7f} s")
        previous, previous_line = t, line_no
        times.append(t)
        prompts.append(_token_count(row[in_col], path, line_no, "ContextTokens"))
        outputs.append(_token_count(row[out_col], path, line_no, "GeneratedTokens"))
        lines.append(line_no)
    return TraceColumns(times, prompts, outputs, None, lines, "ContextTokens", "GeneratedTokens")


def _wallclock(text: str, path: Path, line: int, day_cache: dict[str, int]) -> tuple[int, float]:
    """`YYYY-MM-DD HH:MM:SS[.fraction]` -> (day ordinal, seconds into the day)."""
    text = text.strip()
    date_part, time_part = text[:10], text[11:]
    try:
        day = day_cache.get(date_part)
        if day is None:
            day = day_cache[date_part] = datetime.date.fromisoformat(date_part).toordinal()
        if text[10:11] not in (" ", "T"):
            raise ValueError
        hours, minutes, seconds = time_part.split(":")
        h, m, s = int(hours), int(minutes), float(seconds)
        if not (0 <= h < 24 and 0 <= m < 60 and 0 <= s < 61 and seconds[:1].isdigit()):
            raise ValueError
    except ValueError:
        where = _where(path, line, "TIMESTAMP")
        raise InputError(where, f"bad value {text!r}", _WALLCLOCK_EXPECTED) from None
    return day, h * 3600 + m * 60 + s


_VIDUR_EXPECTED = "a Vidur CSV with columns arrived_at, num_prefill_tokens, num_decode_tokens"


def _parse_vidur(path: Path, handle: Iterable[str]) -> TraceColumns:
    reader = csv.reader(handle)
    header = _csv_header(path, reader, "vidur")
    line = reader.line_num
    in_col = _column(path, line, header, _VIDUR_PROMPT, _VIDUR_EXPECTED)
    out_col = _column(path, line, header, _VIDUR_OUTPUT, _VIDUR_EXPECTED)
    t_name = next((name for name in _VIDUR_ARRIVAL if name in header), None)
    t_col = header.index(t_name) if t_name else None
    in_name, out_name = header[in_col], header[out_col]
    times = array("d") if t_col is not None else None
    prompts, outputs, lines = array("q"), array("q"), array("q")
    previous, previous_line = -math.inf, 0
    for line_no, row in _cells(path, reader, len(header)):
        if times is not None:
            assert t_col is not None and t_name is not None  # times is made only with an arrival column
            t = _number(row[t_col], path, line_no, t_name, "arrival time in seconds")
            _check_order(path, line_no, t_name, t, previous, previous_line, lambda v: f"{v:g} s")
            previous, previous_line = t, line_no
            times.append(t)
        prompts.append(_token_count(row[in_col], path, line_no, in_name))
        outputs.append(_token_count(row[out_col], path, line_no, out_name))
        lines.append(line_no)
    return TraceColumns(times, prompts, outputs, None, lines, in_name, out_name)


_CSV_COLUMNS = ("request_id", "arrival_s", "prompt_tokens", "output_tokens")
_CSV_EXPECTED = "a CSV with columns request_id, arrival_s, prompt_tokens, output_tokens"


def _parse_csv(path: Path, handle: Iterable[str]) -> TraceColumns:
    """infralab's plain CSV (module docstring): ids unique non-negative integers, kept."""
    reader = csv.reader(handle)
    header = _csv_header(path, reader, "csv")
    line = reader.line_num
    id_col, t_col, in_col, out_col = (_column(path, line, header, (name,), _CSV_EXPECTED) for name in _CSV_COLUMNS)
    ids, times, prompts, outputs, lines = array("q"), array("d"), array("q"), array("q"), array("q")
    seen: dict[int, int] = {}
    previous, previous_line = -math.inf, 0
    for line_no, row in _cells(path, reader, len(header)):
        request_id = _token_count(row[id_col], path, line_no, "request_id")
        if request_id in seen:
            raise InputError(_where(path, line_no, "request_id"), f"{request_id} repeats line {seen[request_id]}'s id",
                             "a unique id per request")
        seen[request_id] = line_no
        t = _number(row[t_col], path, line_no, "arrival_s", "arrival time in seconds")
        _check_order(path, line_no, "arrival_s", t, previous, previous_line, lambda v: f"{v:g} s")
        previous, previous_line = t, line_no
        ids.append(request_id)
        times.append(t)
        prompts.append(_token_count(row[in_col], path, line_no, "prompt_tokens"))
        outputs.append(_token_count(row[out_col], path, line_no, "output_tokens"))
        lines.append(line_no)
    return TraceColumns(times, prompts, outputs, None, lines, "prompt_tokens", "output_tokens", ids)
