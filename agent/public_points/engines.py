"""What the engine that produced a public figure adds to the simulated run: its host time per
step, whether it overlaps host and device work, the fraction of device memory it gives the KV
cache, and its all-reduce for small messages. One profile per engine family a source names
(`Point.engine_profile`); each constant says where it comes from.

- vllm-v0: vLLM's first engine: host work runs between steps ("sync"). Host time per step and per
  scheduled sequence from Vidur's cpu_overheads profile of vLLM v0 on A100 (Llama-2-7B TP1: 0.79 ms
  + 0.043 ms per sequence; docs/sim.md, "Calibration from Vidur's profiles"): calibration data,
  never scored. Custom all-reduce (vLLM PR #2192, in every release since v0.2.7).
- vllm-v1: vLLM's V1 engine (0.8+): the same host work; kept "sync" (no public figure of how much
  of it overlaps in the releases the points name). Custom all-reduce.
- sglang: SGLang's overlap scheduler prepares step n+1 while step n runs ("async"), the same host
  work as the vLLM fit. Custom all-reduce (SGLang adapted vLLM's kernel).
- trtllm: TensorRT-LLM's C++ executor: host time taken as 0 (no public per-step figure); its
  benchmarks give the KV cache 0.95 of free memory (`kv_cache_free_gpu_mem_fraction 0.95`, as the
  perf-overview settings state). Its own custom all-reduce plugin (trtllm-build enables it).
- trtllm-0.5: TensorRT-LLM v0.5's per-model build scripts, where the custom all-reduce was an opt-in
  flag (`--use_custom_all_reduce`, store_true: NVIDIA/TensorRT-LLM @ 5fded61 :
  examples/chatglm2-6b/build.py): NCCL all-reduces; otherwise as trtllm.
- unstated: a source that does not name its engine: the vllm-v0 profile, labelled.
- none: a collective measured alone (nccl-tests, rccl-tests, a kernel benchmark): no engine.
"""

from __future__ import annotations

from typing import Any, Literal

EngineProfileName = Literal["vllm-v0", "vllm-v1", "sglang", "trtllm", "trtllm-0.5", "unstated", "none"]

VLLM_V0_HOST = {"overlap": "sync", "per_step_s": 0.00079, "per_request_s": 0.0000426}

PROFILES: dict[str, dict[str, Any]] = {
    "vllm-v0": {"cost.host": VLLM_V0_HOST},
    "vllm-v1": {"cost.host": VLLM_V0_HOST},
    "sglang": {"cost.host": {**VLLM_V0_HOST, "overlap": "async"}},
    "trtllm": {"engine.gpu_memory_utilization": 0.95},
    "trtllm-0.5": {"engine.gpu_memory_utilization": 0.95, "cost.allreduce": "nccl"},
    "unstated": {"cost.host": VLLM_V0_HOST},
    "none": {},
}


def apply_profile(name: str, doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` (a sim config document) with the profile's tables merged in (in place; returned)."""
    for dotted, value in PROFILES[name].items():
        table, key = dotted.split(".")
        doc.setdefault(table, {})[key] = value
    return doc
