"""Where studies and shared data are found (infralab/locations.py), and `@data/` paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from infralab.errors import InputError
from infralab.agent.sim_pool import resolve_value
from infralab.locations import experiments_dir, resolve_path, shared_data_dir

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_follow_the_repository_layout(monkeypatch):
    monkeypatch.delenv("INFRALAB_EXPERIMENTS", raising=False)
    monkeypatch.delenv("INFRALAB_DATA", raising=False)
    assert experiments_dir().resolve() == ROOT / "experiments"
    assert shared_data_dir().resolve() == (ROOT.parent / "shared" / "data").resolve()


def test_environment_variables_override(monkeypatch, tmp_path):
    monkeypatch.setenv("INFRALAB_EXPERIMENTS", str(tmp_path))
    monkeypatch.setenv("INFRALAB_DATA", str(tmp_path))
    assert experiments_dir() == tmp_path and shared_data_dir() == tmp_path
    assert resolve_path("@data/traces/t.csv", Path("/elsewhere")) == tmp_path / "traces" / "t.csv"


def test_a_variable_that_is_not_a_folder_is_an_input_error(monkeypatch, tmp_path):
    monkeypatch.setenv("INFRALAB_DATA", str(tmp_path / "nope"))
    with pytest.raises(InputError, match="INFRALAB_DATA"):
        resolve_path("@data/traces/t.csv", tmp_path)


def test_plain_paths_resolve_against_the_file_that_names_them(tmp_path):
    assert resolve_path("a/b.toml", tmp_path) == tmp_path / "a" / "b.toml"
    assert resolve_path("/abs/b.toml", tmp_path) == Path("/abs/b.toml")
    # A knob copied from a hypothesis or search space into a config: relative paths are rebased,
    # @data/ paths mean the same from any file and stay as written.
    assert resolve_value("a/b.toml", tmp_path) == str((tmp_path / "a" / "b.toml").resolve())
    assert resolve_value("@data/traces/x.csv", tmp_path) == "@data/traces/x.csv"
