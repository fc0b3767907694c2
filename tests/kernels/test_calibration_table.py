"""The calibration table writer and reader (docs/calibration.md): exact columns, deterministic
formatting, round trip, atomic writes, clear errors; and the datasheet peaks behind roofline_fraction."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infralab.errors import InputError
from infralab.kernels.calibration import (
    COLUMNS,
    DevicePeaks,
    WorkCounts,
    make_row,
    parse_shape,
    read_table,
    render_table,
    write_table,
)
from infralab.kernels.device_peaks import H100_PCIE, H100_SXM, H200, peaks_for
from infralab.work_formulas import Transcendentals

DOC_COLUMNS = ("kernel,variant,shape,dtype,device,median_s,bytes,flops,achieved_gbps,achieved_tflops,"
               "roofline_fraction,divisions,transcendentals,repeated_elementwise")

PEAKS = DevicePeaks("test", memory_bytes_per_s=1e12, flops_per_s={"fp32": 1e13})


def sample_row(median_s: float = 2.5e-5, kernel: str = "kda_decode", variant: str = "v3", device: str = "cpu",
               peaks: DevicePeaks | None = None):
    work = WorkCounts(bytes=272_629_760, flops=1_234_567, divisions=64, transcendentals=Transcendentals(exp=24_832),
                      repeated_elementwise=0)
    shape = (("B", 64), ("H", 32), ("K", 128), ("V", 128))
    return make_row(kernel, variant, shape, "fp32", device, median_s, work, peaks, "fp32")


def test_header_is_exactly_the_documented_columns_in_order(tmp_path: Path) -> None:
    assert ",".join(COLUMNS) == DOC_COLUMNS
    doc = (Path(__file__).resolve().parents[2] / "docs" / "calibration.md").read_text()
    documented = [line.split("`")[1] for line in doc.splitlines() if line.startswith("| `")]
    assert tuple(documented) == COLUMNS
    path = write_table([sample_row()], tmp_path / "t.csv", comments=["made by a test"])
    lines = path.read_text().splitlines()
    assert lines[0] == "# made by a test"
    assert lines[1] == DOC_COLUMNS


def test_row_text_is_deterministic_and_consistently_formatted() -> None:
    row = sample_row(median_s=5.65e-5)
    text = render_table([row])
    assert text == render_table([sample_row(median_s=5.65e-5)])
    cells = text.splitlines()[1].split(",")
    assert cells[:5] == ["kda_decode", "v3", "B=64;H=32;K=128;V=128", "fp32", "cpu"]
    assert cells[5] == "5.65e-05"
    assert cells[6] == "272629760" and cells[7] == "1234567"  # integers as plain digits
    assert cells[8] == format(272_629_760 / 5.65e-5 / 1e9, ".6g")
    assert cells[10] == "0"  # roofline fraction without peaks


def test_round_trip_gives_the_same_rows_up_to_six_significant_digits(tmp_path: Path) -> None:
    rows = [sample_row(), sample_row(median_s=1.0 / 3, variant="v1", peaks=PEAKS),
            sample_row(kernel="matmul", variant="3xtf32", device="NVIDIA H200")]
    back = read_table(write_table(rows, tmp_path / "t.csv"))
    assert len(back) == len(rows)
    for original, read in zip(rows, back):
        for column in COLUMNS:
            a, b = getattr(original, column), getattr(read, column)
            if isinstance(a, float):
                assert b == pytest.approx(a, rel=1e-5)
            else:
                assert a == b, column


@settings(max_examples=40, deadline=None)
@given(
    median_s=st.floats(min_value=1e-9, max_value=1e3),
    bytes_=st.integers(min_value=0, max_value=2**50),
    flops=st.integers(min_value=0, max_value=2**55),
    dims=st.lists(st.integers(min_value=1, max_value=1 << 20), min_size=1, max_size=5),
)
def test_any_row_survives_the_round_trip(tmp_path_factory, median_s, bytes_, flops, dims) -> None:
    shape = tuple((name, value) for name, value in zip("BHKVL", dims))
    row = make_row("matmul", "fp32", shape, "fp32", "cpu", median_s, WorkCounts(bytes_, flops), PEAKS, "fp32")
    path = write_table([row], tmp_path_factory.mktemp("rt") / "t.csv")
    (back,) = read_table(path)
    assert back.shape == shape and back.bytes == bytes_ and back.flops == flops
    assert back.median_s == pytest.approx(median_s, rel=1e-5)
    assert back.roofline_fraction == pytest.approx(row.roofline_fraction, rel=1e-5)
    assert render_table([back]) == render_table([row])  # formatting is a fixed point


def test_derived_columns_follow_their_definitions() -> None:
    work = WorkCounts(bytes=2_000_000, flops=30_000_000)
    row = make_row("matmul", "fp32", (("M", 8),), "fp32", "gpu", 1e-3, work, PEAKS, "fp32")
    assert row.achieved_gbps == pytest.approx(2.0)  # 2e6 B / 1e-3 s / 1e9
    assert row.achieved_tflops == pytest.approx(0.03)
    # floor = max(2e6 / 1e12, 3e7 / 1e13) = 3e-6 s (compute-bound) against 1e-3 s measured
    assert row.roofline_fraction == pytest.approx(3e-3)
    unknown_mode = make_row("matmul", "x", (("M", 8),), "int8", "gpu", 1e-3, work, PEAKS, "int8")
    assert unknown_mode.roofline_fraction == 0.0
    with pytest.raises(ValueError):
        make_row("matmul", "fp32", (("M", 8),), "fp32", "cpu", 0.0, work, None, "fp32")


def test_failed_write_leaves_no_partial_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    write_table([sample_row()], path)
    before = path.read_bytes()

    def rows_then_crash():
        yield sample_row(variant="v1")
        raise RuntimeError("benchmark died mid-table")

    with pytest.raises(RuntimeError):
        write_table(rows_then_crash(), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]  # no temp file left behind

    fresh = tmp_path / "sub" / "new.csv"
    with pytest.raises(RuntimeError):
        write_table(rows_then_crash(), fresh)
    assert not fresh.exists() and list(fresh.parent.iterdir()) == []


def test_write_refuses_a_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="folder"):
        write_table([sample_row()], tmp_path)


def _table_with(line: str) -> str:
    good = render_table([sample_row()]).splitlines()
    return "\n".join([good[0], line]) + "\n"


@pytest.mark.parametrize(
    ("replace", "column"),
    [(("272629760", "12.5"), "bytes"), (("5e-05", "0"), "median_s"), (("B=64;", "B=x;"), "shape"),
     (("kda_decode", ""), "kernel"), (("5e-05", "nan"), "median_s")],
)
def test_reader_names_line_and_column_of_a_bad_cell(tmp_path: Path, replace, column) -> None:
    line = render_table([sample_row(median_s=5e-5)]).splitlines()[1].replace(*replace, 1)
    path = tmp_path / "bad.csv"
    path.write_text("# comment\n" + _table_with(line))
    with pytest.raises(InputError) as err:
        read_table(path)
    assert f"{path}:3" in str(err.value) and f"column {column}" in str(err.value)


def test_reader_rejects_a_wrong_header_and_a_short_row(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("kernel,variant\n")
    with pytest.raises(InputError, match=r"bad.csv:1: header"):
        read_table(path)
    path.write_text(DOC_COLUMNS + "\nmatmul,fp32\n")
    with pytest.raises(InputError, match=r"bad.csv:2: 2 columns"):
        read_table(path)
    with pytest.raises(InputError, match="file not found"):
        read_table(tmp_path / "missing.csv")


@pytest.mark.parametrize("text", ["", "M", "M=", "M=0", "M=1;M=2", "M=1.5", "=3"])
def test_bad_shapes_are_rejected(text: str) -> None:
    with pytest.raises(InputError, match="name=value"):
        parse_shape(text, "here")


def test_device_peaks_by_torch_device_name() -> None:
    assert peaks_for("NVIDIA H200") is H200
    assert H200.memory_bytes_per_s == 4.8e12
    assert peaks_for("NVIDIA H100 80GB HBM3") is H100_SXM
    assert peaks_for("NVIDIA H100 PCIe") is H100_PCIE
    assert peaks_for("NVIDIA A100-SXM4-80GB").memory_bytes_per_s == pytest.approx(2.039e12)
    assert peaks_for("NVIDIA A100-PCIE-40GB").memory_bytes_per_s == pytest.approx(1.555e12)
    assert peaks_for("cpu") is None and peaks_for("NVIDIA GeForce RTX 4090") is None
    # 3xTF32 runs three TF32 products per useful one
    assert H200.flops_per_s["3xtf32"] == pytest.approx(H200.flops_per_s["tf32"] / 3)
    assert all(math.isfinite(v) and v > 0 for v in H200.flops_per_s.values())


def test_work_of_several_steps_is_written_per_step() -> None:
    """A ReplaySSM row covers a ring cycle: each count is divided by the steps and rounded."""
    cycle = WorkCounts(bytes=4_000_002, flops=30, divisions=7, transcendentals=Transcendentals(exp=5, log=2, rsqrt=1),
                       repeated_elementwise=3, steps=4, programs=12)
    row = make_row("kda_decode", "replay", (("B", 1), ("L", 4)), "fp32", "cpu", 1e-3, cycle, None, "fp32")
    assert (row.bytes, row.flops, row.divisions, row.transcendentals, row.repeated_elementwise) == \
        (1_000_000, 8, 2, 2, 1)  # 1000000.5 -> 1000000 (half to even), 7.5 -> 8, 1.75, 8/4 = 2, 0.75
    assert row.achieved_gbps == pytest.approx(1_000_000 / 1e-3 / 1e9)
    assert cycle.per_step()["transcendentals"] == 2.0 and cycle.per_step()["programs"] == 3.0


def test_a_field_over_the_csv_modules_limit_is_an_error_at_its_line():
    from infralab.calibration_table import COLUMNS, parse_table

    text = ",".join(COLUMNS) + "\n" + "x" * 200_000 + "\n"
    with pytest.raises(InputError, match=r"^t.csv:2: unreadable CSV line"):
        parse_table(text, "t.csv")
