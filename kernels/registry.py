"""Every kernel op of `infralab.kernels`, each registered once in `kernels/ops/<op>.py`.

`OPS` maps an op's name to its `KernelOp` (variants, splits, shape letters, and where its kernel,
reference, partition adapter, bench cases and work counts live), in calibration-table order.
`kernels check` and `kernels bench` iterate over it; the agent validates hypothesis files against it.

Importing this module imports neither torch nor triton (a test checks it): reading names, variants,
splits and dims is cheap; the functions below import the kernels when they are called.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from infralab.errors import InputError
from infralab.kernels.kernel_op import KernelOp
from infralab.kernels.ops import kda_decode, kv_quantize, matmul, paged_decode_attention, w8a8_matmul

OPS: Mapping[str, KernelOp] = MappingProxyType({
    op.name: op for op in (matmul.OP, w8a8_matmul.OP, kda_decode.OP, paged_decode_attention.OP, kv_quantize.OP)
})
"""Op name -> KernelOp, in the order of the rows of a calibration table (`kernels bench`)."""

CHECK_ORDER: tuple[str, ...] = ("matmul", "kda_decode", "paged_decode_attention", "w8a8_matmul")
"""The ops with a check suite, in the order `kernels check` reports them (a test keeps this list
equal to the ops that register `check_suite`)."""


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
