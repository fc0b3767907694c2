"""Run metrics shared by the simulator and the real engine: the per-request records, the summary
and how one is computed from the other (vllm bench serve's definitions)."""
