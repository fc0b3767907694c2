"""TOML fixtures the tests share (written to files by the tests that need them): a small
simulation config with a synthetic workload, and a tiny kernel hypothesis. A test adds its own
tables after them; none keeps its own copy."""

from __future__ import annotations

Length = int | tuple[int, int]
"""A fixed length in tokens, or a uniform range (low, high)."""


def _length_table(name: str, length: Length) -> str:
    if isinstance(length, tuple):
        low, high = length
        return f'[workload.{name}]\nkind = "uniform"\nlow = {low}\nhigh = {high}\n'
    return f'[workload.{name}]\nkind = "fixed"\nvalue = {length}\n'


def synthetic_config(*, num_requests: int, rate: float, prompt: Length, output: Length,
                     model: str = "llama-3-8b", accelerator: str = "H100") -> str:
    """A simulation config: `model` on one `accelerator`, `num_requests` Poisson arrivals at `rate`
    requests/s with `prompt` and `output` lengths (tokens)."""
    return (f'model = "{model}"\n\n[hardware]\naccelerator = "{accelerator}"\n\n'
            f'[workload]\nkind = "synthetic"\nnum_requests = {num_requests}\n\n'
            f'[workload.arrival]\nkind = "poisson"\nrate = {rate}\n\n'
            f'{_length_table("prompt", prompt)}\n{_length_table("output", output)}')


KERNEL_HYPOTHESIS = '''
[hypothesis]
name = "tiny"
claim = "3xTF32 is more accurate than TF32 under a K-split"
kind = "kernel-numerics"
metrics = ["rel_err"]
validators = ["kernel-check"]
acceptance = ["x3.rel_err < baseline.rel_err"]

[baseline]
kernel = "matmul"
variant = "tf32"
shape = "M=8;N=32;K=64"
split = "row"
tp = 2

[[variant]]
name = "x3"
change = { variant = "3xtf32" }
'''
"""A kernel-check hypothesis that decides in seconds in Triton's interpreter (accepted)."""


def tiny_llama_model(context_length: int = 2048) -> str:
    """A model spec of the real rung's tiny random-weight Llama (real/model_shape.py TINY)."""
    return f'''\
name = "tiny-llama-test"
source = "infralab tests: a tiny random-weight Llama (real/model_shape.py TINY)"
num_layers = 2
hidden_size = 64
num_heads = 4
num_kv_heads = 2
head_dim = 16
vocab_size = 1000
context_length = {context_length}
intermediate_size = 128
tie_word_embeddings = false
'''


TINY_REAL_ENGINE = '''\
[cost]
dtype = "fp32"
step_table = "profile/step_table.csv"

[engine]
scheduler = "hf_fifo"
max_batched_tokens = 48
max_num_seqs = 6
block_size = 32
num_blocks = 24
prefix_cache = false

[real]
warmup_requests = 1
fingerprint_repeats = 1

[real.profile]
repeats = 1
'''
"""The tables a tiny real-engine config ends with: an FP32 step table from `real profile` under
profile/, a small budget and cache, one warm-up request, one repeat."""
