"""The public-measurements study: the points file's checks (roles by the pre-registered rule,
metrics per family, unknown labels), what a point simulates, and the statistics per family."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from infralab.agent.public_points.score import FamilyStats, Scored, family_stats, score, verdict
from infralab.agent.public_points.simulate import Simulated, config_of, simulate
from infralab.sim import api
from infralab.agent.public_points.spec import Point, load_points, role_of
from infralab.errors import InputError
from support.scripts import load_benchmark

SHIPPED = Path(__file__).resolve().parents[2] / "experiments" / "fidelity_public" / "points.toml"


def point(pid: str = "p", **fields) -> Point:
    base = dict(id=pid, family="decode", role=role_of(pid), source="s", locator="l", evidence="e", engine="vLLM",
                hardware="h", metric="tpot_s", measured=0.01, accelerator="H100", model="llama-3-8b",
                input_tokens=128, output_tokens=128)
    base.update(fields)
    return Point(**base)


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "points.toml"
    path.write_text(body)
    return path


def table(pid: str, **fields) -> str:
    values = dict(id=pid, family="decode", role=role_of(pid), source="s", locator="l", evidence="e", engine="x",
                  hardware="h", metric="tpot_s", measured=0.01, accelerator="H100", model="llama-3-8b",
                  input_tokens=128, output_tokens=128)
    values.update(fields)
    lines = ["[[point]]"] + [f"{k} = {v!r}".replace("'", '"') if isinstance(v, str) else f"{k} = {v}"
                             for k, v in values.items()]
    return "\n".join(lines) + "\n"


def test_roles_follow_the_pre_registered_rule(tmp_path):
    pid = "some-point"
    wrong = "evaluation" if role_of(pid) == "calibration" else "calibration"
    with pytest.raises(InputError, match=r"points.toml: point\[0\].role"):
        load_points(write(tmp_path, table(pid, role=wrong)))
    assert [p.role for p in load_points(write(tmp_path, table(pid)))] == [role_of(pid)]
    # the rule is blind to everything but the id, and splits about a third to calibration
    share = sum(role_of(f"id-{i}") == "calibration" for i in range(3000)) / 3000
    assert 0.28 < share < 0.39


@pytest.mark.parametrize(("fields", "where"), [
    ({"metric": "time_s"}, "metric"),
    ({"includes": ["telepathy"]}, "includes"),
    ({"output_tokens": 1}, "output_tokens"),
    ({"family": "collective", "metric": "time_s", "world": 1, "collective": "all_reduce", "message_bytes": 8}, "world"),
    ({"measured": -1.0}, "measured"),
])
def test_a_bad_point_names_file_and_field(tmp_path, fields, where):
    with pytest.raises(InputError, match=rf"points.toml: point\[0\]\.{where}"):
        load_points(write(tmp_path, table("bad", **fields)))


def test_duplicate_ids_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"point\[1\].id"):
        load_points(write(tmp_path, table("a") + table("a")))


def test_a_point_with_a_cold_start_is_shown_not_scored():
    assert not point("cold", includes=("cold_start",), role="evaluation").scored or role_of("cold") == "calibration"
    p = next(point(f"x{i}") for i in range(50) if role_of(f"x{i}") == "evaluation")
    assert p.scored
    assert not Point(**{**p.__dict__, "includes": ("cold_start",)}).scored


def test_a_latency_point_simulates_a_batch_arriving_together():
    p = point("lat", batch=8, input_tokens=32, output_tokens=128, metric="e2e_latency_s")
    cfg = config_of(p)
    assert cfg["workload"]["num_requests"] == 8 and cfg["engine"]["max_num_seqs"] == 8
    assert cfg["workload"]["prompt"] == {"kind": "fixed", "value": 32}
    e2e = simulate(p).value
    tpot = simulate(point("lat2", batch=8, input_tokens=32, output_tokens=128, metric="tpot_s")).value
    ttft = simulate(point("lat3", family="prefill", metric="ttft_s", batch=8, input_tokens=32, output_tokens=1)).value
    # the batch's latency is its prefill plus 127 decode steps of about one TPOT each
    assert e2e == pytest.approx(ttft + 127 * tpot, rel=0.02)


def test_a_decode_step_point_reads_the_median_request_not_the_first_arrival():
    """The first request of a batch starts a step alone and decodes through the others' prefill: the
    mean TPOT carries that step, the median request's TPOT is a decode step."""
    fields = dict(batch=32, input_tokens=1008, output_tokens=33, max_batched_tokens=32 * 1008, accelerator="H200")
    step = simulate(point("step", metric="decode_step_s", **fields)).value
    mean = simulate(point("mean", metric="tpot_s", **fields)).value
    assert step < mean  # the mean carries the straddling request
    result = api.run(config_of(point("step", metric="decode_step_s", **fields)))
    assert step == pytest.approx(result.metrics["tpot_p50_s"])


