"""How long one engine step takes (`CostModel`, the seam the engine calls): a roofline over the
step's operators, per tensor-parallel rank, plus explicit host overheads. A calibration table,
where it has rows, replaces the roofline.

`CostModel` builds the instance's `Geometry` once (`sim/cost/geometry.py`: rates, per-rank shapes,
the checks of the knobs) and one object per operator family, and sums their seconds in the order of
`OPS` (`sim/cost/work.py`): `sim/cost/gemm.py` (dense GEMMs, MoE experts, LM head, sampler),
`sim/cost/attention.py`, `sim/cost/linear_attention.py`, `sim/cost/collectives.py`,
`sim/cost/small_ops.py`; with the layer-class knobs on, the `EXTRA_OPS` and the pipelined step
(`sim/cost/pipeline.py`). Host overheads: `sim/cost/host.py`; memory sizing: `sim/cost/memory.py`;
the calibration reader: `sim/cost/calibrated.py`. No operator formula lives here.

Assumptions (stated, not hidden): operators run back to back on one stream (no overlap of compute,
memory and communication).

Terms that depend only on token counts are memoised per step shape, and runs of identical
decode-only steps take a fast path (`decode_run_ends`) that is bit for bit the step-by-step sum.

Units: seconds, bytes, FLOPs, tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from infralab.sim.calibration import CalibrationTable
from infralab.sim.config import CostConfig, HardwareConfig
from infralab.sim.cost.attention import FullAttention
from infralab.sim.cost.calibrated import Calibration
from infralab.sim.cost.collectives import Collectives
from infralab.sim.cost.gemm import DenseGemms, LmHead, MoeExperts, Sampler
from infralab.sim.cost.geometry import Geometry
from infralab.sim.cost.host import Host
from infralab.sim.cost.linear_attention import LinearAttention
from infralab.sim.cost.memory import Memory, MemoryPlan
from infralab.sim.cost.pipeline import Pipeline
from infralab.sim.cost.small_ops import SmallOps
from infralab.sim.cost.work import OPS, StepCost, StepWork
from infralab.sim.specs import AcceleratorSpec, LinkSpec, ModelSpec


class CostModel:
    """Per-step cost of one serving instance (a model on `tp` accelerators)."""

    def __init__(
        self,
        model: ModelSpec,
        accel: AcceleratorSpec,
        cfg: CostConfig,
        tp: int = 1,
        tp_link: LinkSpec | None = None,
        calibration: CalibrationTable | None = None,
        hardware: HardwareConfig | None = None,
    ) -> None:
        self.model, self.accel, self.cfg, self.tp, self.tp_link = model, accel, cfg, tp, tp_link
        self.calibration = calibration
        g = self._g = Geometry.of(model, accel, cfg, tp, tp_link, hardware)
        # Parallel degree per layer class and the other layer-class knobs (1 or 0: off).
        self.linear_tp, self.lm_head_tp, self.moe_ep = g.linear_tp, g.lm_head_tp, g.moe_ep
        self.layer_split, self.pp, self.micro_batches = g.layer_split, g.pp, g.micro_batches
        self.replay_ring = g.replay_ring
        self._plain = g.plain
        # Attention DP: every operator but the routed experts is one rank's own, timed by a one-rank
        # model (whole heads, all non-expert weights) on the busiest rank's share of the step.
        self._dp_rank = (CostModel(model, accel, cfg, 1, tp_link, calibration, HardwareConfig(accelerator=accel.name))
                         if g.attention_dp else None)
        self._calibrated = Calibration(calibration, g) if calibration is not None else None
        cal = self._calibrated
        self._dense = DenseGemms(g, cal)
        self._moe = MoeExperts(g, cal)
        self._lm_head = LmHead(g, cal)
        self._sampler = Sampler(g)
        self._attention = FullAttention(g, cal)
        self._linear = LinearAttention(g, cal)
        self._collectives = Collectives(g, cal)
        self._small = SmallOps(g, cal)
        self._pipeline = Pipeline(g)
        self._host = Host(cfg.host)
        self._memory = Memory(g)
        # The per-step terms as bound methods on the instance (the hot path calls them directly).
        self._dense_gemm_time = self._dense.time
        self._moe_time = self._moe.time
        self._lm_head_time = self._lm_head.time
        self._sampler_time = self._sampler.time
        self._attention_time = self._attention.time
        self._linear_attention_time = self._linear.time
        self._small_ops_time = self._small.time
        self._collective_time = self._collectives.time
        self._host_s = self._host.host_s
        self._with_host = self._host.with_host
        self._full_layers = g.full_layers
        self._eager_launch_s = cfg.extras.eager_launch_s
        self._graph_launch_s = cfg.extras.graph_launch_s
        self._dense_launches = sum(gemm.count for gemm in self._dense.classes)
        self._decode_floor = self._attention.decode_floor
        self._decode_coeffs = self._attention.decode_coeffs
        # A decode step's attention is the roofline of the coefficients (not indexed, not measured)
        self._roofline_decode_attention = not self._attention.indexed and not (
            self._calibrated is not None and self._calibrated.decode_covered)
        self._dense_cache: dict[int, float] = {}
        self._launch_cache: dict[int, int] = {}  # kernels launched, by the step's tokens (LM head aside)
        self._moe_cache: dict[int, float] = {}
        self._lm_cache: dict[int, tuple[float, float]] = {}  # (lm_head, sampler) by output tokens
        self._small_cache: dict[int, float] = {}
        self._collective_cache: dict[tuple[int, int], float] = {}  # (tokens, output tokens) -> s
        self._decode_host_cache: dict[int, float] = {}  # decode-only steps: host seconds by seqs
        self._decode_run_terms: dict[int, tuple[float, ...] | None] = {}  # decode_run_ends, by seqs
        self._decode_knob_terms: dict[int, tuple[float, ...] | None] = {}  # its knob path, by seqs

    # -- public queries --

    @property
    def calibrated_ops(self) -> frozenset[str]:
        """Operators (names of `StepCost.by_op`) whose time comes, at least in part, from the
        calibration table: dense_gemm, moe_experts and lm_head from `matmul` (`w8a8_matmul` for W8A8)
        rows; attention from `paged_decode_attention` (decode) and `prefill_attention` (prefill);
        linear_attention (decode) from `kda_decode`; small_ops from `rms_norm`, `residual_add`,
        `rope`, `silu_mul`; tp_collectives (the all-reduces) from `all_reduce`. KDA prefill and
        the sampler always use the roofline."""
        return self._calibrated.ops if self._calibrated is not None else frozenset()

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token takes on the whole instance (`Memory.kv_bytes_per_token`)."""
        return self._memory.kv_bytes_per_token()

    def model_kv_bytes_per_token(self) -> int:
        """One copy of a token's KV over all full-attention layers, in their dtypes (bytes): what
        moves between instances."""
        return self._memory.model_kv_bytes_per_token()

    def linear_state_bytes_per_seq(self) -> int:
        """Linear-attention state bytes one sequence holds on the whole instance
        (`Memory.linear_state_bytes_per_seq`)."""
        return self._memory.linear_state_bytes_per_seq()

    def kv_transfer_bytes(self, tokens: int) -> int:
        """Bytes to move one sequence's cache of `tokens` tokens to another instance: its KV (one
        copy, without TP replicas) plus its linear-attention state."""
        return self._memory.kv_transfer_bytes(tokens)

    def weight_bytes(self) -> int:
        """Bytes of the model's weights in the configured dtype (whole instance)."""
        return self._memory.weight_bytes()

    def linear_state_bytes_per_rank(self) -> int:
        """Linear-attention state bytes one sequence holds on one rank (all KDA layers)."""
        return self._memory.linear_state_bytes_per_rank()

    @property
    def virtual_engines(self) -> int:
        """Schedulers this instance runs, each with one batch in flight: pp under
        `hardware.pp_schedule = "virtual_engines"` (vLLM), else 1. A step's time is then one batch's
        way through every stage (`Pipeline.step` with one micro-batch), and the pp batches in
        flight overlap across the stages (the cluster runs pp engines, `sim/cluster.py`)."""
        return self._g.virtual_engines

    @property
    def devices(self) -> int:
        """Accelerators of one instance: tp x pp."""
        return self.tp * self.pp

    def pipeline_bubble(self) -> float:
        """The bubble fraction of this instance's pipeline (0 without pp)."""
        return self._pipeline.bubble()

    def activation_peak_bytes(self, max_num_seqs: int, max_batched_tokens: int) -> float:
        """Peak bytes of activations of the largest step, whole instance (`Memory.activation_peak_bytes`)."""
        return self._memory.activation_peak_bytes(max_num_seqs, max_batched_tokens)

    def memory_plan(self, gpu_memory_utilization: float, max_num_seqs: int = 0, max_batched_tokens: int = 0) -> MemoryPlan:
        """How much KV cache fits, as vLLM sizes it (`Memory.plan`). InputError when nothing is left."""
        return self._memory.plan(gpu_memory_utilization, max_num_seqs, max_batched_tokens)

    def kv_capacity_tokens(self, gpu_memory_utilization: float, max_num_seqs: int = 0, max_batched_tokens: int = 0) -> int:
        """Tokens of KV cache that fit one instance (`memory_plan`)."""
        return self.memory_plan(gpu_memory_utilization, max_num_seqs, max_batched_tokens).kv_tokens

    # -- one operator call (per layer, one rank): what a profile measures, for checks against it --

    def gemm_call_s(self, name: str, tokens: int) -> float:
        """Seconds of one call of the dense GEMM class `name` (e.g. "qkv", "attn_o", "mlp_gate_up",
        "mlp_down") over `tokens` tokens on one rank, as `dense_gemm` counts it."""
        return self._dense.call_s(name, tokens)

    def small_op_call_s(self, kernel: str, tokens: int) -> float:
        """Seconds of one call of the small kernel `kernel` (SMALL_OP_KERNELS) over `tokens`."""
        return self._small.call_s(kernel, tokens)

    def decode_attention_layer_s(self, seqs: int, context_per_seq: int) -> float:
        """Seconds of one layer's decode attention: `seqs` sequences of `context_per_seq` tokens."""
        return self._attention.decode_layer_s(seqs, context_per_seq)

    def prefill_attention_layer_s(self, new: int, cached: int = 0) -> float:
        """Seconds of one layer's prefill attention of one chunk of `new` tokens after `cached`."""
        return self._attention.prefill_layer_s(new, cached)

    def all_reduce_s(self, payload_bytes: float) -> float:
        """Seconds of one all-reduce of `payload_bytes` over the instance's TP ranks (0 at tp 1)."""
        return self._collectives.all_reduce_s(payload_bytes)

    def expected_experts_touched(self, tokens: int) -> float:
        """Distinct routed experts a batch of `tokens` touches per layer, in expectation, when
        each token picks k of E experts uniformly: E * (1 - (1 - k/E)^tokens)."""
        return self._moe.expected_experts_touched(tokens)

    def stage_transfer_s(self, tokens: int) -> float:
        """Seconds to hand `tokens` tokens' hidden states from one pipeline stage to the next
        (`Pipeline.stage_transfer_s`)."""
        return self._pipeline.stage_transfer_s(tokens)

    # -- the step --

    def step(self, work: StepWork) -> StepCost:
        """Seconds of one engine step doing `work` (device time per rank + host overheads).

        With the layer-class knobs on, `by_op` has the EXTRA_OPS that apply (Layer Split's KV
        broadcast, EP's all-to-all, pipeline stage transfers) and, with pp > 1, every operator is
        the pipelined step's: (m + p - 1) slots of the slowest stage's micro-batch (`Pipeline.step`)."""
        if self._plain:
            ops = self._op_times(work)
            device = sum(ops)
            by_op = dict(zip(OPS, ops))
        else:
            by_op = (self._pipeline.step(work, self._op_times_with_knobs) if self.pp > 1
                     else self._op_times_with_knobs(work))
            device = sum(by_op.values())
        gaps = self._launch_gaps(work)
        if gaps:
            by_op["launch_gaps"] = gaps
            device += gaps
        host = self._host_s(work)
        return StepCost(device_s=device, host_s=host, total_s=self._with_host(device, host), by_op=by_op)

    def _launch_gaps(self, work: StepWork) -> float:
        """Idle device seconds between a step's kernels: `eager_launch_s` each when the step has
        prefill (run eagerly), `graph_launch_s` each when decode-only (a CUDA graph's replay)."""
        per_kernel = self._eager_launch_s if work.prefill_tokens else self._graph_launch_s
        return self.kernel_launches(work) * per_kernel if per_kernel else 0.0

    def kernel_launches(self, work: StepWork) -> int:
        """Kernels one rank launches in a step of `work`: each dense GEMM, two grouped GEMMs per MoE
        layer, one attention kernel per (full or linear) attention layer, the small ops, two
        all-reduces per layer under TP, the LM head and the sampler."""
        tokens, m = work.tokens, self.model
        if tokens == 0:
            return 0
        base = self._launch_cache.get(tokens)
        if base is None:
            base = self._dense_launches + 2 * m.num_moe_layers + m.num_layers + self._small.launches(tokens)
            if self._dp_rank is not None:
                base += 2 * m.num_moe_layers  # dispatch and combine; no all-reduce
            elif self.tp > 1:
                base += 2 * m.num_layers
            self._launch_cache[tokens] = base
        return base + (2 if work.output_tokens else 0)

    def _op_times_with_knobs(self, work: StepWork) -> dict[str, float]:
        """Seconds (one rank) of each operator of OPS, plus the EXTRA_OPS the knobs add."""
        if self._dp_rank is not None:
            return self._attention_dp_op_times(work)
        by_op = dict(zip(OPS, self._op_times(work)))
        if self.layer_split > 1:
            by_op["kv_broadcast"] = self._collectives.kv_broadcast_time(work, sum(by_op.values()))
        if self.moe_ep > 1:
            by_op["ep_all_to_all"] = self._collectives.ep_all_to_all_time(work.tokens)
        return by_op

    def _attention_dp_op_times(self, work: StepWork) -> dict[str, float]:
        """Attention DP (`hardware.attention_dp`): the busiest rank's share of the step through every
        operator but the routed experts on one rank (no all-reduce: nothing is split by tp), the
        routed experts of the whole step's tokens expert-parallel over the tp ranks, and the
        all-to-all that takes each rank's tokens to their experts and back."""
        assert self._dp_rank is not None
        by_op = dict(zip(OPS, self._dp_rank._op_times(work.rank_share(self.tp))))
        by_op["moe_experts"] = self._moe_time(work.tokens)
        by_op["tp_collectives"] = 0.0
        by_op["ep_all_to_all"] = self._collectives.ep_all_to_all_time(work.tokens)
        return by_op

    def decode_step_s(self, seqs: int, context_tokens: int) -> float:
        """Seconds of a decode-only step: `step(StepWork.decode(seqs, context_tokens)).total_s`.

        The engine's hot path (runs of identical decode steps) calls this millions of times on a
        long trace; it skips building the per-op mapping and the StepCost. The same sum of the same
        terms as `step`, so the result is bit-identical."""
        work = StepWork.decode(seqs, context_tokens)
        if not self._plain:
            return self.step(work).total_s
        host = self._decode_host_cache.get(seqs)
        if host is None:
            host = self._decode_host_cache[seqs] = self._host_s(work)
        device = sum(self._op_times(work))
        if self._graph_launch_s:  # as step() adds it
            device += self._launch_gaps(work)
        return self._with_host(device, host)

    # -- fast path: runs of decode-only steps (kept apart: exact by construction, see the test) --

    def decode_run_ends(
        self, seqs: int, context_tokens: int, start_s: float, steps: int, horizon_s: float
    ) -> list[float]:
        """End times (s) of back-to-back decode-only steps of `seqs` sequences from `start_s`: step i
        (from 0) has `context_tokens + i * seqs` context tokens and ends at the previous end +
        `decode_step_s(seqs, that context)`. At most `steps` ends; none after the first at or after
        `horizon_s`. Bit for bit `decode_run_ends_stepwise` (tests/sim/test_decode_run_ends.py).

        Within a run only the roofline's decode attention depends on the context, so the other
        terms are evaluated once per batch size and the same sum is redone per step with the new
        attention term. A calibrated attention term, or terms for which the shortcut does not give
        `decode_step_s` exactly (`_decode_run_terms_of`), take the step-by-step path."""
        terms = self._decode_run_terms.get(seqs, ())
        if terms == ():
            terms = self._decode_run_terms[seqs] = self._decode_run_terms_of(seqs, context_tokens)
        if terms is None:
            knob_terms = self._decode_knob_terms.get(seqs, ())
            if knob_terms == ():
                knob_terms = self._decode_knob_terms[seqs] = self._decode_knob_terms_of(seqs, context_tokens)
            if knob_terms is not None:
                knob_step_s = functools.partial(self._decode_knob_step_s, knob_terms)
                return decode_run_ends_stepwise(knob_step_s, seqs, context_tokens, start_s, steps, horizon_s)
            return decode_run_ends_stepwise(self.decode_step_s, seqs, context_tokens, start_s, steps, horizon_s)
        # `_decode_run_step_s` inlined (the hot loop of a long trace): the same expressions in the
        # same order, so the same bits.
        dense, linear, moe, lm, collective, small, sampler, host, gaps = terms
        c_flops, c_bytes, c_seq = self._decode_coeffs
        floor = self._decode_floor
        per_seq = seqs * c_seq
        overlap = self.cfg.host.overlap == "async"
        residue = self.cfg.host.async_residue_s
        ends: list[float] = []
        append = ends.append
        t, context = start_s, context_tokens
        for _ in range(steps):
            attention = first_max(context * c_flops, context * c_bytes + per_seq, floor)
            device = sum((dense, attention, linear, moe, lm, collective, small, sampler))
            if gaps:
                device += gaps
            t = t + (max(device, host) + residue if overlap else device + host)
            append(t)
            if t >= horizon_s:
                break
            context += seqs
        return ends

    # -- the same for steps with technique knobs on: `step()`'s sum, with the terms that do not
    # depend on the context taken once per batch size --

    def _decode_knob_terms_of(self, seqs: int, context_tokens: int) -> tuple[float, ...] | None:
        """For a config with layer-class knobs (not plain; one pipeline stage, no attention DP), the
        context-independent terms of a decode step of `seqs` sequences: the operators of OPS but
        attention, the EP all-to-all, the launch gaps and the host seconds. None when the shortcut
        does not give `step()`'s total exactly at two probe contexts (the guard of the plain path)."""
        if self._plain or self.pp > 1 or self._dp_rank is not None or self._full_layers == 0:
            return None
        work = StepWork.decode(seqs, context_tokens)
        dense, _, linear, moe, lm, collective, small, sampler = self._op_times(work)
        ep = self._collectives.ep_all_to_all_time(work.tokens) if self.moe_ep > 1 else 0.0
        terms = (dense, linear, moe, lm, collective, small, sampler, ep, self._launch_gaps(work), self._host_s(work))
        for probe in (context_tokens, context_tokens + 1021 * seqs):
            if self._decode_knob_step_s(terms, seqs, probe) != self.step(StepWork.decode(seqs, probe)).total_s:
                return None
        return terms

    def _decode_knob_step_s(self, terms: tuple[float, ...], seqs: int, context: int) -> float:
        """`step(StepWork.decode(seqs, context)).total_s` from `_decode_knob_terms_of`'s terms: the
        attention term (the context's), then `step()`'s sums in `step()`'s order (OPS, Layer Split's
        broadcast over their sum, the EP all-to-all, the gaps), so the same bits."""
        dense, linear, moe, lm, collective, small, sampler, ep, gaps, host = terms
        if self._roofline_decode_attention:
            attention = self._roofline_decode_attention_s(seqs, context)
        else:
            attention = self._attention_time(StepWork.decode(seqs, context))
        device = sum((dense, attention, linear, moe, lm, collective, small, sampler))
        if self.layer_split > 1:
            device = device + self._collectives.kv_broadcast_s(context, device)
        if self.moe_ep > 1:
            device = device + ep
        if gaps:
            device += gaps
        return self._with_host(device, host)

    def _decode_run_terms_of(self, seqs: int, context_tokens: int) -> tuple[float, ...] | None:
        """The context-independent terms of a decode step of `seqs` sequences (dense, linear
        attention, MoE, LM head, collectives, small ops, sampler, host; s), or None when the
        shortcut does not apply: calibrated decode attention, or (a guard against cost terms the shortcut does not know) a
        result other than `decode_step_s`'s at two probe contexts."""
        if not self._plain or self._full_layers == 0 or not self._roofline_decode_attention:
            return None  # technique knobs (decode_step_s goes through step()), indexed or calibrated attention
        self.decode_step_s(seqs, context_tokens)  # fills the host-time memo
        dense, _, linear, moe, lm, collective, small, sampler = self._op_times(StepWork.decode(seqs, context_tokens))
        gaps = self._launch_gaps(StepWork.decode(seqs, context_tokens)) if self._graph_launch_s else 0.0
        terms = (dense, linear, moe, lm, collective, small, sampler, self._decode_host_cache[seqs], gaps)
        for probe in (context_tokens, context_tokens + 1021 * seqs):
            if self._decode_run_step_s(terms, seqs, probe) != self.decode_step_s(seqs, probe):
                return None
        return terms

    def _decode_run_step_s(self, terms: tuple[float, ...], seqs: int, context: int) -> float:
        """`decode_step_s(seqs, context)` from the terms of `_decode_run_terms_of`: the roofline's
        decode attention as `FullAttention.time` computes it (0.0 + x == x for x > 0), then the same
        sum in the same order."""
        dense, linear, moe, lm, collective, small, sampler, host, gaps = terms
        attention = self._roofline_decode_attention_s(seqs, context)
        device = sum((dense, attention, linear, moe, lm, collective, small, sampler))
        if gaps:
            device += gaps
        return self._with_host(device, host)

    def _roofline_decode_attention_s(self, seqs: int, context: int) -> float:
        """A decode step's attention as `FullAttention.time` computes it from its roofline
        coefficients (0.0 + x == x for x > 0), for `seqs` sequences with `context` tokens in all."""
        c_flops, c_bytes, c_seq = self._decode_coeffs
        return first_max(context * c_flops, context * c_bytes + seqs * c_seq, self._decode_floor)

    def _op_times(self, work: StepWork) -> tuple[float, float, float, float, float, float, float, float]:
        """Seconds (one rank) of each operator of OPS, in that order: the one place that says
        what a step's device time is made of. Terms that depend only on token counts are memoised."""
        tokens = work.prefill_tokens + work.decode_seqs
        dense = self._dense_cache.get(tokens)
        if dense is None:
            dense = self._dense_cache[tokens] = self._dense_gemm_time(tokens)
        moe = self._moe_cache.get(tokens)
        if moe is None:
            moe = self._moe_cache[tokens] = self._moe_time(tokens)
        outputs = work.output_tokens
        lm = self._lm_cache.get(outputs)
        if lm is None:
            lm = self._lm_cache[outputs] = (self._lm_head_time(outputs), self._sampler_time(outputs))
        small = self._small_cache.get(tokens)
        if small is None:
            small = self._small_cache[tokens] = self._small_ops_time(tokens)
        collective = self._collective_cache.get((tokens, outputs))
        if collective is None:
            collective = self._collective_cache[tokens, outputs] = self._collective_time(tokens, outputs)
        return (
            dense,
            self._attention_time(work),
            self._linear_attention_time(work),
            moe,
            lm[0],
            collective,
            small,
            lm[1],
        )


def first_max(a: float, b: float, c: float) -> float:
    """`max(a, b, c)` as the builtin picks it (the first of equal values), without its generic call:
    the decode run's hot loop, where compiled (sim/native.py) the builtin boxes every float."""
    largest = a
    if b > largest:
        largest = b
    if c > largest:
        largest = c
    return largest


def decode_run_ends_stepwise(
    decode_step_s: Callable[[int, int], float], seqs: int, context_tokens: int, start_s: float, steps: int,
    horizon_s: float,
) -> list[float]:
    """`CostModel.decode_run_ends` one `decode_step_s` call per step: its definition, and what any
    cost model may use (s)."""
    ends: list[float] = []
    t, context = start_s, context_tokens
    for _ in range(steps):
        t = t + decode_step_s(seqs, context)
        ends.append(t)
        if t >= horizon_s:
            break
        context += seqs
    return ends
