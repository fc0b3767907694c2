"""The partitioning harness: the same computation under each tensor-parallel split, against the unsplit one.

A deployment's parallel configuration changes how a kernel's inputs are split and how partial results
are combined. Each split is data (`Split`); `tasks_for(kernel, tp)` lists the kernel-level tasks a
tensor-parallel degree implies; `run_task` slices the inputs, runs the kernel once per shard, combines
the shards and compares the result with the unsplit run and with float64.

Combination rules (stated, because they decide bitwise equality):
- column / head / batch splits concatenate shards along the split axis. Heads (KDA, attention) are
  separate programs, so head and batch splits must be bitwise equal. A matmul column (batch) split is
  bitwise equal only when every shard is a whole number of BLOCK_N (BLOCK_M) tiles: an element's
  summation order can depend on its position inside a tile (it does in the interpreter, whose dot is
  numpy's matmul);
- row splits (matmul K) add the partial products. "sequential" adds them left to right,
  ((p0 + p1) + p2) + ...; "tree" adds neighbours pairwise, level by level. Either changes the
  summation order, so bitwise equality is not expected (it happens when shards are single K blocks
  and the sum is sequential, because the interpreter's dot adds each block's product to the running
  accumulator in the same way), only accuracy within the precision's tolerance against float64.

Kernels plug in through `PartitionedKernel` (inputs for a shape, one run, how to shard, how to combine,
float64 truth, whether a split must be bitwise). Each op registers its adapter with the op
(`kernels/ops/<op>/op.py`; `registry.partition_adapter(name)`): matmul, KDA decode (+ ReplaySSM) and
paged decode attention have one; they call only the kernels' public functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch

from infralab.errors import InputError
from infralab.kernels.compare import Comparison, compare
from infralab.kernels.ops.matmul.kernel import PRECISIONS

SplitKind = Literal["none", "column", "row", "head", "batch"]
Reduction = Literal["concat", "sequential", "tree"]
Tensors = dict[str, torch.Tensor]
Inputs = dict[str, Any]  # tensors, or structures of them (e.g. a paged KV cache)


@dataclass(frozen=True)
class Split:
    """How one kernel call is divided: `kind` names the split axis, `parts` the number of shards.

    column: matmul output columns (N); row: matmul reduction dimension (K), partials summed by
    `reduction`; head: attention/KDA heads; batch: sequences (or tokens, for matmul rows M).
    """

    kind: SplitKind
    parts: int
    reduction: Reduction = "concat"

    def __post_init__(self) -> None:
        if self.parts < 1:
            raise InputError("Split.parts", f"is {self.parts}", "an integer >= 1")
        if (self.kind == "row") != (self.reduction in ("sequential", "tree")):
            raise InputError("Split.reduction", f"is {self.reduction!r} for a {self.kind} split",
                             "'sequential' or 'tree' for row splits, 'concat' for the others")

    def describe(self) -> str:
        """Short label, e.g. `row/4 (sequential sum)` or `head/2`."""
        if self.kind == "none":
            return "none"
        suffix = f" ({self.reduction} sum)" if self.kind == "row" else ""
        return f"{self.kind}/{self.parts}{suffix}"


@dataclass(frozen=True)
class PartitionTask:
    """One kernel call of a deployment under one split: what `run_task` executes and compares.

    `role` names the layer operation the call stands for (e.g. `attn.o_proj`); `shape` holds named
    dimensions (names per kernel as in docs/calibration.md); `variant` is the precision or variant.
    """

    kernel: str
    variant: str
    role: str
    shape: tuple[tuple[str, int], ...]
    split: Split
    tp: int
    seed: int = 0

    @property
    def dims(self) -> dict[str, int]:
        return dict(self.shape)

    def shape_text(self) -> str:
        return ";".join(f"{name}={size}" for name, size in self.shape)


@dataclass(frozen=True)
class PartitionResult:
    """Comparisons for one task, per named output (e.g. `C`, or `o` and `state`)."""

    task: PartitionTask
    split_vs_unsplit: Mapping[str, Comparison]
    split_vs_float64: Mapping[str, Comparison]
    unsplit_vs_float64: Mapping[str, Comparison]

    @property
    def bitwise_equal(self) -> bool:
        return all(c.bitwise_equal for c in self.split_vs_unsplit.values())


class PartitionedKernel(Protocol):
    """What the harness needs from a kernel. Outputs are dicts of named tensors."""

    name: str

    def make_inputs(self, dims: Mapping[str, int], variant: str, seed: int) -> Inputs:
        """Deterministic random inputs for the named dimensions (some depend on the variant,
        e.g. a KV cache quantised to the variant's dtype)."""
        ...

    def run(self, inputs: Inputs, variant: str) -> Tensors:
        """One unsplit kernel call (inputs are not modified; state-carrying kernels clone)."""
        ...

    def float64(self, inputs: Inputs, variant: str) -> Tensors:
        """Ground truth in float64 (or the best available reference) for the same outputs."""
        ...

    def shards(self, inputs: Inputs, split: Split) -> list[Inputs]:
        """The inputs of each shard, in order."""
        ...

    def combine(self, outputs: list[Tensors], split: Split) -> Tensors:
        """Put shard outputs back together into the unsplit outputs' shapes."""
        ...

    def expects_bitwise(self, split: Split, dims: Mapping[str, int]) -> bool:
        """Whether this split of this shape must reproduce the unsplit bits exactly."""
        ...


def split_sizes(total: int, parts: int) -> list[int]:
    """Sizes of `parts` contiguous chunks of `total` (as equal as possible, larger ones first)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def chunks(x: torch.Tensor, dim: int, parts: int) -> list[torch.Tensor]:
    """Contiguous chunks of `x` along `dim` (views, so strided kernels see the original memory)."""
    return list(torch.split(x, split_sizes(x.shape[dim], parts), dim=dim))


def sum_partials(partials: list[torch.Tensor], reduction: Reduction) -> torch.Tensor:
    """Add partial results: "sequential" is ((p0 + p1) + p2) + ...; "tree" adds neighbours pairwise."""
    if reduction == "sequential":
        total = partials[0]
        for p in partials[1:]:
            total = total + p
        return total
    level = list(partials)
    while len(level) > 1:
        paired = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


@dataclass(frozen=True)
class MatmulRole:
    """A projection of one transformer layer: its split under TP and its (small, CPU-friendly) shape."""

    role: str
    split_kind: SplitKind
    m: int
    k: int
    n: int


# Megatron-style intra-node TP: projections into the sharded space are column-parallel, projections
# back to the hidden size are row-parallel (their partial sums meet in an all-reduce). Shapes are
# small so that the interpreter finishes quickly; M is deliberately not a multiple of the block
# size, and N / 8 is a whole number of 128-column tiles, as real TP shards are.
MATMUL_ROLES: tuple[MatmulRole, ...] = (
    MatmulRole("attn.qkv_proj", "column", m=16, k=256, n=1024),
    MatmulRole("attn.o_proj", "row", m=16, k=512, n=256),
    MatmulRole("mlp.gate_up_proj", "column", m=16, k=128, n=1024),
    MatmulRole("mlp.down_proj", "row", m=16, k=2048, n=256),
    MatmulRole("lm_head", "column", m=8, k=256, n=1024),
)



@dataclass(frozen=True)
class HeadSplitKernelSpec:
    """How a head-parallel kernel enters `tasks_for`: its variants, role and a CPU-sized shape."""

    kernel: str
    role: str
    variants: tuple[str, ...]
    shape: tuple[tuple[str, int], ...]
    head_dim_name: str = "H"


def tasks_for(
    kernel: str,
    tp: int,
    *,
    reduction: Reduction = "sequential",
    head_kernels: Mapping[str, HeadSplitKernelSpec] | None = None,
    dp: int = 1,
) -> list[PartitionTask]:
    """The kernel-level tasks that tensor-parallel degree `tp` implies for `kernel`.

    matmul: every projection of `MATMUL_ROLES` in every precision, column- or row-split into `tp`
    parts (row partials combined by `reduction`). Head-parallel kernels (attention, KDA; described by
    `head_kernels`) are split by heads into `tp` parts. With `dp` > 1 (data-parallel attention), the
    head-parallel kernels also get a batch split into `dp` parts. tp = 1 yields the unsplit tasks
    (split kind "none"), which must trivially match themselves.
    """
    if tp < 1:
        raise InputError("tp", f"is {tp}", "a tensor-parallel degree >= 1")
    head_kernels = head_kernels or {}
    if kernel == "matmul":
        tasks = []
        for role in MATMUL_ROLES:
            split = _tp_split(role.split_kind, tp, reduction)
            shape = (("M", role.m), ("N", role.n), ("K", role.k))
            tasks += [PartitionTask("matmul", p, role.role, shape, split, tp) for p in PRECISIONS]
        return tasks
    if kernel in head_kernels:
        spec = head_kernels[kernel]
        heads = dict(spec.shape)[spec.head_dim_name]
        if heads % tp:
            raise InputError("tp", f"is {tp} but {kernel} has {heads} heads in its check shape",
                             f"a divisor of {heads}")
        split = Split("head", tp) if tp > 1 else Split("none", 1)
        tasks = [PartitionTask(kernel, v, spec.role, spec.shape, split, tp) for v in spec.variants]
        if dp > 1:
            tasks += [PartitionTask(kernel, v, spec.role, spec.shape, Split("batch", dp), tp) for v in spec.variants]
        return tasks
    known = ", ".join(["matmul", *head_kernels])
    raise InputError("kernel", f"is {kernel!r}", f"one of {known}")


def _tp_split(kind: SplitKind, tp: int, reduction: Reduction) -> Split:
    if tp == 1:
        return Split("none", 1)
    return Split(kind, tp, reduction if kind == "row" else "concat")


def run_task(
    task: PartitionTask,
    kernel: PartitionedKernel,
    cache: dict[tuple, object] | None = None,
) -> PartitionResult:
    """Run `task`: unsplit, per shard, combined; compare split vs unsplit and both vs float64.

    `cache` (optional) keeps the inputs, unsplit and float64 outputs per (kernel, variant, shape, seed),
    and the shard outputs per split axis and degree, so that several splits (or two reductions of the
    same shards) of one call reuse them.
    """
    cache = {} if cache is None else cache
    key = (task.kernel, task.variant, task.shape, task.seed)
    if key not in cache:
        inputs = kernel.make_inputs(task.dims, task.variant, task.seed)
        cache[key] = (inputs, kernel.run(inputs, task.variant), kernel.float64(inputs, task.variant))
    inputs, unsplit, truth = cache[key]
    shard_key = (*key, task.split.kind, task.split.parts)
    if shard_key not in cache:
        cache[shard_key] = [kernel.run(shard, task.variant) for shard in kernel.shards(inputs, task.split)]
    combined = kernel.combine(cache[shard_key], task.split)
    return PartitionResult(
        task=task,
        split_vs_unsplit={name: compare(combined[name], unsplit[name]) for name in unsplit},
        split_vs_float64={name: compare(combined[name], truth[name]) for name in unsplit},
        unsplit_vs_float64={name: compare(unsplit[name], truth[name]) for name in unsplit},
    )

