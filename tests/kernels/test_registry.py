"""The kernel registry: every op `kernels check` and `kernels bench` run is registered once, its
data (variants, splits, shape letters) agrees with the kernels and adapters, importing it needs
no torch, and its work metrics are the op's work counts per decode step."""

from __future__ import annotations

import subprocess
import sys

import pytest

from infralab.errors import InputError
from infralab.kernels import check, registry
from infralab.kernels.bench import all_cases, parse_kernels
from infralab.kernels.bench_cases import FULL, GRIDS, KERNELS
from infralab.kernels.partition import Split
from infralab.kernels.registry import OPS

ALL_SPLITS = ("column", "row", "head", "batch")
TINY_DIMS = {
    "matmul": {"M": 4, "N": 6, "K": 8},
    "kda_decode": {"S": 1, "B": 2, "H": 2, "K": 4, "V": 4},
    "paged_decode_attention": {"B": 2, "H": 4, "HKV": 2, "D": 4, "T": 3},
}
TARGET = {"B": 64, "H": 32, "K": 128, "V": 128}


def test_importing_the_registry_imports_neither_torch_nor_triton() -> None:
    code = ("import sys, infralab.kernels.registry as r; "
            "[(op.variants, op.splits, op.shape_dims) for op in r.OPS.values()]; "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith(('torch', 'triton')))")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_check_and_bench_run_exactly_the_registered_ops() -> None:
    assert list(check.suites()) == [n for n, op in OPS.items() if op.check_suite]  # table order
    assert all(check.suites()[name] is OPS[name].check_suite for name in check.suites())
    assert KERNELS == parse_kernels("all") == tuple(OPS)
    for grid in GRIDS.values():
        for on_gpu in (False, True):
            assert {case.kernel for case in all_cases(KERNELS, grid, on_gpu)} <= set(OPS)


def test_every_bench_shape_has_the_letters_its_op_registers() -> None:
    for case in all_cases(KERNELS, FULL, on_gpu=True):
        op = OPS[case.kernel]
        registry.check_dims(case.kernel, case.dims())
        assert tuple(case.dims())[:len(op.shape_dims)] == op.shape_dims
    from infralab.kernels.ops.kda_decode.check import KDA_SPEC
    from infralab.kernels.ops.paged_decode_attention.check import ATTENTION_SPEC

    for spec in (KDA_SPEC, ATTENTION_SPEC):
        registry.check_dims(spec.kernel, dict(spec.shape))
        assert spec.variants == OPS[spec.kernel].variants


def test_variants_are_the_kernels_own() -> None:
    from infralab.kernels.ops.kda_decode import kernel as kda_decode
    from infralab.kernels.ops.kv_quantize import kernel as kv_quant
    from infralab.kernels.ops.matmul import kernel as matmul

    assert OPS["matmul"].variants == matmul.PRECISIONS
    assert OPS["kda_decode"].variants == (*kda_decode.VARIANTS, "replay")
    assert OPS["paged_decode_attention"].variants == kv_quant.KV_DTYPES
    assert set(OPS["kv_quantize"].variants) < set(kv_quant.KV_DTYPES)


def test_kernel_and_reference_entries_resolve() -> None:
    for op in OPS.values():
        assert callable(op.kernel_entry()) and callable(op.reference_entry())


@pytest.mark.parametrize("name", list(TINY_DIMS))
def test_registered_splits_are_the_ones_the_adapter_accepts(name: str) -> None:
    adapter = registry.partition_adapter(name)
    inputs = adapter.make_inputs(TINY_DIMS[name], OPS[name].variants[0], seed=0)
    assert "none" in OPS[name].splits
    for kind in ALL_SPLITS:
        split = Split(kind, 2, "sequential" if kind == "row" else "concat")
        if kind in OPS[name].splits:
            assert len(adapter.shards(inputs, split)) == 2
        else:
            with pytest.raises(InputError, match="does not apply"):
                adapter.shards(inputs, split)


def test_partition_adapters_are_configured_as_kernels_check_runs_them() -> None:
    from infralab.kernels.ops.kda_decode.op import CHECK_RING_LEN
    from infralab.kernels.ops.matmul.op import CHECK_BLOCKS

    assert registry.partition_adapter("matmul").blocks == CHECK_BLOCKS
    assert registry.partition_adapter("kda_decode").ring_len == CHECK_RING_LEN
    assert registry.partition_adapter("paged_decode_attention").name == "paged_decode_attention"
    assert {n for n, op in OPS.items() if op.splits} == {n for n in OPS if registry.partition_adapter(n)}
    assert registry.partition_adapter("w8a8_matmul") is None
    assert registry.partition_adapter("kda_decod") is None


def test_work_metrics_are_the_work_counts_per_decode_step() -> None:
    from infralab.kernels.ops.kda_decode.replay_ssm import replay_ssm_memory

    v3 = registry.work_counts("kda_decode", "v3", TARGET)
    metrics = registry.work_metrics("kda_decode", "v3", TARGET)
    assert metrics == {"bytes": v3.bytes, "bytes_loaded": v3.bytes_loaded, "flops": v3.flops,
                       "divisions": v3.divisions, "transcendentals": v3.transcendentals.total,
                       "repeated_elementwise": v3.repeated_elementwise, "programs": v3.programs,
                       "state_bytes_per_seq": 32 * 128 * 128 * 4}
    cycle = registry.work_counts("kda_decode", "replay", {**TARGET, "L": 4})
    replay = registry.work_metrics("kda_decode", "replay", TARGET, ring_len=4)
    assert cycle.steps == 4
    assert replay["bytes"] == cycle.bytes / 4 and replay["transcendentals"] == cycle.transcendentals.total / 4
    assert replay["state_bytes_per_seq"] == replay_ssm_memory(128, 128, 4, 32).total_bytes
    assert registry.work_metrics("kda_decode", "replay", {**TARGET, "L": 4}) == replay
    # v1 -> v2 is the division optimisation, visible without a device
    assert registry.work_metrics("kda_decode", "v2", TARGET)["divisions"] < \
        registry.work_metrics("kda_decode", "v1", TARGET)["divisions"]


def test_work_metrics_of_an_op_without_state() -> None:
    metrics = registry.work_metrics("matmul", "tf32", {"M": 64, "N": 256, "K": 512})
    assert metrics["flops"] == 2 * 64 * 256 * 512 and "state_bytes_per_seq" not in metrics


@pytest.mark.parametrize(("name", "variant", "dims", "match"), [
    ("kda_decod", "v1", TARGET, r"kernel: is 'kda_decod'.*one of matmul, w8a8_matmul, kda_decode"),
    ("kda_decode", "v9", TARGET, r"variant: is 'v9'.*one of v1, v2, v3, replay"),
    ("kda_decode", "v1", {"B": 1, "H": 1, "K": 8}, r"shape: lacks V.*B=..;H=..;K=..;V=.."),
    ("matmul", "fp32", {"M": 1, "N": 1, "K": 1, "Q": 2}, r"shape: has Q, which matmul does not know"),
])
def test_bad_requests_are_input_errors_naming_the_allowed_values(name, variant, dims, match) -> None:
    with pytest.raises(InputError, match=match):
        registry.work_metrics(name, variant, dims)
