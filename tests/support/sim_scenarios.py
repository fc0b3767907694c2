"""Random small clusters and workloads for the simulator's property tests (hypothesis): engines
with tight KV memory (so preemptions happen), prompts whose block hashes come from a tiny alphabet
(so prefix-cache hits happen), colocated and disaggregated layouts, every router, transfer mode, first-token side and reservation
rule."""

from __future__ import annotations

from hypothesis import strategies as st
from support.sim_fakes import FakeCost, sim_config

from infralab.sim.config import ClusterConfig, EngineConfig, SimConfig, TransferConfig
from infralab.sim.specs import LinkSpec
from infralab.workload.request import Request

LINK = LinkSpec(name="test", bandwidth=1e6, latency=1e-4)


def fake_cost(capacity_tokens: int) -> FakeCost:
    """Step time affine in the step's work, with attention and decode-context terms; KV as given."""
    return FakeCost(
        capacity_tokens,
        per_step_s=1e-3,
        per_prefill_token_s=2e-5,
        per_attn_pair_s=1e-8,
        per_decode_seq_s=1e-4,
        per_context_token_s=1e-7,
        transfer_bytes_per_token=100,
    )


@st.composite
def scenarios(draw) -> tuple[SimConfig, list[Request], int]:
    """(config, requests, KV capacity in tokens per instance)."""
    block_size = draw(st.sampled_from([2, 4, 8]))
    prefix_block = block_size * draw(st.sampled_from([1, 2, 4]))
    engine = EngineConfig(
        max_num_seqs=draw(st.integers(1, 6)),
        max_batched_tokens=draw(st.integers(8, 96)),
        block_size=block_size,
        prefix_cache=draw(st.booleans()),
        prefix_block_tokens=prefix_block,
    )
    layout = draw(st.sampled_from(["colocated", "disaggregated"]))
    cluster = ClusterConfig(
        layout=layout,
        instances=draw(st.integers(1, 3)),
        prefill_instances=draw(st.integers(1, 2)),
        decode_instances=draw(st.integers(1, 2)),
        router=draw(st.sampled_from(["round_robin", "least_outstanding_tokens", "prefix_aware"])),
        decode_router=draw(st.sampled_from(["round_robin", "least_outstanding_tokens"])),
        transfer=TransferConfig(
            mode=draw(st.sampled_from(["after_prefill", "layerwise"])),
            topology=draw(st.sampled_from(["per_prefill_nic", "shared"])),
            layer_groups=draw(st.integers(1, 3)),
            first_token=draw(st.sampled_from(["decode", "prefill"])),
            reservation_takes_slot=draw(st.booleans()),
        ),
    )
    n = draw(st.integers(1, 12))
    requests = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.001, 0.01, 0.05]))
        prompt = draw(st.integers(1, 120))
        output = draw(st.integers(1, 25))
        # Hash chains from a tiny alphabet, so prompts share prefixes often.
        chain, hashes = 0, []
        for _ in range(prompt // prefix_block + draw(st.integers(0, 1))):
            chain = chain * 3 + draw(st.integers(1, 2))
            hashes.append(chain)
        requests.append(Request(i, t, prompt, output, tuple(hashes)))
    need = max(-(-(r.prompt_tokens + r.output_tokens - 1) // block_size) for r in requests)
    capacity = block_size * draw(st.integers(need, 2 * need))  # tight: preemptions happen
    return sim_config(engine=engine, cluster=cluster), requests, capacity


# ---- one larger fixed case ---------------------------------------------------------------------

PRESSURE_LINK = LinkSpec(name="test", bandwidth=5e9, latency=1e-5)


def kv_pressure_requests(n: int) -> list[Request]:
    """`n` Poisson-ish requests (seed 5) with prompts of 50-3000 tokens, outputs of 1-300 and
    5-block hash chains from a tiny alphabet: with `kv_pressure_configs` and `fake_cost(8000)`
    they preempt and hit the prefix cache."""
    import numpy as np

    rng = np.random.default_rng(5)
    arrivals = np.cumsum(rng.exponential(0.01, n))
    return [
        Request(i, float(arrivals[i]), int(rng.integers(50, 3000)), int(rng.integers(1, 300)),
                tuple(int(h) for h in np.cumsum(rng.integers(1, 3, size=5))))
        for i in range(n)
    ]


def kv_pressure_configs() -> list[SimConfig]:
    """The same engine (32 sequences, 1,024-token budget) colocated (2 instances) and
    disaggregated (2 prefill, 1 decode), least-outstanding-tokens routing."""
    engine = EngineConfig(max_num_seqs=32, max_batched_tokens=1024)
    return [
        sim_config(engine=engine, cluster=ClusterConfig(layout=layout, instances=2, prefill_instances=2,
                                                        decode_instances=1, router="least_outstanding_tokens"))
        for layout in ("colocated", "disaggregated")
    ]
