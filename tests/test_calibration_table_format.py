"""The shared calibration table format (infralab/calibration_table.py): both sides use the one row
type and the one reader, rows keep the kernel's field order, and the reader is strict about plain
decimal digits (docs/calibration.md: integers as plain decimal digits)."""

from __future__ import annotations

import pytest

from infralab import calibration_table as fmt
from infralab.errors import InputError
from infralab.kernels import calibration as kernels_side
from infralab.sim import calibration as sim_side

HEADER = ",".join(fmt.COLUMNS)
GOOD = "matmul,fp32,N=8;M=4;K=2,fp32,cpu,1e-05,100,200,0.01,2e-05,0,0,0,0"


def test_both_sides_use_the_one_format() -> None:
    assert kernels_side.CalibrationRow is fmt.CalibrationRow is sim_side.CalibrationRow
    assert kernels_side.COLUMNS is fmt.COLUMNS is sim_side.COLUMNS
    assert kernels_side.read_table is fmt.read_table


def test_rows_keep_the_written_field_order_and_render_back_unchanged() -> None:
    (row,) = fmt.parse_table(f"# c\n{HEADER}\n{GOOD}\n", "t.csv")
    assert row.shape == (("N", 8), ("M", 4), ("K", 2))
    assert row.shape_text == "N=8;M=4;K=2" and row.shape_dict == {"M": 4, "N": 8, "K": 2}
    assert fmt.render_table([row]).splitlines()[1] == GOOD
    # the simulator's exact lookup does not depend on the field order
    table = sim_side.CalibrationTable([row])
    assert table.lookup("matmul", "fp32", "cpu", {"K": 2, "M": 4, "N": 8}) == 1e-05


@pytest.mark.parametrize(("old", "new", "column"), [
    (",100,", ",+100,", "bytes"), (",100,", ",1_00,", "bytes"), (",100,", ",\u0661\u0660\u0660,", "bytes"),
    (",100,", ",\u00b2,", "bytes"), ("M=4", "M=+4", "shape"), ("M=4", "M=\u0664", "shape"), ("M=4", "M=\u00b2", "shape"),
])
def test_integers_must_be_plain_ascii_digits(old: str, new: str, column: str) -> None:
    with pytest.raises(InputError) as err:
        fmt.parse_table(f"{HEADER}\n{GOOD.replace(old, new, 1)}\n", "t.csv")
    assert f"t.csv:2: column {column}" in str(err.value)


def test_not_utf8_is_an_input_error(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xff\xfe" + HEADER.encode())
    with pytest.raises(InputError, match="not UTF-8"):
        fmt.read_table(path)


def test_a_tables_provenance_line_reads_back_and_is_checked(tmp_path):
    from infralab.calibration_table import check_provenance, provenance_line, read_provenance, render_table

    path = tmp_path / "t.csv"
    path.write_text(render_table([], ["made by a test", provenance_line({"model": "m", "threads": 1})]))
    facts = read_provenance(path)
    assert facts == {"model": "m", "threads": 1}
    check_provenance(str(path), facts, {"model": "m", "threads": 1, "dtype": "fp32"})  # a field it lacks passes
    with pytest.raises(InputError) as err:
        check_provenance(str(path), facts, {"threads": 2})
    assert err.value.where == f"{path}: provenance.threads" and "1, but this run's is 2" in str(err.value)
    path.write_text(render_table([], ["no provenance here"]))
    assert read_provenance(path) is None
    path.write_text("# provenance: {not json\n" + render_table([]))
    with pytest.raises(InputError, match="provenance is not JSON") as err:
        read_provenance(path)
    assert err.value.where == f"{path}:1"
