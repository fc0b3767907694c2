"""The paged decode attention op over a quantised KV cache (`kernel.py`, cache layout
in `kernels/ops/kv_quantize/kernel.py`): partition adapter, bench cases and work counts. Its variant is the cache's
dtype.

Torch and triton are imported inside the functions (this module is imported by the registry)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from infralab.errors import InputError
from infralab.kernels.kernel_op import KernelOp, Shape, shape_of, lazy
from infralab.work_formulas import WorkCounts, paged_attention_counts

if TYPE_CHECKING:  # torch-free at run time
    import torch

    from infralab.kernels.bench_cases import BenchCase
    from infralab.kernels.partition import Split

KV_DTYPES = ("int8", "fp8e4m3", "bf16", "fp32")  # `kv_quant.KV_DTYPES` (checked by a test)


class PagedAttentionPartition:
    """Paged decode attention over a KV cache quantised to the variant's dtype, under head splits
    (each shard holds HKV/parts KV heads and their query-head groups, as views of the shared cache)
    and batch splits (rows of the block table). One program per (sequence, KV head): bitwise expected.

    Dims: B sequences, H query heads, HKV KV heads, D head dim, T longest context (others are shorter).
    """

    name = "paged_decode_attention"

    def make_inputs(self, dims: Mapping[str, int], variant: str, seed: int) -> dict[str, Any]:
        import torch

        from infralab.kernels.interpreter import kernel_device
        from infralab.kernels.ops.kv_quantize.kernel import build_paged_cache

        gen = torch.Generator().manual_seed(seed)
        b, h, hkv, d, t = dims["B"], dims["H"], dims["HKV"], dims["D"], dims["T"]
        lens = torch.tensor([max(1, t - (i * 11) % t) for i in range(b)], dtype=torch.int32)  # ragged
        q = torch.randn(b, h, d, generator=gen)
        k = torch.randn(b, t, hkv, d, generator=gen)
        v = torch.randn(b, t, hkv, d, generator=gen)
        device = kernel_device()
        cache = build_paged_cache(k.to(device), v.to(device), lens.to(device), variant, spare_blocks=1,
                                  generator=torch.Generator().manual_seed(seed + 1))
        return {"q": q.to(device), "cache": cache}

    def run(self, inputs: dict, variant: str) -> dict:
        from infralab.kernels.ops.paged_decode_attention.kernel import run_paged

        return {"o": run_paged(inputs["q"], inputs["cache"])}

    def float64(self, inputs: dict, variant: str) -> dict:
        """Truth for the kernel's arithmetic: float64 attention over the same quantised cache."""
        import torch

        from infralab.kernels.ops.paged_decode_attention.kernel import paged_decode_attention_ref

        c = inputs["cache"]
        return {"o": paged_decode_attention_ref(inputs["q"], c.k_cache, c.v_cache, c.k_scale, c.v_scale,
                                                c.block_table, c.context_lens, c.kv_dtype,
                                                compute_dtype=torch.float64)}

    def shards(self, inputs: dict, split: Split) -> list[dict]:
        import torch

        from infralab.kernels.ops.kv_quantize.kernel import PagedKV
        from infralab.kernels.partition import split_sizes

        q, cache = inputs["q"], inputs["cache"]
        if split.kind == "none":
            return [inputs]
        if split.kind == "head":
            hkv = cache.k_cache.shape[2]
            group = q.shape[1] // hkv
            shards, lo = [], 0
            for size in split_sizes(hkv, split.parts):
                shards.append({"q": q[:, lo * group:(lo + size) * group], "cache": cache.kv_head_slice(lo, lo + size)})
                lo += size
            return shards
        if split.kind == "batch":
            rows = split_sizes(q.shape[0], split.parts)
            tables = torch.split(cache.block_table, rows)
            lens = torch.split(cache.context_lens, rows)
            return [{"q": part, "cache": PagedKV(cache.k_cache, cache.v_cache, cache.k_scale, cache.v_scale,
                                                 table, n, cache.kv_dtype)}
                    for part, table, n in zip(torch.split(q, rows), tables, lens)]
        raise InputError("split.kind", f"{split.kind!r} does not apply to paged attention", "none, head or batch")

    def combine(self, outputs: list[dict], split: Split) -> dict:
        import torch

        return {"o": torch.cat([x["o"] for x in outputs], 1 if split.kind == "head" else 0)}

    def expects_bitwise(self, split: Split, dims: Mapping[str, int]) -> bool:
        return split.kind in ("none", "head", "batch")


