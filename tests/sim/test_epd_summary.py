"""What a multimodal run prints and writes about its encode stage and its pools: the encode lines
of the printed table (EPD and inline), the per-pool KV capacity in summary.json where the pools'
hardware differs, and neither for a text-only run."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from infralab.config_io import dump_toml
from infralab.errors import InputError
from infralab.sim.run import run_config_file


def config(layout: str, multimodal: bool = True, **cluster: Any) -> dict[str, Any]:
    """Llama-3-8B on H100s, 4 short requests, all with one image when `multimodal`."""
    out: dict[str, Any] = {
        "model": "llama-3-8b",
        "hardware": {"accelerator": "H100"},
        "workload": {"kind": "synthetic", "num_requests": 4, "arrival": {"kind": "poisson", "rate": 2.0},
                     "prompt": {"kind": "fixed", "value": 1000}, "output": {"kind": "fixed", "value": 4}},
        "cluster": {"layout": layout, **cluster},
    }
    if multimodal:
        out["workload"]["multimodal"] = {"image_share": 1.0}
    return out


def run(tmp_path, doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    path = tmp_path / "cfg.toml"
    path.write_text(dump_toml(doc))
    printed = io.StringIO()
    run_config_file(path, tmp_path / "out", stdout=printed, timeline=False)
    return printed.getvalue(), json.loads((tmp_path / "out" / "summary.json").read_text())


def value(printed: str, label: str) -> str:
    return next(line[len(label):].strip() for line in printed.splitlines() if line.startswith(label))


def test_an_epd_run_prints_its_encode_stage_and_per_pool_kv(tmp_path):
    doc = config("epd", encode_instances=1, prefill_instances=1, decode_instances=1,
                 pool_hardware={"prefill": {"tp": 1}, "decode": {"tp": 2}})
    printed, summary = run(tmp_path, doc)
    encode = summary["encode"]
    assert value(printed, "Image requests, images:") == "4, 4"
    assert value(printed, "  encoded:") == "encode pool"
    assert value(printed, "Mean encode (ms):") == f"{encode['encode_s']['mean'] * 1e3:.2f}"
    assert value(printed, "P90 encode (ms):") == f"{encode['encode_s']['p90'] * 1e3:.2f}"
    busy = encode["encode_pool_busy"]
    assert value(printed, "Encode pool busy (mean, max %):") == f"{busy['mean'] * 100:.1f}, {busy['max'] * 100:.1f}"
    # the decode pool has twice the ranks of the prefill pool: more KV per instance
    pools = summary["kv_cache"]["per_pool"]
    assert set(pools) == {"prefill", "decode"} and pools["decode"]["kv_blocks"] > pools["prefill"]["kv_blocks"]
    assert pools["prefill"]["kv_tokens"] == pools["prefill"]["kv_blocks"] * summary["kv_cache"]["block_size"]
    assert "KV cache per instance, by pool: prefill" in printed


def test_an_inline_run_prints_its_encode_stage_without_a_pool(tmp_path):
    printed, summary = run(tmp_path, config("colocated"))
    assert value(printed, "  encoded:") == "inline, in the prefill step"
    assert "Encode pool busy" not in printed and "per_pool" not in summary["kv_cache"]


def test_a_text_only_run_prints_no_encode_lines(tmp_path):
    printed, summary = run(tmp_path, config("disaggregated", multimodal=False))
    assert "encode" not in printed.lower() and "encode" not in summary
    assert "per_pool" not in summary["kv_cache"] and "by pool" not in printed


def test_a_layer_class_degree_that_does_not_divide_a_pools_tp_names_the_pool_and_the_knob(tmp_path):
    """[hardware]'s per-layer-class degrees reach every pool as they are: lm_head_tp = 2 does not
    divide a tp-1 prefill pool."""
    doc = config("disaggregated", pool_hardware={"prefill": {"tp": 1}})
    doc["hardware"].update(tp=2, lm_head_tp=2)
    with pytest.raises(InputError, match=r"cluster.pool_hardware.prefill \(hardware.lm_head_tp\)"):
        run(tmp_path, doc)
