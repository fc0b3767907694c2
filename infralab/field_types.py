"""Strict, bounded field types for the schemas (sim configs, specs, hypotheses, search spaces).

Per-field strictness (not a model-wide `strict=True`, which would also refuse plain dicts for
nested tables): an integer field takes only an integer (`true`, `"1"` and `1.0` are errors), a
boolean field only `true`/`false` (`1`, `"yes"` are errors), and a number field an integer or a
decimal but never a boolean or text, and never NaN or infinity. Every number has an upper bound,
so that nothing a file says can reach numpy or the simulator as a value it cannot represent or
a size that cannot finish. The limits, in the units the fields document, are listed in
docs/sim.md ("Limits").
"""

from __future__ import annotations

import math
from typing import Annotated, Any, TypeAlias

from pydantic import BeforeValidator, Field, StrictBool, StrictInt
from pydantic.fields import FieldInfo

Bool = StrictBool

#: Tokens in one request's prompt or output; above every public model's context window.
MAX_TOKENS = 10_000_000
#: Requests in one synthetic workload.
MAX_REQUESTS = 10_000_000
#: Instances in one pool (colocated, prefill or decode).
MAX_INSTANCES = 4096
#: Seconds: host overheads, link latency, SLOs and trace windows stay below these.
MAX_OVERHEAD_S = 3600.0
MAX_SPAN_S = 1e9
#: Requests per second of a synthetic arrival process.
MIN_RATE, MAX_RATE = 1e-6, 1e9
#: A trace's `workload.rate_scale` (its own arrival rate times this is the rate it replays at).
MIN_RATE_SCALE, MAX_RATE_SCALE = 1e-6, 1e6
#: Smallest efficiency (fraction of peak) or memory utilisation: below it a run would take ages.
MIN_FRACTION = 1e-3


def _real_number(value: object) -> float:
    """Integers and decimals pass (an int for a float field stays accepted); booleans and text do
    not, even when they look like numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a number, not {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a finite number (NaN and infinity are not accepted)")
    return value


def int_bounds(ge: int | None = None, gt: int | None = None, le: int = 2**63 - 1) -> FieldInfo:
    """The bounds of an integer field as pydantic metadata: `Annotated[StrictInt, int_bounds(gt=0)]`
    is the type `Int(gt=0)` builds, written so that a type checker reads it as `int`."""
    bounds: FieldInfo = Field(ge=ge, gt=gt, le=le)
    return bounds


def number_bounds(ge: float | None = None, gt: float | None = None, le: float = 1e18) -> FieldInfo:
    """The bounds of a number field as pydantic metadata: `Annotated[RealNumber, number_bounds(ge=0.0)]`
    is the type `Number(ge=0.0)` builds, written so that a type checker reads it as `float`."""
    bounds: FieldInfo = Field(ge=ge, gt=gt, le=le, allow_inf_nan=False)
    return bounds


#: A number that is an integer or a decimal, never a boolean or text (bounds: `number_bounds`).
RealNumber: TypeAlias = Annotated[float, BeforeValidator(_real_number)]


def Int(ge: int | None = None, gt: int | None = None, le: int = 2**63 - 1) -> Any:
    """An integer above `ge`/`gt` and at most `le`; booleans, decimals and text are errors.
    (A call is no type to a type checker: annotations say `Annotated[StrictInt, int_bounds(...)]`.)"""
    return Annotated[StrictInt, int_bounds(ge, gt, le)]


def Number(ge: float | None = None, gt: float | None = None, le: float = 1e18) -> Any:
    """A finite number in the given range (an integer is accepted and becomes a float).
    (A call is no type to a type checker: annotations say `Annotated[RealNumber, number_bounds(...)]`.)"""
    return Annotated[RealNumber, number_bounds(ge, gt, le)]


PositiveInt: TypeAlias = Annotated[StrictInt, int_bounds(gt=0)]
NonNegInt: TypeAlias = Annotated[StrictInt, int_bounds(ge=0)]
Tokens: TypeAlias = Annotated[StrictInt, int_bounds(gt=0, le=MAX_TOKENS)]
Fraction: TypeAlias = Annotated[RealNumber, number_bounds(ge=MIN_FRACTION, le=1.0)]
Seconds: TypeAlias = Annotated[RealNumber, number_bounds(ge=0.0, le=MAX_OVERHEAD_S)]
PositiveSeconds: TypeAlias = Annotated[RealNumber, number_bounds(gt=0.0, le=MAX_SPAN_S)]
