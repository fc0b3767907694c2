"""Step costs from a real engine's step profile: a whole step timed from measured rows, not from
operators (`[cost] step_table = "profile.csv"`; docs/fidelity.md, docs/calibration.md).

The profile (written by `infralab.real.profile`) has two rows per grid point (q_tokens, kv_tokens,
seqs): `engine_step`, the forward with its logits and sampling, and `engine_prepare`, the host's
batch building. A step of the simulator has the same three numbers: query tokens = prompt tokens
computed + one per decoding sequence; kv_tokens = the keys its attention covers, past + query, over
all its sequences; seqs = its sequences. Both rows are looked up through the one calibration lookup
(`CalibrationTable.lookup(..., grid=True)`: exact, else interpolated over the measured grid).

- device_s = the `engine_step` time x `cost.step_table_speed` (the machine's speed relative to the
  profile's, 1.0 by default: the fidelity study sets it from the reference steps around a replay);
- host_s = the `engine_prepare` time (x the same) + `[cost.host]`'s per-step, per-sequence and per-output-token
  terms (what the profile does not measure: the scheduler and the step's update; 0 by default);
- total_s = device_s + host_s ("sync", the engine on CPU runs them one after the other), or
  max(device_s, host_s) + async_residue_s with `overlap = "async"`.

A step outside the profile's measured range in any field (more query tokens, keys or sequences
than profiled, or fewer than its smallest point) is not extrapolated: it is an InputError naming
the table, raised before the run from the bounds the engine settings and the workload put on
every step (`check_covers`; `step` checks each step again). The KV capacity is the engine's (`engine.num_blocks` x `engine.block_size`), given by the
run: a step table has no memory model. Units: seconds, tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infralab.calibration_table import check_provenance, read_provenance
from infralab.errors import InputError
from infralab.sim.calibration import CalibrationTable
from infralab.sim.config import HostOverheadConfig, SimConfig
from infralab.sim.cost import StepWork, decode_run_ends_stepwise
from infralab.sim.protocols import ServedRequest
from infralab.sim.specs import ModelSpec

STEP_KERNEL = "engine_step"  # the names `infralab.real.profile` writes (real never imports sim)
PREPARE_KERNEL = "engine_prepare"
FIELDS = ("q_tokens", "kv_tokens", "seqs")


@dataclass(frozen=True, slots=True)
class TableStepCost:
    """Seconds of one step: the profiled forward, host time, and their combination."""

    device_s: float
    host_s: float
    total_s: float


def step_shape(work: StepWork) -> dict[str, int]:
    """The profile's key of a step: query tokens, keys attended over (past + query), sequences."""
    return {"q_tokens": work.tokens, "kv_tokens": work.prefill_context_tokens + work.decode_context_tokens,
            "seqs": work.prefill_seqs + work.decode_seqs}


