"""EPD (an encode pool in front of P/D), inline encoding and per-pool hardware: each mechanism on a
hand-worked case, invariants over random small EPD runs (hypothesis), and the input errors."""

from __future__ import annotations

import copy
import io
import math
from typing import Any

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.sim_fakes import sim_config

import infralab.sim.catalog
from infralab.config_io import dump_toml
from infralab.errors import InputError
from infralab.sim import api
from infralab.sim.cluster import simulate
from infralab.sim.config import ClusterConfig, CostConfig, EfficiencyConfig, HardwareConfig, TransferConfig
from infralab.sim.cost import CostModel, StepWork
from infralab.sim.encoder_cost import EncoderCost
from infralab.sim.pool_hardware import ClusterPools, cluster_accelerators
from infralab.sim.run import run_config_file
from infralab.sim.specs import LinkSpec, load_accelerator, load_encoder, load_link, load_model
from infralab.workload.request import Request

ENCODER = load_encoder("clip-vit-l-14-336")
H100 = load_accelerator("H100")
RDMA = load_link("rdma-400g")
EQUAL_EFFICIENCY = {"gemm": 0.5, "attention": 0.5}  # one rate for the encoder's GEMMs and attention


def doc(layout: str = "epd", share: float = 1.0, prompt: int = 1000, output: int = 4, n: int = 1,
        rate: float = 1.0, **cluster: Any) -> dict[str, Any]:
    """A config document: Llama-3-8B on H100s, `n` requests of fixed lengths, `share` with one image."""
    out: dict[str, Any] = {
        "model": "llama-3-8b",
        "hardware": {"accelerator": "H100"},
        "workload": {"kind": "synthetic", "num_requests": n, "arrival": {"kind": "poisson", "rate": rate},
                     "prompt": {"kind": "fixed", "value": prompt}, "output": {"kind": "fixed", "value": output},
                     "multimodal": {"image_share": share}},
        "cost": {"efficiency": dict(EQUAL_EFFICIENCY)},
        "cluster": {"layout": layout, "router": "round_robin", **cluster},
    }
    if layout == "colocated":
        del out["cluster"]["router"]
    return out


