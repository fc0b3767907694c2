"""Result folders and files that are never half-written and never destroy the user's data; deterministic JSON.

The rules for an output FOLDER (`atomic_output_dir`), documented in docs/architecture.md, "Output folders":

- A run writes into a temporary sibling folder `.<name>.tmp-<pid>` and renames it into place only
  when everything is written. The folder honours the umask.
- An existing folder is replaced only if an earlier infralab run wrote it: it holds the marker file
  `MARKER`, whose lines after the first list the files that run wrote. Anything else at that path
  (a file, a folder without the marker) belongs to the user and is never touched.
- A user's file put inside an earlier result folder is not lost: the run refuses to replace a folder
  that holds files the marker does not list (before any work), and checks again just before replacing.
  A marker without a list of files (or not infralab's) vouches for none: marker or not, a file
  infralab did not list, or a folder holding none it listed (even empty), is never deleted.
- Replacing is one step that cannot lose both: the old folder is renamed aside (`.<name>.old-<pid>`)
  only once the new one is complete, the new one is renamed in, and only then is the old one deleted;
  on any failure in between the old one is renamed back.
- One run at a time per folder: a lock file `.<name>.lock` beside it holds the writer's PID (an
  `flock`, which the kernel releases when a run dies); a second run stops with a one-line error.
- Temporaries left by killed runs (`.<name>.tmp-<pid>`, `.<name>.old-<pid>` with a dead PID) are
  cleaned by the next run into the same place; an `.old` folder whose result never arrived is
  renamed back first. Only folders holding the marker are cleaned (a run's temporary holds it from
  its start; an empty temporary too): anything else of that name is the user's.

An output FILE (`check_new_file`) that exists is replaced only when the user says so (`--force`).

`pause_point` is a testing hook: with `INFRALAB_PAUSE_AT=<phase>` a run stops at that named phase,
writes its PID to the file named by `INFRALAB_PAUSE_READY` (if set), and waits for a signal, so
that kill tests are deterministic.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from infralab.errors import InputError

MARKER = ".infralab-result"
MARKER_HEADER = "written by infralab"
PAUSE_ENV = "INFRALAB_PAUSE_AT"
PAUSE_READY_ENV = "INFRALAB_PAUSE_READY"
FOLDER_EXPECTED = "a new folder, or one an earlier infralab run wrote"
FILE_EXPECTED = "a file path in a folder that can be written"


@contextlib.contextmanager
def atomic_output_dir(final: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder; on success it becomes `final`, on any error it vanishes.

    Raises InputError (naming `--out final`) before any work when `final` is not ours to replace,
    cannot be created, or another run is writing it.
    """
    final = Path(final)
    where = f"--out {final}"
    if final.name in ("", ".", ".."):
        raise InputError(where, "does not name a folder of its own",
                         "a path ending in a folder name, e.g. results/run1")
    with _os_errors_as_input(where):
        _check_replaceable(final, where)
        final.parent.mkdir(parents=True, exist_ok=True)
    with _folder_lock(final, where):
        with _os_errors_as_input(where):
            _check_replaceable(final, where)  # again: another run may have finished meanwhile
            clean_stale(final)
            tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
            tmp.mkdir()  # not mkdtemp: the result folder honours the umask
        try:
            (tmp / MARKER).write_text(MARKER_HEADER + "\n")
            yield tmp
            _write_manifest(tmp)
            _check_replaceable(final, where)
            _replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def check_new_file(path: str | Path, force: bool, flag: str = "--out") -> Path:
    """Refuse (InputError) to write the FILE `path` when something already exists there, unless
    `force`; a folder at `path` is always refused. Call it before the work that produces the file."""
    path = Path(path)
    where = f"{flag} {path}"
    with _os_errors_as_input(where, FILE_EXPECTED):
        if path.is_dir():
            raise InputError(where, "is a folder", "a file path")
        if path.exists() and not force:
            raise InputError(where, "exists; refusing to overwrite it", "a new file name, or --force to replace it")
        if path.exists() and not path.is_file():
            raise InputError(where, "is not a regular file", "a file path")
        # Make sure the file can be written there now, not after the work: create and remove a probe.
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))
        probe.unlink()
    return path


