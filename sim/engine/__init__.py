"""The serving engine of one instance: paged KV blocks, a prefix cache, a continuous-batching
scheduler with chunked prefill and preemption, and the SimPy process that runs its steps."""
