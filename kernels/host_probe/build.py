"""Compile `native.c` (the native helpers of the micro-probes and the studies' probes) at first use with the system C compiler and load it twice via ctypes.

The shared object goes to a cache folder outside the repository (`$INFRALAB_CACHE`, else
`$XDG_CACHE_HOME/infralab`, else `~/.cache/infralab`), in a file named by the hash of the source
and the compile command, so an edit recompiles and concurrent first uses do not clash (each
compiles to a temporary name and renames it into place).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("native.c")
FLAGS = ("-O2", "-shared", "-fPIC")


class NativeBuildError(RuntimeError):
    """The C compiler is missing or failed; the message says which and how to fix it."""


def cache_dir() -> Path:
    """Where compiled probe libraries are kept (created on demand)."""
    root = os.environ.get("INFRALAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "infralab"
    )
    return Path(root) / "host_probe"


def compiler() -> str:
    """The C compiler: $CC, else `cc` on PATH."""
    name = os.environ.get("CC", "cc")
    path = shutil.which(name)
    if path is None:
        raise NativeBuildError(f"no C compiler: `{name}` is not on PATH (install one, or set CC)")
    return path


def build() -> Path:
    """Path of the compiled library, compiling it if this source has not been compiled yet."""
    cc = compiler()
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + " ".join((os.path.basename(cc), *FLAGS)).encode()).hexdigest()[:16]
    target = cache_dir() / f"libinfralab_host_probe-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        result = subprocess.run([cc, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True)
        if result.returncode != 0:
            raise NativeBuildError(f"{cc} failed to compile {SOURCE}:\n{result.stderr.strip()}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


@dataclass(frozen=True)
class NativeLibs:
    """The same library loaded twice: `holding` calls keep the GIL, `releasing` calls drop it."""

    holding: ctypes.PyDLL
    releasing: ctypes.CDLL

    def lib(self, holds_gil: bool) -> ctypes.CDLL:
        return self.holding if holds_gil else self.releasing


def _declare(lib: ctypes.CDLL) -> None:
    u64, u64p = ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)
    lib.infralab_now_ns.argtypes, lib.infralab_now_ns.restype = [], u64
    lib.infralab_spin_ns.argtypes, lib.infralab_spin_ns.restype = [u64, u64p], None
    lib.infralab_sleep_ns.argtypes, lib.infralab_sleep_ns.restype = [u64, u64p], None
    lib.infralab_spin_ns_cpu.argtypes = [u64, u64p, ctypes.POINTER(ctypes.c_int)]
    lib.infralab_spin_ns_cpu.restype = None
    lib.infralab_spin_observe.argtypes = [
        u64,
        ctypes.POINTER(ctypes.c_long),
        ctypes.POINTER(ctypes.c_long),
        ctypes.POINTER(ctypes.c_long),
    ]
    lib.infralab_spin_observe.restype = None
    lib.infralab_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, u64p]
    lib.infralab_copy.restype = None


def load() -> NativeLibs:
    """Compile if needed and load the library as a PyDLL and as a CDLL."""
    path = str(build())
    holding, releasing = ctypes.PyDLL(path), ctypes.CDLL(path)
    _declare(holding)
    _declare(releasing)
    return NativeLibs(holding, releasing)
