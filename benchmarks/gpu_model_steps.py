"""Device time of whole Llama steps on one GPU: the numbers the cost model predicts for TP1, measured.

    python3 benchmarks/gpu_model_steps.py --out DIR [--model llama-3-8b]     (needs a CUDA GPU)
    python3 benchmarks/gpu_model_steps.py --points RESULT.json > POINTS.toml (anywhere: the measured
        steps as `infralab fidelity public` points, evaluation or calibration by the points' one rule)

What runs: the model's shape from the catalog (`infralab.real.model_shape`), random bf16 weights, in
plain torch: per layer RMSNorm, fused QKV projection, RoPE, the new K/V written into a dense cache,
`scaled_dot_product_attention` with grouped KV heads (causal for prefill), O projection, residual,
RMSNorm, gate+up projection, SiLU-and-multiply, down projection, residual; then the final norm and the
LM head on each sequence's last token. Each step is captured in a CUDA graph and its replays are timed
with CUDA events (median of `--repeats`), so host time is out: this is device time of unfused torch
ops (cuBLAS GEMMs, torch's SDPA backends), not of a serving engine's fused kernels (vLLM's fused
residual+RMSNorm, paged attention); no sampling.

Steps: decode of B sequences, one new token each, over C cached tokens (KV length C + 1); prefill of
one sequence of T tokens from an empty cache. The JSON holds every step's median seconds and spread,
the device, the versions and the SDPA path taken.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

DECODE_POINTS: tuple[tuple[int, int], ...] = ((1, 1024), (8, 1024), (32, 1024), (64, 1024), (128, 1024),
                                            (256, 1024), (1, 8192), (32, 8192))
"""(batch, cached tokens) of the decode steps."""
DECODE_STRADDLE = 16
"""A decode point becomes a batch whose 2 * 16 decode steps have contexts C - 15 .. C + 16."""
PREFILL_TOKENS: tuple[int, ...] = (128, 512, 2048, 8192)
"""Prompt lengths of the one-sequence prefill steps."""


@dataclass(frozen=True)
class StepTiming:
    """One step: kind ("decode" or "prefill"), batch, cached tokens before it, new tokens per sequence,
    median / min / max device seconds over the timed replays."""

    kind: str
    batch: int
    cached: int
    new: int
    median_s: float
    min_s: float
    max_s: float
    repeats: int


def _rms_norm(x, weight, eps: float = 1e-5):
    import torch

    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + eps)).to(x.dtype) * weight


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    import torch

    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class PlainLlama:
    """Random bf16 weights of a Llama shape on the GPU, and one forward step over a dense KV cache."""

    def __init__(self, shape, device: str, seed: int = 0) -> None:
        import torch

        gen = torch.Generator(device=device).manual_seed(seed)
        self.shape = shape
        self.head_dim = shape.hidden_size // shape.num_heads
        h, d = shape.hidden_size, self.head_dim
        qkv = (shape.num_heads + 2 * shape.num_kv_heads) * d

        def weight(rows: int, cols: int):
            return (torch.randn(rows, cols, device=device, generator=gen, dtype=torch.bfloat16) * 0.02)

        self.layers = [dict(qkv=weight(h, qkv), o=weight(shape.num_heads * d, h),
                            gate_up=weight(h, 2 * shape.intermediate_size), down=weight(shape.intermediate_size, h),
                            norm1=torch.ones(h, device=device, dtype=torch.bfloat16),
                            norm2=torch.ones(h, device=device, dtype=torch.bfloat16))
                       for _ in range(shape.num_layers)]
        self.final_norm = torch.ones(h, device=device, dtype=torch.bfloat16)
        self.lm_head = weight(h, shape.vocab_size)

    def step(self, x, caches, start: int, causal: bool):
        """x: [B, Q, hidden] bf16; caches: per layer (k, v) of [B, Hkv, start + Q, D]; returns logits
        of each sequence's last token [B, vocab]."""
        import torch
        import torch.nn.functional as F

        s, d = self.shape, self.head_dim
        batch, q_len, _ = x.shape
        pos = torch.arange(start, start + q_len, device=x.device, dtype=torch.float32)
        inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
        angles = torch.outer(pos, inv)
        cos = torch.cat((angles.cos(), angles.cos()), -1).to(x.dtype)[None, None]
        sin = torch.cat((angles.sin(), angles.sin()), -1).to(x.dtype)[None, None]
        for layer, (k_cache, v_cache) in zip(self.layers, caches):
            y = _rms_norm(x, layer["norm1"]) @ layer["qkv"]
            q, k, v = y.split([s.num_heads * d, s.num_kv_heads * d, s.num_kv_heads * d], dim=-1)
            q = _rope(q.view(batch, q_len, s.num_heads, d).transpose(1, 2), cos, sin)
            k = _rope(k.view(batch, q_len, s.num_kv_heads, d).transpose(1, 2), cos, sin)
            k_cache[:, :, start:start + q_len] = k
            v_cache[:, :, start:start + q_len] = v.view(batch, q_len, s.num_kv_heads, d).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k_cache, v_cache, is_causal=causal, enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(batch, q_len, s.num_heads * d) @ layer["o"]
            gate, up = (_rms_norm(x, layer["norm2"]) @ layer["gate_up"]).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer["down"]
        return _rms_norm(x[:, -1], self.final_norm) @ self.lm_head


