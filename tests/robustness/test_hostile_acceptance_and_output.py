"""Hostile inputs, acceptance and output classes: each one gets exit 2, one line `error: ...` naming
the file or flag and the field, no traceback, and nothing is written.

Run in-process through `infralab.cli.main`. The classes and their sizes (`CLASS_COUNTS`) are what
issue 15's closing note reports.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from infralab.cli import main

# ---- acceptance expressions ----------------------------------------------------------------------

HYPOTHESIS = """\
[hypothesis]
name = "hostile"
claim = "a claim"
kind = "kernel-performance"
metrics = ["divisions", "bytes", "time_s"]
validators = ["microbench"]
acceptance = {acceptance}
seeds = [0]
repetitions = 1

[baseline]
kernel = "kda_decode"
variant = "v1"
shape = "B=1;H=1;K=16;V=16"

[[variant]]
name = "v2"
change = {{ variant = "v2" }}
"""

GOOD = "v2.divisions < baseline.divisions"

# Expressions that parse (or nearly) but cannot be judged: each must be refused at load time.
BAD_EXPRESSIONS = [
    # fail late today: arithmetic, calls, subscripts, strings
    "1 / 0 > 0", "v2.divisions / 0 > 1", "v2.divisions / 0.0 > 1", "min() < 1", "max() < v2.divisions",
    "abs() > 1", "abs(v2.divisions, 1) > 0", "min(v2.divisions) < 1", "max(v2.divisions) > 1",
    "min(*v2.divisions) < 1", "min(v2.divisions, key=1) < 1", "baseline.divisions['x'] > 0",
    "baseline.divisions[0] > 0", "baseline.divisions[v2.divisions] > 0", "baseline['divisions'] > 0",
    "baseline.divisions[1:2] > 0", "'a' < 'b'", "'a' * 200000000 == 'b'", "v2.divisions < 'b'",
    "v2.divisions + 'x' > 0", "f'{v2.divisions}' > '0'", "b'a' < v2.divisions", "None < v2.divisions",
    "v2.divisions < 1j", "v2.divisions < 1e999", "v2.divisions < " + "9" * 400, "v2.divisions < -1e400",
    # too large or too deep
    " + ".join(["v2.divisions"] * 30000) + " > 0", "not " * 5000 + "v2.divisions",
    "(" * 300 + "v2.divisions" + ")" * 300 + " > 0", "-" * 5000 + "v2.divisions > 0",
    "min(" * 40 + "v2.divisions" + ", 1)" * 40 + " > 0", "min(" + ", ".join(["v2.divisions"] * 60) + ") > 0",
    "not " * 45 + "v2.divisions", "v2.divisions < " + "9" * 5000,
    # read no measurement
    "1", "1 == 1", "0 < 1", "True", "not 0", "abs(-1) > 0", "min(1, 2) < 3", "2 * 3 >= 6",
    # names that are not declared arms' metrics
    "v9.divisions < 1", "v2.nope < 1", "divisions < 1", "abs < 1", "v2 < 1", "v2.divisions.x < 1",
    "v2.divisions.__class__ < 1", "baseline.time_s.real > 0", "min.x < 1", "v2.flops < 1",
    # constructs outside the grammar
    "__import__('os').system('true')", "[v2.divisions] < [1]", "{1} < {2}", "lambda: 1",
    "v2.divisions if 1 else 2", "v2.divisions is None", "v2.divisions in [1]", "v2.divisions ** 2 > 0",
    "v2.divisions // 2 > 0", "v2.divisions % 2 > 0", "v2.divisions << 1 > 0", "~v2.divisions > 0",
    "(x := v2.divisions) > 0", "v2.divisions @ v2.divisions > 0", "print(v2.divisions)",
    "getattr(v2, 'divisions') > 0", "v2.divisions.bit_length() > 0", "[x for x in v2.divisions]",
    "v2.divisions > 0 and", ">= 1", "", "   ", "v2.divisions > 0; import os", "v2.divisions\n> 0",
    "v2.divisions\x00 > 0", "await v2.divisions", "(yield v2.divisions)", "v2.divisions == ...",
    "*v2.divisions", "v2.divisions, 1", "v2.divisions < min", "abs(v2.divisions) < abs",
]

# Acceptance fields of the wrong shape: TOML values for `acceptance = ...`.
BAD_ACCEPTANCE_FIELDS = ["[1]", "[true]", "[]", f'["{GOOD}", 5]', "{ a = 1 }", '"' + GOOD + '"', "[[1]]"]


def toml_string(text: str) -> str:
    """A TOML basic string for `text` (JSON's escapes are a subset of TOML's)."""
    return json.dumps(text)


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for folders, the target for links): to assert
    nothing was written."""
    def content(p: Path) -> bytes | str | None:
        if p.is_symlink():
            return os.readlink(p)
        return None if p.is_dir() else p.read_bytes()

    return {str(p.relative_to(root)): content(p) for p in sorted(root.rglob("*"))}


