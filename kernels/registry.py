"""Every kernel op of `infralab.kernels`, discovered: each op is one folder `kernels/ops/<op>/`
whose `op.py` declares its `KernelOp` as `OP` (kernel, reference, variants, splits, shapes, bench
cases, work counts, check suite). Adding an op is adding its folder; nothing here names an op.

`OPS` maps an op's name to its `KernelOp`, in calibration-table order (`KernelOp.table_order`, then
name). `kernels check` and `kernels bench` iterate over it; the agent validates hypothesis files
against it.

Importing this module imports neither torch nor triton (a test checks it): reading names, variants,
splits and dims is cheap; the functions below import the kernels when they are called.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from infralab.errors import InputError
from infralab.kernels import ops as ops_package
from infralab.kernels.kernel_op import KernelOp


def discover() -> Mapping[str, KernelOp]:
    """Every op folder on the `infralab.kernels.ops` package's path (`kernels/ops/`, and any folder
    appended to `ops.__path__`) that has an `op.py` declaring `OP`, as name -> KernelOp in table
    order. A folder's name must be its op's name, so that a calibration row's kernel names the
    folder it comes from."""
    found: list[KernelOp] = []
    for module in pkgutil.iter_modules(ops_package.__path__):
        if not module.ispkg:
            continue
        name = f"{ops_package.__name__}.{module.name}.op"
        if importlib.util.find_spec(name) is None:
            continue
        declared = importlib.import_module(name).OP
        if declared.name != module.name:
            raise InputError(f"kernels/ops/{module.name}/op.py", f"declares op {declared.name!r}",
                             f"OP.name equal to its folder's name, {module.name!r}")
        found.append(declared)
    return MappingProxyType({k.name: k for k in sorted(found, key=lambda k: (k.table_order, k.name))})


OPS: Mapping[str, KernelOp] = discover()
"""Op name -> KernelOp, in the order of the rows of a calibration table (`kernels bench`)."""


def op(name: str, where: str = "kernel") -> KernelOp:
    """The registered op `name`; an InputError naming `where` and the known ops otherwise."""
    found = OPS.get(name)
    if found is None:
        raise InputError(where, f"is {name!r}", f"one of {', '.join(OPS)}")
    return found


def partition_adapter(name: str) -> Any | None:
    """The partition harness's adapter for op `name`, with the block sizes and ring length
    `kernels check` uses; None when the op (or an unknown name) has none."""
    found = OPS.get(name)
    if found is None or found.partition_adapter is None:
        return None
    return found.partition_adapter()


def check_dims(name: str, dims: Mapping[str, int], where: str = "shape") -> None:
    """Raise InputError unless `dims` has every letter op `name` needs and only letters it knows."""
    kernel_op = op(name)
    known = (*kernel_op.shape_dims, *(letter for letter, _ in kernel_op.optional_dims))
    form = ";".join(f"{letter}=.." for letter in kernel_op.shape_dims)
    missing = [letter for letter in kernel_op.shape_dims if letter not in dims]
    if missing:
        raise InputError(where, f"lacks {', '.join(missing)}", form)
    unknown = [letter for letter in dims if letter not in known]
    if unknown:
        raise InputError(where, f"has {', '.join(unknown)}, which {name} does not know",
                         f"{form} (optional: {', '.join(known[len(kernel_op.shape_dims):]) or 'none'})")


def work_counts(name: str, variant: str, dims: Mapping[str, int], dtype: str = "fp32") -> Any:
    """Static work (`infralab.work_formulas.WorkCounts`) of one call of op `name` at `dims`."""
    return op(name).work_counts(variant, dtype, dims)


def work_metrics(name: str, variant: str, dims: Mapping[str, int], **extra: Any) -> dict[str, float]:
    """Per-step work of op `name` (no device needed): bytes, bytes_loaded, flops, divisions,
    transcendentals, repeated_elementwise, programs (a ReplaySSM cycle divided by its steps), and
    state_bytes_per_seq for ops that keep a recurrent state.

    `extra`: `ring_len` (ReplaySSM's L, when `dims` has no L) and `dtype` (the data type of the
    counts, "fp32" by default). Shapes are checked against the op's letters."""
    check_dims(name, dims)
    kernel_op = op(name)
    if variant not in kernel_op.variants:
        raise InputError("variant", f"is {variant!r}", f"one of {', '.join(kernel_op.variants)} for {name}")
    dims = dict(dims)
    if "ring_len" in extra and "L" not in dims:
        dims["L"] = int(extra["ring_len"])
    metrics = kernel_op.work_counts(variant, str(extra.get("dtype", "fp32")), dims).per_step()
    if kernel_op.state_bytes_per_seq is not None:
        metrics["state_bytes_per_seq"] = kernel_op.state_bytes_per_seq(variant, dims)
    return metrics
