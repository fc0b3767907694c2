"""Hypothesis files: the shipped studies parse; every kind of mistake is one InputError naming the
file, the line and the key."""

from pathlib import Path

import pytest

from infralab.agent.hypothesis import find_line, load_hypothesis
from infralab.agent.studies import discover_studies
from infralab.errors import InputError
from support.toml_fixtures import KERNEL_HYPOTHESIS

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"

GOOD = KERNEL_HYPOTHESIS


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "h.toml"
    path.write_text(text)
    return path


SHIPPED_HYPOTHESES = [path for study in discover_studies() for path in study.hypotheses]


def test_every_study_keeps_its_hypothesis_files_in_its_folder():
    assert len(SHIPPED_HYPOTHESES) >= 8
    for study in discover_studies():
        assert all(path.parent == study.folder for path in study.hypotheses), study.name


@pytest.mark.parametrize("path", SHIPPED_HYPOTHESES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_shipped_studies_parse(path):
    hyp = load_hypothesis(path)
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
    src = (EXPERIMENTS / "whatif_mooncake_pd" / "whatif_mooncake_pd.toml").read_text()
    config = EXPERIMENTS / "sim" / "mooncake_conv_pd_rdma.toml"
    text = src.replace('config = "../sim/mooncake_conv_pd_rdma.toml"', f'config = "{config}"')
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
    host = HOST_TEMPLATE.replace("HOOK", str(EXPERIMENTS / "gil_kv_transfer" / "hook.py"))
    msg = error_of(tmp_path, host)
    assert f"h.toml:{line_of(host, 'experiment =')}: setup.experiment" in msg and "missing.toml" in msg
    msg = error_of(tmp_path, host.replace('experiment = "missing.toml"', 'experiment = "m.toml"\nexperimnt = "x.toml"'))
    assert "setup.experimnt" in msg and "unknown field" in msg
    missing_hook = host.replace(str(EXPERIMENTS / "gil_kv_transfer" / "hook.py"), "nohook.py")
    msg = error_of(tmp_path, missing_hook)
    assert f"h.toml:{line_of(missing_hook, 'hook =')}: setup.hook" in msg and "nohook.py" in msg


HOST_TEMPLATE = '''
[hypothesis]
name = "h"
claim = "c"
kind = "hook"
metrics = ["max_degradation"]
validators = ["sim"]
acceptance = ["released.max_degradation < baseline.max_degradation"]

[setup]
experiment = "missing.toml"
hook = "HOOK"

[baseline]
dispatch_combine_gil = "held"

[[variant]]
name = "released"
change = { dispatch_combine_gil = "released" }
'''


# ---- what a file may say is derived from its validators' declarations ------------------------

KDA = (EXPERIMENTS / "kda_tuning" / "kda_tuning.toml").read_text()


def test_misspelt_kernel_is_bad_input_with_line_and_allowed_names(tmp_path):
    text = KDA.replace('kernel = "kda_decode"', 'kernel = "kda_decod"')
    msg = error_of(tmp_path, text)
    assert f"h.toml:{line_of(text, 'kernel =')}: baseline.kernel" in msg
    from infralab.kernels.registry import OPS

    assert "'kda_decod'" in msg and f"one of {', '.join(OPS)}" in msg  # microbench measures every registered op


def test_misspelt_kernel_exits_2_from_the_command(tmp_path, capsys):
    from infralab.cli import main

    path = write(tmp_path, KDA.replace('kernel = "kda_decode"', 'kernel = "kda_decod"'))
    assert main(["test", str(path)]) == 2
    assert "baseline.kernel" in capsys.readouterr().err


def test_variant_must_be_one_of_the_kernels_variants(tmp_path):
    text = KDA.replace('change = { variant = "v3" }', 'change = { variant = "v4" }')
    msg = error_of(tmp_path, text)
    line = line_of(text, '"v4"')
    assert f"h.toml:{line}: variant[1].change.variant" in msg
    assert "'v4'" in msg and all(v in msg for v in ("v1", "v2", "v3", "replay"))
    text = GOOD.replace('change = { variant = "3xtf32" }', 'change = { variant = "4xtf32" }')
    msg = error_of(tmp_path, text)
    assert "variant[0].change.variant" in msg and "fp32, tf32, 3xtf32" in msg


def test_changing_the_kernel_keeps_only_variants_it_has(tmp_path):
    text = GOOD.replace('change = { variant = "3xtf32" }', 'change = { kernel = "kda_decode" }')
    msg = error_of(tmp_path, text)
    # The baseline's split (row) is the first knob kda_decode's registry entry does not allow.
    assert "variant[0].change.kernel" in msg and "split='row'" in msg and "none, head, batch" in msg
    text = text.replace('split = "row"', 'split = "none"')
    msg = error_of(tmp_path, text)
    assert "variant[0].change.kernel" in msg and "variant='tf32'" in msg and "v1" in msg


def test_unknown_metric_and_kind_list_what_the_validators_declare(tmp_path):
    text = KDA.replace('"state_bytes_per_seq", "time_s"]', '"state_bytes_per_seq", "time_ms"]')
    msg = error_of(tmp_path, text)
    assert "hypothesis.metrics[6]" in msg and "'time_ms'" in msg and "time_s" in msg and "achieved_gbps" in msg
    msg = error_of(tmp_path, GOOD.replace('kind = "kernel-numerics"', 'kind = "kernel-speed"'))
    assert "hypothesis.kind" in msg and "kernel-numerics" in msg and "cluster" in msg


def test_allowed_metrics_and_knobs_are_the_union_of_the_named_validators():
    from infralab.agent.hypothesis import allowed_for
    from infralab.agent.validators.real import Real
    from infralab.agent.validators.sim import Sim

    from infralab.agent.hypothesis import resolved

    # A hook-measured hypothesis's declarations come from the hook its setup names.
    setup, base = {"hook": "hook.py"}, EXPERIMENTS / "gil_kv_transfer"
    both = resolved(allowed_for("hook", ("sim", "real")), setup, base)
    sim = next(d for d in Sim().declarations() if d.kind == "hook").resolve(setup, base, None)
    real = next(d for d in Real().declarations() if d.kind == "hook").resolve(setup, base, None)
    assert set(both.metrics) == set(sim.metrics) | set(real.metrics)
    assert set(both.knobs) == set(sim.knobs) | set(real.knobs) == {"dispatch_combine_gil", "kv_descriptors"}
    assert "main_gil_wait_s" in sim.metrics and "main_gil_wait_s" not in real.metrics
    assert allowed_for("cluster", ("sim",)).knobs is None  # dotted config paths, checked by the setup


def test_setup_integers_are_strict(tmp_path):
    """`true` is not 1 in a kernel hypothesis's dims nor in the host study's probe repeats."""
    msg = error_of(tmp_path, GOOD + '\n[setup]\ndims = { K = true }\n')
    assert "setup.dims" in msg
    gil = (EXPERIMENTS / "gil_kv_transfer" / "hypothesis.toml").read_text()
    gil = gil.replace("probe_repeats = 2", "probe_repeats = true")
    for key in ("experiment", "hook"):  # the study's files, named from a copy elsewhere
        line = next(l for l in gil.splitlines() if l.startswith(f"{key} = "))
        gil = gil.replace(line, f'{key} = "{EXPERIMENTS / "gil_kv_transfer" / line.split(chr(34))[1]}"')
    with pytest.raises(InputError, match="probe_repeats"):
        load_hypothesis(write(tmp_path, gil), quick=True)