def test_family_statistics_score_only_evaluation_points():
    def scored(pid: str, family: str, measured: float, simulated: float, role: str) -> Scored:
        p = point(pid, family=family, role=role, measured=measured, metric="tpot_s" if family == "decode" else "ttft_s")
        return Scored(p, Simulated(simulated, ""))

    rows = [scored("a", "decode", 1.0, 1.05, "evaluation"), scored("b", "decode", 1.0, 0.85, "evaluation"),
            scored("c", "decode", 1.0, 1.09, "evaluation"), scored("d", "decode", 1.0, 9.0, "calibration"),
            scored("e", "prefill", 2.0, 2.0, "evaluation")]
    stats = {s.family: s for s in family_stats(rows)}
    decode = stats["decode"]
    assert decode.n == 3 and math.isclose(decode.median_abs, 0.09) and math.isclose(decode.worst_abs, 0.15)
    assert (decode.over, decode.under) == (2, 1) and math.isclose(decode.signed_median, 0.05)
    assert stats["overall"].n == 4 and stats["prefill"].met and decode.met
    assert verdict(list(stats.values())) == "accepted"
    assert verdict([FamilyStats("decode", 3, 0.2, 0.3, 0.2, 3, 0)]) == "rejected"
    assert verdict([FamilyStats("decode", 3, 0.2, 0.3, 0.2, 3, 0), stats["prefill"]]) == "partial"


def test_the_shipped_points_load_and_cite_their_sources():
    points = load_points(SHIPPED)
    assert len(points) >= 60
    families = {p.family for p in points if p.scored}
    assert families == {"decode", "prefill", "collective", "serving"}
    for p in points:
        assert p.source and p.locator and p.evidence and p.engine
        assert p.source.startswith(("http", "github "))


def test_the_report_names_the_worst_points_of_a_family_that_misses():
    from infralab.agent.public_points.report import markdown

    rows = [Scored(point("ok", measured=1.0), Simulated(1.02, "")),
            Scored(point("bad", measured=1.0), Simulated(1.6, ""), {"dense_gemm": 3.0, "attention": 1.0})]
    assert all(r.point.scored for r in rows)  # both ids are evaluation points by the rule
    text = markdown(rows, family_stats(rows))
    assert "Families that miss a target" in text and "| decode | bad | +60.0% | dense_gemm 75 %" in text


# ------------------------------------------------------------------- the H200 model steps (docs/gpu.md)

MEASURED = SHIPPED.parents[2] / "benchmarks" / "measured" / "h200-2026-12-04" / "model_steps.json"
H200_POINTS = SHIPPED.parent / "h200_model_steps.toml"


def test_h200_points_are_derived_from_the_measured_steps_not_edited():
    module = load_benchmark("gpu_model_steps")
    source = "this repository: benchmarks/measured/h200-2026-12-04/model_steps.json (docs/gpu.md), benchmarks/gpu_model_steps.py"
    assert module.points_toml(json.loads(MEASURED.read_text()), source) == H200_POINTS.read_text()