@contextlib.contextmanager
def atomic_output_file(path: str | Path, flag: str = "--out") -> Iterator[TextIO]:
    """Yield a text handle on a temporary file beside `path`; it replaces `path` only once complete
    and synced, so a failure leaves no partial file and keeps any old one. The file honours the
    umask. Whether an existing `path` may be replaced is `check_new_file`'s question, asked earlier."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with _os_errors_as_input(f"{flag} {path}", FILE_EXPECTED):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)  # left by a dead run with our PID
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def dump_json(obj: object, path: str | Path) -> None:
    """Write JSON with sorted keys and a trailing newline, so equal inputs give equal bytes."""
    Path(path).write_text(json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n")


def pause_point(phase: str) -> None:
    """Testing hook: when `INFRALAB_PAUSE_AT` names `phase`, announce readiness and wait for a signal.

    The ready file (`INFRALAB_PAUSE_READY`) receives this process's PID. A handled signal (SIGINT,
    SIGTERM with `infralab.cli.main`'s handlers) raises out of the wait; SIGKILL ends the process.
    """
    if os.environ.get(PAUSE_ENV) != phase:
        return
    ready = os.environ.get(PAUSE_READY_ENV)
    if ready:
        Path(ready).write_text(f"{os.getpid()}\n")
    while True:
        signal.pause()


# ---- checks ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _os_errors_as_input(where: str, expected: str = FOLDER_EXPECTED) -> Iterator[None]:
    """An OS error on the output path (unwritable parent, under a file, too long a name) is bad input."""
    try:
        yield
    except OSError as exc:
        raise InputError(where, f"cannot be written ({exc.strerror or exc})", expected) from None


def _check_replaceable(final: Path, where: str) -> None:
    """Raise InputError unless `final` is absent, an empty folder, or a result folder of ours
    holding only files its marker lists."""
    if not final.exists() and not final.is_symlink():
        return
    if final.is_symlink() or not final.is_dir():
        raise InputError(where, "exists and is not a folder infralab wrote; refusing to overwrite it", FOLDER_EXPECTED)
    if not (final / MARKER).is_file():
        if any(final.iterdir()):
            raise InputError(where, "exists and was not written by infralab; refusing to overwrite it", FOLDER_EXPECTED)
        return
    # Only the files the marker lists are ours: a marker without a list (a run that died before
    # writing it, an older version, or a file of that name put there by hand) vouches for nothing.
    listed = _manifest(final) or set()
    extra = sorted(set(_files(final)) - listed - {MARKER}) + _unlisted_folders(final, listed)
    if extra:
        shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        raise InputError(where, f"holds files an earlier infralab run did not write ({shown}); refusing to replace it",
                         "move those files out, or choose another --out")


def _files(folder: Path) -> list[str]:
    """Every non-folder entry under `folder`, as relative POSIX paths."""
    found = []
    for root, dirs, names in os.walk(folder):
        base = Path(root)
        for name in names + [d for d in dirs if (base / d).is_symlink()]:
            found.append((base / name).relative_to(folder).as_posix())
    return found


def _unlisted_folders(folder: Path, listed: set[str]) -> list[str]:
    """Folders under `folder` that hold no file the marker lists (a user's folder, empty or not), as
    "name/": the run never wrote them, so replacing the result must not delete them."""
    found = []
    for root, dirs, _ in os.walk(folder):
        for name in dirs:
            if (Path(root) / name).is_symlink():
                continue  # a link is an entry of its own (`_files`)
            rel = (Path(root) / name).relative_to(folder).as_posix()
            if not any(path.startswith(rel + "/") for path in listed):
                found.append(rel + "/")
    return sorted(found)


def _manifest(folder: Path) -> set[str] | None:
    """The files the marker lists, or None when it is not infralab's (its first line differs)."""
    lines = (folder / MARKER).read_text(encoding="utf-8", errors="replace").splitlines()
    if not lines or lines[0] != MARKER_HEADER:
        return None
    return set(lines[1:])


def _write_manifest(tmp: Path) -> None:
    listed = sorted(set(_files(tmp)) - {MARKER})
    (tmp / MARKER).write_text("\n".join([MARKER_HEADER, *listed]) + "\n")


# ---- the lock, stale temporaries, the replacement ------------------------------------------------


@contextlib.contextmanager
def _folder_lock(final: Path, where: str) -> Iterator[None]:
    """Hold `.<name>.lock` beside `final` (flock, PID inside) for the whole run; InputError if held."""
    path = final.with_name(f".{final.name}.lock")
    while True:
        with _os_errors_as_input(where):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise InputError(where, f"cannot be locked ({exc.strerror})", FOLDER_EXPECTED) from None
            raise InputError(where, f"another infralab run (PID {holder}) is writing it",
                             "wait for that run to finish, or choose another --out") from None
        # The holder before us may have removed the lock file after we opened it: lock the current one.
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(final: Path) -> list[Path]:
    """Remove `.<name>.tmp-<pid>` and `.<name>.old-<pid>` beside `final` left by runs that died (their
    PID is dead, or is ours before we made anything); an `.old` folder is renamed back to `final`
    first when `final` is missing (a run killed between its two renames). Returns what was removed.
    Call it only while holding the folder's lock."""
    removed = []
    for kind in ("old", "tmp"):  # restore an old result before deciding anything else
        for entry in sorted(final.parent.glob(f".{final.name}.{kind}-*")):
            pid_text = entry.name.rsplit("-", 1)[1]
            if not pid_text.isdigit():
                continue
            pid = int(pid_text)
            if pid != os.getpid() and _pid_alive(pid):
                continue
            if entry.is_symlink() or not entry.is_dir():
                continue  # a user's file or link of that name
            if not (entry / MARKER).is_file() and (kind == "old" or any(entry.iterdir())):
                continue  # not a folder of ours after all (a run's tmp holds its marker from the start)
            if kind == "old" and not final.exists():
                entry.rename(final)
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _replace(tmp: Path, final: Path) -> None:
    """Rename the complete `tmp` into `final`; the old `final` is deleted only after that worked,
    and renamed back on any failure (including a signal) in between."""
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(old)
    try:
        pause_point("replacing")
        tmp.rename(final)
    except BaseException:
        if old is not None and not final.exists():
            old.rename(final)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
