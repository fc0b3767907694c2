"""The real side's plain-data parts, which need neither torch nor transformers: how a step shape
splits over sequences, the static work of a step, and what the step hook reads from a batch."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from infralab.real.model_shape import SMALL
from infralab.real.step_shape import StepShape
from infralab.real.step_trace import BATCH_FIELDS, batch_shape
from infralab.real.step_work import step_bytes, step_flops


@given(q=st.integers(1, 300), past=st.integers(0, 5000), seqs=st.integers(1, 64))
def test_a_step_shape_splits_into_sequences_that_add_up(q: int, past: int, seqs: int) -> None:
    seqs = min(seqs, q)
    parts = StepShape(q_tokens=q, kv_tokens=q + past, seqs=seqs).per_sequence()
    assert len(parts) == seqs
    assert sum(query for query, _ in parts) == q and sum(p for _, p in parts) == past
    assert all(query >= 1 for query, _ in parts)
    assert max(query for query, _ in parts) - min(query for query, _ in parts) <= 1


def test_step_work_grows_with_queries_keys_and_sequences() -> None:
    base = step_flops(SMALL, q_tokens=8, past_tokens=256, seqs=8)
    assert step_flops(SMALL, 16, 256, 8) > base and step_flops(SMALL, 8, 512, 8) > base
    assert step_flops(SMALL, 8, 256, 4) < base  # fewer LM-head rows
    assert step_bytes(SMALL, 8, 512, 4) > step_bytes(SMALL, 8, 256, 4) > step_bytes(SMALL, 8, 256, 2)


def _future(prompt: int, past_after: int, query: int, samples: bool) -> SimpleNamespace:
    # As the processor leaves it: position_offset already advanced by the query.
    state = SimpleNamespace(initial_tokens=[0] * prompt, position_offset=past_after)
    return SimpleNamespace(state=state, query_length=query, has_new_token=samples)


def test_the_step_hook_reads_a_batch_as_the_processor_left_it() -> None:
    batch = [_future(prompt=100, past_after=40, query=40, samples=False),  # first chunk of a prompt
             _future(prompt=30, past_after=30, query=10, samples=True),  # last chunk: samples token 1
             _future(prompt=20, past_after=26, query=1, samples=True)]  # decoding, 5 tokens out
    processor = SimpleNamespace(inputs_and_outputs=SimpleNamespace(requests_in_batch=batch))
    shape = batch_shape(processor)
    assert (shape.q_tokens, shape.kv_tokens_read, shape.seqs) == (51, 0 + 20 + 25, 3)
    assert (shape.prefill_seqs, shape.prefill_tokens, shape.new_tokens) == (2, 50, 2)
    assert shape.kv_tokens == 96 and shape.missing == ()


def test_a_batch_the_processor_does_not_expose_is_recorded_as_missing() -> None:
    shape = batch_shape(SimpleNamespace())
    assert shape.missing == BATCH_FIELDS and shape.kv_tokens is None
