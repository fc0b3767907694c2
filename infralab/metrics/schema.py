"""The schema of the `[run]`, `[slo]` and `[metrics]` tables: a run's name and seed, what its
summary is judged against and which percentiles it reports. Shared by `infralab sim run` and `infralab real run`, whose
summaries one module computes (`infralab.metrics.run_metrics.summarize`). Units: seconds.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import StrictInt
from pydantic.dataclasses import dataclass

from infralab.config_io import STRICT
from infralab.errors import InputError
from infralab.field_types import RealNumber, int_bounds, number_bounds


@dataclass(frozen=True, config=STRICT)
class SLOConfig:
    ttft_s: Annotated[RealNumber, number_bounds(gt=0.0, le=86400.0)] = 2.0
    tpot_s: Annotated[RealNumber, number_bounds(gt=0.0, le=86400.0)] = 0.1


@dataclass(frozen=True, config=STRICT)
class MetricsConfig:
    """What the summary reports. `percentiles`: of every latency distribution (0..100, strictly
    increasing; numpy's linear percentiles, as `vllm bench serve --metric-percentiles`)."""

    percentiles: tuple[Annotated[RealNumber, number_bounds(ge=0.0, le=100.0)], ...] = (50.0, 90.0, 99.0)


@dataclass(frozen=True, config=STRICT)
class RunConfig:
    name: str = "run"
    seed: Annotated[StrictInt, int_bounds(ge=0, le=2**63 - 1)] = 0


def check_percentiles(qs: tuple[float, ...], where: str) -> None:
    """Percentiles must be listed once each, in increasing order, and at least one."""
    if not qs or any(b <= a for a, b in zip(qs, qs[1:])):
        raise InputError(where, f"{list(qs)}", "a non-empty list of percentiles in strictly increasing order, e.g. [50, 90, 99]")
