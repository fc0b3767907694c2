"""Host overheads of a step (`HostOverheadConfig`): per step, per scheduled sequence and per output
token, and how they meet the device's time (`overlap`): "sync" (total_s = device_s + host_s) or
"async" (total_s = max(device_s, host_s) + async_residue_s).

Units: seconds.
"""

from __future__ import annotations

from infralab.sim.config import HostOverheadConfig
from infralab.sim.cost.work import StepWork


class Host:
    """A step's host seconds and its total seconds (module docstring)."""

    def __init__(self, host: HostOverheadConfig) -> None:
        self._host = host

    def host_s(self, work: StepWork) -> float:
        """Host overheads of a step (s): per step, per scheduled sequence, per output token."""
        host = self._host
        return (
            host.per_step_s
            + host.per_request_s * (work.prefill_seqs + work.decode_seqs)
            + host.per_output_token_s * work.output_tokens
        )

    def with_host(self, device: float, host: float) -> float:
        """A step's seconds from its device and host seconds (`HostOverheadConfig.overlap`)."""
        if self._host.overlap == "async":
            return max(device, host) + self._host.async_residue_s
        return device + host