def assert_one_line_error(code: int, err: str, *names: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    for name in names:
        assert name in err, (name, err)


def run_hypothesis(tmp_path: Path, capsys, acceptance: str) -> tuple[Path, int, str]:
    """`infralab test` on HYPOTHESIS with `acceptance = <acceptance>` (TOML); asserts nothing was written."""
    path = tmp_path / "hostile.toml"
    path.write_text(HYPOTHESIS.format(acceptance=acceptance), encoding="utf-8")
    before = tree(tmp_path)
    code = main(["test", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert tree(tmp_path) == before  # nothing written, not even the --out folder
    return path, code, err


def test_the_good_expression_loads(tmp_path):
    from infralab.agent.hypothesis import load_hypothesis

    path = tmp_path / "good.toml"
    path.write_text(HYPOTHESIS.format(acceptance=f"[{toml_string(GOOD)}]"))
    assert [c.text for c in load_hypothesis(path).acceptance] == [GOOD]


@pytest.mark.parametrize("expression", BAD_EXPRESSIONS, ids=range(len(BAD_EXPRESSIONS)))
def test_bad_acceptance_expression(tmp_path, capsys, expression):
    path, code, err = run_hypothesis(tmp_path, capsys, f"[{toml_string(expression)}]")
    assert_one_line_error(code, err, str(path), "hypothesis.acceptance[0]")


@pytest.mark.parametrize("expression", BAD_EXPRESSIONS[:20], ids=range(20))
def test_bad_acceptance_expression_after_a_good_one(tmp_path, capsys, expression):
    path, code, err = run_hypothesis(tmp_path, capsys, f"[{toml_string(GOOD)}, {toml_string(expression)}]")
    assert_one_line_error(code, err, str(path), "hypothesis.acceptance[1]")


@pytest.mark.parametrize("field", BAD_ACCEPTANCE_FIELDS, ids=range(len(BAD_ACCEPTANCE_FIELDS)))
def test_bad_acceptance_field(tmp_path, capsys, field):
    path, code, err = run_hypothesis(tmp_path, capsys, field)
    assert_one_line_error(code, err, str(path), "hypothesis.acceptance")


# ---- output paths ---------------------------------------------------------------------------------

SIM_CONFIG = """\
model = "llama-3-8b"

[run]
name = "hostile-out"
seed = 1

[hardware]
accelerator = "H100"

[workload]
kind = "synthetic"
num_requests = 2

[workload.arrival]
kind = "poisson"
rate = 4.0

[workload.prompt]
kind = "uniform"
low = 16
high = 32

[workload.output]
kind = "uniform"
low = 1
high = 2

[cluster]
layout = "colocated"
instances = 1
"""


def make_out(tmp_path: Path, case: str) -> str:
    """Build the hostile situation `case` under tmp_path; return the --out argument."""
    user = tmp_path / "user"
    user.mkdir()
    if case == "unwritable parent":
        user.chmod(0o500)
        return str(user / "out")
    if case == "under a file":
        (user / "file.txt").write_text("mine")
        return str(user / "file.txt" / "out")
    if case == "deep under a file":
        (user / "file.txt").write_text("mine")
        return str(user / "file.txt" / "a" / "b")
    if case == "under /proc":
        return "/proc/infralab-out"
    if case == "under /sys":
        return "/sys/infralab-out"
    if case == "/proc itself":
        return "/proc"
    if case == "/dev/null":
        return "/dev/null"
    if case == "/dev/zero":
        return "/dev/zero"
    if case == "300-character name":
        return str(user / ("a" * 300))
    if case == "250-character name":  # fits, but its temporary sibling does not
        return str(user / ("a" * 250))
    if case == "existing user file":
        (user / "results.csv").write_text("mine")
        return str(user / "results.csv")
    if case == "non-infralab folder":
        (user / "data").mkdir()
        (user / "data" / "keep.csv").write_text("mine")
        return str(user / "data")
    if case == "symlink to a folder":
        (user / "real").mkdir()
        (user / "link").symlink_to(user / "real")
        return str(user / "link")
    if case == "dangling symlink":
        (user / "link").symlink_to(user / "nowhere")
        return str(user / "link")
    if case == "user file inside an earlier result":
        (user / "res").mkdir()
        (user / "res" / ".infralab-result").write_text("written by infralab\nsummary.json\n")
        (user / "res" / "summary.json").write_text("{}")
        (user / "res" / "notes.txt").write_text("mine")
        return str(user / "res")
    if case in ("the current folder", "the parent folder", "empty"):
        os.chdir(user)  # tests run this in-process: the caller restores the folder (monkeypatch)
        return {"the current folder": ".", "the parent folder": "..", "empty": ""}[case]
    raise AssertionError(case)


OUTPUT_CASES = [
    "unwritable parent", "under a file", "deep under a file", "under /proc", "under /sys", "/proc itself",
    "/dev/null", "/dev/zero", "300-character name", "250-character name", "existing user file",
    "non-infralab folder", "symlink to a folder", "dangling symlink", "user file inside an earlier result",
    "the current folder", "the parent folder", "empty",
]


def check_output_case(tmp_path: Path, capsys, case: str, argv_for, out: str | None = None) -> None:
    if case == "unwritable parent" and os.geteuid() == 0:
        pytest.skip("root writes through folder permissions")
    cwd = os.getcwd()
    try:
        out = out if out is not None else make_out(tmp_path, case)
        before = tree(tmp_path)
        code = main(argv_for(out))
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert_one_line_error(code, err, f"--out {out}")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("case", OUTPUT_CASES)
def test_sim_run_output_path(tmp_path, capsys, case):
    config = tmp_path / "sim.toml"
    config.write_text(SIM_CONFIG)
    check_output_case(tmp_path, capsys, case,
                      lambda out: ["sim", "run", str(config), "--out", out, "--max-trace-events", "10"])


@pytest.mark.parametrize("case", OUTPUT_CASES)
def test_test_command_output_path(tmp_path, capsys, case):
    hypothesis = tmp_path / "good.toml"
    hypothesis.write_text(HYPOTHESIS.format(acceptance=f"[{toml_string(GOOD)}]"))
    check_output_case(tmp_path, capsys, case, lambda out: ["test", str(hypothesis), "--quick", "--out", out])


FILE_CASES = ["unwritable parent", "under a file", "deep under a file", "under /proc", "existing user file",
              "folder at the file's path"]


@pytest.mark.parametrize("case", FILE_CASES)
def test_kernels_bench_output_file(tmp_path, capsys, case):
    """Every one is refused before any kernel is timed."""
    def argv(out: str) -> list[str]:
        csv = out if out.endswith(".csv") else out + ".csv"
        return ["kernels", "bench", "--kernels", "kv_quantize", "--no-progress", "--out", csv]

    out = None
    if case == "folder at the file's path":
        folder = tmp_path / "user" / "table.csv"
        folder.mkdir(parents=True)
        (folder / "keep.txt").write_text("mine")
        out = str(folder)
    check_output_case(tmp_path, capsys, case, argv, out=out)


CLASS_COUNTS = {
    "acceptance expressions": len(BAD_EXPRESSIONS) + 20,
    "acceptance fields": len(BAD_ACCEPTANCE_FIELDS),
    "output folders (sim run, test)": 2 * len(OUTPUT_CASES),
    "output files (kernels bench)": len(FILE_CASES),
}


def test_the_suite_is_as_large_as_the_issue_asks():
    assert len(BAD_EXPRESSIONS) >= 60 and len(OUTPUT_CASES) >= 7
