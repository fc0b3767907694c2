"""The one input boundary (infralab/input_files.py): whatever the bytes, a str/dict or one InputError."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.errors import InputError
from infralab.input_files import MAX_NESTING, SIZE_CAPS, parse_toml, read_json, read_text, read_toml


def test_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "a.toml"
    path.write_bytes(b'\xef\xbb\xbfname = "x"\n')
    assert read_text(path, "config") == 'name = "x"\n'
    assert read_toml(path) == {"name": "x"}


def test_latin1_names_file_and_line(tmp_path):
    path = tmp_path / "a.toml"
    path.write_bytes('a = 1\nname = "café"\n'.encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8") as err:
        read_toml(path)
    assert err.value.where == f"{path}: line 2"


def test_size_cap_is_checked_before_reading(tmp_path):
    path = tmp_path / "big.toml"
    with path.open("wb") as handle:
        handle.truncate(SIZE_CAPS["config"] + 1)
    with pytest.raises(InputError, match="byte limit"):
        read_toml(path)
    assert read_text(path, "trace").count("\0") == SIZE_CAPS["config"] + 1  # a trace's cap is larger


@pytest.mark.parametrize("path, problem", [("/dev/zero", "not a regular file"), ("/", "is a folder")])
def test_devices_and_folders(path, problem):
    with pytest.raises(InputError, match=problem):
        read_text(path, "run")


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_json(tmp_path / "nope.json")


def test_nesting(tmp_path):
    deep = ".".join(["k"] * (MAX_NESTING + 1)) + " = 1\n"
    with pytest.raises(InputError, match="nested deeper"):
        parse_toml(deep, "x.toml")
    assert parse_toml(".".join(["k"] * (MAX_NESTING - 1)) + " = 1\n", "x.toml")
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="nested deeper"):
        read_json(path)


def test_json_refuses_non_finite_and_names_the_line(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"a": NaN}')
    with pytest.raises(InputError, match="non-finite"):
        read_json(path)
    path.write_text('{\n"a": }')
    with pytest.raises(InputError) as err:
        read_json(path)
    assert err.value.where == f"{path}: line 2"


def test_toml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text("a = 1\nb = \n")
    with pytest.raises(InputError, match="line 2"):
        read_toml(path)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_give_a_dict_or_one_input_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "x.toml"
    path.write_bytes(data)
    try:
        result = read_toml(path)
    except InputError as exc:
        assert str(path) in exc.where and "\n" not in str(exc).strip("\n")
    else:
        assert isinstance(result, dict)


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=20))
def test_json_values_round_trip(tmp_path_factory, value):
    import json

    path = tmp_path_factory.mktemp("json") / "x.json"
    path.write_text(json.dumps(value))
    assert read_json(path) == value or (isinstance(value, float) and math.isnan(value))
