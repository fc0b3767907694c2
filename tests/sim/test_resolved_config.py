"""No hidden defaults: every run folder records the resolved config, fields a layout does not read
are errors, and the defaults a disaggregated layout brings in are printed once."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infralab.cli import main
from infralab.config_io import dump_toml, validate
from infralab.errors import InputError
from infralab.sim.config import SimConfig, config_doc, layout_defaults, load_config, resolved_config_text
from support.toml_fixtures import synthetic_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "experiments" / "sim").glob("*.toml"))

BASE = synthetic_config(num_requests=12, rate=3.0, prompt=(20, 300), output=6)


def write(tmp_path: Path, text: str, name: str = "cfg.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_the_resolved_text_of_a_shipped_example_reads_back_as_the_same_config(example: Path) -> None:
    cfg, base_dir = load_config(example)
    text = resolved_config_text(cfg, base_dir)
    assert validate(SimConfig, tomllib.loads(text), "resolved") == cfg
    doc = tomllib.loads(text)
    assert doc["engine"]["block_size"] == 16 and doc["metrics"]["percentiles"] == [50.0, 90.0, 99.0]


def test_a_run_folder_holds_the_resolved_config_and_running_it_gives_the_same_run(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "t.jsonl").write_text("".join(
        json.dumps({"timestamp": 100 * i, "input_length": 50 + i, "output_length": 3, "hash_ids": [i]}) + "\n"
        for i in range(10)))
    sub = tmp_path / "configs"
    sub.mkdir()
    cfg = write(sub, BASE.replace('kind = "synthetic"\nnum_requests = 12', 'kind = "trace"\npath = "../traces/t.jsonl"\nformat = "mooncake"')
                .split("[workload.arrival]")[0] + '\n[cluster]\nlayout = "disaggregated"\n')
    assert main(["sim", "run", str(cfg), "--out", str(tmp_path / "a"), "--set", "engine.block_size=32", "--seed", "5"]) == 0
    resolved = (tmp_path / "a" / "resolved_config.toml").read_text()
    doc = tomllib.loads(resolved)
    assert doc["engine"]["block_size"] == 32 and doc["run"]["seed"] == 5  # overrides and --seed recorded
    assert doc["cluster"]["transfer"]["mode"] == "after_prefill"  # the default, written out
    assert "instances" not in doc["cluster"] and "layer_groups" not in doc["cluster"]["transfer"]
    assert Path(doc["workload"]["path"]).is_absolute()  # runs from the run folder too
    assert (tmp_path / "a" / "config.toml").read_text() == cfg.read_text()  # the input, as written
    # The resolved file, run from elsewhere, runs the same.
    assert main(["sim", "run", str(tmp_path / "a" / "resolved_config.toml"), "--out", str(tmp_path / "b")]) == 0
    for name in ("requests.csv", "resolved_config.toml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in "ab")
    a.pop("run"), b.pop("run")
    assert a == b


@pytest.mark.parametrize(
    ("cluster", "field"),
    [
        ('layout = "disaggregated"\ninstances = 7', "cluster.instances"),
        ('layout = "colocated"\nprefill_instances = 2', "cluster.prefill_instances"),
        ('instances = 2\ndecode_router = "round_robin"', "cluster.decode_router"),
        ('layout = "colocated"\n[cluster.transfer]\nmode = "layerwise"', "cluster.transfer"),
        ('layout = "disaggregated"\n[cluster.transfer]\nlayer_groups = 8', "cluster.transfer.layer_groups"),
    ],
)
def test_a_field_the_layout_does_not_read_is_an_error_naming_it(tmp_path: Path, cluster: str, field: str) -> None:
    with pytest.raises(InputError) as info:
        load_config(write(tmp_path, BASE + "\n[cluster]\n" + cluster + "\n"))
    assert info.value.where.endswith(f": {field}")
    assert "does not apply" in info.value.problem


def test_the_defaults_of_a_disaggregated_layout_are_printed_once(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, BASE + '\n[cluster]\nlayout = "disaggregated"\n[cluster.transfer]\nmode = "layerwise"\n')
    cfg, _ = load_config(path)
    defaults = layout_defaults(config_doc(path), cfg)
    assert "cluster.transfer.layer_groups = 4" in defaults and "cluster.prefill_instances = 1" in defaults
    assert not any(d.startswith("cluster.transfer.mode") for d in defaults)  # written, not defaulted
    assert main(["sim", "run", str(path), "--out", str(tmp_path / "a"), "--no-timeline"]) == 0
    err = capsys.readouterr().err
    assert err.count("note: the disaggregated layout uses defaults") == 1 and "layer_groups = 4" in err
    colocated = write(tmp_path, BASE, "colocated.toml")
    assert main(["sim", "run", str(colocated), "--out", str(tmp_path / "b"), "--no-timeline"]) == 0
    assert "note:" not in capsys.readouterr().err


scalars = st.one_of(
    st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12)
)
keys = st.text(min_size=1, max_size=8)
documents = st.recursive(
    st.dictionaries(keys, scalars | st.lists(scalars.filter(lambda v: not isinstance(v, bool)), max_size=3), max_size=4),
    lambda inner: st.dictionaries(keys, inner, max_size=3),
    max_leaves=12,
)


@given(documents)
def test_dump_toml_reads_back_as_the_same_document(doc: dict) -> None:
    assert tomllib.loads(dump_toml(doc)) == doc