def test_h200_points_load_as_device_time_points_with_a_pure_decode_batch():
    points = load_points(H200_POINTS)
    assert len(points) == 12 and {p.accelerator for p in points} == {"H200"}
    assert all(p.engine_profile == "none" and p.includes == () and p.tp == 1 for p in points)
    for p in points:
        if p.family == "decode":  # every prompt of the batch prefilled in one step: TPOT is pure decode
            assert p.max_batched_tokens == p.batch * p.input_tokens and p.output_tokens == 33
            assert p.input_tokens + p.output_tokens <= 8192


def test_scoring_over_processes_equals_scoring_in_this_process():
    points = load_points(H200_POINTS)[:4]
    assert score(points, workers=2) == score(points, workers=1)


def _limits(model: str = "llama-3.1-8b", accel: str = "H200", kv: str = "fp8e4m3", tp: int = 1,
            isl: int = 2048, osl: int = 2048) -> tuple[int, int]:
    from infralab.agent.public_points.engines import trtllm_bench_limits
    from infralab.sim.specs import load_accelerator, load_model
    return trtllm_bench_limits(load_model(model), load_accelerator(accel), "fp8e4m3", kv, tp, 1, isl, osl)


@pytest.mark.parametrize("case", [dict(), dict(kv="bf16"), dict(isl=128, osl=128), dict(model="llama-3.1-70b"),
                                  dict(model="llama-3.1-70b", accel="H100", tp=2), dict(isl=20000, osl=2000)])
def test_trtllm_bench_limits_follow_its_rounding(case):
    """trtllm-bench's batch: at least 64, a multiple of 32 below 256, of 128 below 1024, of 256 above,
    at most 4096; its token budget holds a whole prompt beside every running sequence (no chunking)."""
    batch, tokens = _limits(**case)
    isl = case.get("isl", 2048)
    assert 64 <= batch <= 4096
    step = 32 if batch <= 256 else 128 if batch <= 1024 else 256
    assert batch % step == 0
    assert tokens >= max(2048, isl + batch)


def test_trtllm_bench_limits_grow_with_the_kv_memory_a_request_needs_less_of():
    assert _limits(kv="fp8e4m3")[0] > _limits(kv="bf16")[0]  # an FP8 KV cache holds twice the requests
    assert _limits(isl=128, osl=128)[0] > _limits()[0]  # shorter requests: more of them fit
    assert _limits(model="llama-3.1-70b")[0] < _limits()[0]  # larger weights leave less KV memory


def test_a_tensorrt_llm_serving_point_gets_trtllm_bench_limits_and_a_vllm_one_vllm_defaults():
    fields = dict(family="serving", metric="output_tokens_per_s", num_prompts=10, input_tokens=2048,
                  output_tokens=2048, accelerator="H200", model="llama-3.1-8b", dtype="fp8e4m3", kv_dtype="fp8e4m3")
    trt = config_of(point("trt", engine_profile="trtllm", **fields))["engine"]
    assert (trt["max_num_seqs"], trt["max_batched_tokens"]) == _limits()
    assert "max_num_seqs" not in config_of(point("vllm", engine_profile="vllm-v1", **fields))["engine"]
    stated = config_of(point("stated", engine_profile="trtllm", max_num_seqs=7, **fields))["engine"]
    assert stated["max_num_seqs"] == 7 and "max_batched_tokens" not in stated  # a source's own limits win


def test_vllm_from_0_6_and_v1_leave_output_processing_off_the_steps_host_time():
    """vLLM PR #7049 (v0.6.0) overlaps output processing with the next forward; V1 runs it in the
    front-end process: their host time per step is vLLM v0's without that phase, still "sync"."""
    hosts = {name: config_of(point(name, engine_profile=name))["cost"]["host"] for name in ("vllm-v0", "vllm-v0.6", "vllm-v1")}
    assert hosts["vllm-v0.6"] == hosts["vllm-v1"] and hosts["vllm-v1"]["overlap"] == "sync"
    for batch in (1, 8, 256):
        def per_step(h: dict) -> float:
            return h["per_step_s"] + batch * h["per_request_s"]
        assert per_step(hosts["vllm-v0.6"]) < per_step(hosts["vllm-v0"])
