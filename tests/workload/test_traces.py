"""Trace readers on the real traces (facts from ../shared/data/traces/README.md) and on bad files."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import pytest

from infralab.errors import InputError
from infralab.workload import Request, ZeroLengthWarning, read_trace, read_trace_column

# The shared traces live beside the checkout (../shared/data/traces); INFRALAB_TRACES overrides.
_DEFAULT_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
TRACES = Path(os.environ.get("INFRALAB_TRACES", _DEFAULT_TRACES))
MOONCAKE = TRACES / "mooncake_conversation_trace.jsonl"
AZURE_CONV = TRACES / "AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = TRACES / "AzureLLMInferenceTrace_code.csv"

needs_traces = pytest.mark.skipif(not MOONCAKE.exists(), reason=f"real traces not found under {TRACES}")


def _mean(values):
    return sum(values) / len(values)


# ---- the real traces ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mooncake():
    return read_trace(MOONCAKE, "mooncake")


@pytest.fixture(scope="module")
def azure_conv():
    return read_trace(AZURE_CONV, "azure")


@needs_traces
def test_mooncake_trace_counts_rows_and_means(mooncake):
    assert len(mooncake) == 12_031
    assert [r.id for r in mooncake] == list(range(12_031))
    first, last = mooncake[0], mooncake[-1]
    assert first == Request(0, 0.0, 6758, 500, tuple(range(14)))
    assert (last.arrival_s, last.prompt_tokens, last.output_tokens) == (3536.999, 20774, 508)
    assert _mean([r.prompt_tokens for r in mooncake]) == pytest.approx(12_035, abs=1)
    assert _mean([r.output_tokens for r in mooncake]) == pytest.approx(343, abs=1)
    assert len(mooncake) / last.arrival_s == pytest.approx(3.4, abs=0.05)
    # hash_ids: one per 512-token block of the prompt
    assert all(len(r.block_hashes) == math.ceil(r.prompt_tokens / 512) for r in mooncake)


@needs_traces
def test_mooncake_prefix_reuse_fraction_matches_readme(mooncake):
    seen: set[int] = set()
    repeats = total = 0
    for r in mooncake:
        for h in r.block_hashes:
            repeats += h in seen
            seen.add(h)
        total += len(r.block_hashes)
    assert repeats / total == pytest.approx(0.366, abs=0.001)


@needs_traces
def test_azure_conversation_trace(azure_conv):
    assert len(azure_conv) == 19_366
    assert azure_conv[0] == Request(0, 0.0, 374, 44)
    assert azure_conv[1].arrival_s == pytest.approx(50.9951690 - 46.6805900, abs=1e-9)
    last = azure_conv[-1]
    # 18:15:46.6805900 -> 19:14:08.4025270, all seven fractional digits kept
    expected = (19 * 3600 + 14 * 60 + 8.4025270) - (18 * 3600 + 15 * 60 + 46.6805900)
    assert last.arrival_s == pytest.approx(expected, abs=1e-9)
    assert (last.prompt_tokens, last.output_tokens) == (197, 183)
    assert _mean([r.prompt_tokens for r in azure_conv]) == pytest.approx(1_155, abs=1)
    assert _mean([r.output_tokens for r in azure_conv]) == pytest.approx(211, abs=1)
    assert len(azure_conv) / last.arrival_s == pytest.approx(5.5, abs=0.05)


@needs_traces
def test_azure_code_trace():
    code = read_trace(AZURE_CODE, "azure")
    assert len(code) == 8_819
    assert (code[0].prompt_tokens, code[0].output_tokens) == (4808, 10)
    assert (code[-1].prompt_tokens, code[-1].output_tokens) == (549, 173)
    assert _mean([r.prompt_tokens for r in code]) == pytest.approx(2_048, abs=1)
    assert _mean([r.output_tokens for r in code]) == pytest.approx(28, abs=0.5)
    assert len(code) / code[-1].arrival_s == pytest.approx(2.6, abs=0.05)


@needs_traces
def test_vidur_copy_of_azure_reads_the_same_requests(tmp_path, azure_conv):
    path = tmp_path / "conv_vidur.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["arrived_at", "num_prefill_tokens", "num_decode_tokens"])
        for r in azure_conv:
            writer.writerow([repr(r.arrival_s), r.prompt_tokens, r.output_tokens])
    assert read_trace(path, "vidur") == azure_conv


# ---- windows, scaling, truncation ------------------------------------------------------------------


@needs_traces
def test_window_selects_requests_by_time_and_rebases(mooncake):
    raw_ms = [json.loads(line)["timestamp"] for line in MOONCAKE.open()]
    inside = [i for i, ms in enumerate(raw_ms) if 600_000 <= ms - raw_ms[0] < 1_200_000]
    window = read_trace(MOONCAKE, "mooncake", start_s=600, end_s=1200)
    assert len(window) == len(inside)
    assert window[0].arrival_s == 0.0
    assert [r.id for r in window] == list(range(len(inside)))
    assert [r.prompt_tokens for r in window] == [mooncake[i].prompt_tokens for i in inside]
    offset = mooncake[inside[0]].arrival_s
    assert [r.arrival_s for r in window] == pytest.approx([mooncake[i].arrival_s - offset for i in inside])
    assert window[-1].arrival_s < 600


@needs_traces
def test_rate_scale_divides_inter_arrival_times(mooncake):
    fast = read_trace(MOONCAKE, "mooncake", rate_scale=4.0, max_requests=500)
    assert len(fast) == 500
    assert [r.arrival_s for r in fast] == pytest.approx([r.arrival_s / 4.0 for r in mooncake[:500]])
    assert [r.output_tokens for r in fast] == [r.output_tokens for r in mooncake[:500]]


@needs_traces
def test_prompt_clip_also_clips_block_hashes(mooncake):
    clipped = read_trace(MOONCAKE, "mooncake", max_prompt_tokens=4000)
    for before, after in zip(mooncake, clipped):
        assert after.prompt_tokens == min(before.prompt_tokens, 4000)
        assert after.block_hashes == before.block_hashes[: math.ceil(after.prompt_tokens / 512)]
    assert max(r.prompt_tokens for r in clipped) == 4000


def test_ties_keep_file_order_and_old_vidur_column_names(tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("Date,Time,PromptTokenCount,CompletionTokenCount\nd,5.0,10,1\nd,5.0,20,2\nd,7.5,30,3\n")
    requests = read_trace(path, "vidur")
    assert [(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in requests] == [
        (0, 0.0, 10, 1),
        (1, 0.0, 20, 2),
        (2, 2.5, 30, 3),
    ]


def test_empty_window_is_an_error(tmp_path):
    path = _write(tmp_path, "t.jsonl", _moon(0, 10, 1), _moon(1000, 10, 1))
    with pytest.raises(InputError, match=r"no requests in the window"):
        read_trace(path, "mooncake", start_s=5.0)


def test_zero_output_counts_as_one_token_with_a_warning(tmp_path):
    path = _write(tmp_path, "t.jsonl", _moon(0, 10, 0), _moon(5, 10, 3), _moon(9, 10, 0))
    with pytest.warns(ZeroLengthWarning, match=r"2 request\(s\) with 0 output tokens"):
        requests = read_trace(path, "mooncake")
    assert [r.output_tokens for r in requests] == [1, 3, 1]


def test_length_only_vidur_trace_feeds_lengths_not_arrivals(tmp_path):
    path = tmp_path / "lengths.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens,pd_ratio\n100,10,10.0\n200.0,20,10.0\n")
    assert read_trace_column(path, "vidur", "input").tolist() == [100, 200]
    assert read_trace_column(path, "vidur", "output").tolist() == [10, 20]
    with pytest.raises(InputError, match=r"no arrival-time column.*empirical"):
        read_trace(path, "vidur")


# ---- bad files: one InputError naming file, line and field ---------------------------------------


def _moon(ms, prompt, output, **extra):
    fields = {"timestamp": ms, "input_length": prompt, "output_length": output, "hash_ids": [1]}
    return json.dumps({**fields, **extra})


def _write(tmp_path, name, *lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _error(path, format) -> str:
    with pytest.raises(InputError) as info:
        read_trace(path, format)
    message = str(info.value)
    assert str(path) in message or path.name in message
    return message


def test_mooncake_missing_field(tmp_path):
    path = _write(tmp_path, "t.jsonl", _moon(0, 10, 1), json.dumps({"timestamp": 1, "input_length": 5}))
    assert ":2: output_length: missing field" in _error(path, "mooncake")


@pytest.mark.parametrize("bad", ["abc", 12.5, None, True])
def test_mooncake_non_integer_length(tmp_path, bad):
    path = _write(tmp_path, "t.jsonl", _moon(0, 10, 1), _moon(1, 10, 1), _moon(2, bad, 1))
    message = _error(path, "mooncake")
    assert ":3: input_length: bad value" in message and "non-negative integer" in message


def test_mooncake_negative_length(tmp_path):
    path = _write(tmp_path, "t.jsonl", _moon(0, 10, -4))
    assert ":1: output_length: negative value -4" in _error(path, "mooncake")


def test_mooncake_unsorted_timestamps_name_the_backward_line(tmp_path):
    path = _write(tmp_path, "t.jsonl", _moon(0, 10, 1), _moon(1500, 10, 1), _moon(1200, 10, 1))
    message = _error(path, "mooncake")
    assert ":3: timestamp: time goes backwards: 1200 ms after 1500 ms on line 2" in message


def test_mooncake_bad_hash_ids_and_bad_json(tmp_path):
    path = _write(tmp_path, "t.jsonl", _moon(0, 10, 1).replace("[1]", '["x"]'))
    assert ":1: hash_ids: bad value" in _error(path, "mooncake")
    path = _write(tmp_path, "u.jsonl", _moon(0, 10, 1), "{not json")
    assert ":2: not valid JSON" in _error(path, "mooncake")


def test_csv_given_as_mooncake(tmp_path):
    header = "TIMESTAMP,ContextTokens,GeneratedTokens"
    path = _write(tmp_path, "azure.csv", header, "2023-11-16 18:15:46.6805900,374,44")
    message = _error(path, "mooncake")
    assert ":1: not valid JSON" in message and "looks like a CSV" in message


def test_jsonl_given_as_azure_or_vidur(tmp_path):
    path = _write(tmp_path, "t.jsonl", _moon(0, 10, 1))
    for format in ("azure", "vidur"):
        message = _error(path, format)
        assert ":1: header: missing column" in message and "format 'mooncake'" in message


@pytest.mark.parametrize("format", ["mooncake", "azure", "vidur", "csv"])
def test_empty_file(tmp_path, format):
    path = tmp_path / "empty.txt"
    path.write_text("")
    assert "empty" in _error(path, format) or "no requests" in _error(path, format)


def test_header_only_csv_has_no_requests(tmp_path):
    path = _write(tmp_path, "h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens")
    assert "no requests" in _error(path, "azure")


def test_missing_file(tmp_path):
    assert "file not found" in _error(tmp_path / "nope.jsonl", "mooncake")


def test_azure_bad_timestamp_and_unsorted_rows(tmp_path):
    header = "TIMESTAMP,ContextTokens,GeneratedTokens"
    path = _write(tmp_path, "a.csv", header, "2023-11-16 18:15:46.68,374,44", "16/11/2023 18:15,5,5")
    assert ":3: TIMESTAMP: bad value '16/11/2023 18:15'" in _error(path, "azure")
    rows = ("2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:40.0000000,5,5")
    path = _write(tmp_path, "b.csv", header, *rows)
    message = _error(path, "azure")
    assert ":3: TIMESTAMP: time goes backwards" in message and "on line 2" in message


def test_azure_missing_column_and_bad_count(tmp_path):
    path = _write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens", "2023-11-16 18:15:46.68,374")
    assert ":1: header: missing column GeneratedTokens" in _error(path, "azure")
    path = _write(tmp_path, "b.csv", "TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46.68,3x,4")
    assert ":2: ContextTokens: bad value '3x'" in _error(path, "azure")


def test_azure_timestamps_cross_midnight(tmp_path):
    header = "TIMESTAMP,ContextTokens,GeneratedTokens"
    rows = ("2023-11-16 23:59:59.5000000,1,1", "2023-11-17 00:00:00.2500000,1,1")
    path = _write(tmp_path, "a.csv", header, *rows)
    assert [r.arrival_s for r in read_trace(path, "azure")] == pytest.approx([0.0, 0.75])


def test_vidur_unsorted_and_short_row(tmp_path):
    header = "arrived_at,num_prefill_tokens,num_decode_tokens"
    path = _write(tmp_path, "v.csv", header, "0.5,10,1", "0.25,10,1")
    assert ":3: arrived_at: time goes backwards: 0.25 s after 0.5 s on line 2" in _error(path, "vidur")
    path = _write(tmp_path, "w.csv", header, "0.5,10")
    assert ":2: 2 column(s)" in _error(path, "vidur")


def test_unknown_format(tmp_path):
    path = _write(tmp_path, "t.jsonl", _moon(0, 10, 1))
    with pytest.raises(InputError, match="unknown format"):
        read_trace(path, "sharegpt")  # type: ignore[arg-type]


def test_mooncake_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = ['{"timestamp": 0, "input_length": 5, "output_length": 2}', '{"timestamp": 7, "input_length": 9, "output_length": 3}']
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(rows).encode() + b"\n")
    requests = read_trace(path, "mooncake")
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in requests] == [(0.0, 5, 2), (0.007, 9, 3)]


def test_a_token_count_above_the_limit_names_the_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n'
                    '{"timestamp": 1, "input_length": 1000000000, "output_length": 2}\n')
    assert _error(path, "mooncake").startswith(f"{path}:2: input_length: 1000000000 tokens, over the limit")


def test_a_prompt_longer_than_the_context_names_the_trace_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,1\n1,500,1\n2,20,1\n")
    with pytest.raises(InputError, match="context_length 100") as err:
        read_trace(path, "vidur", context_length=100)
    assert err.value.where == f"{path}:3: num_prefill_tokens"
    # Prompts clipped to leave room for the output, or a window without the long row, fit; a clip
    # to the whole context leaves none, and the output is named.
    assert len(read_trace(path, "vidur", context_length=100, max_prompt_tokens=99)) == 3
    with pytest.raises(InputError, match=r"100 prompt \+ 1 output tokens") as err:
        read_trace(path, "vidur", context_length=100, max_prompt_tokens=100)
    assert err.value.where == f"{path}:3: num_decode_tokens"
    assert len(read_trace(path, "vidur", context_length=100, max_requests=1)) == 1


# ---- the plain CSV (request_id, arrival_s, prompt_tokens, output_tokens) -----------------------


def test_the_plain_csv_keeps_its_ids_and_ignores_other_columns(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("request_id,arrival_s,prompt_tokens,output_tokens,note\n17,1.5,812,64,a\n18,1.75,95,210,b\n"
                    "3,2.0,40,5,c\n")
    requests = read_trace(path, "csv")
    assert [(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in requests] == [
        (17, 0.0, 812, 64), (18, 0.25, 95, 210), (3, 0.5, 40, 5)]
    assert requests[2].id == 3 and [r.id for r in requests[1:]] == [18, 3]
    assert [r.id for r in read_trace(path, "csv", start_s=0.2)] == [18, 3]  # a window keeps the ids too


@pytest.mark.parametrize("body, where, problem", [
    ("1,0,5,2\n1,1,5,2\n", ":3: request_id", "1 repeats line 2's id"),
    ("1,0,5,2\n-2,1,5,2\n", ":3: request_id", "-2"),
    ("1,0,5,2\n2,x,5,2\n", ":3: arrival_s", "'x'"),
    ("1,3,5,2\n2,1,5,2\n", ":3: arrival_s", "time goes backwards"),
])
def test_the_plain_csv_names_the_line_and_field_of_a_bad_row(tmp_path, body, where, problem):
    path = tmp_path / "bad.csv"
    path.write_text("request_id,arrival_s,prompt_tokens,output_tokens\n" + body)
    with pytest.raises(InputError) as err:
        read_trace(path, "csv")
    assert err.value.where == f"{path}{where}" and problem in str(err.value)


def test_the_plain_csv_names_a_missing_column(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,arrival_s,prompt_tokens,output_tokens\n1,0,5,2\n")
    assert "missing column request_id" in _error(path, "csv")


def test_a_length_column_is_parsed_once_per_unchanged_file_and_read_only(tmp_path, monkeypatch):
    from infralab.workload import traces

    path = tmp_path / "t.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n100,10\n200,20\n")
    parses = []
    real_parse = traces.parse_trace
    monkeypatch.setattr(traces, "parse_trace", lambda p, f: parses.append(p) or real_parse(p, f))
    first = read_trace_column(path, "vidur", "input")
    again = read_trace_column(path, "vidur", "input")
    assert again is first and len(parses) == 1
    with pytest.raises(ValueError):
        first[0] = 7  # shared by every caller: read-only
    path.write_text("num_prefill_tokens,num_decode_tokens\n100,10\n200,20\n300,30\n")  # changed file: parsed again
    assert read_trace_column(path, "vidur", "input").tolist() == [100, 200, 300] and len(parses) == 2
    missing = tmp_path / "missing.csv"
    for _ in range(2):  # an error is raised every time, never remembered
        with pytest.raises(InputError, match="missing.csv"):
            read_trace_column(missing, "vidur", "input")
