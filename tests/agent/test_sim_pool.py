"""The simulation pool keeps no timeline: its summaries are those of a run that keeps one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from infralab.agent.sim_pool import SimJob, run_one
from infralab.sim.config import load_config
from infralab.sim.run import run_summary, simulate_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("config", ["azure_conv_colocated.toml", "mooncake_conv_pd_rdma.toml"])
def test_pool_summary_is_the_timeline_runs(config):
    path = ROOT / "experiments" / "sim" / config
    cfg, base_dir = load_config(path)
    # A short window keeps the test quick; both runs read the same one.
    workload = dataclasses.replace(cfg.workload, max_requests=300)
    cfg = dataclasses.replace(cfg, workload=workload)
    job = SimJob(config=dataclasses.asdict(cfg), base_dir=str(base_dir), source=str(path))
    pooled = run_one(job, inspect=lambda run, summary: (len(run.intervals), len(run.requests)))
    with_timeline = simulate_config(cfg, base_dir, source=str(path))
    assert pooled.summary == run_summary(with_timeline, cfg, path)
    assert pooled.details == (0, 300)  # no intervals kept; every request
    assert len(with_timeline.intervals) > 0
