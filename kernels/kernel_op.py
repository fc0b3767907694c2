"""`KernelOp`: everything `infralab.kernels` knows about one kernel op, registered once per op in
`kernels/ops/<op>.py` and collected by `kernels/registry.py`.

Importing this module (and the op modules) imports neither torch nor triton: the names, variants,
splits and shape letters are plain data, and every callable imports what it needs when it is called
(`lazy` wraps a "module:attribute" path), so the agent can validate hypothesis files cheaply.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LazyCall:
    """A callable named by "module:attribute", imported on the first call (keeps torch out of imports)."""

    path: str

    def resolve(self) -> Callable[..., Any]:
        module, _, attribute = self.path.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


def lazy(path: str) -> LazyCall:
    """`lazy("infralab.kernels.matmul:matmul")`: the function, imported when first called."""
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
    - `bench_cases(grid, on_gpu) -> list[BenchCase]`, `prepare(case, device, generator, use_triton)
      -> zero-argument call`: what `kernels bench` times.
    - `work_counts(variant, dtype, dims) -> WorkCounts`: static work of one call (or of a ReplaySSM
      cycle, with `steps`), written into every bench row.
    - `partition_adapter() -> PartitionedKernel | None`: the partition harness's adapter, configured
      as `kernels check` runs it; `check_suite(tp_degrees) -> (findings, summaries)`: its checks.
    - `state_bytes_per_seq(dims) -> int | None`: recurrent memory one sequence keeps (None: no state).
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
