"""A kernel shape's tensors are sized before any is allocated (agent/validators/shape_memory.py)."""

from __future__ import annotations

import pytest

from infralab.agent.validators.shape_memory import BYTES_PER_ELEMENT, COPIES, available_bytes, check_fits_memory, shape_bytes
from infralab.errors import InputError


def test_the_estimate_scales_with_the_state_of_kda_decode():
    small, doubled = {"B": 4, "H": 8, "K": 32, "V": 48}, {"B": 8, "H": 8, "K": 32, "V": 48}
    assert shape_bytes("kda_decode", doubled) == pytest.approx(2 * shape_bytes("kda_decode", small), rel=0.05)
    # at least the K x V states read and written, at 8 bytes, COPIES times
    assert shape_bytes("kda_decode", small) >= 2 * 4 * 8 * 32 * 48 * BYTES_PER_ELEMENT * COPIES


def test_a_shape_beyond_free_memory_is_refused_naming_the_field():
    dims = {"M": 40_000, "N": 40_000, "K": 40_000}  # 3 x 1.6e9 elements
    with pytest.raises(InputError, match=r"h.toml: baseline.shape: the tensors of matmul .* GiB") as info:
        check_fits_memory("matmul", dims, "h.toml: baseline.shape", available=16 * 2**30)
    assert info.value.expected == "a smaller shape"
    check_fits_memory("matmul", {"M": 40, "N": 256, "K": 2048}, "h.toml: baseline.shape", available=16 * 2**30)


def test_free_memory_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:   1000 kB\n")
    assert available_bytes(meminfo) == 1000 * 1024
    assert available_bytes(tmp_path / "missing") > 0  # falls back to the free physical pages
