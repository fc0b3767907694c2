"""Vidur's profiles as calibration rows (infralab/vidur_profile.py), the lookup's interpolation and
out-of-range rules (sim/calibration.py), the cost model reading them, host overlap, vLLM's batch
defaults and `infralab sim catalog`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infralab.calibration_table import CalibrationRow
from infralab.cli import main
from infralab.errors import InputError
from infralab.locations import resolve_path
from infralab.sim.calibration import CalibrationTable, load_calibration, scale
from infralab.sim.config import CostConfig, EngineConfig, HostOverheadConfig, vllm_batch_defaults
from infralab.sim.cost import CostModel, StepWork
from infralab.sim.specs import load_accelerator, load_link, load_model
from infralab.vidur_profile import HOST_PHASES, HOST_PHASES_BEFORE_OUTPUTS, VIDUR_DEVICES, host_rows, read_vidur_profile
from support.toml_fixtures import synthetic_config

A100 = load_accelerator("A100")
H100 = load_accelerator("H100")
DEVICE = A100.calibration_device
PEAKS = (A100.peak("fp16"), A100.hbm_bandwidth)
LLAMA2_7B = load_model("llama-2-7b")

OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
MLP_HEADER = ",".join(f"time_stats.{op}.{stat}" for op in OPS for stat in ("min", "max", "mean", "median", "std"))
MLP_HEADER += ",n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers"


def mlp_line(tokens: int, tp: int, median_ms: float = 0.5) -> str:
    cells = []
    for i, _ in enumerate(OPS):
        value = median_ms * (i + 1)  # op i takes (i + 1) x median_ms
        cells += [str(value)] * 4 + ["0.0"]
    return ",".join(cells + ["32", "32", "4096", "11008", "32768", "True", str(tokens), str(tp)])


def shared_vidur_profile(relative: str) -> Path:
    """A file or folder of Vidur's profile tree in the shared data folder; the test is skipped
    where there is none."""
    try:
        path = resolve_path(f"@data/profiles/vidur/{relative}", Path.cwd())
    except InputError:
        pytest.skip("no shared data folder")
    if not path.exists():
        pytest.skip(f"no {relative} in the shared data folder's Vidur profile")
    return path


def vidur_tree(root: Path) -> Path:
    """A small profile tree in Vidur's format: one mlp.csv, one attention.csv, one all_reduce.csv,
    one cpu_overheads.csv."""
    mlp = root / "compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
    mlp.parent.mkdir(parents=True)
    mlp.write_text(MLP_HEADER + "\n" + mlp_line(64, 1) + "\n" + mlp_line(128, 2, 0.25) + "\n")
    attention = root / "compute/a100/meta-llama/Llama-2-70b-hf/attention.csv"
    attention.parent.mkdir(parents=True)
    stats = lambda op, v: ",".join([v] * 4 + ["0.0"])  # noqa: E731
    head = ",".join(f"time_stats.{op}.{s}" for op in ("attn_input_reshape", "attn_decode", "attn_output_reshape",
                                                      "attn_prefill") for s in ("min", "max", "mean", "median", "std"))
    head += ",n_embd,n_q_head,n_kv_head,block_size,num_tensor_parallel_workers,max_model_len,batch_size," \
            "prefill_chunk_size,kv_cache_size,is_prefill,attention_backend,profile_method"
    tail = "8192,64,8,16,2,4096"
    attention.write_text("\n".join([
        head,
        f"{stats('r', '0.0')},{stats('d', '0.02')},{stats('o', '0.001')},,,,,,{tail},4,0,512,False,FA,K",
        f"{stats('r', '0.0')},{stats('d', '0.02')},{stats('o', '0.001')},,,,,,{tail},4,0,0,False,FA,K",  # no KV: skipped
        f"{stats('r', '0.0')},,,,,,{stats('o', '0.0')},{stats('p', '0.1')},{tail},1,256,768,True,FA,K",
    ]) + "\n")
    net = root / "network/a100_dgx/all_reduce.csv"
    net.parent.mkdir(parents=True)
    net.write_text(",time_stats.all_reduce.min,time_stats.all_reduce.max,time_stats.all_reduce.mean,"
                   "time_stats.all_reduce.median,time_stats.all_reduce.std,rank,num_workers,size,collective,"
                   "devices_per_node,max_devices_per_node\n"
                   "0,0.03,0.03,0.03,0.03,0,0,4,1048576,all_reduce,4,8\n"
                   "1,0.09,0.09,0.09,0.09,0,0,4,1048576,all_reduce,2,8\n")  # across nodes: skipped
    cpu = root / "cpu_overhead/a100/cpu_overheads.csv"
    cpu.parent.mkdir(parents=True)
    phases = ("schedule", "sampler_e2e", "prepare_inputs_e2e", "process_model_outputs")
    cpu.write_text("," + ",".join(f"{p}_median" for p in phases) + ",model_name,batch_size,tensor_parallel_degree\n"
                   "0,0.1,0.2,0.3,0.4,meta-llama/Llama-2-7b-hf,8,1\n")
    return root


# ---- reading Vidur's format --------------------------------------------------------------------


def test_mlp_rows_map_onto_the_simulators_operators(tmp_path):
    rows = read_vidur_profile(vidur_tree(tmp_path))
    mlp = [r for r in rows if r.shape_dict.get("M", r.shape_dict.get("T")) == 64 and r.kernel != "prefill_attention"]
    by = {(r.kernel, tuple(sorted(r.shape_dict.items()))): r for r in mlp}
    # Llama-2-7B at TP 1, 64 tokens: op i of the file took (i + 1) x 0.5 ms
    assert by[("matmul", (("K", 4096), ("M", 64), ("N", 12288)))].median_s == pytest.approx(3 * 0.5e-3)  # qkv
    assert by[("matmul", (("K", 4096), ("M", 64), ("N", 4096)))].median_s == pytest.approx(5 * 0.5e-3)  # o
    assert by[("matmul", (("K", 4096), ("M", 64), ("N", 22016)))].median_s == pytest.approx(7 * 0.5e-3)  # gate+up
    assert by[("matmul", (("K", 11008), ("M", 64), ("N", 4096)))].median_s == pytest.approx(9 * 0.5e-3)  # down
    assert by[("rope", (("D", 128), ("H", 32), ("HKV", 32), ("T", 64)))].median_s == pytest.approx(4 * 0.5e-3)
    assert by[("silu_mul", (("D", 11008), ("T", 64)))].median_s == pytest.approx(8 * 0.5e-3)
    assert by[("residual_add", (("D", 4096), ("T", 64)))].median_s == pytest.approx(10 * 0.5e-3)
    norms = [r.median_s for r in mlp if r.kernel == "rms_norm"]
    assert sorted(norms) == pytest.approx([2 * 0.5e-3, 6 * 0.5e-3])
    assert {r.dtype for r in rows} == {"fp16"} and {r.device for r in rows} == {VIDUR_DEVICES["a100"]}
    tp2 = [r for r in rows if r.kernel == "matmul" and r.shape_dict["M"] == 128]
    assert {(r.shape_dict["N"], r.shape_dict["K"]) for r in tp2} == {(6144, 4096), (4096, 2048), (11008, 4096), (4096, 5504)}


def test_attention_network_and_host_rows(tmp_path):
    rows = read_vidur_profile(vidur_tree(tmp_path))
    decode = [r for r in rows if r.kernel == "paged_decode_attention"]
    assert len(decode) == 1  # the row with an empty KV cache is skipped
    assert decode[0].shape_dict == {"B": 4, "H": 32, "HKV": 4, "D": 128, "T": 512}
    assert decode[0].median_s == pytest.approx(0.021e-3)  # decode + output reshape
    (prefill,) = [r for r in rows if r.kernel == "prefill_attention"]
    assert prefill.shape_dict == {"Q": 256, "T": 1024, "H": 32, "HKV": 4, "D": 128}  # 768 cached + 256 new
    assert prefill.median_s == pytest.approx(0.1e-3)
    (all_reduce,) = [r for r in rows if r.kernel == "all_reduce"]  # the 2-node row is not TP's
    assert all_reduce.shape_dict == {"W": 4, "N": 1048576} and all_reduce.variant == "a100_dgx"
    (host,) = [r for r in rows if r.kernel == "engine_host"]
    assert host.median_s == pytest.approx(1.0e-3) and host.shape_dict == {"B": 8, "W": 1}


def test_host_rows_sum_only_the_phases_asked(tmp_path):
    """The fixture's phases take 0.1, 0.2, 0.3 and 0.4 ms (schedule, sampler, prepare, outputs)."""
    csv_path = vidur_tree(tmp_path) / "cpu_overhead/a100/cpu_overheads.csv"
    (every,) = host_rows(csv_path)
    (before,) = host_rows(csv_path, HOST_PHASES_BEFORE_OUTPUTS)
    assert every.median_s == pytest.approx(1.0e-3) and before.median_s == pytest.approx(0.6e-3)
    assert before.kernel == "engine_host" and before.shape_dict == {"B": 8, "W": 1}
    with pytest.raises(InputError, match="phases: unknown phases .'detokenize'."):
        host_rows(csv_path, ("schedule", "detokenize"))
    with pytest.raises(InputError, match="no phase given"):
        host_rows(csv_path, ())
    with pytest.raises(InputError, match="is not a file"):
        host_rows(tmp_path / "missing.csv")


