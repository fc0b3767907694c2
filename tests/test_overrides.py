"""`--set dotted.key=value` (infralab.overrides): values in TOML syntax, applied before validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infralab.cli import main
from infralab.errors import InputError
from infralab.overrides import apply_overrides
from infralab.sim.config import load_config
from support.toml_fixtures import synthetic_config

CONFIG = synthetic_config(num_requests=6, rate=2.0, prompt=100, output=4)


def test_values_take_toml_types_and_the_input_is_not_changed() -> None:
    doc = {"cluster": {"instances": 1}, "model": "m"}
    out = apply_overrides(
        doc,
        ["cluster.instances=4", "cost.efficiency.gemm=0.5", "engine.prefix_cache=false",
         'run.name="a b"', "cluster.layout=disaggregated", "metrics.percentiles=[50, 99]",
         'workload.arrival={ kind = "gamma", rate = 1.5, cv = 2.0 }'],
        "--set",
    )
    assert out["cluster"] == {"instances": 4, "layout": "disaggregated"}
    assert out["cost"] == {"efficiency": {"gemm": 0.5}}
    assert out["engine"]["prefix_cache"] is False
    assert out["run"]["name"] == "a b"
    assert out["metrics"]["percentiles"] == [50, 99]
    assert out["workload"]["arrival"] == {"kind": "gamma", "rate": 1.5, "cv": 2.0}
    assert doc == {"cluster": {"instances": 1}, "model": "m"}


def test_a_later_assignment_to_the_same_key_wins() -> None:
    assert apply_overrides({}, ["a.b=1", "a.b=2"], "--set") == {"a": {"b": 2}}


@pytest.mark.parametrize(
    ("assignment", "problem"),
    [
        ("cluster.instances", "no '='"),
        ("=4", "bad key"),
        ("cluster..instances=4", "bad key"),
        ("cluster instances=4", "bad key"),
        ("cluster.instances=", "no value"),
        ("cluster.instances=4x", "not TOML"),
        ("cluster.instances=[1,", "not TOML"),
        ("a=1\nb=2", "line break"),
        ("model.name=x", "not a table"),
    ],
)
def test_a_malformed_assignment_names_the_flag_and_the_form(assignment: str, problem: str) -> None:
    with pytest.raises(InputError) as info:
        apply_overrides({"model": "m"}, [assignment], "--set")
    assert info.value.where.startswith("--set ")
    assert problem in info.value.problem
    assert "KEY=VALUE" in (info.value.expected or "") or problem == "not a table"


def toml_literal(value: int | bool | str) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\U{ord(c):08X}" for c in value) + '"'


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.booleans() | st.text(max_size=20))
def test_a_value_written_as_toml_comes_back_as_itself(value) -> None:
    text = toml_literal(value)
    assert apply_overrides({}, [f"x.y={text}"], "--set") == {"x": {"y": value}}


def test_an_override_meets_the_same_validation_as_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text(CONFIG)
    cfg, _ = load_config(path, ["cluster.instances=3", "workload.arrival.rate=5"])
    assert cfg.cluster.instances == 3 and cfg.workload.arrival.rate == 5.0
    # ... and its error is named at the flag that gave the value, the file's field beside it.
    with pytest.raises(InputError, match=r"^--set 'cluster\.instancez=3': unknown field \(.*cfg\.toml: cluster\.instancez\)"):
        load_config(path, ["cluster.instancez=3"])
    with pytest.raises(InputError, match=r"^--set 'cluster\.instances=0': bad value 0 \(.*cfg\.toml: cluster\.instances\)"):
        load_config(path, ["cluster.instances=0"])
    path.write_text(CONFIG.replace("num_requests = 6", "num_requests = 0"))  # the file's own bad value
    with pytest.raises(InputError, match=r"^\S*cfg\.toml: workload\.num_requests: bad value 0"):
        load_config(path, ["run.name=x"])


def test_sim_run_set_changes_the_run_and_a_bad_one_is_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text(CONFIG)
    out = tmp_path / "out"
    assert main(["sim", "run", str(path), "--out", str(out), "--no-timeline",
                 "--set", "workload.num_requests=3", "--set", "run.name=renamed"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["total"] == 3 and summary["run"]["name"] == "renamed"
    capsys.readouterr()
    assert main(["sim", "run", str(path), "--out", str(tmp_path / "bad"), "--set", "cluster.instances"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--set 'cluster.instances'" in err[0] and "KEY=VALUE" in err[0]
    assert not (tmp_path / "bad").exists()
