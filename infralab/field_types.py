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
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictBool, StrictInt

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


def _real_number(value: Any) -> Any:
    """Integers and decimals pass (an int for a float field stays accepted); booleans and text do
    not, even when they look like numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a number, not {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a finite number (NaN and infinity are not accepted)")
    return value


def Int(ge: int | None = None, gt: int | None = None, le: int = 2**63 - 1) -> Any:
    """An integer above `ge`/`gt` and at most `le`; booleans, decimals and text are errors."""
    return Annotated[StrictInt, Field(ge=ge, gt=gt, le=le)]


def Number(ge: float | None = None, gt: float | None = None, le: float = 1e18) -> Any:
    """A finite number in the given range (an integer is accepted and becomes a float)."""
    return Annotated[float, BeforeValidator(_real_number), Field(ge=ge, gt=gt, le=le, allow_inf_nan=False)]


PositiveInt = Int(gt=0)
NonNegInt = Int(ge=0)
Tokens = Int(gt=0, le=MAX_TOKENS)
Fraction = Number(ge=MIN_FRACTION, le=1.0)
Seconds = Number(ge=0.0, le=MAX_OVERHEAD_S)
PositiveSeconds = Number(gt=0.0, le=MAX_SPAN_S)
