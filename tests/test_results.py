"""infralab.results: output folders and files that never destroy the user's data."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from infralab.errors import InputError
from infralab.results import MARKER, atomic_output_dir, atomic_output_file, check_new_file, clean_stale


@contextlib.contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def write_result(out: Path, files: dict[str, str]) -> None:
    with atomic_output_dir(out) as tmp:
        for name, text in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def siblings(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.glob(f".{out.name}.*"))


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_result_folders_and_files_honour_the_umask(tmp_path, mask):
    with umask(mask):
        write_result(tmp_path / "res", {"a.txt": "x"})
        with atomic_output_file(tmp_path / "t.csv") as handle:
            handle.write("x\n")
    assert stat.S_IMODE((tmp_path / "res").stat().st_mode) == 0o777 & ~mask
    assert stat.S_IMODE((tmp_path / "t.csv").stat().st_mode) == 0o666 & ~mask


def test_the_marker_lists_what_the_run_wrote(tmp_path):
    write_result(tmp_path / "res", {"a.txt": "x", "sub/b.txt": "y"})
    assert (tmp_path / "res" / MARKER).read_text().splitlines() == ["written by infralab", "a.txt", "sub/b.txt"]
    assert siblings(tmp_path / "res") == []


def test_rerun_replaces_an_earlier_result_including_its_other_files(tmp_path):
    out = tmp_path / "res"
    write_result(out, {"a.txt": "1", "only-first.txt": "1"})
    write_result(out, {"a.txt": "2"})
    assert (out / "a.txt").read_text() == "2" and not (out / "only-first.txt").exists()
    assert siblings(out) == []


@pytest.mark.parametrize("where", ["user.txt", "sub/user.txt"])
def test_a_user_file_inside_an_earlier_result_is_refused_before_the_run(tmp_path, where):
    out = tmp_path / "res"
    write_result(out, {"a.txt": "1", "sub/b.txt": "1"})
    (out / where).write_text("mine")
    entered = []
    with pytest.raises(InputError, match=rf"--out .*res: holds files .*{where}"):
        with atomic_output_dir(out):
            entered.append(True)
    assert entered == [] and (out / where).read_text() == "mine" and (out / "a.txt").read_text() == "1"
    assert siblings(out) == []


@pytest.mark.parametrize("marker", ["written by infralab\n", "", "my own notes\nuser.txt\n"])
def test_a_marker_without_a_list_vouches_for_no_file(tmp_path, marker):
    """A folder holding the marker but no list of files (a run that died before writing it, an
    older version, or a file of that name the user made) is not ours to replace: its files stay."""
    out = tmp_path / "res"
    out.mkdir()
    (out / MARKER).write_text(marker)
    (out / "user.txt").write_text("mine")
    with pytest.raises(InputError, match=r"--out .*res: holds files .*user.txt"):
        with atomic_output_dir(out):
            pass
    assert (out / "user.txt").read_text() == "mine"
    (out / "user.txt").unlink()  # with only the marker left, the folder may be replaced
    with atomic_output_dir(out) as tmp:
        (tmp / "a.txt").write_text("1")
    assert (out / "a.txt").read_text() == "1"


def test_a_user_file_added_during_the_run_is_kept(tmp_path):
    out = tmp_path / "res"
    write_result(out, {"a.txt": "1"})
    with pytest.raises(InputError, match="holds files"):
        with atomic_output_dir(out) as tmp:
            (tmp / "a.txt").write_text("2")
            (out / "late.txt").write_text("mine")
    assert (out / "late.txt").read_text() == "mine" and (out / "a.txt").read_text() == "1"
    assert siblings(out) == []


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_what_the_user_owns_at_the_path_is_never_touched(tmp_path, kind):
    out = tmp_path / "res"
    if kind == "file":
        out.write_text("mine")
    else:
        out.mkdir()
        (out / "data.csv").write_text("mine")
    with pytest.raises(InputError, match="not .*infralab"):
        with atomic_output_dir(out):
            pytest.fail("entered")
    assert (out.read_text() if kind == "file" else (out / "data.csv").read_text()) == "mine"
    assert siblings(out) == []


def test_a_failing_run_keeps_the_earlier_result_and_leaves_nothing(tmp_path):
    out = tmp_path / "res"
    write_result(out, {"a.txt": "1"})
    with pytest.raises(RuntimeError):
        with atomic_output_dir(out) as tmp:
            (tmp / "a.txt").write_text("2")
            raise RuntimeError("disk full")
    assert (out / "a.txt").read_text() == "1" and siblings(out) == []


def test_a_failure_between_the_renames_puts_the_old_result_back(tmp_path, monkeypatch):
    out = tmp_path / "res"
    write_result(out, {"a.txt": "1"})
    real_rename = Path.rename

    def rename(self, target):
        if ".tmp-" in self.name:
            raise OSError("rename failed")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="rename failed"):
        write_result(out, {"a.txt": "2"})
    assert (out / "a.txt").read_text() == "1" and siblings(out) == []


def test_stale_temporaries_of_dead_runs_are_cleaned_live_ones_kept(tmp_path):
    out = tmp_path / "res"
    write_result(out, {"a.txt": "1"})
    dead = dead_pid()
    for name in (f".res.tmp-{dead}", f".res.old-{dead}", ".res.tmp-1"):  # PID 1 is alive
        (tmp_path / name).mkdir()
        (tmp_path / name / MARKER).write_text("written by infralab\n")
    write_result(out, {"a.txt": "2"})
    assert siblings(out) == [".res.tmp-1"] and (out / "a.txt").read_text() == "2"


def test_an_old_result_whose_replacement_never_arrived_is_restored(tmp_path):
    out = tmp_path / "res"
    write_result(out, {"a.txt": "1"})
    out.rename(tmp_path / f".res.old-{dead_pid()}")  # as a run killed between its two renames leaves it
    clean_stale(out)
    assert (out / "a.txt").read_text() == "1" and siblings(out) == []


def test_check_new_file_refuses_an_existing_file_unless_forced(tmp_path):
    path = tmp_path / "user.csv"
    assert check_new_file(path, force=False) == path
    path.write_text("mine")
    with pytest.raises(InputError, match=r"--out .*user.csv: exists; refusing to overwrite it .*--force"):
        check_new_file(path, force=False)
    assert check_new_file(path, force=True) == path
    with pytest.raises(InputError, match="is a folder"):
        check_new_file(tmp_path, force=True)


def test_a_failing_file_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output_file(path) as handle:
            handle.write("partial")
            raise RuntimeError("boom")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_kernels_bench_never_overwrites_a_file_without_force(tmp_path, capsys):
    from infralab.cli import main

    path = tmp_path / "user.csv"
    path.write_text("mine")
    assert main(["kernels", "bench", "--kernels", "kv_quantize", "--out", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err and str(path) in err
    assert path.read_text() == "mine"


def test_a_users_folder_inside_an_earlier_result_is_refused_even_empty(tmp_path):
    """A folder the marker's list does not account for (no listed file inside) is the user's."""
    out = tmp_path / "res"
    write_result(out, {"a.txt": "1", "sub/b.txt": "1"})
    (out / "mine" / "empty").mkdir(parents=True)
    with pytest.raises(InputError, match=r"holds files .*mine/"):
        with atomic_output_dir(out):
            pytest.fail("entered")
    assert (out / "mine" / "empty").is_dir() and (out / "sub" / "b.txt").read_text() == "1"


def test_a_stale_temporary_without_the_marker_is_left_alone(tmp_path):
    """Only a dead run's temporaries holding the marker (or nothing) are removed: a folder or file of
    that name holding anything else is the user's."""
    out = tmp_path / "res"
    users, file, empty = (dead_pid() for _ in range(3))
    (tmp_path / f".res.tmp-{users}").mkdir()
    (tmp_path / f".res.tmp-{users}" / "keep.txt").write_text("mine")
    (tmp_path / f".res.old-{file}").write_text("mine too")  # a file, not a folder
    (tmp_path / f".res.tmp-{empty}").mkdir()  # empty: a run killed before its marker
    write_result(out, {"a.txt": "1"})
    assert (tmp_path / f".res.tmp-{users}" / "keep.txt").read_text() == "mine"
    assert (tmp_path / f".res.old-{file}").read_text() == "mine too"
    assert not (tmp_path / f".res.tmp-{empty}").exists()