class StepTableCost:
    """`StepCostModel` over a step profile (module doc). `dtype`: the table's dtype of the
    profiled engine (e.g. "fp32"); `kv_capacity_tokens`: the engine's KV cache, tokens."""

    def __init__(self, table: CalibrationTable, dtype: str, kv_capacity_tokens: int,
                 host: HostOverheadConfig = HostOverheadConfig(), speed: float = 1.0,
                 model: ModelSpec | None = None, kv_dtype: str | None = None) -> None:
        self.table = table
        self.model, self.kv_dtype = model, kv_dtype if kv_dtype is not None else dtype
        self.speed = speed  # every table time x this (`cost.step_table_speed`)
        self.dtype = dtype
        self.host = host
        self.kv_tokens = kv_capacity_tokens
        devices = sorted({row.device for row in table.rows if row.kernel == STEP_KERNEL and row.dtype == dtype})
        if len(devices) != 1:
            found = f"{STEP_KERNEL} rows of dtype {dtype} on devices {devices}" if devices else f"no {STEP_KERNEL} rows of dtype {dtype}"
            raise InputError(table.source, found, f"a step profile of one engine: {STEP_KERNEL} and {PREPARE_KERNEL} "
                                                  f"rows of one device (written by infralab.real.profile)")
        self.device = devices[0]
        self.ranges = {kernel: table.measured_range(kernel, dtype, self.device) for kernel in (STEP_KERNEL, PREPARE_KERNEL)}
        for kernel, measured in self.ranges.items():
            if sorted(measured) != sorted(FIELDS):
                raise InputError(table.source, f"{kernel} rows of dtype {dtype} on {self.device} have shape fields "
                                               f"{sorted(measured)}", f"rows keyed {';'.join(FIELDS)}")
        self._decode_cache: dict[tuple[int, int], float] = {}

    def check_covers(self, q_tokens: int, kv_tokens: int, seqs: int) -> None:
        """InputError naming the table unless its measured range holds every step from the
        smallest (1 query token, 1 key, 1 sequence) to these bounds: the most query tokens, keys and
        sequences a step of the run can have. Checked before a run, so none stops half-way."""
        bounds = {"q_tokens": q_tokens, "kv_tokens": kv_tokens, "seqs": seqs}
        for kernel, measured in self.ranges.items():
            short = [f"{name} 1-{bounds[name]} (profiled {lo}-{hi})" for name, (lo, hi) in measured.items()
                     if lo > 1 or hi < bounds[name]]
            if short:
                raise InputError(self.table.source, f"the {kernel} rows do not cover the run's steps: {', '.join(short)}",
                                 "a profile whose grid spans every step the engine settings allow (infralab.real.profile "
                                 "with a larger grid, or a smaller engine.max_batched_tokens, max_num_seqs or num_blocks)")

    def step(self, work: StepWork) -> TableStepCost:
        shape = step_shape(work)
        device = self._lookup(STEP_KERNEL, shape) * self.speed
        host = self._lookup(PREPARE_KERNEL, shape) * self.speed + self.host.per_step_s + self.host.per_request_s * shape["seqs"] \
            + self.host.per_output_token_s * work.output_tokens
        if self.host.overlap == "async":
            return TableStepCost(device, host, max(device, host) + self.host.async_residue_s)
        return TableStepCost(device, host, device + host)

    def decode_step_s(self, seqs: int, context_tokens: int) -> float:
        key = (seqs, context_tokens)
        seconds = self._decode_cache.get(key)
        if seconds is None:
            seconds = self._decode_cache[key] = self.step(StepWork.decode(seqs, context_tokens)).total_s
        return seconds

    def decode_run_ends(
        self, seqs: int, context_tokens: int, start_s: float, steps: int, horizon_s: float
    ) -> list[float]:
        """End times (s) of a run of decode-only steps, step by step (StepCostModel)."""
        return decode_run_ends_stepwise(self.decode_step_s, seqs, context_tokens, start_s, steps, horizon_s)

    def kv_capacity_tokens(self, gpu_memory_utilization: float, max_num_seqs: int = 0, max_batched_tokens: int = 0) -> int:
        """The engine's KV cache (tokens), whatever the memory settings: the profile has no memory model."""
        return self.kv_tokens

    def kv_bytes_per_token(self) -> int:
        """One token's KV bytes, from the model's shape in the KV dtype (what a prefix-cache entry's
        state snapshot is measured against; the profile itself has no memory model)."""
        return self._model().kv_bytes_per_token(self.kv_dtype)

    def linear_state_bytes_per_seq(self) -> int:
        """One sequence's linear-attention state bytes, from the model's shape (0 without KDA layers)."""
        return self._model().linear_state_bytes_per_seq()

    def _model(self) -> ModelSpec:
        if self.model is None:
            raise InputError(self.table.source, "a step table given no model cannot size a prefix-cache entry",
                             "the run's model passed to StepTableCost (run_step_table_cost does)")
        return self.model

    def kv_transfer_bytes(self, tokens: int) -> int:
        raise InputError(self.table.source, "a step table times colocated instances only",
                         'cluster.layout = "colocated" with cost.step_table')

    def _lookup(self, kernel: str, shape: dict[str, int]) -> float:
        measured = self.ranges[kernel]
        if all(lo <= shape[name] <= hi for name, (lo, hi) in measured.items()):
            seconds = self.table.lookup(kernel, self.dtype, self.device, shape, grid=True)
            if seconds is not None:
                return seconds
        outside = [f"{name}={shape[name]} (profiled {lo}-{hi})" for name, (lo, hi) in measured.items()
                   if not lo <= shape[name] <= hi]
        what = ", ".join(outside) or ", ".join(f"{name}={shape[name]}" for name in FIELDS)
        raise InputError(self.table.source, f"the step profile does not cover a step of {what}",
                         "a profile whose grid covers every step of the run (infralab.real.profile with a "
                         "larger grid, or a smaller engine.max_batched_tokens / num_blocks)")


def run_step_table_cost(table: CalibrationTable, cfg: SimConfig, requests: Sequence[ServedRequest],
                        model: str | None = None, model_spec: ModelSpec | None = None) -> StepTableCost:
    """The cost model of a run with `cost.step_table` (its rows in `table`), checked to cover every
    step the run can have: up to the token budget, min(KV cache, the workload's tokens) keys and
    min(request cap, requests) sequences (unset limits filled in as the cluster fills them), and to
    have been profiled for the run's model (`model`, its name), dtype and KV cache. `model_spec`:
    the model's shape, for the memory queries a prefix cache makes."""
    if cfg.engine.num_blocks is None:
        raise InputError("engine.num_blocks", "unset with cost.step_table", "the real engine's KV cache in blocks")
    kv_tokens = cfg.engine.num_blocks * cfg.engine.block_size
    if Path(table.source).is_file():
        check_provenance(table.source, read_provenance(table.source),
                         {"model": model, "dtype": cfg.cost.dtype, "cache_tokens": kv_tokens})
    cost = StepTableCost(table, cfg.cost.dtype, kv_tokens, cfg.cost.host, cfg.cost.step_table_speed,
                         model_spec, cfg.cost.kv_dtype)
    engine = cfg.engine.with_vllm_defaults()  # a cost model without an accelerator: the cluster does the same
    assert engine.max_batched_tokens is not None and engine.max_num_seqs is not None
    tokens = sum(r.prompt_tokens + r.output_tokens - 1 for r in requests)
    cost.check_covers(engine.max_batched_tokens, min(kv_tokens, tokens),
                      min(engine.max_num_seqs, engine.max_batched_tokens, len(requests)))
    return cost
