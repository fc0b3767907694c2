"""The real engine: transformers' continuous-batching manager on a random-weight Llama model, on CPU.

`RealEngine(shape, settings)` builds the model from its shape (seeded, no download), creates the
manager (`model.init_continuous_batching`) with every sizing knob set explicitly (the engine would
otherwise size its cache from 60 % of host memory), creates the manager's batch processor up front
so that the step hooks (`real.step_trace`) are on it before the first step, and lets the caller
submit requests with a forced output length: `max_new_tokens` = the output length and EOS disabled
(`eos_token_id=-1`), so a request ends exactly at its output length. Sampling is greedy.

How the engine schedules, once these settings are resolved, is written down in docs/fidelity.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from infralab.real.model_shape import ModelShape
from infralab.real.step_trace import StepTrace, install_step_hooks

SchedulerName = Literal["fifo", "prefill_first"]
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}

NO_EOS = -1
"""An EOS id no token can equal: the engine keeps only ids >= 0, so nothing ends a request early."""


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """The engine's knobs (transformers' `ContinuousBatchingConfig` names where they exist).

    `max_batch_tokens`: query tokens per step (the scheduler's token budget). `num_blocks` x
    `page_size`: the KV cache, in tokens (a block holds `page_size` tokens of every layer).
    `max_requests_per_batch`: sequences per step (the engine caps it at `max_batch_tokens`).
    `safety_margin`: free-cache fraction under which no new prompt is admitted; None = the
    scheduler's own default (fifo 0.15, prefill_first 0.0). `threads`: torch intra-op threads.
    Prefix sharing is off: the replayed prompts are random, and a shared block would change what
    the simulator has to mirror.
    """

    scheduler: SchedulerName = "fifo"
    max_batch_tokens: int = 256
    num_blocks: int = 64
    page_size: int = 256
    max_requests_per_batch: int = 64
    safety_margin: float | None = None
    attention: str = "sdpa"
    dtype: str = "fp32"
    threads: int = 2
    seed: int = 0
    device: str = "cpu"


def build_model(shape: ModelShape, settings: EngineSettings) -> LlamaForCausalLM:
    """The model with random weights drawn from `settings.seed` (torch's global RNG is left as it was)."""
    config = LlamaConfig(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads, max_position_embeddings=shape.context_length,
        tie_word_embeddings=shape.tie_word_embeddings, eos_token_id=None, bos_token_id=None, pad_token_id=None,
    )
    config._attn_implementation = settings.attention
    # Built on its device: an 8B shape's fp32 weights drawn on the host would take 32 GB of it and
    # minutes; on a GPU they are drawn there (its RNG forked too, so the caller's is left alone).
    cuda = [torch.cuda.current_device()] if settings.device == "cuda" else []
    with torch.random.fork_rng(devices=cuda), torch.device(settings.device):
        torch.manual_seed(settings.seed)
        model = LlamaForCausalLM(config)
    return model.to(device=settings.device, dtype=DTYPES[settings.dtype]).eval()


def continuous_batching_config(settings: EngineSettings) -> ContinuousBatchingConfig:
    return ContinuousBatchingConfig(
        page_size=settings.page_size, num_blocks=settings.num_blocks, max_batch_tokens=settings.max_batch_tokens,
        max_requests_per_batch=settings.max_requests_per_batch, scheduler_type=settings.scheduler,
        safety_margin=settings.safety_margin, allow_block_sharing=False, seed=settings.seed,
    )


class RealEngine:
    """One model and one continuous-batching manager; a context manager that starts and stops it.

    Use: `with RealEngine(shape, settings) as engine: engine.submit(...); engine.next_result(...)`.
    Outside `with`, the processor exists but no loop runs: synthetic-step timings
    (`real.synthetic_step`) may use it freely; inside, they go through `engine.quiet()`.
    """

    def __init__(self, shape: ModelShape, settings: EngineSettings) -> None:
        self.shape = shape
        self.settings = settings
        self._threads_before: int | None = None
        self.model = build_model(shape, settings)
        generation = GenerationConfig(do_sample=False, max_new_tokens=1, eos_token_id=NO_EOS)
        self.manager = self.model.init_continuous_batching(
            generation_config=generation, continuous_batching_config=continuous_batching_config(settings))
        # Created here, not in the loop's thread, so that the hooks are on it before the first step; the
        # loop's `_create_batch_processor` resets and reuses an existing processor.
        self.processor = self.manager._create_batch_processor()
        self.manager.batch_processor = self.processor
        self.trace = StepTrace()
        install_step_hooks(self.processor, self.trace, torch.cuda.synchronize if settings.device == "cuda" else None)

    # ---- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> RealEngine:
        # torch's intra-op thread count is process-wide: set while the loop runs, restored by close().
        self._threads_before = torch.get_num_threads()
        torch.set_num_threads(self.settings.threads)
        self.manager.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the loop (the processor is kept, so synthetic steps still work) and restore torch's threads."""
        if self.manager.is_running():
            self.manager.stop(block=True, keep_for_next_session=True)
            self.manager.batch_processor = self.processor
        if self._threads_before is not None:
            torch.set_num_threads(self._threads_before)
            self._threads_before = None

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """The loop paused (or not running): the caller may run the processor itself, with the
        engine's thread count."""
        threads_before = torch.get_num_threads()
        torch.set_num_threads(self.settings.threads)
        try:
            if self.manager.is_running():
                with self.manager.pause():
                    yield
            else:
                yield
        finally:
            torch.set_num_threads(threads_before)

    # ---- requests ----------------------------------------------------------------------------

    def submit(self, request_id: str, prompt_ids: list[int], output_tokens: int) -> None:
        """Queue one request that generates exactly `output_tokens` tokens, recording every token's time."""
        added = self.manager.add_request(input_ids=prompt_ids, request_id=request_id, max_new_tokens=output_tokens,
                                         streaming=False, record_timestamps=True, eos_token_id=NO_EOS)
        if added is None:
            raise RuntimeError(f"the engine refused request {request_id} (its loop is stopping or failed)")

    def next_result(self, timeout_s: float) -> Any | None:
        """The next finished request's `GenerationOutput`, or None after `timeout_s` seconds."""
        fatal = self.manager.background_thread_status.fatal_error
        if fatal is not None:
            raise RuntimeError(f"the engine's loop failed: {fatal}") from fatal
        return self.manager.get_result(timeout=timeout_s)

    # ---- facts -------------------------------------------------------------------------------

    @property
    def cache_tokens(self) -> int:
        """KV-cache capacity, tokens (whole blocks of every layer)."""
        return self.processor.cache.num_blocks * self.settings.page_size

    def resolved(self) -> dict[str, Any]:
        """The settings as the engine resolved them (what its scheduler actually uses)."""
        config = self.manager.continuous_batching_config
        scheduler = self.processor.scheduler
        return {
            "scheduler": type(scheduler).__name__,
            "max_batch_tokens": self.processor.max_batch_tokens,
            "max_requests_per_batch": scheduler.max_requests_per_batch,
            "safety_margin": scheduler.safety_margin,
            "page_size": config.page_size,
            "num_blocks": self.processor.cache.num_blocks,
            "cache_tokens": self.cache_tokens,
            "max_tokens_read": self.processor.cache.max_tokens_read,
            "decode_fast_path": self.processor.cache.max_blocks_per_request > 0,
            "async_batching": bool(config.use_async_batching),
            "cuda_graphs": tuple(config.use_cuda_graph),
            "attention": self.model.config._attn_implementation,
            "dtype": self.settings.dtype,
            "device": self.settings.device,
            "threads": self.settings.threads,
        }
