"""`real`: the real run this machine offers, to confirm a simulated conclusion.

For `hook` hypotheses (`infralab.agent.validators.hook`): the study's own real run on this machine,
through the hook the setup names (which says why it cannot run here, if it cannot). Real timings
vary from run to run, so criteria on them need >= 2 repeats and are judged with the noise rule
(`infralab.agent.acceptance.NOISE_RULE`).

For `cluster` hypotheses: each arm's config replayed on the real engine (`infralab.agent.real_cluster`:
the simulator's cluster metrics, one sample per seed x repetition); an arm the engine cannot run
here makes the rung unavailable with "cannot confirm here: ...".
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from infralab.agent.hypothesis import Hypothesis, setup_as
from infralab.agent.validators import hook, sim
from infralab.agent.validators.base import Declaration, Measurement

if TYPE_CHECKING:
    from infralab.agent.sim_pool import Execution  # measures on this machine whatever the pool's backend

NAME = "real"
DECLARATIONS = (hook.declaration(NAME),
                *(d for d in sim.DECLARATIONS if d.kind == sim.CLUSTER))  # the same setup, knobs and metrics


class Real:
    name = NAME
    rung = 40

    def declarations(self) -> tuple[Declaration, ...]:
        return DECLARATIONS

    def unavailable(self, hyp: Hypothesis) -> str | None:
        if hyp.kind == sim.CLUSTER:
            from infralab.agent.real_cluster import cannot_confirm

            return cannot_confirm(hyp, setup_as(hyp, sim.ClusterSetup))
        if hyp.kind != hook.KIND:
            return f"no real run for a {hyp.kind!r} hypothesis on this machine"
        return hook.unavailable(hyp, NAME)

    def measure(self, hyp: Hypothesis, workdir: Path | None, execution: Execution) -> Measurement:
        if hyp.kind == sim.CLUSTER:
            from infralab.agent.real_cluster import measure_real_cluster

            return measure_real_cluster(hyp, setup_as(hyp, sim.ClusterSetup), workdir, NAME)
        return hook.measure(hyp, workdir, NAME)


VALIDATOR = Real