def test_the_async_output_host_profile_is_the_fit_without_output_processing():
    """agent/public_points/engines.py's VLLM_ASYNC_OUTPUT_HOST: the least-squares line through the
    shared profile's Llama-2-7B host rows without process_model_outputs, to its three digits."""
    import numpy as np

    from infralab.agent.public_points.engines import VLLM_ASYNC_OUTPUT_HOST, VLLM_V0_HOST
    path = shared_vidur_profile("cpu_overhead/a100/cpu_overheads.csv")
    for phases, host in ((HOST_PHASES_BEFORE_OUTPUTS, VLLM_ASYNC_OUTPUT_HOST), (HOST_PHASES, VLLM_V0_HOST)):
        rows = [r for r in host_rows(path, phases) if r.variant == "meta-llama/Llama-2-7b-hf"]
        slope, intercept = np.polyfit([r.shape_dict["B"] for r in rows], [r.median_s for r in rows], 1)
        assert float(f"{intercept:.3g}") == host["per_step_s"] and float(f"{slope:.3g}") == host["per_request_s"]


def test_a_subfolder_reads_only_what_is_under_it(tmp_path):
    rows = read_vidur_profile(vidur_tree(tmp_path) / "network")
    assert {r.kernel for r in rows} == {"all_reduce"}