def same_column(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal columns, NaN equal to NaN in float columns."""
    return np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def without_multimodal(config: dict[str, Any], prompt: int) -> dict[str, Any]:
    out = copy.deepcopy(config)
    del out["workload"]["multimodal"]
    out["workload"]["prompt"]["value"] = prompt
    return out


# ---- the encoder's cost ---------------------------------------------------------------------------


def test_one_image_costs_its_flops_at_the_gemm_rate_on_one_rank():
    """ViT-L/14 at 336 px is compute-bound on an H100: with the GEMM and attention efficiencies
    equal, an image takes exactly its FLOPs / (BF16 peak x efficiency)."""
    cost = CostModel(load_model("llama-3-8b"), H100, CostConfig(efficiency=EfficiencyConfig(**EQUAL_EFFICIENCY)))
    encoder = EncoderCost(ENCODER, cost, ENCODER.tokens_per_image)
    expected = ENCODER.flops_per_image() / (H100.peak("bf16") * 0.5)
    assert encoder.images_s(1) == pytest.approx(expected, rel=1e-12)
    assert encoder.images_s(3) == pytest.approx(3 * expected, rel=1e-12)
    assert encoder.images_s(0) == 0.0
    assert encoder.embedding_bytes(2) == 2 * 576 * ENCODER.out_hidden_size * 2


def test_tp_divides_the_encoder_compute_and_adds_two_all_reduces_per_block():
    model = load_model("llama-3-8b")
    one = EncoderCost(ENCODER, CostModel(model, H100, CostConfig()), 576)
    tp2_cost = CostModel(model, H100, CostConfig(), tp=2, tp_link=load_link("nvlink4"))
    two = EncoderCost(ENCODER, tp2_cost, 576)
    collectives = 2 * ENCODER.num_layers * tp2_cost.all_reduce_s(576 * ENCODER.hidden_size * 2)
    assert collectives > 0
    assert two.images_s(1) == pytest.approx(one.images_s(1) / 2 + collectives, rel=1e-12)


# ---- EPD: the encode stage inside TTFT ------------------------------------------------------------


def test_epd_ttft_is_pd_ttft_plus_encode_compute_and_embedding_transfer():
    """One request with one image, worked by hand: the encode instance encodes it at once (FLOPs /
    (peak x efficiency)), its 576 x 2304 x 2 bytes of embeddings cross the encode NIC (latency +
    bytes / bandwidth), and from then on it is the P/D run of a text prompt of 1000 + 576 tokens."""
    epd = api.run(doc())
    pd = api.run(without_multimodal(doc("disaggregated"), 1000 + 576))
    compute = ENCODER.flops_per_image() / (H100.peak("bf16") * 0.5)
    transfer = RDMA.latency + 576 * ENCODER.out_hidden_size * 2 / RDMA.bandwidth
    req = epd.requests
    assert req["images"][0] == 1 and req["image_tokens"][0] == 576 and req["prompt_tokens"][0] == 1576
    assert req["encode_instance"][0] == "encode-0"
    assert req["encode_end_s"][0] - req["encode_start_s"][0] == pytest.approx(compute, rel=1e-12)
    assert req["encode_s"][0] == pytest.approx(compute + transfer, rel=1e-9)
    assert req["first_scheduled_s"][0] == req["embeddings_ready_s"][0]
    assert req["ttft_s"][0] == pytest.approx(pd.requests["ttft_s"][0] + compute + transfer, rel=1e-9)
    assert req["tpot_s"][0] == pytest.approx(pd.requests["tpot_s"][0], rel=1e-9)
    encode = epd.summary.encode
    assert encode["encode_pool"] is True and encode["image_requests"] == 1
    assert encode["encode_s"]["mean"] == pytest.approx(compute + transfer, rel=1e-9)
    assert 0 < encode["encode_pool_busy"]["max"] <= 1


def test_requests_without_images_never_touch_the_encode_pool():
    result = api.run(doc(share=0.5, n=40, rate=20.0, encode_instances=2), timeline=True)
    req = result.requests
    has = req["images"] > 0
    assert 0 < has.sum() < len(has)
    assert all(name.startswith("encode-") for name in req["encode_instance"][has])
    assert all(name == "" for name in req["encode_instance"][~has])
    assert np.isnan(req["encode_s"][~has]).all()
    assert (req["prompt_tokens"][has] == 1000 + 576).all() and (req["prompt_tokens"][~has] == 1000).all()
    encoded = [dict(iv.args)["request"] for iv in result.record.intervals if iv.track.startswith("instance/encode-")]
    assert sorted(encoded) == sorted(req["id"][has].tolist())  # one encode interval per image request
    embeddings = [iv for iv in result.record.intervals if iv.track.startswith("link/nic-encode-")]
    assert len(embeddings) == has.sum()


def test_epd_without_images_is_exactly_pd():
    """image_share = 0: no request has images, so the EPD layout is P/D (the same columns, bit for bit)."""
    config = doc(share=0.0, n=30, rate=15.0, encode_instances=2)
    epd = api.run(config)
    pd = api.run(without_multimodal(doc("disaggregated", n=30, rate=15.0), 1000))
    for name, column in pd.requests.items():
        assert same_column(column, epd.requests[name]), name
    assert epd.summary.latency == pd.summary.latency and epd.summary.encode["image_requests"] == 0


def test_inline_encoding_adds_the_encoder_time_to_the_first_prefill_step():
    """Colocated: the step that first computes the prompt runs the encoder first (as vLLM's model
    runner does), so TTFT = encoder time + that step's language-model time."""
    result = api.run(doc("colocated"))
    cost = CostModel(load_model("llama-3-8b"), H100, CostConfig(efficiency=EfficiencyConfig(**EQUAL_EFFICIENCY)))
    encode = ENCODER.flops_per_image() / (H100.peak("bf16") * 0.5)
    req = result.requests
    assert req["encode_instance"][0] == "instance-0" and req["encode_s"][0] == pytest.approx(encode, rel=1e-12)
    assert req["ttft_s"][0] == pytest.approx(encode + cost.step(StepWork.prefill(1576)).total_s, rel=1e-12)
    assert result.summary.encode["encode_pool"] is False


# ---- per-pool hardware ------------------------------------------------------------------------------


def test_decode_pool_tp_changes_only_the_decode_steps():
    """Decode pool at tp = 2, prefill at [hardware]'s tp = 1: prefill steps cost what they did,
    decode steps what the tp = 2 instance's cost model says; the KV that crosses is the decode
    instance's layout (Llama-3-8B's 8 KV heads split, the same bytes), over min(1, 2) = 1 NIC."""
    model = load_model("llama-3-8b")
    one = CostModel(model, H100, CostConfig())
    two = CostModel(model, H100, CostConfig(), tp=2, tp_link=load_link("nvlink4"))
    link = LinkSpec(name="test", bandwidth=50e9, latency=20e-6)
    cfg = sim_config(cluster=ClusterConfig(layout="disaggregated", transfer=TransferConfig(first_token="prefill")))
    prompt = 3000
    record = simulate(cfg, [Request(0, 0.0, prompt, 4)], one, link, pools=ClusterPools({"decode": two}))
    rec = record.requests[0]
    assert rec.prefill_end_s == one.step(StepWork.prefill(prompt)).total_s
    assert rec.kv_transfer_end_s - rec.kv_transfer_start_s == pytest.approx(
        link.latency + prompt * two.kv_bytes_per_token() / link.bandwidth, rel=1e-12)
    assert rec.token_times_s[1] == rec.decode_scheduled_s + two.step(StepWork.decode(1, prompt + 1)).total_s
    assert two.step(StepWork.decode(1, prompt + 1)).total_s != one.step(StepWork.decode(1, prompt + 1)).total_s
    blocks = record.resources["cluster"]["kv_capacity_blocks_per_pool"]
    assert blocks["decode"] > blocks["prefill"]  # twice the HBM, the same weights


def test_cluster_accelerators_sum_instances_times_tp_times_pp_over_pools():
    config = doc(encode_instances=3, prefill_instances=2, decode_instances=1)
    config["hardware"]["tp"] = 2
    config["cluster"]["pool_hardware"] = {"encode": {"tp": 1}, "decode": {"tp": 4, "pp": 2, "accelerator": "H200"}}
    result = api.run(config)
    assert cluster_accelerators(result.config) == 3 * 1 + 2 * 2 + 1 * 4 * 2
    run = result.summary.run
    assert run["accelerators"] == 15
    assert run["pools"]["decode"] == {"instances": 1, "accelerator": "H200", "tp": 4, "pp": 2}
    plain = sim_config(cluster=ClusterConfig(layout="disaggregated", prefill_instances=2, decode_instances=3),
                       hardware=HardwareConfig(accelerator="H100", tp=2))
    assert cluster_accelerators(plain) == 10


# ---- whole runs (hypothesis) ------------------------------------------------------------------------


LAYOUT_FIELDS = {
    "epd": lambda encoders, router: {"encode_instances": encoders, "encode_router": router,
                                     "prefill_instances": 2, "decode_instances": 2},
    "disaggregated": lambda encoders, router: {"prefill_instances": 2, "decode_instances": 1},
    "colocated": lambda encoders, router: {"instances": 2},
}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=st.sampled_from(sorted(LAYOUT_FIELDS)), share=st.sampled_from([0.0, 0.3, 1.0]),
       images=st.integers(1, 3), encoders=st.integers(1, 3),
       router=st.sampled_from(["round_robin", "least_outstanding_tokens"]), seed=st.integers(0, 1000),
       n=st.integers(1, 25))
