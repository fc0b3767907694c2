"""A kernel op is one folder: an op dropped into a temporary folder on the ops package's path is
discovered by the registry, benched over its own shapes, checked by its own suite and given work
metrics, with no other file edited. The shipped ops each keep their parts in their folder."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from infralab.errors import InputError
from infralab.kernels import check, ops, registry
from infralab.kernels.bench import all_cases, run_bench
from infralab.kernels.bench_cases import ShapeGrid

TOY_OP = '''
"""A toy op: y = 2x, a "kernel" in torch, with a reference, shapes, work counts and a check suite."""
from infralab.kernels.kernel_op import KernelOp, lazy, shape_of
from infralab.work_formulas import WorkCounts


def bench_cases(shapes, on_gpu):
    from infralab.kernels.bench_cases import BenchCase

    return [BenchCase("toy_scale", "torch", "fp32", shape, "fp32", "toy_ref") for shape in shapes]


def prepare(case, device, gen, use_triton):
    from infralab.kernels.bench_cases import randn

    x = randn((case.dims()["N"],), device, gen)
    return lambda: x * 2


def work_counts(variant, dtype, dims):
    n = dims["N"]
    return WorkCounts(bytes=8 * n, bytes_loaded=8 * n, flops=n)


OP = KernelOp(
    name="toy_scale",
    variants=("torch",),
    splits=(),
    shape_dims=("N",),
    kernel="infralab.kernels.ops.toy_scale.kernel:scale",
    reference="infralab.kernels.ops.toy_scale.kernel:scale_ref",
    bench_cases=bench_cases,
    prepare=prepare,
    work_counts=work_counts,
    shapes={"small": (shape_of(N=16),), "full": (shape_of(N=1 << 20),)},
    check_suite=lazy("infralab.kernels.ops.toy_scale.check:suite"),
)
'''

TOY_KERNEL = '''
def scale(x):
    return x * 2


def scale_ref(x):
    return x + x
'''

TOY_CHECK = '''
import torch

from infralab.kernels.check import Comparison


def suite(tp_degrees):
    from infralab.kernels.ops.toy_scale.kernel import scale, scale_ref

    x = torch.arange(8, dtype=torch.float32)
    same = bool(torch.equal(scale(x), scale_ref(x)))
    return [Comparison(kernel="toy_scale", check="numerics", variant="torch", shape="N=8", dtype="fp32",
                       passed=same, criterion="bitwise equal", measured=f"bitwise={same}")], {}
'''


@pytest.fixture
def toy_ops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The ops found with a folder `toy_scale/` on the ops package's path (removed afterwards)."""
    folder = tmp_path / "toy_scale"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""The toy op."""\n')
    for name, text in (("op.py", TOY_OP), ("kernel.py", TOY_KERNEL), ("check.py", TOY_CHECK)):
        (folder / name).write_text(textwrap.dedent(text))
    monkeypatch.setattr(ops, "__path__", [*ops.__path__, str(tmp_path)])
    importlib.invalidate_caches()
    found = registry.discover()
    monkeypatch.setattr(registry, "OPS", found)
    yield found
    for module in [m for m in sys.modules if m.startswith("infralab.kernels.ops.toy_scale")]:
        del sys.modules[module]


def test_a_new_op_is_one_folder(toy_ops) -> None:
    assert list(toy_ops)[:-1] == list(registry.OPS)[:-1] and list(toy_ops)[-1] == "toy_scale"  # last: default order
    toy = toy_ops["toy_scale"]
    assert toy.kernel_entry()(3) == toy.reference_entry()(3) == 6
    # benched over its own shapes, its rows carrying its work counts
    grid = ShapeGrid("small", {name: op.shapes.get("small", ()) for name, op in toy_ops.items()})
    cases = all_cases(("toy_scale",), grid, on_gpu=False)
    assert [c.dims() for c in cases] == [{"N": 16}]
    rows = run_bench(("toy_scale",), grid, "cpu", timer=lambda fn: (fn(), 1e-3)[1], progress=False)
    assert [(r.kernel, r.shape, r.bytes, r.flops) for r in rows] == [("toy_scale", (("N", 16),), 128, 16)]
    # checked by its own suite, after the shipped ops
    assert list(check.suites())[-1] == "toy_scale"
    report = check.run_checks((1,), kernels=("toy_scale",))
    assert report.passed and [v.kernel for v in report.verdicts] == ["toy_scale"]
    # its shape letters and work metrics through the registry
    assert registry.work_metrics("toy_scale", "torch", {"N": 4})["flops"] == 4
    with pytest.raises(InputError, match="lacks N"):
        registry.check_dims("toy_scale", {"M": 4})


def test_a_folder_must_be_named_for_its_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "toy_misnamed"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "op.py").write_text(textwrap.dedent(TOY_OP))
    monkeypatch.setattr(ops, "__path__", [*ops.__path__, str(tmp_path)])
    importlib.invalidate_caches()
    try:
        with pytest.raises(InputError, match="toy_misnamed/op.py: declares op 'toy_scale'"):
            registry.discover()
    finally:
        for module in [m for m in sys.modules if m.startswith("infralab.kernels.ops.toy_misnamed")]:
            del sys.modules[module]


def test_every_shipped_op_keeps_its_parts_in_its_folder() -> None:
    root = Path(ops.__file__).parent
    for name, op in registry.OPS.items():
        folder = f"infralab.kernels.ops.{name}."
        assert (root / name / "op.py").is_file()
        assert op.kernel.startswith(folder) and op.reference.startswith(folder), name
        assert set(op.shapes) == {"small", "full"} and all(op.shapes.values()), name
        if op.check_suite is not None:
            assert op.check_suite.path.startswith(folder), name