def test_bad_profile_input_is_one_error_naming_file_line_and_column(tmp_path):
    with pytest.raises(InputError, match="is not a folder"):
        read_vidur_profile(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no Vidur profile file"):
        read_vidur_profile(tmp_path / "empty")
    root = vidur_tree(tmp_path / "tree")
    mlp = root / "compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
    mlp.write_text(mlp.read_text().replace(",64,1\n", ",sixty-four,1\n"))
    with pytest.raises(InputError) as info:
        read_vidur_profile(root)
    assert "mlp.csv:2" in info.value.where and "num_tokens" in info.value.where


def test_the_shipped_profile_reads_as_published():
    """One figure checked against the file by eye: Llama-2-7B on A100, TP 1, 4,096 tokens, the QKV
    projection's median (first data row of mlp.csv: 1.911 ms)."""
    root = shared_vidur_profile("compute/a100/meta-llama/Llama-2-7b-hf")
    table = CalibrationTable(read_vidur_profile(root))
    assert table.exact("matmul", "fp16", DEVICE, (("K", 4096), ("M", 4096), ("N", 12288))) == pytest.approx(1.886e-3, rel=0.02)


# ---- interpolation and the rule outside the measured sizes ------------------------------------


def gemm(m: int, seconds: float, n: int = 1024, k: int = 1024) -> CalibrationRow:
    return CalibrationRow("matmul", "vidur", (("M", m), ("N", n), ("K", k)), "fp16", DEVICE, seconds,
                          bytes=2 * (m * k + k * n + m * n), flops=2 * m * n * k)


def test_between_two_measured_sizes_the_time_is_linear_in_the_size():
    t = CalibrationTable([gemm(64, 10e-6), gemm(128, 20e-6)])
    assert t.lookup("matmul", "fp16", DEVICE, {"M": 96, "N": 1024, "K": 1024}, peaks=PEAKS) == pytest.approx(15e-6)
    assert t.lookup("matmul", "fp16", DEVICE, {"M": 80, "N": 1024, "K": 1024}, peaks=PEAKS) == pytest.approx(12.5e-6)
    assert t.lookup("matmul", "fp16", DEVICE, {"M": 128, "N": 1024, "K": 1024}, peaks=PEAKS) == 20e-6  # measured


def test_outside_the_measured_sizes_the_nearest_end_is_scaled_by_work():
    t = CalibrationTable([gemm(64, 10e-6), gemm(128, 20e-6)])
    # M=128: 268 MFLOP in 2.6 MB -> on A100 0.86 us compute vs 1.3 us memory: memory-bound,
    # so a larger M scales by bytes: (2*(256*1024) + 1024*1024) / (2*(128*1024) + 1024*1024)
    above = t.lookup("matmul", "fp16", DEVICE, {"M": 256, "N": 1024, "K": 1024}, peaks=PEAKS)
    assert above == pytest.approx(20e-6 * (2 * 256 * 1024 + 1024 * 1024) / (2 * 128 * 1024 + 1024 * 1024))
    below = t.lookup("matmul", "fp16", DEVICE, {"M": 16, "N": 1024, "K": 1024}, peaks=PEAKS)
    assert below == pytest.approx(10e-6 * (2 * 16 * 1024 + 1024 * 1024) / (2 * 64 * 1024 + 1024 * 1024))
    assert above == scale(gemm(128, 20e-6), {"M": 256, "N": 1024, "K": 1024}, PEAKS)


def test_the_line_whose_end_is_nearest_the_query_is_used():
    # Query (M=64, N=1024, K=1400): a K line ends at 1024 (x1.37 away), an N line ends at 4096 (x4 away).
    near = gemm(64, 10e-6, n=1024, k=1024)
    far = gemm(64, 99e-6, n=4096, k=1400)
    t = CalibrationTable([near, far])
    got = t.lookup("matmul", "fp16", DEVICE, {"M": 64, "N": 1024, "K": 1400}, peaks=PEAKS)
    assert got == pytest.approx(scale(near, {"M": 64, "N": 1024, "K": 1400}, PEAKS))


def test_a_shape_on_no_line_falls_back_to_the_nearest_row():
    t = CalibrationTable([gemm(64, 10e-6)])
    query = {"M": 100, "N": 2000, "K": 3000}  # every field differs
    assert t.along_line("matmul", "fp16", DEVICE, query, PEAKS) is None
    assert t.lookup("matmul", "fp16", DEVICE, query, peaks=PEAKS) == pytest.approx(scale(gemm(64, 10e-6), query, PEAKS))


def test_load_calibration_merges_a_bench_table_and_a_vidur_folder(tmp_path):
    from infralab.calibration_table import render_table

    csv = tmp_path / "bench.csv"
    csv.write_text(render_table([gemm(8, 1e-6)]))
    tree = vidur_tree(tmp_path / "vidur")
    merged = load_calibration(csv, tree)
    assert len(merged.rows) == 1 + len(read_vidur_profile(tree))
    assert load_calibration(None, None) is None
    assert len(load_calibration(csv, None).rows) == 1


# ---- the cost model with Vidur rows ------------------------------------------------------------


def test_cost_model_uses_vidur_rows_for_gemms_small_ops_attention_and_all_reduce(tmp_path):
    table = load_calibration(None, vidur_tree(tmp_path))
    cfg = CostConfig(dtype="bf16", kv_dtype="bf16")  # fp16 rows stand in for bf16 (same rate)
    one = CostModel(LLAMA2_7B, A100, cfg, calibration=table)
    assert {"dense_gemm", "lm_head", "small_ops"} <= one.calibrated_ops
    assert one.gemm_call_s("qkv", 64) == pytest.approx(3 * 0.5e-3)  # measured
    assert one.small_op_call_s("silu_mul", 64) == pytest.approx(8 * 0.5e-3)
    seventy = CostModel(load_model("llama-2-70b"), A100, cfg, tp=2, tp_link=load_link("nvlink3"), calibration=table)
    assert "attention" in seventy.calibrated_ops
    assert seventy.decode_attention_layer_s(4, 512) == pytest.approx(0.021e-3)
    assert seventy.prefill_attention_layer_s(256, 768) == pytest.approx(0.1e-3)
    four = CostModel(load_model("llama-2-70b"), A100, cfg, tp=4, tp_link=load_link("nvlink3"), calibration=table)
    assert "tp_collectives" in four.calibrated_ops
    assert four.all_reduce_s(2 * 1048576) == pytest.approx(0.03e-3)  # 1 Mi elements of 2 bytes, 4 GPUs


def test_a_step_with_several_prefill_chunks_is_timed_as_chunks_of_their_mean_size(tmp_path):
    table = load_calibration(None, vidur_tree(tmp_path))
    cost = CostModel(load_model("llama-2-70b"), A100, CostConfig(), tp=2, tp_link=load_link("nvlink3"),
                     calibration=table)
    two = StepWork.prefill_chunk(256, 768) + StepWork.prefill_chunk(256, 768)
    assert cost.step(two).by_op["attention"] == pytest.approx(2 * 80 * 0.1e-3)


# ---- host time: sync and async -----------------------------------------------------------------


def test_sync_host_adds_and_async_host_overlaps_with_a_residue():
    host = dict(per_step_s=15e-3, per_request_s=1e-4)
    sync = CostModel(LLAMA2_7B, A100, CostConfig(host=HostOverheadConfig(**host)))
    overlap = CostModel(LLAMA2_7B, A100, CostConfig(host=HostOverheadConfig(**host, overlap="async", async_residue_s=5e-5)))
    small, big = StepWork.decode(4, 400), StepWork.prefill(4000)
    for work in (small, big):
        s, a = sync.step(work), overlap.step(work)
        assert s.device_s == a.device_s and s.host_s == a.host_s
        assert s.total_s == pytest.approx(s.device_s + s.host_s)
        assert a.total_s == pytest.approx(max(a.device_s, a.host_s) + 5e-5)
    assert overlap.step(small).host_s > overlap.step(small).device_s  # a small decode is host-bound
    assert overlap.step(big).device_s > overlap.step(big).host_s  # a long prefill hides the host


def test_async_decode_fast_path_equals_the_step():
    cfg = CostConfig(host=HostOverheadConfig(per_step_s=9e-4, per_request_s=2e-5, overlap="async", async_residue_s=1e-5))
    cost = CostModel(LLAMA2_7B, A100, cfg)
    for seqs, ctx in ((1, 10), (7, 7000), (200, 200_000)):
        assert cost.decode_step_s(seqs, ctx) == cost.step(StepWork.decode(seqs, ctx)).total_s


# ---- vLLM's batch defaults ---------------------------------------------------------------------


def test_batch_defaults_follow_vllm_for_the_accelerator():
    assert vllm_batch_defaults(H100.usable_memory, H100.calibration_device) == (1024, 8192)
    assert vllm_batch_defaults(A100.usable_memory, A100.calibration_device) == (256, 2048)  # the A100 exception
    assert vllm_batch_defaults() == (256, 2048)  # unknown device
    assert vllm_batch_defaults(40 * 2**30, "NVIDIA L40S") == (256, 2048)  # under 70 GiB


def test_engine_defaults_keep_set_limits_and_apply_vllms_caps():
    h100 = (H100.usable_memory, H100.calibration_device)
    assert EngineConfig().with_vllm_defaults(*h100) == EngineConfig(max_num_seqs=1024, max_batched_tokens=8192)
    set_both = EngineConfig(max_num_seqs=7, max_batched_tokens=99)
    assert set_both.with_vllm_defaults(*h100) is set_both
    # a default token budget is at most max_num_seqs x context; a default max_num_seqs at most the budget
    assert EngineConfig(max_num_seqs=1).with_vllm_defaults(*h100, context_length=4096).max_batched_tokens == 4096
    assert EngineConfig(max_batched_tokens=512).with_vllm_defaults(*h100).max_num_seqs == 512


# ---- `infralab sim catalog` --------------------------------------------------------------------


def test_catalog_lists_and_shows_a_models_kv_capacity(capsys):
    assert main(["sim", "catalog"]) == 0
    listing = capsys.readouterr().out
    assert "llama-2-7b" in listing and "llama-2-70b" in listing and "nvlink3" in listing
    args = ["sim", "catalog", "llama-2-70b", "--accelerator", "A100", "--tp", "4", "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    model = load_model("llama-2-70b")
    assert data["weight_bytes"] == model.weight_bytes("bf16") == 2 * model.num_params
    assert data["kv_bytes_per_token"] == 80 * 2 * 8 * 128 * 2  # layers x K,V x KV heads x head dim x bf16
    assert data["state_bytes_per_seq"] == 0 and data["context_length"] == 4096
    kv = data["kv_capacity"]
    assert (kv["max_num_seqs"], kv["max_batched_tokens"]) == (256, 2048)  # vLLM's A100 defaults
    cost = CostModel(model, A100, CostConfig(), tp=4, tp_link=load_link("nvlink4"))
    plan = cost.memory_plan(0.9, 256, 2048)
    assert kv["kv_tokens"] == plan.kv_tokens and kv["kv_blocks"] == plan.kv_tokens // 16
    assert main(["sim", "catalog", "llama-2-7b", "--accelerator", "H100"]) == 0
    text = capsys.readouterr().out
    assert "kv_capacity.kv_blocks:" in text and f"weight_bytes: {LLAMA2_7B.weight_bytes('bf16')}" in text


def test_catalog_unknown_name_is_one_error(capsys):
    assert main(["sim", "catalog", "llama-9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "llama-9" in err[0] and "llama-2-7b" in err[0]


# ---- a run with a Vidur profile ----------------------------------------------------------------

RUN = (synthetic_config(model="llama-2-7b", accelerator="A100", num_requests=5, rate=2.0, prompt=100, output=10)
       + '\n[cost]\nvidur_profile = "{profile}"\n')


def test_a_run_reads_a_vidur_folder_and_reports_its_kv_capacity(tmp_path, capsys):
    vidur_tree(tmp_path / "vidur")
    config = tmp_path / "run.toml"
    config.write_text(RUN.format(profile="vidur"))  # relative to the config's folder
    assert main(["sim", "run", str(config), "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    cost = CostModel(LLAMA2_7B, A100, CostConfig())
    tokens = cost.kv_capacity_tokens(0.9, 256, max_batched_tokens=2048)  # vLLM's A100 defaults
    assert summary["kv_cache"] == {"kv_blocks": tokens // 16, "block_size": 16, "kv_tokens": tokens // 16 * 16}
    assert f"KV cache per instance: {tokens // 16} blocks" in capsys.readouterr().out


def test_a_missing_vidur_folder_is_one_error_naming_the_field(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(RUN.format(profile="no-such-folder"))
    assert main(["sim", "run", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cost.vidur_profile" in err[0] and "no-such-folder" in err[0]
    assert not (tmp_path / "out").exists()
