"""What the engine that produced a public figure adds to the simulated run: its host time per
step, whether it overlaps host and device work, the fraction of device memory it gives the KV
cache, and its all-reduce for small messages. One profile per engine family a source names
(`Point.engine_profile`); each constant says where it comes from.

- vllm-v0: vLLM's first engine: host work runs between steps ("sync"). Host time per step and per
  scheduled sequence from Vidur's cpu_overheads profile of vLLM v0 on A100 (Llama-2-7B TP1: 0.79 ms
  + 0.043 ms per sequence; docs/sim.md, "Calibration from Vidur's profiles"): calibration data,
  never scored. Custom all-reduce (vLLM PR #2192, in every release since v0.2.7).
- vllm-v0.6: vLLM's first engine from v0.6.0 on: output processing (`_process_model_outputs`:
  detokenisation, stop checks, the request outputs) runs while the next step's forward runs (vLLM
  PR #7049, "Asynchronous Output Processor", on by default, `--disable-async-output-proc`), so a
  step's host time is the rest: schedule + sampler + prepare_inputs, fitted the same way on the
  same Vidur rows without the process_model_outputs phase (Llama-2-7B TP1: 0.725 ms + 0.027 ms per
  sequence; `benchmarks/vidur_calibration_check.py` prints both fits). "sync" otherwise: the
  output work of a step is taken as hidden by the next forward, which is longer at these batches.
  Custom all-reduce.
- vllm-v1: vLLM's V1 engine (0.8+): output processing runs in the front-end process (vLLM PR
  #9826, `AsyncLLM`), off the engine core's loop: the host time of vllm-v0.6; the rest kept "sync"
  (scheduling and input preparation; no public per-step figure of V1's own). Custom all-reduce.
- sglang: SGLang's overlap scheduler prepares step n+1 while step n runs ("async"), the same host
  work as the vLLM fit. Custom all-reduce (SGLang adapted vLLM's kernel).
- trtllm: TensorRT-LLM's C++ executor: host time taken as 0 (no public per-step figure); its
  benchmarks give the KV cache 0.95 of free memory (`kv_cache_free_gpu_mem_fraction 0.95`, as the
  perf-overview settings state). Its own custom all-reduce plugin (trtllm-build enables it).
- trtllm-0.5: TensorRT-LLM v0.5's per-model build scripts, where the custom all-reduce was an opt-in
  flag (`--use_custom_all_reduce`, store_true: NVIDIA/TensorRT-LLM @ 5fded61 :
  examples/chatglm2-6b/build.py): NCCL all-reduces; otherwise as trtllm.
  A serving point's batch limits are the ones `trtllm-bench` derives from the KV memory
  (`trtllm_bench_limits`), not vLLM's defaults.
- unstated: a source that does not name its engine: the vllm-v0 profile, labelled.
- none: a collective measured alone (nccl-tests, rccl-tests, a kernel benchmark): no engine.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from infralab.sim.cost.memory import GIB
from infralab.sim.specs import AcceleratorSpec, ModelSpec

EngineProfileName = Literal["vllm-v0", "vllm-v0.6", "vllm-v1", "sglang", "trtllm", "trtllm-0.5", "unstated", "none"]

VLLM_V0_HOST = {"overlap": "sync", "per_step_s": 0.00079, "per_request_s": 0.0000426}
# The same fit without the output-processing phase (vllm-v0.6 and vllm-v1 above).
VLLM_ASYNC_OUTPUT_HOST = {"overlap": "sync", "per_step_s": 0.000725, "per_request_s": 0.0000270}

PROFILES: dict[str, dict[str, Any]] = {
    "vllm-v0": {"cost.host": VLLM_V0_HOST},
    "vllm-v0.6": {"cost.host": VLLM_ASYNC_OUTPUT_HOST},
    "vllm-v1": {"cost.host": VLLM_ASYNC_OUTPUT_HOST},
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


# trtllm-bench's batch limits (NVIDIA/TensorRT-LLM @ 04cba88 : tensorrt_llm/bench/build/tuning.py,
# `calc_engine_setting` and `finetune_setting`; applied to the PyTorch backend by
# tensorrt_llm/bench/benchmark/utils/general.py @ 0171265, `get_settings`, and to built engines by
# `trtllm-bench build --dataset` in v0.17). The rule, restated: the requests that fit the KV memory at
# the dataset's mean ISL + OSL set the batch, rounded up to a step that grows with it; the token budget
# is the batch times (1 + ISL / OSL); without chunked prefill (the benchmark's default) a whole prompt
# plus one token per running sequence must fit.
TRTLLM_MAX_REQUESTS = 4096  # cap on the batch (decoder buffers)
TRTLLM_MAX_TOKENS = 32768  # cap on the token budget (activation buffers)
TRTLLM_MIN_BATCH = 64
TRTLLM_MIN_TOKENS = 2048
# (below this value, round up to a multiple of this), in order; the last step applies above all
TRTLLM_BATCH_STEPS = ((256, 32), (1024, 128), (math.inf, 256))
TRTLLM_TOKEN_STEPS = ((4096, 256), (8192, 512), (math.inf, 1024))


def _round_up_by_steps(value: float, steps: tuple[tuple[float, int], ...]) -> int:
    """`value` rounded up to the multiple of the step of the first band it lies below."""
    step = next(step for below, step in steps if value < below)
    return step * math.ceil(value / step)


def _trtllm_bytes(dtype: str) -> float:
    """trtllm-bench's bytes per element: 1 for an 8-bit format, else 2 (its default)."""
    return 1.0 if dtype in ("fp8e4m3", "int8") else 2.0


def trtllm_bench_limits(model: ModelSpec, accel: AcceleratorSpec, dtype: str, kv_dtype: str, tp: int, pp: int,
                        input_tokens: int, output_tokens: int, kv_fraction: float = 0.95) -> tuple[int, int]:
    """(max_num_seqs, max_batched_tokens) that `trtllm-bench` picks for `model` on `tp` x `pp` of
    `accel` for requests of `input_tokens` + `output_tokens` (its heuristic, restated above). Weights
    and KV count 1 byte per element in an 8-bit dtype, else 2; memory is the device's reported size."""
    kv_heads = max(tp, model.num_kv_heads)
    per_token_gib = 2 * model.num_full_attention_layers * kv_heads * model.head_dim * _trtllm_bytes(kv_dtype) / GIB
    available_gib = accel.usable_memory * tp * pp / GIB - model.num_params * _trtllm_bytes(dtype) / GIB
    requests = available_gib * kv_fraction / (per_token_gib * (input_tokens + output_tokens))
    raw_batch = min(requests, TRTLLM_MAX_REQUESTS) / pp
    raw_tokens = min(raw_batch * (1 + input_tokens / output_tokens), TRTLLM_MAX_TOKENS)
    # the minimums only bind in the lowest band (every higher band starts above them)
    batch = max(TRTLLM_MIN_BATCH, _round_up_by_steps(raw_batch, TRTLLM_BATCH_STEPS))
    tokens = max(TRTLLM_MIN_TOKENS, _round_up_by_steps(raw_tokens, TRTLLM_TOKEN_STEPS))
    return batch, max(tokens, input_tokens + batch)
