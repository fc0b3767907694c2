"""The simulator from Python (a notebook, a script): run a config, get the summary and the
per-request table as arrays, with no command line and no files unless asked.

    from infralab.sim import api
    result = api.run("experiments/sim/azure_conv_colocated.toml",
                     overrides=["workload.max_requests=2000", "cluster.instances=2"])
    result.summary.latency.ttft_s.percentiles["p90"]   # seconds
    result.metrics["goodput"]                          # the flat metric names (RunSummary.flat_metrics)
    result.requests["ttft_s"]                          # numpy array, one value per request (by id)

`config` is a config file's path or its document as a dict (what `tomllib.load` gives); the run is
the one `infralab sim run` makes of it (the same summary, the same requests.csv columns), so the
same config and seed give the same numbers. docs/sim.md, "Python API", has a worked example.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infralab.metrics.encode_records import ENCODE_COLUMNS, encode_values
from infralab.metrics.records import RequestRecord, RunRecord
from infralab.metrics.requests_csv import DERIVED_FIELDS, REQUEST_FIELDS
from infralab.metrics.run_metrics import is_finished, request_metrics
from infralab.metrics.summary import Metric, RunSummary
from infralab.metrics.timeline import DEFAULT_MAX_EVENTS, save_trace
from infralab.overrides import apply_overrides
from infralab.sim.config import SimConfig, config_doc, config_from_doc, layout_defaults, resolved_config_text
from infralab.sim.run import run_summary, simulate_config, with_seed

DICT_SOURCE = "<config dict>"
# The numpy type of each requests.csv column, from RequestRecord's field types.
_COLUMN_TYPES = {
    f.name: {"int": np.int64, "float": np.float64, "str": np.str_}[str(f.type)]
    for f in dataclasses.fields(RequestRecord)
    if f.name in REQUEST_FIELDS
}


@dataclasses.dataclass(frozen=True)
class SimResult:
    """One run's results.

    - `summary`: the RunSummary (`summary.to_json()` is summary.json's document);
    - `requests`: the per-request table, requests.csv's columns (REQUEST_FIELDS, then ttft_s,
      tpot_s, e2e_s in seconds, NaN where undefined) as numpy arrays, one entry per request in id
      order (times float64, counts int64, instance names str);
    - `config`: the config that ran (overrides and seed applied); `resolved_config` its TOML text;
    - `layout_defaults`: the layout's fields the config left to their defaults;
    - `record`: the run's raw record (intervals, counters) when run with `timeline=True`, else None.
    """

    summary: RunSummary
    requests: dict[str, np.ndarray]
    config: SimConfig
    resolved_config: str
    layout_defaults: tuple[str, ...]
    record: RunRecord | None = None

    @property
    def metrics(self) -> dict[str, Metric]:
        """The summary's flat metric names -> values (`RunSummary.flat_metrics`)."""
        return self.summary.flat_metrics()

    def save_trace(self, path: str | Path, max_events: int = DEFAULT_MAX_EVENTS) -> dict[str, Any]:
        """Write the Perfetto timeline (needs `timeline=True`); returns what it holds."""
        if self.record is None:
            raise ValueError("this run kept no timeline: run it with timeline=True")
        return save_trace(self.record, path, max_events=max_events, metadata={"run": self.summary.run})


def run(
    config: str | Path | Mapping[str, Any],
    overrides: Sequence[str] = (),
    *,
    seed: int | None = None,
    timeline: bool = False,
    base_dir: str | Path | None = None,
) -> SimResult:
    """Simulate `config` (a TOML file's path, or a config document as a dict) with `overrides`
    (`dotted.key=value` assignments, as `--set`) and `seed` (as `--seed`) applied.

    Relative paths in a dict config resolve against `base_dir` (default: the current folder); in a
    file, against its folder. `timeline=True` keeps the intervals and counters (`SimResult.record`,
    `save_trace`), at the memory cost docs/sim.md gives. Bad input raises InputError, as the CLI
    reports it. Nothing is printed and no file is written.
    """
    if isinstance(config, Mapping):
        source = DICT_SOURCE
        folder = Path(base_dir) if base_dir is not None else Path.cwd()
        doc = apply_overrides(copy.deepcopy(dict(config)), overrides, source="overrides")
    else:
        source = str(config)
        folder = Path(config).resolve().parent
        doc = config_doc(config, overrides)
    cfg = with_seed(config_from_doc(doc, source, folder), seed)
    record = simulate_config(cfg, folder, source, timeline=timeline)
    summary = run_summary(record, cfg, Path(source))
    return SimResult(
        summary=summary,
        requests=request_table(record),
        config=cfg,
        resolved_config=resolved_config_text(cfg, folder),
        layout_defaults=tuple(layout_defaults(doc, cfg)),
        record=record if timeline else None,
    )


def request_table(record: RunRecord) -> dict[str, np.ndarray]:
    """requests.csv as columns of numpy arrays (see SimResult.requests)."""
    reqs = sorted(record.requests, key=operator.attrgetter("id"))
    table: dict[str, np.ndarray] = {}
    for name in REQUEST_FIELDS:
        table[name] = np.array([getattr(r, name) for r in reqs], dtype=_COLUMN_TYPES[name])
    derived = np.full((len(reqs), len(DERIVED_FIELDS)), np.nan)
    for row, req in enumerate(reqs):
        if is_finished(req):
            m = request_metrics(req)
            derived[row] = (m.ttft_s, np.nan if m.tpot_s is None else m.tpot_s, m.e2e_s)
    for column, name in enumerate(DERIVED_FIELDS):
        table[name] = derived[:, column]
    if record.encodes is not None:  # multimodal runs: requests.csv's encode columns
        encodes = dict(zip((r.id for r in record.requests), record.encodes))
        values = [encode_values(encodes[r.id]) for r in reqs]
        for column, name in enumerate(ENCODE_COLUMNS):
            kind = str if name == "encode_instance" else np.int64 if name in ("images", "image_tokens") else np.float64
            table[name] = np.array([row[column] for row in values], dtype=kind)
    return table