def time_step(model: PlainLlama, batch: int, cached: int, new: int, repeats: int) -> StepTiming:
    """Capture one step in a CUDA graph and time `repeats` replays with CUDA events (device seconds)."""
    import torch

    s, d = model.shape, model.head_dim
    kv = [(torch.randn(batch, s.num_kv_heads, cached + new, d, device="cuda", dtype=torch.bfloat16),
           torch.randn(batch, s.num_kv_heads, cached + new, d, device="cuda", dtype=torch.bfloat16))
          for _ in range(s.num_layers)]
    x = torch.randn(batch, new, s.hidden_size, device="cuda", dtype=torch.bfloat16)
    causal = new > 1  # one new token attends to every cached one; a prompt attends causally
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up outside the graph (cuBLAS handles, SDPA backend selection)
            model.step(x, kv, cached, causal)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model.step(x, kv, cached, causal)
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(repeats):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e-3)
    del graph, kv
    torch.cuda.empty_cache()
    return StepTiming("decode" if new == 1 else "prefill", batch, cached, new,
                      statistics.median(times), min(times), max(times), repeats)


def measure(model_name: str, repeats: int) -> dict:
    import torch

    from infralab.real.model_shape import catalog_shape

    shape = catalog_shape(model_name)
    model = PlainLlama(shape, "cuda")
    steps = []
    for batch, cached in DECODE_POINTS:
        steps.append(time_step(model, batch, cached, 1, repeats))
        print(f"decode  B={batch:4d} C={cached:5d}: {steps[-1].median_s * 1e3:8.3f} ms", flush=True)
    for tokens in PREFILL_TOKENS:
        steps.append(time_step(model, 1, 0, tokens, repeats))
        print(f"prefill T={tokens:5d}:        {steps[-1].median_s * 1e3:8.3f} ms", flush=True)
    return {"model": model_name, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "dtype": "bf16", "repeats": repeats,
            "measured_on": time.strftime("%Y-%m-%d", time.gmtime()),
            "timing": "CUDA graph of one step, median of CUDA-event-timed replays (device time, no host)",
            "steps": [asdict(step) for step in steps]}


def points_toml(result: dict, source: str) -> str:
    """The measured steps as `infralab fidelity public` points (decode_step_s / prefill_s, TP1,
    engine_profile "none": device time only), each role by the points file's one rule."""
    from infralab.agent.public_points.spec import role_of
    from infralab.real.model_shape import catalog_shape

    context = catalog_shape(result["model"]).context_length
    device = result["device"]
    accelerator = {"NVIDIA H200": "H200", "NVIDIA H100 80GB HBM3": "H100"}.get(device, device)
    blocks = []
    for step in result["steps"]:
        if step["kind"] == "decode":
            pid = f"infralab-{accelerator.lower()}-{result['model']}-bf16-decode-b{step['batch']}-c{step['cached']}"
            # The simulator reads a decode point as the mean TPOT of a batch: 32 decode steps whose
            # contexts straddle the measured one (prompt C - 16, 33 output tokens; below the model's
            # context where C + 16 passes it), all prompts prefilled in one step (a token budget of
            # the whole batch), so that every TPOT step is a pure decode step like the measured one.
            family, metric, batch = "decode", "decode_step_s", step["batch"]
            output = 2 * DECODE_STRADDLE + 1
            prompt = min(step["cached"] - DECODE_STRADDLE, context - output)
            budget = batch * prompt
            what = (f"decode step of {step['batch']} sequences over {step['cached']} cached tokens (simulated as a "
                    f"batch: prompt {prompt}, {output} output tokens, mean context {prompt + DECODE_STRADDLE})")
        else:
            pid = f"infralab-{accelerator.lower()}-{result['model']}-bf16-prefill-t{step['new']}"
            family, metric, batch, output = "prefill", "prefill_s", 1, 1
            prompt, budget = min(step["new"], context - output), None  # the model's window holds the one output
            what = f"prefill of one {step['new']}-token prompt (simulated: {prompt} tokens)"
        blocks.append("\n".join([
            "[[point]]", f'id = "{pid}"', f'family = "{family}"', f'role = "{role_of(pid)}"', f'metric = "{metric}"',
            f"measured = {step['median_s']:.6g}", f'accelerator = "{accelerator}"', f'model = "{result["model"]}"',
            'dtype = "bf16"', "tp = 1", f"batch = {batch}", f"input_tokens = {prompt}", f"output_tokens = {output}",
            *([f"max_batched_tokens = {budget}"] if budget else []),
            'engine_profile = "none"', "includes = []",
            f'engine = "plain torch {result["torch"]} (CUDA {result["cuda"]}): cuBLAS GEMMs, SDPA, unfused norms"',
            f'hardware = "1x {device}"',
            f'settings = "{what}; random bf16 weights; one CUDA graph per step, {result["repeats"]} timed replays"',
            f'source = "{source}"', f'locator = "steps[] kind={step["kind"]} batch={step["batch"]} '
            f'cached={step["cached"]} new={step["new"]}"',
            f'evidence = "median {step["median_s"]:.6g} s (min {step["min_s"]:.6g}, max {step["max_s"]:.6g})"',
            f'unit_note = "measured {result["measured_on"]} with benchmarks/gpu_model_steps.py"',
        ]))
    return "\n\n".join(blocks) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for model_steps.json (runs the steps; needs CUDA)")
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--points", type=Path, help="a model_steps.json to print as fidelity-public points")
    parser.add_argument("--source", default="this repository: docs/gpu.md, benchmarks/gpu_model_steps.py")
    args = parser.parse_args(argv)
    if args.points is not None:
        print(points_toml(json.loads(args.points.read_text()), args.source), end="")
        return 0
    import torch

    if args.out is None or not torch.cuda.is_available():
        print("gpu_model_steps: needs --out DIR and a CUDA GPU (or --points FILE)", file=sys.stderr)
        return 2
    result = measure(args.model, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "model_steps.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
