"""Error metrics between a computed tensor and a reference: the numbers every numerics finding carries.

ULP distance is measured in FP32: both tensors are rounded to FP32 (a float64 reference becomes the
correctly rounded FP32 value) and the distance is the number of representable FP32 values between
them (+0 and -0 count as the same point; adjacent floats are 1 apart).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

# Distance reported when exactly one side is NaN: larger than any distance between two FP32 values.
NAN_MISMATCH_ULP = 2**32


@dataclass(frozen=True)
class Comparison:
    """How far `actual` is from `expected` (elementwise metrics, maxima over all elements).

    max_rel is |a - e| / |e| over elements with e != 0 (an element with e == 0 and a != 0 makes it inf).
    worst_index is the index of the largest absolute error (first one on ties), with the two values there.
    rel_fro is ||a - e||_F / ||e||_F in float64.
    """

    max_abs: float
    max_rel: float
    max_ulp: int
    bitwise_equal: bool
    worst_index: tuple[int, ...]
    worst_actual: float
    worst_expected: float
    rel_fro: float
    elements: int

    def to_dict(self) -> dict:
        return asdict(self)


def ordered_fp32(x: torch.Tensor) -> torch.Tensor:
    """Map FP32 values to int64 so that adjacent floats differ by 1 and order is kept (-0 -> 0)."""
    bits = x.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    # negative floats: sign-magnitude -> two's complement order
    return torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in FP32 ULPs (int64); NaN vs NaN is 0, NaN vs number is NAN_MISMATCH_ULP."""
    distance = (ordered_fp32(actual) - ordered_fp32(expected)).abs()
    a_nan = torch.isnan(actual)
    e_nan = torch.isnan(expected)
    distance = torch.where(a_nan & e_nan, torch.zeros_like(distance), distance)
    return torch.where(a_nan ^ e_nan, torch.full_like(distance, NAN_MISMATCH_ULP), distance)


def bitwise_equal(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Same shape, dtype and bit pattern everywhere (so -0 != +0, and equal NaN payloads are equal)."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[actual.element_size()]
    return torch.equal(actual.contiguous().view(width), expected.contiguous().view(width))


def compare(actual: torch.Tensor, expected: torch.Tensor) -> Comparison:
    """All metrics of `actual` against `expected` (same shape; either may be float32 or float64)."""
    if actual.shape != expected.shape:
        raise ValueError(f"compare: shapes differ: {tuple(actual.shape)} vs {tuple(expected.shape)}")
    a = actual.detach().cpu()
    e = expected.detach().cpu()
    a64, e64 = a.double(), e.double()
    diff = (a64 - e64).abs()
    both_nan = torch.isnan(a64) & torch.isnan(e64)
    diff = torch.where(both_nan, torch.zeros_like(diff), diff)
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    nonzero = e64 != 0
    rel = torch.where(nonzero, diff / e64.abs().where(nonzero, torch.ones_like(e64)),
                      torch.where(diff > 0, torch.full_like(diff, float("inf")), torch.zeros_like(diff)))
    flat_worst = int(torch.argmax(diff.reshape(-1)).item()) if diff.numel() else 0
    worst_index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_worst), a.shape)) if a.dim() else ()
    finite = ~both_nan
    ref_norm = torch.linalg.vector_norm(e64[finite]).item()
    err_norm = torch.linalg.vector_norm(diff[finite]).item()
    return Comparison(
        max_abs=float(diff.max().item()) if diff.numel() else 0.0,
        max_rel=float(rel.max().item()) if rel.numel() else 0.0,
        max_ulp=int(ulp_distance(a, e).max().item()) if a.numel() else 0,
        bitwise_equal=bitwise_equal(a, e),
        worst_index=worst_index,
        worst_actual=float(a64.reshape(-1)[flat_worst].item()) if a.numel() else 0.0,
        worst_expected=float(e64.reshape(-1)[flat_worst].item()) if e.numel() else 0.0,
        rel_fro=err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf")),
        elements=a.numel(),
    )
