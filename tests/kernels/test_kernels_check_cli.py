"""`infralab kernels check`: verdict table, JSON output, exit codes and flag errors."""

import json

import pytest

from infralab.cli import main
from infralab.errors import InputError
from infralab.kernels import check
from infralab.kernels.check import Comparison
from infralab.kernels.cli import parse_tp_degrees


def test_matmul_check_passes_and_reports_partition_results_as_json(capsys):
    code = main(["kernels", "check", "--json", "--tp", "2", "--kernels", "matmul"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["passed"] is True
    assert report["tp"] == [2]
    assert [v["kernel"] for v in report["verdicts"]] == ["matmul"]
    partition = [f for f in report["findings"] if f["check"] == "partition" and f["tp"] == 2]
    column = [f for f in partition if f["split"] == "column/2"]
    row = [f for f in partition if f["role"] == "mlp.down_proj"]
    assert column and all(f["metrics"]["vs_unsplit"]["bitwise_equal"] for f in column)
    assert row and not any(f["metrics"]["vs_unsplit"]["bitwise_equal"] for f in row)  # K-split changes bits
    assert all(f["shape"] and f["dtype"] and f["variant"] for f in report["findings"])
    drift = report["summaries"]["matmul_k_split_drift"]
    assert {d["precision"] for d in drift} == {"tf32", "3xtf32"}


def _fake_suites(passed: bool):
    finding = Comparison(kernel="fake", check="numerics", variant="v", shape="N=1", dtype="fp32", passed=passed,
                      criterion="max abs <= 0", measured="max abs 1", worst_index=(0,))
    return lambda: {"fake": lambda tp_degrees: ([finding], {})}


def test_a_failing_check_prints_fail_and_exits_nonzero(monkeypatch, capsys):
    monkeypatch.setattr(check, "suites", _fake_suites(passed=False))
    assert main(["kernels", "check", "--tp", "1"]) == 1
    out = capsys.readouterr().out
    assert "fake" in out and "FAIL" in out and "overall: FAIL" in out
    assert "worst at [0]" in out  # the finding is local: it names the element


def test_a_passing_check_prints_the_verdict_table(monkeypatch, capsys):
    monkeypatch.setattr(check, "suites", _fake_suites(passed=True))
    assert main(["kernels", "check"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "overall: PASS" in out


@pytest.mark.parametrize("argv, flag", [
    (["kernels", "check", "--tp", "3"], "--tp"),
    (["kernels", "check", "--tp", "two"], "--tp"),
    (["kernels", "check", "--kernels", "conv2d"], "--kernels"),
])
def test_bad_flags_exit_2_with_one_line_naming_the_flag(argv, flag, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {flag}")


def test_parse_tp_degrees():
    assert parse_tp_degrees("1,2,4,8") == (1, 2, 4, 8)
    with pytest.raises(InputError, match="expected degrees among"):
        parse_tp_degrees("16")