def bench_cases(shapes: tuple[Shape, ...], on_gpu: bool) -> list[BenchCase]:
    """Every cache dtype per shape of `shapes`."""
    from infralab.kernels.bench_cases import BenchCase

    return [BenchCase("paged_decode_attention", "triton", d, shape, "fp32", f"paged_ref:{d}")
            for shape in shapes for d in KV_DTYPES]


def prepare(case: BenchCase, device: str, gen: torch.Generator, use_triton: bool) -> Callable[[], object]:
    import torch

    from infralab.kernels.bench_cases import randn
    from infralab.kernels.ops.kv_quantize.kernel import build_paged_cache
    from infralab.kernels.ops.paged_decode_attention.kernel import paged_decode_attention, paged_decode_attention_ref

    d = case.dims()
    batch, heads, hkv, head_dim, ctx = d["B"], d["H"], d["HKV"], d["D"], d["T"]
    q = randn((batch, heads, head_dim), device, gen)
    k = randn((batch, ctx, hkv, head_dim), device, gen)
    v = randn((batch, ctx, hkv, head_dim), device, gen)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=device)
    # a shuffled block table (CPU generator: build_paged_cache draws the permutation on the CPU)
    cache = build_paged_cache(k, v, lens, case.dtype, generator=torch.Generator().manual_seed(1))
    del k, v
    args = (q, cache.k_cache, cache.v_cache, cache.k_scale, cache.v_scale, cache.block_table,
            cache.context_lens, case.dtype)
    if not use_triton:
        return lambda: paged_decode_attention_ref(*args)
    out = torch.empty_like(q)
    return lambda: paged_decode_attention(*args, out=out)


def work_counts(variant: str, dtype: str, dims: Mapping[str, int]) -> WorkCounts:
    """One call over a cache of dtype `dtype`, every sequence at T tokens."""
    from infralab.kernels.ops.kv_quantize.kernel import BLOCK_SIZE, SCALED, kv_bytes_per_token

    return paged_attention_counts(kv_bytes_per_token(dtype, dims["HKV"], dims["D"]), SCALED[dtype],
                                  dims["B"], dims["H"], dims["HKV"], dims["D"], dims["T"], BLOCK_SIZE)


OP = KernelOp(
    name="paged_decode_attention",
    table_order=40,
    shapes={
        "small": (shape_of(B=4, H=8, HKV=2, D=128, T=256),),
        "full": (
            shape_of(B=64, H=32, HKV=8, D=128, T=1024),
            shape_of(B=64, H=32, HKV=8, D=128, T=4096),
            shape_of(B=8, H=32, HKV=8, D=128, T=32768),
        ),
    },
    variants=KV_DTYPES,
    splits=("none", "head", "batch"),
    shape_dims=("B", "H", "HKV", "D", "T"),
    kernel="infralab.kernels.ops.paged_decode_attention.kernel:paged_decode_attention",
    reference="infralab.kernels.ops.paged_decode_attention.kernel:paged_decode_attention_ref",
    bench_cases=bench_cases,
    prepare=prepare,
    work_counts=work_counts,
    partition_adapter=PagedAttentionPartition,
    check_suite=lazy("infralab.kernels.ops.paged_decode_attention.check:suite"),
)
