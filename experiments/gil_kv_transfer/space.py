"""The GIL case's knobs as a search space for `infralab optimize` (agent/hook_space.py): the
published scenario (published.toml: EP16, 4k-token prompts, the SGLang/Mooncake transfer thread)
with its software choices as axes, each point simulated by this study's scenario model
(scenario.py), with and without the KV transfer, at the published host costs.

Knobs (dotted names; `KNOBS`):
- `dispatch_combine`: "held" (DeepEP's dispatch/combine keep the GIL while they wait) or "released";
- `host.kv_descriptors`: the transfer thread builds its per-page descriptors in "python" (holding the
  GIL) or in one "native" call that releases it;
- `scenario.granularity`: KV sent "after_prefill" or "per_layer" (as each layer's KV is ready);
- `scenario.page_tokens`: tokens per KV page (fewer, larger pages: fewer descriptors);
- `scenario.kv_slots`: prompts whose KV may wait for transfer before the prefill stalls.
Metrics (`METRICS`): the prefill's `degradation` with transfer (1 - throughput ratio) and
`throughput_with_tok_s`. Causes of the extra prefill time, from the study's attribution
(attribution.py): `gil_wait` (the main thread's extra wait for the GIL), `comm_share` (the
all-to-all slowed by KV sharing the NIC), `kv_slot` (waiting for a KV slot to free).

The declarations (`EFFECTS`: raising a knob, which causes go up or down) are the scenario model's
first-order mechanics, written before any comparison ran: holding the GIL in dispatch/combine, or
building descriptors in Python, adds to main's GIL wait; larger pages mean fewer descriptors and so
less Python under the GIL; sending per layer overlaps the transfer with the prefill (less waiting for
a slot) but puts its Python and its NIC traffic inside the prefill; more slots, less waiting.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PUBLISHED = HERE / "published.toml"

KNOBS = ("dispatch_combine", "host.kv_descriptors", "scenario.granularity", "scenario.page_tokens",
         "scenario.kv_slots")
METRICS = ("degradation", "throughput_with_tok_s")
CAUSES = ("gil_wait", "comm_share", "kv_slot")
EFFECTS = {
    "dispatch_combine": {"gil_wait": +1},
    "host.kv_descriptors": {"gil_wait": +1},
    "scenario.page_tokens": {"gil_wait": -1},
    "scenario.granularity": {"kv_slot": -1, "gil_wait": +1, "comm_share": +1},
    "scenario.kv_slots": {"kv_slot": -1},
}
SCALES = {
    "dispatch_combine": {"released": 0.0, "held": 1.0},
    "host.kv_descriptors": {"native": 0.0, "python": 1.0},
    "scenario.granularity": {"after_prefill": 0.0, "per_layer": 1.0},
}
METRIC_CAUSES = {"degradation": CAUSES, "throughput": CAUSES}


@functools.cache
def _study() -> tuple[Any, Any, Any]:
    """This study's published experiment, scenario model and attribution (read once per process:
    every point starts from the same file)."""
    from infralab.agent.studies import load_hook

    case, scenario_model, attribution = (load_hook(HERE / name) for name in ("case.py", "scenario.py", "attribution.py"))
    return case.load_experiment(PUBLISHED), scenario_model, attribution


def evaluate(knobs: dict[str, Any], seed: int = 0) -> tuple[dict[str, Any], dict[str, float]]:
    """One point: the published scenario with `knobs` set, simulated with and without the transfer
    (the scenario model is deterministic: `seed` is unused). Metrics and the seconds each cause added."""
    exp, scenario_model, attribution = _study()
    scenario, host = exp.scenario[0], exp.host
    fields = {key.split(".", 1)[1]: value for key, value in knobs.items() if key.startswith("scenario.")}
    host_fields = {key.split(".", 1)[1]: value for key, value in knobs.items() if key.startswith("host.")}
    scenario = dataclasses.replace(scenario, **fields)
    host = dataclasses.replace(host, **host_fields)
    holds = knobs.get("dispatch_combine", "held") == "held"
    built = scenario_model.build(exp.setup, host, scenario)
    without = scenario_model.run(built, scenario, holds, with_transfer=False)
    with_ = scenario_model.run(built, scenario, holds, with_transfer=True)
    blame = attribution.attribute(without.record.intervals, without.prefill_s, with_.record.intervals, with_.prefill_s)
    metrics = {"degradation": 1.0 - with_.throughput / without.throughput, "throughput_with_tok_s": with_.throughput}
    causes = {"gil_wait": max(blame.main_gil_wait_s, 0.0), "comm_share": max(blame.comm_extra_s, 0.0),
              "kv_slot": max(blame.kv_slot_wait_s, 0.0)}
    return metrics, causes
