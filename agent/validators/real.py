"""`real`: the real run this machine offers, to confirm a simulated conclusion.

For `host-concurrency` hypotheses (`infralab.agent.validators.host`: knob, metrics, setup): the
study's real-threads probe, run through its hook: Python threads, native calls that hold or
release the GIL, a transfer thread copying buffers, with the same schedule simulated beside it.
One sample per probe repeat: real timings vary from run to run, so criteria need >= 2 repeats and
are judged with the noise rule (`infralab.agent.acceptance.NOISE_RULE`).

For `cluster` hypotheses: each arm's config replayed on the real engine (`infralab.agent.real_cluster`:
the simulator's cluster metrics, one sample per seed x repetition); an arm the engine cannot run
here makes the rung unavailable with "cannot confirm here: ...".
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from infralab.agent.hypothesis import Hypothesis, setup_as
from infralab.agent.validators import host, sim
from infralab.agent.validators.base import Declaration, Measurement

if TYPE_CHECKING:
    from infralab.agent.sim_pool import Execution  # measures on this machine whatever the pool's backend

NAME = "real"
DECLARATIONS = (host.declaration(host.REAL_METRICS),
                *(d for d in sim.DECLARATIONS if d.kind == sim.CLUSTER))  # the same setup, knobs and metrics


class Real:
    name = NAME

    def declarations(self) -> tuple[Declaration, ...]:
        return DECLARATIONS

    def unavailable(self, hyp: Hypothesis) -> str | None:
        if hyp.kind == sim.CLUSTER:
            from infralab.agent.real_cluster import cannot_confirm

            return cannot_confirm(hyp, setup_as(hyp, sim.ClusterSetup))
        if hyp.kind != host.KIND:
            return f"no real run for a {hyp.kind!r} hypothesis on this machine"
        from infralab.kernels.host_probe.build import NativeBuildError, compiler

        try:
            compiler()
        except NativeBuildError as exc:
            return str(exc)
        return None

    def measure(self, hyp: Hypothesis, workdir: Path | None, execution: Execution) -> Measurement:
        if hyp.kind == sim.CLUSTER:
            from infralab.agent.real_cluster import measure_real_cluster

            return measure_real_cluster(hyp, setup_as(hyp, sim.ClusterSetup), workdir, NAME)
        return host.measure(hyp, setup_as(hyp, host.HostConcurrencySetup), workdir, NAME)
