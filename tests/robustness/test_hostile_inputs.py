"""Every hostile input gets one clean error: exit 2, one line `error: ...` naming the file and the
field, no traceback, nothing written. The corpus is generated (tests/robustness/hostile_inputs.py)
and run through the CLI in-process; the counts per class are printed by test_corpus_counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infralab.cli import main
from robustness.hostile_inputs import (
    BASE_CONFIG,
    HYPOTHESIS,
    MODEL_SPEC,
    CLASSES,
    MOONCAKE_ROWS,
    SPACE,
    OUT,
    all_cases,
    counts,
    to_toml,
    trace_config,
    with_value,
    write,
)

CASES = all_cases()


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input_gets_one_line(case, tmp_path, capsys):
    argv, needles = case.build(tmp_path)
    code, out, err = run(argv, capsys)
    lines = err.splitlines()
    assert code == 2, (code, err, out)
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err + out
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not (tmp_path / OUT).exists(), "a refused input wrote output"


def test_corpus_counts():
    """At least 200 cases, every class represented; the counts per class are printed (-s)."""
    per_class = counts(CASES)
    print("hostile inputs per class:", json.dumps(per_class), "total", len(CASES))
    assert set(per_class) >= set(CLASSES)
    assert min(per_class.values()) >= 10
    assert len(CASES) >= 200
    assert len({case.id for case in CASES}) == len(CASES), "case ids are unique"


# ---- what must still be accepted ------------------------------------------------------------------


def test_mooncake_with_a_byte_order_mark_is_read(tmp_path, capsys):
    write(tmp_path, "t.jsonl", b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in MOONCAKE_ROWS).encode())
    cfg = write(tmp_path, "cfg.toml", to_toml(trace_config("t.jsonl", "mooncake")))
    code, _, err = run(["sim", "run", str(cfg), "--out", str(tmp_path / OUT)], capsys)
    assert code == 0, err
    summary = json.loads((tmp_path / OUT / "summary.json").read_text())
    assert summary["requests"]["completed"] == len(MOONCAKE_ROWS) if "requests" in summary else True
    assert (tmp_path / OUT / "requests.csv").read_text().count("\n") == len(MOONCAKE_ROWS) + 1


def test_an_integer_for_a_number_field_is_accepted(tmp_path, capsys):
    data = with_value(with_value(BASE_CONFIG, "workload.arrival.rate", 2), "slo.ttft_s", 3)
    cfg = write(tmp_path, "cfg.toml", to_toml(data))
    code, _, err = run(["sim", "run", str(cfg), "--out", str(tmp_path / OUT)], capsys)
    assert code == 0, err


def test_a_head_dim_other_than_hidden_over_heads_is_accepted(tmp_path, capsys):
    """Real models set head_dim apart from hidden / heads (Qwen3, Gemma): accepted, and the
    attention projections are heads x head_dim wide, not hidden."""
    from infralab.sim.specs import load_model

    narrow = write(tmp_path, "narrow.toml", to_toml(MODEL_SPEC))  # head_dim 16 = 64 / 4
    wide = write(tmp_path, "wide.toml", to_toml(with_value(MODEL_SPEC, "head_dim", 32)))
    cfg = write(tmp_path, "cfg.toml", to_toml(with_value(BASE_CONFIG, "model", "wide.toml")))
    code, _, err = run(["sim", "run", str(cfg), "--out", str(tmp_path / OUT)], capsys)
    assert code == 0, err
    h, heads, kv, layers = MODEL_SPEC["hidden_size"], MODEL_SPEC["num_heads"], MODEL_SPEC["num_kv_heads"], MODEL_SPEC["num_layers"]
    extra = layers * h * ((heads + 2 * kv) * 16 + heads * 16)  # q, k, v and o grow by 16 columns per head
    assert load_model(str(wide)).num_params - load_model(str(narrow)).num_params == extra


def test_a_knob_written_as_a_toml_sub_table_is_the_dotted_knob(tmp_path):
    """`change = { engine.max_num_seqs = 16 }` (TOML's unquoted dotted key: a sub-table) is the same
    variant as the quoted key."""
    from infralab.agent.hypothesis import load_hypothesis

    write(tmp_path, "cfg.toml", to_toml(BASE_CONFIG))
    quoted = write(tmp_path, "a.toml", to_toml(HYPOTHESIS))
    nested = write(tmp_path, "b.toml", to_toml(with_value(HYPOTHESIS, "variant", [
        {"name": "fast", "change": {"engine": {"max_num_seqs": 16}}}])))
    assert load_hypothesis(quoted).arms == load_hypothesis(nested).arms


def test_help_is_unchanged(capsys):
    code, out, _ = run(["sim", "run", "--help"], capsys)
    assert code == 0
    assert out.startswith("usage: infralab sim run")
    assert "--out DIR" in out and len(out.splitlines()) > 3


def test_same_config_same_bytes(tmp_path, capsys):
    """Determinism holds through the input boundary: two runs of one config write the same files."""
    cfg = write(tmp_path, "cfg.toml", to_toml(BASE_CONFIG))
    for name in ("a", "b"):
        code, _, err = run(["sim", "run", str(cfg), "--out", str(tmp_path / name)], capsys)
        assert code == 0, err
    for path in sorted((tmp_path / "a").iterdir()):
        assert path.read_bytes() == (tmp_path / "b" / path.name).read_bytes(), path.name


# ---- issue 27's classes of hostile input: one test each ---------------------------------------------


def assert_one_line(code: int, out: str, err: str, *needles: str) -> str:
    """Exit 2, one line `error: ...` naming every needle, no traceback; returns the line."""
    assert code == 2, (code, err, out)
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert "Traceback" not in err + out
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_class1_a_flag_beyond_its_fields_bound_is_the_flags_error(tmp_path, capsys):
    """--jobs 2**70 with Ray reached Ray's resource check as a ValueError traceback; a rate beyond
    workload.arrival.rate's bound was blamed on the config's field, which the user did not write."""
    cfg = write(tmp_path, "cfg.toml", to_toml(BASE_CONFIG))
    for argv, flag in (
        (["sim", "sweep", str(cfg), "--rates", "1", "--backend", "ray", "--jobs", str(2**70)], "--jobs"),
        (["sim", "sweep", str(cfg), "--rates", "1e308"], "--rates"),
        (["sim", "capacity", str(cfg), "--start", "2e9"], "--start"),
    ):
        assert_one_line(*run([*argv, "--out", str(tmp_path / OUT), "--no-progress"], capsys), flag)
    assert not (tmp_path / OUT).exists()


def test_class1_flag_bounds_are_their_fields_bounds():
    """--seed and --jobs are bounded by argparse with the bounds of the fields they set (run.seed,
    setup.processes), so that the two never disagree."""
    from pydantic import TypeAdapter, ValidationError

    from infralab.agent.validators.sim import ClusterSetup
    from infralab.cli import JOBS_MAX, SEED_MAX
    from infralab.metrics.schema import RunConfig

    for schema, field, bound in ((RunConfig, "seed", SEED_MAX), (ClusterSetup, "processes", JOBS_MAX)):
        given = {"config": "c.toml"} if schema is ClusterSetup else {}
        TypeAdapter(schema).validate_python({**given, field: bound})
        with pytest.raises(ValidationError):
            TypeAdapter(schema).validate_python({**given, field: bound + 1})


def test_class1_capacity_stops_at_the_rate_fields_bound(tmp_path, capsys):
    """A search that meets the SLOs at every rate doubles up to the rate field's bound and stops
    there (it probed 1.2e9 req/s, an error naming workload.arrival.rate)."""
    lenient = with_value(with_value(BASE_CONFIG, "slo.ttft_s", 100.0), "slo.tpot_s", 100.0)
    cfg = write(tmp_path, "cfg.toml", to_toml(lenient))
    code, out, err = run(["sim", "capacity", str(cfg), "--start", "3e8", "--no-progress"], capsys)
    assert code == 0, err
    assert "up to 1e+09 req/s" in out


def test_class2_a_csv_field_over_the_csv_modules_limit_is_an_error_at_its_line(tmp_path, capsys):
    """Every CSV the tools read turns csv's own error (a field over `csv.field_size_limit()`) into
    one line at the file and line: traces (azure, vidur, csv), calibration tables, Vidur profiles
    (this one was a `_csv.Error` traceback), a results folder's requests.csv."""
    huge = "1" * 200_000
    cases = {
        "trace-csv": ("t.csv", "request_id,arrival_s,prompt_tokens,output_tokens\n0,0.0,10,5\n1,1.0," + huge + ",5\n",
                      trace_config("t.csv", "csv"), "t.csv:3"),
        "vidur-profile": ("prof/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv",
                          "time_stats.emb.median,num_tokens\n0.2," + huge + "\n",
                          with_value(BASE_CONFIG, "cost.vidur_profile", "prof"), "mlp.csv:2"),
    }
    for name, (path, text, config, needle) in cases.items():
        folder = tmp_path / name
        write(folder, path, text)
        cfg = write(folder, "cfg.toml", to_toml(config))
        line = assert_one_line(*run(["sim", "run", str(cfg), "--out", str(folder / OUT)], capsys), needle)
        assert "field larger than field limit" in line, line
        assert not (folder / OUT).exists()


def kernel_hypothesis(kind: str, baseline: dict, variants: list[dict], setup: dict | None = None) -> dict:
    """A kernel hypothesis file's document: numerics (kernel-check) or performance (microbench)."""
    numerics = kind == "kernel-numerics"
    doc = {
        "hypothesis": {"name": "k", "claim": "c", "kind": kind, "metrics": ["rel_err" if numerics else "bytes"],
                       "validators": ["kernel-check" if numerics else "microbench"],
                       "acceptance": [f"{variants[0]['name']}.{'rel_err <= 1' if numerics else 'bytes > 0'}"]},
        "baseline": baseline,
        "variant": variants,
    }
    return {**doc, "setup": setup} if setup else doc


def test_class3_a_kernel_shape_beyond_memory_is_refused_before_any_allocation(tmp_path, capsys, monkeypatch):
    """A shape whose tensors exceed free memory is one error naming the field that sized them, before
    any arm runs: a variant's shape (the baseline ran first before), the shape with setup.dims, and
    a microbench shape on a GPU, sized against the GPU's free memory (it was torch's OOM traceback)."""
    import infralab.agent.validators.microbench as microbench
    import infralab.agent.validators.shape_memory as shape_memory
    from infralab.kernels import partition

    def never(*args, **kwargs):
        raise AssertionError("a kernel ran before every shape was checked")

    monkeypatch.setattr(partition, "run_task", never)
    small = {"kernel": "matmul", "variant": "tf32", "shape": "M=8;N=128;K=64", "split": "none", "tp": 1}
    huge_variant = kernel_hypothesis("kernel-numerics", small, [
        {"name": "big", "change": {"shape": "M=400000;N=400000;K=400000"}}])
    by_dims = kernel_hypothesis("kernel-numerics", small, [{"name": "row", "change": {"split": "row"}}],
                                setup={"dims": {"M": 65536, "N": 65536, "K": 65536}})
    for name, doc, needles in (("variant", huge_variant, ("h.toml", "big.shape", "GiB")),
                               ("dims", by_dims, ("h.toml", "baseline.shape with setup.dims"))):
        hyp = write(tmp_path / name, "h.toml", to_toml(doc))
        assert_one_line(*run(["test", str(hyp), "--out", str(tmp_path / name / OUT)], capsys), *needles)

    # microbench times kernels only on a GPU: a GPU with 1 MiB free, and timing that must not start.
    monkeypatch.setattr(microbench, "_on_gpu", lambda: True)
    monkeypatch.setattr(microbench, "gpu_times", never)
    monkeypatch.setattr(shape_memory, "free_bytes", lambda device: (2**20 if device == "cuda" else 2**40, device))
    bench = kernel_hypothesis("kernel-performance", {"kernel": "kda_decode", "variant": "v1", "shape": "B=64;H=32;K=128;V=128"},
                              [{"name": "v2", "change": {"variant": "v2"}}])
    hyp = write(tmp_path / "bench", "h.toml", to_toml(bench))
    assert_one_line(*run(["test", str(hyp), "--out", str(tmp_path / "bench" / OUT)], capsys),
                    "h.toml", "baseline.shape", "free cuda")
    assert not any((tmp_path / name / OUT).exists() for name in ("variant", "dims", "bench"))


def test_class4_a_head_dim_apart_from_hidden_over_heads_is_refused_where_the_engine_would_differ(tmp_path, capsys):
    """The simulator accepts a head_dim apart from hidden / heads (Qwen3, Gemma set it; see
    test_a_head_dim_other_than_hidden_over_heads_is_accepted). The real engine builds a Llama whose
    head_dim is hidden / heads: a model TOML saying otherwise was profiled silently as another
    model than the simulator's; now refused at the file's head_dim (and heads that do not divide
    hidden at num_heads)."""
    real = {**BASE_CONFIG, "cost": {"dtype": "fp32", "step_table": "steps.csv"},
            "engine": {"scheduler": "hf_fifo", "max_batched_tokens": 48, "max_num_seqs": 6, "block_size": 32,
                       "num_blocks": 24, "prefix_cache": False}, "model": "m.toml"}
    for name, spec, needle in (("head-dim", with_value(MODEL_SPEC, "head_dim", 32), "m.toml: head_dim"),
                               ("heads", with_value(MODEL_SPEC, "num_heads", 6), "m.toml: num_heads")):
        folder = tmp_path / name
        write(folder, "m.toml", to_toml(spec))
        cfg = write(folder, "cfg.toml", to_toml(real))
        assert_one_line(*run(["real", "profile", str(cfg), "--out", str(folder / OUT), "--no-progress"], capsys),
                        needle, "hidden_size / num_heads")
        assert not (folder / OUT).exists()


def test_class5_prompt_plus_output_beyond_the_context_is_refused(tmp_path, capsys):
    """A request whose prompt fits the model's context (llama-3-8b: 8192) but whose prompt + output
    does not is refused, naming the output's field: synthetic lengths, a trace's row, and images'
    tokens added to a prompt (that one was accepted: only text + images was checked)."""
    synthetic = with_value(with_value(BASE_CONFIG, "workload.prompt.value", 8000), "workload.output.value", 500)
    images = with_value(with_value(BASE_CONFIG, "workload.output.value", 7700), "workload.multimodal",
                        {"image_share": 1.0, "images_per_request": 1, "encoder": "clip-vit-l-14-336"})
    rows = [dict(r) for r in MOONCAKE_ROWS]
    rows[1].update(input_length=8000, output_length=500)
    for name, config, needles in (
        ("synthetic", synthetic, ("cfg.toml", "workload.output", "500 output")),
        ("trace", trace_config("t.jsonl", "mooncake"), ("t.jsonl:2: output_length",)),
        ("images", images, ("cfg.toml", "workload.multimodal", "576 image + 7700 output")),
    ):
        folder = tmp_path / name
        write(folder, "t.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        cfg = write(folder, "cfg.toml", to_toml(config))
        assert_one_line(*run(["sim", "run", str(cfg), "--out", str(folder / OUT)], capsys), *needles)
        assert not (folder / OUT).exists()


def test_class6_more_prefix_hashes_than_prompt_blocks_is_refused_at_the_row(tmp_path, capsys):
    """A Mooncake row names one hash per 512-token block of its prompt: 1025 tokens are 3 blocks, so
    3 ids are a prompt and 4 are not (refused at file, line and field since b5663a1)."""
    def trace_run(ids: int) -> tuple[int, str, str]:
        rows = [dict(r) for r in MOONCAKE_ROWS]
        rows[1].update(input_length=1025, hash_ids=list(range(10, 10 + ids)))
        folder = tmp_path / str(ids)
        write(folder, "t.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        cfg = write(folder, "cfg.toml", to_toml(trace_config("t.jsonl", "mooncake")))
        return run(["sim", "run", str(cfg), "--out", str(folder / OUT)], capsys)

    code, _, err = trace_run(3)
    assert code == 0, err
    assert_one_line(*trace_run(4), "t.jsonl:2: hash_ids", "4 block ids for a prompt of 1025 tokens (3 blocks")
    assert not (tmp_path / "4" / OUT).exists()


def test_class7_an_unknown_key_inside_a_variant_table_is_named_with_its_table(tmp_path, capsys):
    """An unknown key written inside a table is refused naming the key in full and the table it was
    written in: a variant's change or the baseline as a TOML sub-table (b5663a1), a search space's
    fixed and axes sub-tables, and [quick] (its keys were checked only under --quick, and then
    named as [setup]'s)."""
    write(tmp_path, "cfg.toml", to_toml(BASE_CONFIG))
    quick = write(tmp_path, "q.toml", to_toml({**HYPOTHESIS, "quick": {"bogus": 1}}))
    cases = [
        (["test", str(quick), "--quick"], ("q.toml", "quick.bogus", "unknown field")),
        (["test", str(quick)], ("q.toml", "quick.bogus", "unknown field")),
    ]
    for name, hyp in (("change", with_value(HYPOTHESIS, "variant", [{"name": "fast", "change": {"engine": {"bogus": 1}}}])),
                      ("baseline", with_value(HYPOTHESIS, "baseline", {"engine": {"max_num_seqs": 8, "bogus": 2}}))):
        cases.append((["test", str(write(tmp_path, f"{name}.toml", to_toml(hyp)))],
                      (f"{name}.toml", "variant[0].change" if name == "change" else "baseline.engine.bogus", "'engine.bogus'")))
    for name, space in (("fixed", {**SPACE, "fixed": {"engine": {"bogus": 1}}}),
                        ("axes", with_value(SPACE, "axes", {"engine": {"max_num_seqs": [4, 8], "bogus": [1]}}))):
        cases.append((["search", str(write(tmp_path, f"{name}.toml", to_toml(space))), "--no-progress"],
                      (f"{name}.toml", f"{name}.engine.bogus", "'engine.bogus'")))
    for argv, needles in cases:
        assert_one_line(*run([*argv, "--out", str(tmp_path / OUT)], capsys), *needles)
    assert not (tmp_path / OUT).exists()


def test_class8_a_cross_field_error_names_what_the_user_wrote(tmp_path, capsys):
    """An error a hypothesis's knob causes is named at that knob in the hypothesis file, never at a
    key the user did not write: a variant's unknown link name (it surfaced mid-run, named in the
    base config), a baseline's unknown model name, and a baseline knob that breaks a config field
    it did not set (it was named `baseline.<that field>`)."""
    disaggregated = with_value(with_value(BASE_CONFIG, "cluster", {"layout": "disaggregated"}),
                               "cluster.transfer", {"mode": "layerwise", "layer_groups": 8})
    write(tmp_path, "cfg.toml", to_toml(BASE_CONFIG))
    write(tmp_path, "pd.toml", to_toml(disaggregated))
    write(tmp_path, "big.toml", to_toml(with_value(BASE_CONFIG, "workload.num_requests", 10_000_000)))
    link = with_value(with_value(HYPOTHESIS, "setup.config", "pd.toml"), "variant",
                      [{"name": "fast", "change": {"cluster.transfer.link": "no-such-link"}}])
    model = with_value(HYPOTHESIS, "baseline", {"model": "no-such-model", "engine.max_num_seqs": 8})
    memory = with_value(with_value(HYPOTHESIS, "setup.config", "big.toml"), "baseline",
                        {"engine.max_num_seqs": 8, "workload.output.value": 10_000_000})
    for name, doc, needles, absent in (
        ("link", link, ("link.toml:", "variant[0].change", "no-such-link", "pd.toml: cluster.transfer.link"),
         "layer_groups"),
        ("model", model, ("model.toml:", "baseline.model", "no-such-model"), f"error: {tmp_path / 'cfg.toml'}"),
        ("memory", memory, ("memory.toml: baseline:", "big.toml: workload.num_requests"), "baseline.workload.num_requests"),
    ):
        hyp = write(tmp_path, f"{name}.toml", to_toml(doc))
        line = assert_one_line(*run(["test", str(hyp), "--out", str(tmp_path / OUT)], capsys), *needles)
        assert absent not in line, line
    assert not (tmp_path / OUT).exists()


def test_class9_a_result_folder_holding_what_infralab_did_not_write_is_never_replaced(tmp_path, capsys):
    """infralab deletes no file it did not write, marker or not: a folder holding the result marker
    but no result (its list of files never written) plus a user's file, and an earlier result
    holding a user's (empty) folder, are refused with one line; the user's things stay."""
    from infralab.results import MARKER

    cfg = write(tmp_path, "cfg.toml", to_toml(BASE_CONFIG))
    no_result = tmp_path / "no-result"
    write(no_result, MARKER, "written by infralab\n")
    write(no_result, "notes.txt", "mine")
    earlier = tmp_path / "earlier"
    code, _, err = run(["sim", "run", str(cfg), "--out", str(earlier)], capsys)
    assert code == 0, err
    (earlier / "mine").mkdir()
    for out, needle, kept in ((no_result, "notes.txt", no_result / "notes.txt"), (earlier, "mine/", earlier / "mine")):
        assert_one_line(*run(["sim", "run", str(cfg), "--out", str(out)], capsys), f"--out {out}", needle,
                        "refusing to replace it")
        assert kept.exists()
    assert (no_result / "notes.txt").read_text() == "mine" and (earlier / "summary.json").exists()


def test_class7_a_study_overlay_written_as_a_sub_table_changes_keys_not_tables(tmp_path):
    """A study arm's `set` (agent.capacity.Overlay, glm_stack's stack.toml) written with unquoted
    dotted keys is a TOML sub-table: it replaced the base config's whole table (the base's other
    [engine] fields were dropped, silently); now it changes those keys, and an unknown key inside is
    named in full at the arm."""
    from infralab.agent.capacity import Overlay, overlay_config
    from infralab.errors import InputError

    base = write(tmp_path, "base.toml", to_toml(BASE_CONFIG))
    nested = overlay_config(base, Overlay("a", {"engine": {"max_num_seqs": 16}}, "stack.toml: arm[1].set"))
    quoted = overlay_config(base, Overlay("a", {"engine.max_num_seqs": 16}, "stack.toml: arm[1].set"))
    assert nested.data == quoted.data and nested.data["engine"]["block_size"] == BASE_CONFIG["engine"]["block_size"]
    with pytest.raises(InputError, match=r"^stack.toml: arm\[1\].set.engine.bogus: unknown field"):
        overlay_config(base, Overlay("a", {"engine": {"bogus": 1}}, "stack.toml: arm[1].set"))


def test_class1_a_command_line_value_beyond_its_field_is_named_at_its_flag(tmp_path, capsys):
    """A value given with --set (or --percentiles) that its field refuses is one line naming the flag
    and assignment the user typed, the file's field beside it (it was named as the config file's
    field, a value the file does not hold)."""
    cfg = write(tmp_path, "cfg.toml", to_toml(BASE_CONFIG))
    space = write(tmp_path, "space.toml", to_toml(SPACE))
    for argv, needles in (
        (["sim", "run", str(cfg), "--set", f"run.seed={2**70}"], (f"--set 'run.seed={2**70}'", "cfg.toml: run.seed")),
        (["sim", "run", str(cfg), "--set", "workload.prompt.value=9000"],
         ("--set 'workload.prompt.value=9000'", "cfg.toml: workload.prompt")),
        (["sim", "run", str(cfg), "--percentiles", "50,1e400"], ("--percentiles '50,1e400'", "metrics.percentiles")),
        (["search", str(space), "--no-progress", "--set", f"search.top={10**9}"], ("--set 'search.top=", "space.toml: search.top")),
    ):
        assert_one_line(*run([*argv, "--out", str(tmp_path / OUT)], capsys), *needles)
    assert not (tmp_path / OUT).exists()
