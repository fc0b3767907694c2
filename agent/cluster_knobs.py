"""Knobs of a `cluster` hypothesis: changes to a simulation config, applied and validated.

A knob is a dotted path into the simulation config (`cluster.transfer.link`,
`engine.max_batched_tokens`, `cluster.router`, ...), or one of these named knobs:

- `pools = "P:D"`: the prefill:decode pool sizes of a disaggregated layout, one knob because the
  what-if question is about the ratio (it sets `cluster.prefill_instances` and
  `cluster.decode_instances`).

String values that look like paths (contain "/" or end in .toml/.csv) resolve against the hypothesis
file's folder. The result is validated as a whole config, so a bad knob is reported at its key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infralab.config_io import validate
from infralab.errors import InputError


def _as_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj)


def _set(data: dict[str, Any], dotted: str, value: Any) -> bool:
    """Set `dotted` in nested dicts; False when a part of the path does not exist."""
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node or not isinstance(node[part], dict):
            return False
        node = node[part]
    if parts[-1] not in node:
        return False
    node[parts[-1]] = value
    return True


def _path_like(value: Any) -> bool:
    return isinstance(value, str) and ("/" in value or value.endswith((".toml", ".csv", ".jsonl")))


def arm_config(hyp, setup, arm, where: Callable[[str], str]):
    """The simulation config of `arm`: setup's config with the window and the arm's knobs applied.

    Returns (SimConfig, base_dir). `where(knob)` names the hypothesis key for error messages.
    """
    from infralab.sim.config import SimConfig, check_config, load_config

    config_path = hyp.resolve(setup.config)
    cfg, base_dir = load_config(config_path)
    data = _as_dict(cfg)
    if setup.window_s is not None or setup.max_requests is not None:
        if data["workload"].get("kind") != "trace":
            raise InputError(f"{hyp.source}: setup.window_s", "the config's workload is not a trace",
                             "window_s/max_requests only with [workload] kind = \"trace\"")
        if setup.window_s is not None:
            data["workload"]["start_s"], data["workload"]["end_s"] = setup.window_s
        if setup.max_requests is not None:
            data["workload"]["max_requests"] = setup.max_requests
    for knob, value in arm.knobs:
        if _path_like(value):
            value = str(hyp.resolve(value))
        if knob == "pools":
            match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(value))
            if not match or data["cluster"]["layout"] != "disaggregated":
                raise InputError(where(knob), f"bad value {value!r}",
                                 "\"P:D\" prefill:decode instance counts, for a disaggregated config")
            data["cluster"]["prefill_instances"], data["cluster"]["decode_instances"] = map(int, match.groups())
            continue
        if not _set(data, knob, value):
            raise InputError(where(knob), f"unknown knob {knob!r}",
                             "'pools' or a dotted path of the simulation config, e.g. cluster.transfer.link")
    try:
        new = validate(SimConfig, data, str(config_path))
        check_config(new, str(config_path), base_dir)
    except InputError as exc:
        # Blame the knob that set the offending field when there is one, else the variant's change.
        field = exc.where.split(": ", 1)[-1]
        knob = field if field in arm.config else (arm.change[0] if arm.change else field)
        raise InputError(where(knob), exc.problem + f" ({exc.where})", exc.expected) from None
    return new, base_dir


def describe_paths(value: Any) -> Any:
    """A knob value for reports: paths shortened to their file name."""
    return Path(value).name if _path_like(value) else value
