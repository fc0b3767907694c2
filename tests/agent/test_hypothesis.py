"""Hypothesis files: the shipped studies parse; every kind of mistake is one InputError naming the
file, the line and the key."""

from pathlib import Path

import pytest

from infralab.agent.hypothesis import find_line, load_hypothesis
from infralab.errors import InputError

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"

GOOD = '''
[hypothesis]
name = "tiny"
claim = "3xTF32 is more accurate than TF32 under a K-split"
kind = "kernel-numerics"
metrics = ["rel_err"]
validators = ["kernel-check"]
acceptance = ["x3.rel_err < baseline.rel_err"]

[baseline]
kernel = "matmul"
variant = "tf32"
shape = "M=8;N=32;K=64"
split = "row"
tp = 2

[[variant]]
name = "x3"
change = { variant = "3xtf32" }
'''


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "h.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["partition_correctness", "gil_kv_transfer_hypothesis", "kda_tuning",
                                  "whatif_mooncake_pd"])
def test_shipped_studies_parse(name):
    hyp = load_hypothesis(EXPERIMENTS / f"{name}.toml")
    assert hyp.arms[0].name == "baseline" and len(hyp.arms) >= 2
    assert all(a.change is not None for a in hyp.arms[1:])
    assert hyp.acceptance


def test_good_file_resolves_arms_and_chains(tmp_path):
    text = GOOD + '\n[[variant]]\nname = "x3_tree"\nfrom = "x3"\nchange = { reduction = "tree" }\n'
    hyp = load_hypothesis(write(tmp_path, text))
    assert [a.name for a in hyp.arms] == ["baseline", "x3", "x3_tree"]
    tree = hyp.arm("x3_tree")
    assert tree.parent == "x3" and tree.change == ("reduction", "tree")
    assert tree.config["variant"] == "3xtf32" and tree.config["split"] == "row"
    assert hyp.validators == ("kernel-check",) and hyp.seeds == (0,) and hyp.repetitions == 1


def error_of(tmp_path, text) -> str:
    with pytest.raises(InputError) as info:
        load_hypothesis(write(tmp_path, text))
    return str(info.value)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_missing_key_names_file_line_and_key(tmp_path):
    text = GOOD.replace('claim = "3xTF32 is more accurate than TF32 under a K-split"\n', "")
    msg = error_of(tmp_path, text)
    assert "h.toml" in msg and "hypothesis.claim" in msg and "missing" in msg
    assert f"h.toml:{line_of(text, '[hypothesis]')}:" in msg


def test_bad_expression_names_line_and_key(tmp_path):
    text = GOOD.replace('"x3.rel_err < baseline.rel_err"', '"x3.rel_err <"')
    msg = error_of(tmp_path, text)
    assert f"h.toml:{line_of(text, 'acceptance =')}: hypothesis.acceptance[0]" in msg
    assert "cannot parse" in msg


def test_unknown_validator(tmp_path):
    text = GOOD.replace('validators = ["kernel-check"]', 'validators = ["oracle"]')
    msg = error_of(tmp_path, text)
    assert "hypothesis.validators[0]" in msg and "oracle" in msg
    assert f"h.toml:{line_of(text, 'validators =')}:" in msg


def test_validator_that_cannot_answer_the_kind(tmp_path):
    msg = error_of(tmp_path, GOOD.replace('validators = ["kernel-check"]', 'validators = ["sim"]'))
    assert "hypothesis.validators[0]" in msg and "cannot answer" in msg and "kernel-check" in msg


def test_variant_changing_two_things(tmp_path):
    text = GOOD.replace('change = { variant = "3xtf32" }', 'change = { variant = "3xtf32", tp = 4 }')
    msg = error_of(tmp_path, text)
    assert "variant[0].change" in msg and "changes 2 things (variant, tp)" in msg and "exactly one knob" in msg
    line = line_of(text, 'name = "x3"')
    assert f"h.toml:{line}:" in msg