def test_every_request_finishes_exactly_once_and_runs_repeat(layout, share, images, encoders, router, seed, n):
    """Random small runs, encode pool or inline: every request finishes once, its encode stage
    lies inside its TTFT, and the same seed gives the same columns and summary."""
    config = doc(layout, share=share, n=n, rate=50.0, **LAYOUT_FIELDS[layout](encoders, router))
    config["workload"]["multimodal"]["images_per_request"] = images
    config["workload"]["output"]["value"] = 8
    config["run"] = {"seed": seed}
    first, second = api.run(config), api.run(config)
    req = first.requests
    assert sorted(req["id"].tolist()) == list(range(n))
    assert not np.isnan(req["finish_s"]).any() and first.summary.requests.completed == n
    has = req["images"] > 0
    assert (req["image_tokens"][has] == images * 576).all()
    assert (req["encode_s"][has] <= req["ttft_s"][has]).all()  # the encode stage is inside TTFT
    if layout == "epd":  # encoded before the prefill starts
        assert (req["embeddings_ready_s"][has] <= req["first_scheduled_s"][has]).all()
    else:  # encoded in a prefill step, before its first token
        assert (req["first_scheduled_s"][has] <= req["encode_start_s"][has]).all()
        assert (req["encode_end_s"][has] <= req["first_token_s"][has]).all()
    for name, column in first.requests.items():
        assert same_column(column, second.requests[name]), name
    assert first.summary.to_json() == second.summary.to_json()


# ---- input errors -----------------------------------------------------------------------------------


def _error(config: dict[str, Any]) -> InputError:
    with pytest.raises(InputError) as info:
        api.run(config)
    return info.value


def test_an_encode_pool_without_multimodal_requests_is_an_error():
    config = doc()
    del config["workload"]["multimodal"]
    assert "cluster.layout" in _error(config).where


