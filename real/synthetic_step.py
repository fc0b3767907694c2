"""One engine step of a chosen shape, run and timed through the engine's own code.

A step of shape `StepShape(q_tokens, kv_tokens, seqs)` is `seqs` sequences whose query tokens sum
to `q_tokens` and whose keys (past tokens already in the KV cache, plus the step's own new ones)
sum to `kv_tokens`, both split as evenly as whole tokens allow. The sequences are made-up request states
whose cache blocks are allocated by the engine's own cache (as transformers' warm-up does), the
batch is built by the processor's `prepare_batch_tensors` and run by its `_generation_step`
(forward, logits, greedy sampling), the same two calls a served step makes; then the blocks are
freed. The profile (`real.profile`) and the step-speed fingerprint (`real.fingerprint`) both time
steps this way. Call it while the engine's loop is quiet (`RealEngine.quiet()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter

import torch
from transformers.generation.continuous_batching.requests import FutureRequestState, RequestState, RequestStatus

from infralab.real.engine import RealEngine
from infralab.real.step_shape import StepShape

FILLER_TOKEN = 1
"""The token every made-up position holds: token values do not change a step's time."""


@dataclass(frozen=True, slots=True)
class StepTiming:
    """Seconds of the two parts of one synthetic step."""

    prepare_s: float  # building the batch tensors (host)
    forward_s: float  # `_generation_step`: forward, logits, sampling


def fits(engine: RealEngine, shape: StepShape) -> str | None:
    """Why `engine` cannot run a step of `shape`, or None when it can."""
    if not 1 <= shape.seqs <= shape.q_tokens <= shape.kv_tokens:
        return f"needs 1 <= seqs <= q_tokens <= kv_tokens, got {shape}"
    if shape.q_tokens > engine.processor.max_batch_tokens:
        return f"q_tokens={shape.q_tokens} is over the token budget {engine.processor.max_batch_tokens}"
    if shape.seqs > engine.processor.scheduler.max_requests_per_batch:
        return f"seqs={shape.seqs} is over the request cap {engine.processor.scheduler.max_requests_per_batch}"
    blocks = sum(-(-(q + past) // engine.settings.page_size) for q, past in shape.per_sequence())
    if blocks > engine.processor.cache.num_blocks:
        return f"needs {blocks} KV blocks, the cache has {engine.processor.cache.num_blocks}"
    return None


def time_step(engine: RealEngine, shape: StepShape) -> StepTiming:
    """Build and run one step of `shape` on `engine` (loop quiet), returning its two timings."""
    problem = fits(engine, shape)
    if problem is not None:
        raise ValueError(f"step {shape}: {problem}")
    processor = engine.processor
    cache = processor.cache
    futures: list[FutureRequestState] = []
    try:
        for i, (query, past) in enumerate(shape.per_sequence()):
            state = RequestState(request_id=f"__synthetic_{i}__", initial_tokens=[FILLER_TOKEN] * (past + query),
                                 max_new_tokens=1)
            state._status = RequestStatus.DECODING  # set directly: the property setter stamps a lifespan
            state.tokens_to_process = [FILLER_TOKEN] * query
            state.position_offset = past
            if not cache.can_store_request_tokens(state, query):  # allocates past + query tokens
                raise RuntimeError(f"the cache refused synthetic sequence {i} of {shape}")
            futures.append(FutureRequestState(state, has_new_token=True, complete_blocks={}, query_length=query))
        sync = torch.cuda.synchronize if engine.settings.device == "cuda" else _nothing
        sync()  # on a GPU, work still queued must not land in this step's time
        start = perf_counter()
        processor.inputs_and_outputs.prepare_batch_tensors(
            requests_in_batch=futures, logits_processors=processor.logit_processor, use_decode_fast_path=False,
            num_q_tokens=shape.q_tokens, max_kv_read=shape.past_tokens, use_padding=False)
        sync()
        built = perf_counter()
        type(processor)._generation_step(processor, engine.model)  # the class's: the step hooks stay out
        sync()  # a GPU runs the step asynchronously: time it to its end
        done = perf_counter()
    finally:
        for future in futures:
            cache.free_blocks(future.state.request_id)
    return StepTiming(prepare_s=built - start, forward_s=done - built)


def _nothing() -> None:
    """On CPU every operation has finished when it returns: nothing to wait for."""
