"""``attention``: the full-attention layers of a step on one rank (seconds).

Prefill: QK and PV flops over the causal query-key pairs (`StepWork.prefill_attn_pairs`), the KV
of every prefill sequence's context read once, new KV written. Decode: each sequence reads its
whole KV (memory-bound). MLA decodes in the absorbed form (queries attend the compressed latent,
one "KV head" of `kv_lora_rank + qk_rope_head_dim`). With scaled KV formats (int8, fp8e4m3) each
cached element is dequantised once, and with a KV dtype per layer each layer reads its own bytes.

What a plain roofline misses (`RooflineExtrasConfig`, defaults fitted on Vidur's profiles): decode
attention takes at least `decode_attention_floor_s` per layer (few sequences leave most of the GPU
idle); prefill attention at least one kernel launch per layer.

A calibration table's `paged_decode_attention` (decode) and `prefill_attention` (prefill) rows
replace the roofline, never below the same work at 100 % of peak.

Sparse "indexed" attention (`ModelSpec.index_topk > 0`; DeepSeek Sparse Attention as
GLM-5.3-Flash runs it, transformers' modeling_glm5_next.py, Glm5NextTextIndexer and
Glm5NextTextAttention) is two kernels per layer, timed as two rooflines back to back:
- the indexer: each query token scores every pooled key of its context, ceil(context / kpool)
  keys (pools of `index_kpool` tokens, each a gated average of its tokens' indexer keys:
  get_pooled_states; "Score across pools, not on a per token basis"), with `index_n_heads` heads
  of `index_head_dim` (q . pool_key per head, relu, then a weighted sum over heads:
  index_scores = weights @ relu(q @ pool_keys^T)), i.e. 2 x H_i x (D_i + 1) FLOPs per (query,
  pooled key) pair, reading the pooled keys (D_i elements each, activation width). It is
  replicated on every tensor-parallel rank (all H_i heads on each: vLLM's DeepSeek-V3.2 Indexer,
  "no tensor parallel, just replicated"), and runs at the attention rate.
- attention over the selected tokens only: top (index_topk / kpool) pools, i.e. index_topk tokens
  (plus the incomplete tail pool's <= kpool - 1 tokens, left out: <= 0.7 % at the GLM defaults), so
  a query at position p attends min(p, index_topk) tokens; the MLA latent of every token is still
  cached (KV bytes per token unchanged). Decode reads min(context, index_topk) tokens' latents.
Steps carry context totals, not per-sequence contexts, so the selection is evaluated at the mean
context of the step's decode sequences (exact when all are on the same side of index_topk; an
upper bound otherwise) and at the mean chunk of its prefills. Indexed layers always use the
roofline (calibration rows time dense attention).

Units: seconds, bytes, FLOPs, tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infralab.sim.cost.geometry import Geometry
from infralab.sim.cost.work import StepWork
from infralab.work_formulas import KV_CACHE_DTYPES, KV_SCALED, kv_dequant_flops

if TYPE_CHECKING:
    from infralab.sim.cost.calibrated import Calibration


class FullAttention:
    """Full attention, prefill and decode (module docstring). The roofline of decode attention is
    folded into three per-token coefficients (`decode_coeffs`) and a floor (`decode_floor`), which
    `CostModel.decode_run_ends` reuses."""

    def __init__(self, g: Geometry, calibrated: Calibration | None) -> None:
        self._g, self._calibrated = g, calibrated
        self._full_layers = g.full_layers
        self.decode_floor = g.full_layers * g.decode_attention_floor_s  # all full layers
        self.decode_coeffs = self._decode_coeffs()
        m = g.model
        self.indexed = m.is_indexed and g.full_layers > 0
        if self.indexed:
            self._topk, self._kpool = m.index_topk, m.index_kpool
            heads, dim = m.index_n_heads, m.index_head_dim
            # per (query token, pooled key): q . key per head, then the weighted sum over heads
            self._idx_flops_per_key = 2.0 * heads * (dim + 1)
            self._idx_bytes_per_key = float(dim * g.act_width)  # the pooled key read
            # per query token: its indexer query (heads x dim) in, its key (and pool gate) written
            self._idx_bytes_per_query = float((heads * dim + 2 * dim) * g.act_width)

    def time(self, work: StepWork) -> float:
        """Seconds of all full layers' attention of `work`."""
        if self._full_layers == 0:
            return 0.0
        if self.indexed:
            return self._indexed_time(work)
        total = 0.0
        if work.prefill_tokens:
            total += self.prefill_time(work)
        if work.decode_seqs:
            seqs, context = work.decode_seqs, work.decode_context_tokens
            if self._calibrated is not None and self._calibrated.decode_covered:
                total += self._calibrated_decode(seqs, context)
            else:  # the roofline with per-token coefficients folded in (hot path)
                c = self.decode_coeffs
                total += max(context * c[0], context * c[1] + seqs * c[2], self.decode_floor)
        return total

    # -- sparse indexed attention (module docstring) --

    def _indexed_time(self, work: StepWork) -> float:
        """All full layers' attention of `work` when they are indexed: the indexer plus attention
        over the selected tokens, prefill and decode."""
        total = 0.0
        if work.prefill_tokens:
            total += self._indexed_prefill(work)
        if work.decode_seqs:
            total += self.indexer_decode_s(work.decode_seqs, work.decode_context_tokens)
            total += self.selected_decode_s(work.decode_seqs, work.decode_context_tokens)
        return total

    def selected_decode_s(self, seqs: int, context: int) -> float:
        """Seconds (all full layers) of decode attention over the selected tokens of `seqs`
        sequences with `context` tokens in all: plain (MLA) decode attention over min(mean
        context, index_topk) tokens per sequence."""
        selected = seqs * min(context / seqs, float(self._topk))
        c = self.decode_coeffs
        return max(selected * c[0], selected * c[1] + seqs * c[2], self.decode_floor)

    def indexer_decode_s(self, seqs: int, context: int) -> float:
        """Seconds (all full layers) of the indexer of `seqs` decode tokens whose contexts sum to
        `context`: every pooled key of each context scored once."""
        g = self._g
        keys = context / self._kpool
        flops = keys * self._idx_flops_per_key
        nbytes = keys * self._idx_bytes_per_key + seqs * self._idx_bytes_per_query
        return self._full_layers * g.roofline(flops, nbytes, g.attn_rate)

    def _indexed_prefill(self, work: StepWork) -> float:
        """Prefill of indexed layers: the indexer over every (query, pooled key) pair (the causal
        pairs / kpool) plus attention over the selected pairs, sum over the chunk's positions p
        of min(p, index_topk), at the mean chunk (new tokens, context) of the step's prefills."""
        g = self._g
        seqs = max(work.prefill_seqs, 1)
        new = work.prefill_tokens / seqs
        cached = max(work.prefill_context_tokens / seqs - new, 0.0)
        selected_pairs = seqs * capped_causal_pairs(cached, new, float(self._topk))
        flops, nbytes = self._prefill_work(work, selected_pairs)
        attention = max(g.roofline(flops, nbytes, g.attn_rate), g.launch)
        keys = work.prefill_attn_pairs / self._kpool
        idx_flops = keys * self._idx_flops_per_key
        idx_bytes = (work.prefill_context_tokens / self._kpool * self._idx_bytes_per_key
                     + work.prefill_tokens * self._idx_bytes_per_query)
        indexer = max(g.roofline(idx_flops, idx_bytes, g.attn_rate), g.launch)
        return self._full_layers * (attention + indexer)

    def decode_layer_s(self, seqs: int, context_per_seq: int) -> float:
        """Seconds of one layer's decode attention: `seqs` sequences of `context_per_seq` tokens."""
        return self.time(StepWork.decode(seqs, seqs * context_per_seq)) / self._full_layers

    def prefill_layer_s(self, new: int, cached: int = 0) -> float:
        """Seconds of one layer's prefill attention of one chunk of `new` tokens after `cached`."""
        work = StepWork.prefill_chunk(new, cached)
        time = self._indexed_prefill(work) if self.indexed else self.prefill_time(work)
        return time / self._full_layers

    def prefill_time(self, work: StepWork) -> float:
        """All full layers' prefill attention. A table's `prefill_attention` rows time one
        sequence's chunk; a step with several prefill chunks is timed as that many chunks of
        their mean size (new tokens and context)."""
        g = self._g
        flops, nbytes = self._prefill_work(work)
        seqs = work.prefill_seqs
        measured = None
        if self._calibrated is not None and seqs:
            new = max(1, round(work.prefill_tokens / seqs))
            measured = self._calibrated.prefill_attention(new, max(new, round(work.prefill_context_tokens / seqs)))
        if measured is not None:
            ideal = max(flops / g.attn_peak, nbytes / g.accel.hbm_bandwidth)
            return self._full_layers * max(seqs * measured, ideal)
        return self._full_layers * max(g.roofline(flops, nbytes, g.attn_rate), g.launch)

    def _prefill_work(self, work: StepWork, pairs: float | None = None) -> tuple[float, float]:
        """(flops, bytes) of one full-attention layer's prefill attention on one rank, over
        `pairs` (query, key) pairs (default: every causal pair of `work`)."""
        g = self._g
        heads = g.heads
        pairs = work.prefill_attn_pairs if pairs is None else pairs
        flops = 2.0 * heads * pairs * (g.qk_dim + g.v_dim)
        nbytes = (
            (work.prefill_context_tokens + work.prefill_tokens) * g.kv_bytes_layer
            + work.prefill_tokens * heads * (g.qk_dim + g.v_dim) * g.act_width
        )
        return flops, nbytes

    def _decode_work(self, seqs: int, context: int) -> tuple[float, float]:
        """(flops, bytes) of one full-attention layer's decode attention on one rank: every
        sequence's KV read once; its query in, output out and new KV written."""
        flops, per_context, per_seq = self._decode_terms()
        return flops * context, per_context * context + per_seq * seqs

    def _decode_terms(self) -> tuple[float, float, float]:
        """Flops per context token, bytes per context token, bytes per sequence (one layer)."""
        g = self._g
        heads, qk, v = g.heads, g.decode_qk_dim, g.decode_v_dim
        per_seq = heads * (qk + v) * g.act_width + g.kv_bytes_layer
        return 2.0 * heads * (qk + v), float(g.kv_bytes_layer), float(per_seq)

    def _decode_coeffs(self) -> tuple[float, float, float]:
        """Seconds (all full layers) per context token of compute, per context token of memory
        traffic and per sequence of memory traffic: decode attention = max(c0*ctx, c1*ctx + c2*seqs).

        With scaled KV formats (int8, fp8e4m3) each cached element is dequantised once (a multiply
        by its scale, `work_formulas.kv_dequant_flops`), and with a dtype per layer each layer reads
        its own bytes. MLA has no paged-attention kernel here (the kernel is GQA-only): its
        quantised-latent cost is modelled the same way, labelled "modelled" in docs/sim.md."""
        g = self._g
        if g.cfg.kv_layer_dtypes is None and not KV_SCALED.get(g.cfg.kv_dtype, False):
            flops, per_context, per_seq = self._decode_terms()
            layers = self._full_layers
            return (
                layers * flops / g.attn_rate,
                layers * per_context / g.mem_rate,
                layers * per_seq / g.mem_rate,
            )
        flops, _, _ = self._decode_terms()
        qo = g.heads * (g.decode_qk_dim + g.decode_v_dim) * g.act_width
        elements = g.model.kv_elements_per_token_per_layer(g.tp)
        dequant = sum(kv_dequant_flops(dtype, elements) if dtype in KV_CACHE_DTYPES else 0 for dtype in g.kv_dtypes)
        kv_bytes = float(sum(g.kv_layer_bytes))
        return (
            (self._full_layers * flops + dequant) / g.attn_rate,
            kv_bytes / g.mem_rate,
            (self._full_layers * qo + kv_bytes) / g.mem_rate,
        )

    def _calibrated_decode(self, seqs: int, context: int) -> float:
        g = self._g
        flops, nbytes = self._decode_work(seqs, context)
        measured = self._calibrated.decode_attention(seqs, context) if self._calibrated else None
        if measured is None:
            return max(self._full_layers * g.roofline(flops, nbytes, g.attn_rate), self.decode_floor)
        ideal = max(flops / g.attn_peak, nbytes / g.accel.hbm_bandwidth)
        return self._full_layers * max(measured, ideal)


def capped_causal_pairs(cached: float, new: float, cap: float) -> float:
    """Sum over the positions p = cached + 1 .. cached + new of min(p, cap): the (query, key)
    pairs of a chunk whose queries attend at most `cap` keys each (every causal pair when cap is
    at least cached + new)."""
    below = max(0.0, min(cached + new, cap) - cached)  # positions still under the cap
    return below * cached + below * (below + 1) / 2 + (new - below) * cap
