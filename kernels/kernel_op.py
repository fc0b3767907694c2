"""`KernelOp`: everything `infralab.kernels` knows about one kernel op, declared once per op in
`kernels/ops/<op>/op.py` (the op's folder) and discovered by `kernels/registry.py`.

Importing this module (and the op modules) imports neither torch nor triton: the names, variants,
splits and shape letters are plain data, and every callable imports what it needs when it is called
(`lazy` wraps a "module:attribute" path), so the agent can validate hypothesis files cheaply.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from infralab.calibration_table import Shape  # (letter, value) pairs in the op's letter order


@dataclass(frozen=True)
class LazyCall:
    """A callable named by "module:attribute", imported on the first call (keeps torch out of imports)."""

    path: str

    def resolve(self) -> Callable[..., Any]:
        module, _, attribute = self.path.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


def shape_of(**dims: int) -> Shape:
    """`shape_of(M=64, N=256, K=512)`: a shape in the keywords' order."""
    return tuple(dims.items())


def lazy(path: str) -> LazyCall:
    """`lazy("infralab.kernels.ops.matmul.kernel:matmul")`: the function, imported when first called."""
    return LazyCall(path)


@dataclass(frozen=True)
class KernelOp:
    """One kernel op: its identity (plain data) and where each of its parts lives.

    - `name`: as in calibration tables, `kernels check` and `kernels bench` (e.g. "kda_decode").
    - `variants`: what the kernel entry takes as its variant (matmul precision, KDA version, the
      paged cache's or the quantiser's dtype); partition checks and work counts take the same names.
      Bench rows may add a "torch" baseline variant (torch's own op) and label single-implementation
      kernels "triton".
    - `splits`: the split kinds its partition adapter supports (empty: no adapter).
    - `shape_dims`: the dimension letters a shape string must have ("M=64;N=256;K=512");
      `optional_dims`: (letter, meaning) pairs of letters a shape may add.
    - `kernel`, `reference`: the Triton entry and its torch reference ("module:function").
    - `shapes`: the bench grids' shapes of this op, by grid name ("small": a laptop CPU in well
      under a minute; "full": a GPU), each a tuple of (letter, value) pairs in `shape_dims` order.
    - `bench_cases(shapes, on_gpu) -> list[BenchCase]`, `prepare(case, device, generator,
      use_triton) -> zero-argument call`: what `kernels bench` times, for one grid's `shapes`.
    - `work_counts(variant, dtype, dims) -> WorkCounts`: static work of one call (or of a ReplaySSM
      cycle, with `steps`), written into every bench row.
    - `partition_adapter() -> PartitionedKernel | None`: the partition harness's adapter, configured
      as `kernels check` runs it; `check_suite(tp_degrees) -> (findings, summaries)`: its checks.
    - `state_bytes_per_seq(dims) -> int | None`: recurrent memory one sequence keeps (None: no state).
    - `table_order`: where its rows go in calibration tables and its verdict in `kernels check`
      (ascending; ties by name). A new op needs no other file's edit.
    """

    name: str
    variants: tuple[str, ...]
    splits: tuple[str, ...]
    shape_dims: tuple[str, ...]
    kernel: str
    reference: str
    bench_cases: Callable[..., list]
    prepare: Callable[..., Callable[[], object]]
    work_counts: Callable[..., Any]
    shapes: Mapping[str, tuple[Shape, ...]] = field(default_factory=dict)
    table_order: int = 100
    optional_dims: tuple[tuple[str, str], ...] = ()
    partition_adapter: Callable[[], Any] | None = None
    check_suite: Callable[..., tuple[list, dict]] | None = None
    state_bytes_per_seq: Callable[..., int | None] | None = None

    def kernel_entry(self) -> Callable[..., Any]:
        """The Triton entry point (imports torch and triton)."""
        return lazy(self.kernel).resolve()

    def reference_entry(self) -> Callable[..., Any]:
        """The torch reference (imports torch)."""
        return lazy(self.reference).resolve()