@pytest.mark.parametrize("change, field", [
    (lambda c: c["cluster"].update(layout="disaggregated"), "cluster.encode_instances"),
    (lambda c: c["workload"]["multimodal"].update(image_share=1.5), "workload.multimodal.image_share"),
    (lambda c: c["workload"]["multimodal"].update(image_share=-0.1), "workload.multimodal.image_share"),
    (lambda c: c["workload"]["multimodal"].update(images_per_request=0), "workload.multimodal.images_per_request"),
    (lambda c: c["workload"]["multimodal"].update(encoder="vit-huge"), "workload.multimodal.encoder"),
    (lambda c: c["workload"]["multimodal"].update(tokens_per_image=10_000_000), "workload.multimodal"),
    (lambda c: c["cluster"].update(pool_hardware={"encode": {"pp": 2}}), "cluster.pool_hardware.encode.pp"),
    (lambda c: c["cluster"].update(pool_hardware={"decode": {"tp": 3}}), "cluster.pool_hardware.decode"),
    (lambda c: c["cluster"].update(pool_hardware={"prefill": {"accelerator": "B200"}}),
     "cluster.pool_hardware.prefill.accelerator"),
    (lambda c: c["cluster"].update(embedding_transfer={"link": "missing.toml"}), "cluster.embedding_transfer.link"),
    (lambda c: c["cluster"].update(pool_hardware={"encode": {"tp": 32}}), "cluster.pool_hardware.encode.tp"),
])
def test_bad_epd_fields_name_the_field(change, field):
    config = doc(encode_instances=2)
    change(config)
    assert field in _error(config).where


def test_pool_hardware_for_a_pool_the_layout_lacks_is_an_error():
    config = doc("disaggregated")
    config["cluster"]["pool_hardware"] = {"encode": {"tp": 2}}
    assert "cluster.pool_hardware.encode" in _error(config).where
    config = doc("colocated")
    config["cluster"]["pool_hardware"] = {"prefill": {"tp": 2}}
    assert "cluster.pool_hardware.prefill" in _error(config).where


def test_the_resolved_config_of_an_epd_run_with_spec_files_runs_the_same(tmp_path):
    """Spec files named by relative paths (encoder, a pool's accelerator, the embedding link) are
    written as absolute paths, so resolved_config.toml runs the same from another folder."""
    specs = tmp_path / "specs"
    specs.mkdir()
    catalog = Path(infralab.sim.catalog.__file__).parent
    for kind, name in (("encoders", "clip-vit-l-14-336"), ("accelerators", "H200"), ("links", "rdma-400g")):
        (specs / f"{name}.toml").write_bytes((catalog / kind / f"{name}.toml").read_bytes())
    config = doc(share=0.5, n=10, rate=10.0)
    config["workload"]["multimodal"]["encoder"] = "specs/clip-vit-l-14-336.toml"
    config["cluster"]["pool_hardware"] = {"decode": {"accelerator": "specs/H200.toml"}}
    config["cluster"]["embedding_transfer"] = {"link": "specs/rdma-400g.toml"}
    (tmp_path / "cfg.toml").write_text(dump_toml(config), encoding="utf-8")
    first = api.run(tmp_path / "cfg.toml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "resolved.toml").write_text(first.resolved_config, encoding="utf-8")
    again = api.run(elsewhere / "resolved.toml")
    for name, column in first.requests.items():
        assert same_column(column, again.requests[name]), name


def test_the_same_seed_writes_the_same_bytes(tmp_path):
    """`sim run` of an EPD config twice: the same requests.csv, summary.json and trace.json, byte for
    byte; the trace has the encode instance's track and its NIC's."""
    config = doc(share=0.4, n=30, rate=20.0, encode_instances=2)
    config["cluster"]["pool_hardware"] = {"decode": {"tp": 2}}
    (tmp_path / "cfg.toml").write_text(dump_toml(config), encoding="utf-8")
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        run_config_file(tmp_path / "cfg.toml", out, stdout=io.StringIO())
    for name in ("requests.csv", "summary.json", "trace.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    trace = (outs[0] / "trace.json").read_text(encoding="utf-8")
    assert "instance/encode-0" in trace and "link/nic-encode-0" in trace
    header = (outs[0] / "requests.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header.endswith(
        "e2e_s,images,image_tokens,encode_instance,encode_start_s,encode_end_s,embeddings_ready_s,encode_s")


def test_configs_without_the_new_knobs_report_as_before():
    plain = api.run(without_multimodal(doc("disaggregated"), 1000))
    assert plain.summary.encode is None and "accelerators" not in plain.summary.run
    assert "images" not in plain.requests and "encode" not in plain.summary.to_json()
    assert "encode_instances" not in plain.resolved_config and "pool_hardware" not in plain.resolved_config
    assert not math.isnan(plain.requests["ttft_s"][0])
