"""The cost model's fast path for runs of decode-only steps gives exactly the step-by-step ends."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infralab.sim.calibration import COLUMNS, CalibrationTable
from infralab.sim.config import CostConfig, HardwareConfig, HostOverheadConfig
from infralab.sim.cost import CostModel, StepWork, decode_run_ends_stepwise
from infralab.sim.specs import load_accelerator, load_link, load_model

NVLINK = load_link("nvlink4")
HOST = CostConfig(host=HostOverheadConfig(per_step_s=9e-4, per_request_s=3e-6, per_output_token_s=1e-6))
MODELS = {
    "llama-3-8b H100 tp1": CostModel(load_model("llama-3-8b"), load_accelerator("H100"), CostConfig()),
    "llama-3-70b A100 tp4 host": CostModel(
        load_model("llama-3-70b"), load_accelerator("A100"), HOST, tp=4, tp_link=NVLINK
    ),
    "mixtral H100 tp2": CostModel(
        load_model("mixtral-8x7b"), load_accelerator("H100"), HOST, tp=2, tp_link=NVLINK
    ),
    "kimi-linear H200 tp2": CostModel(
        load_model("kimi-linear-48b-a3b"), load_accelerator("H200"), CostConfig(), tp=2, tp_link=NVLINK
    ),
}
KIMI = load_model("kimi-linear-48b-a3b")
H200 = load_accelerator("H200")
# The GLM-class knobs (not plain: their steps go through `step()`'s extra operators).
KNOBS = {
    "layer split + EP + per-class TP": dict(tp=8, linear_tp=4, lm_head_tp=4, moe_ep=8, layer_split=8),
    "EP, W8A8, KV per layer, ReplaySSM": dict(tp=4, moe_ep=4, cfg=CostConfig(
        dtype="int8", kv_layer_dtypes=("int8",) * KIMI.num_full_attention_layers, replay_ssm_ring=8)),
    "lm head TP only, host": dict(tp=4, lm_head_tp=2, cfg=HOST),
}


def knob_model(tp: int, cfg: CostConfig = CostConfig(), **knobs: int) -> CostModel:
    return CostModel(KIMI, H200, cfg, tp=tp, tp_link=NVLINK,
                     hardware=HardwareConfig(accelerator="H200", tp=tp, **knobs))


MODELS.update({name: knob_model(**knobs) for name, knobs in KNOBS.items()})


def stepwise_by_step(
    cost: CostModel, seqs: int, context: int, start: float, steps: int, horizon: float
) -> list[float]:
    """The definition with the full `step()`: what a single step is timed with."""
    return decode_run_ends_stepwise(
        lambda s, c: cost.step(StepWork.decode(s, c)).total_s, seqs, context, start, steps, horizon
    )


runs = st.tuples(
    st.integers(1, 256),  # seqs
    st.integers(1, 4096),  # mean context per sequence
    st.floats(0.0, 1e6, allow_nan=False),  # start (s)
    st.integers(1, 300),  # steps
    st.floats(0.0, 30.0, allow_nan=False) | st.just(float("inf")),  # horizon after start (s)
)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(MODELS)), run=runs)
def test_fast_decode_run_gives_the_step_by_step_ends(name, run):
    seqs, mean_context, start, steps, ahead = run
    cost = MODELS[name]
    context, horizon = seqs * mean_context, start + ahead
    ends = cost.decode_run_ends(seqs, context, start, steps, horizon)
    assert ends == stepwise_by_step(cost, seqs, context, start, steps, horizon)
    assert 1 <= len(ends) <= steps
    assert all(t < horizon for t in ends[:-1])
    assert len(ends) == steps or ends[-1] >= horizon


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> CostModel:
    """Llama-3-8B on H100 with a measured decode-attention row (context-dependent: the slow path)
    and a matmul row."""
    header = ",".join(COLUMNS)
    device = load_accelerator("H100").calibration_device
    rows = [
        f"paged_decode_attention,v1,B=4;H=32;HKV=8;D=128;T=1000,bf16,{device},5e-4,16384000,16384000,"
        "1,1,0.5,0,0,0",
        f"matmul,v1,M=16;N=6144;K=4096,bf16,{device},4e-5,50000000,800000000,1,1,0.5,0,0,0",
    ]
    path = Path(tmp_path_factory.mktemp("cal")) / "cal.csv"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return CostModel(load_model("llama-3-8b"), load_accelerator("H100"), CostConfig(),
                     calibration=CalibrationTable.load(path))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run=runs)
def test_calibrated_decode_run_gives_the_step_by_step_ends(calibrated, run):
    seqs, mean_context, start, steps, ahead = run
    context, horizon = seqs * mean_context, start + ahead
    assert calibrated.decode_run_ends(seqs, context, start, steps, horizon) == stepwise_by_step(
        calibrated, seqs, context, start, steps, horizon
    )


def test_the_calibrated_model_measures_decode_attention(calibrated):
    """The fixture exercises the step-by-step path (a measured, context-dependent attention term)."""
    assert {"attention", "dense_gemm"} <= calibrated.calibrated_ops


def test_a_cost_term_the_shortcut_does_not_know_sends_it_step_by_step():
    """Should another operator come to depend on the context, the guard notices and the ends stay
    exact (here: a made-up linear-attention term of 1 ns per context token)."""
    cost = CostModel(load_model("llama-3-8b"), load_accelerator("H100"), CostConfig())
    cost._linear_attention_time = lambda work: work.decode_context_tokens * 1e-9  # type: ignore[method-assign]
    ends = cost.decode_run_ends(8, 8000, 1.0, 50, float("inf"))
    assert ends == stepwise_by_step(cost, 8, 8000, 1.0, 50, float("inf"))
    assert cost._decode_run_terms[8] is None


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_a_config_with_technique_knobs_takes_the_fast_path(name):
    """Not step by step: the context-independent terms are taken once per batch size."""
    cost = knob_model(**KNOBS[name])
    cost.decode_run_ends(16, 16 * 3000, 0.0, 40, float("inf"))
    assert cost._decode_run_terms[16] is None and cost._decode_knob_terms[16] is not None