def test_variant_that_changes_nothing(tmp_path):
    msg = error_of(tmp_path, GOOD.replace('change = { variant = "3xtf32" }', 'change = { variant = "tf32" }'))
    assert "variant[0].change.variant" in msg and "changes nothing" in msg


def test_unknown_parent_and_duplicate_name(tmp_path):
    assert "variant[0].from" in error_of(tmp_path, GOOD.replace('name = "x3"', 'name = "x3"\nfrom = "nope"'))
    dup = GOOD + '\n[[variant]]\nname = "x3"\nchange = { tp = 4 }\n'
    assert "variant[1].name" in error_of(tmp_path, dup) and "used twice" in error_of(tmp_path, dup)


def test_unknown_knob_and_bad_knob_value(tmp_path):
    msg = error_of(tmp_path, GOOD.replace('split = "row"', 'splt = "row"'))
    assert "baseline.splt" in msg and "unknown knob" in msg
    text = GOOD.replace('split = "row"', 'split = "diagonal"')
    msg = error_of(tmp_path, text)
    assert f"h.toml:{line_of(text, 'split =')}: baseline.split" in msg and "diagonal" in msg


def test_expression_naming_unknown_arm_or_undeclared_metric(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("x3.rel_err < baseline", "x4.rel_err < baseline"))
    assert "hypothesis.acceptance[0]" in msg and "x4.rel_err" in msg and "baseline, x3" in msg
    msg = error_of(tmp_path, GOOD.replace("x3.rel_err < baseline.rel_err", "x3.max_ulp < 3"))
    assert "metric 'max_ulp' is not in hypothesis.metrics" in msg


def test_unknown_top_level_key_and_bad_toml(tmp_path):
    assert "unknown field" in error_of(tmp_path, GOOD + '\n[extra]\nx = 1\n')
    msg = error_of(tmp_path, GOOD.replace("[baseline]", "[baseline"))
    assert "h.toml" in msg and "not valid TOML" in msg


def test_cluster_knob_is_checked_against_the_simulation_config(tmp_path):
    src = (EXPERIMENTS / "whatif_mooncake_pd.toml").read_text()
    config = EXPERIMENTS / "sim" / "mooncake_conv_pd_rdma.toml"
    text = src.replace('config = "sim/mooncake_conv_pd_rdma.toml"', f'config = "{config}"')
    text = text.replace('change = { pools = "5:1" }', 'change = { "cluster.no_such_field" = 3 }')
    with pytest.raises(InputError, match=r"h.toml:\d+: variant\[0\].change.*unknown knob 'cluster.no_such_field'"):
        load_hypothesis(write(tmp_path, text))
    bad_pools = text.replace('change = { "cluster.no_such_field" = 3 }', 'change = { pools = "4/2" }')
    with pytest.raises(InputError, match=r"variant\[0\].change.*P:D"):
        load_hypothesis(write(tmp_path, bad_pools))


def test_find_line_locates_tables_and_keys():
    text = "[a]\nx = 1\n\n[[v]]\nname = 'p'\n[[v]]\nname = 'q'\nchange = { k = 1 }\n"
    assert find_line(text, "a.x") == 2
    assert find_line(text, "v[1].change") == 8
    assert find_line(text, "v[1].name") == 7


def test_setup_errors_name_the_setup_key(tmp_path):
    host = '''
[hypothesis]
name = "h"
claim = "c"
kind = "host-concurrency"
metrics = ["max_degradation"]
validators = ["sim"]
acceptance = ["released.max_degradation < baseline.max_degradation"]

[setup]
experiment = "missing.toml"

[baseline]
dispatch_combine_gil = "held"

[[variant]]
name = "released"
change = { dispatch_combine_gil = "released" }
'''
    msg = error_of(tmp_path, host)
    assert f"h.toml:{line_of(host, 'experiment =')}: setup.experiment" in msg and "missing.toml" in msg
    msg = error_of(tmp_path, host.replace('experiment = "missing.toml"', 'experiment = "m.toml"\nexperimnt = "x.toml"'))
    assert "setup.experimnt" in msg and "unknown field" in msg
