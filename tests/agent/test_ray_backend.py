"""The Ray backend of the simulation pool, on a local Ray cluster of 2 CPUs: `infralab search` and
`infralab test` give byte-identical results on Ray and locally, a failed job comes back as its own
error, and a missing ray or an unreachable address is one InputError. The `ray` extra is installed
by `make setup` (and so in CI): nothing here is skipped."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
import ray

from infralab.agent.sim_pool import BACKENDS, Execution, SimJob, run_pool
from infralab.cli import BACKEND_ARGS, main
from infralab.errors import InputError
from support.toml_fixtures import synthetic_config

BASE = synthetic_config(num_requests=8, rate=4.0, prompt=128, output=4)

SPACE = """
[search]
name = "tiny"
base = "base.toml"
seed = 5
objective = "maximize output_throughput_per_accelerator"
constraints = ["ttft_p90_s <= 1.0"]

[axes]
"cluster.instances" = [1, 2]
engine.max_num_seqs = [2, 8]
"""

HYPOTHESIS = """
[hypothesis]
name = "two_instances"
claim = "two instances serve the tiny workload with more goodput than one"
kind = "cluster"
metrics = ["goodput", "ttft_p90_s"]
validators = ["sim"]
acceptance = ["two.goodput >= baseline.goodput"]
seeds = [1, 2]

[setup]
config = "base.toml"
processes = 2

[baseline]
"cluster.instances" = 1

[[variant]]
name = "two"
change = { "cluster.instances" = 2 }
"""


def write(folder: Path, name: str, text: str) -> Path:
    (folder / "base.toml").write_text(BASE)
    (folder / name).write_text(text)
    return folder / name


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_search_on_a_local_ray_cluster_is_byte_identical_to_local(tmp_path, capsys):
    # The CLI starts a local Ray cluster of --jobs CPUs for the run and shuts it down after.
    assert not ray.is_initialized()
    space = write(tmp_path, "space.toml", SPACE)
    assert main(["search", str(space), "--out", str(tmp_path / "local"), "--jobs", "1", "--no-progress"]) == 0
    assert main(["search", str(space), "--out", str(tmp_path / "ray"), "--jobs", "2", "--no-progress",
                 "--backend", "ray"]) == 0
    assert not ray.is_initialized()
    local, on_ray = files_of(tmp_path / "local"), files_of(tmp_path / "ray")
    assert {"search.json", "search.csv"} <= set(local)
    assert local["search.json"] == on_ray["search.json"] and local["search.csv"] == on_ray["search.csv"]
    report = json.loads(local["search.json"])
    assert [p["index"] for p in report["points"]] == [0, 1, 2, 3]  # point order, not completion order


def test_an_address_nothing_listens_on_is_one_input_error(tmp_path, capsys):
    with socket.socket() as probe:  # a port that was free a moment ago: connecting is refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    space = write(tmp_path, "space.toml", SPACE)
    for address, problem in ((f"127.0.0.1:{port}", "cannot reach a Ray cluster"), ("no-port", "bad address")):
        status = main(["search", str(space), "--out", str(tmp_path / "out"), "--backend", "ray",
                       "--ray-address", address, "--no-progress"])
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1
        assert err.startswith("error: --ray-address: ") and problem in err and "ray start --head" in err
    assert not (tmp_path / "out").exists() and not ray.is_initialized()


def test_without_ray_installed_the_ray_backend_is_one_input_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    space, hyp = write(tmp_path, "space.toml", SPACE), write(tmp_path, "h.toml", HYPOTHESIS)
    for argv in (["search", str(space), "--out", str(tmp_path / "out")], ["test", str(hyp)]):
        assert main([*argv, "--backend", "ray"]) == 2
        err = capsys.readouterr().err
        assert err == "error: --backend ray: ray is not installed (expected install the extra: " \
                      "pip install 'infralab[ray]')\n"
    assert not (tmp_path / "out").exists()
    # The local backend never imports ray.
    assert main(["search", str(space), "--out", str(tmp_path / "out"), "--no-progress"]) == 0


def test_the_backend_options():
    choices = next(a.options["choices"] for a in BACKEND_ARGS if a.names == ("--backend",))
    assert choices == BACKENDS  # the command table cannot import the pool: the two lists agree
    with pytest.raises(InputError, match="--ray-address"):
        Execution("local", ray_address="10.0.0.1:6379")
    with pytest.raises(InputError, match="one of local, ray"):
        Execution("dask")  # type: ignore[arg-type]


@pytest.fixture(scope="class")
def ray_connection():
    """One local 2-CPU cluster, connected here, for the tests of a class; the pool uses a
    connection of its caller as it is (the other tests start and stop their own, or none)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.usefixtures("ray_connection")
class TestOnOneRayConnection:

    def test_cluster_hypothesis_on_ray_matches_local(self, tmp_path, capsys):
        hyp = write(tmp_path, "h.toml", HYPOTHESIS)
        docs = {}
        for backend in BACKENDS:
            main(["test", str(hyp), "--json", "--out", str(tmp_path / backend), "--backend", backend])
            docs[backend] = json.loads(capsys.readouterr().out)
        local, on_ray = (files_of(tmp_path / b / "sim" / "summaries") for b in BACKENDS)
        assert sorted(local) == ["baseline-seed1.json", "baseline-seed2.json", "two-seed1.json", "two-seed2.json"]
        assert local == on_ray
        notes = [doc["rungs"][0].pop("notes") for doc in docs.values()]
        assert notes == [["iteration-level cluster model, 4 runs over 2 processes"],
                         ["iteration-level cluster model, 4 runs over a local Ray cluster of 2 CPUs"]]
        assert docs["local"] == docs["ray"]
        assert docs["local"]["rungs"][0]["status"] == "ran"

    def test_a_failed_job_raises_its_own_error_on_either_backend(self, tmp_path):
        bad = SimJob(config={"model": "no-such-model"}, base_dir=str(tmp_path), source="bad.toml")
        for backend in BACKENDS:
            with pytest.raises(InputError, match="bad.toml: workload"):
                run_pool([bad, bad], workers=2, execution=Execution(backend))
        assert run_pool([], execution=Execution("ray")) == []

    def test_an_address_besides_an_existing_connection_is_an_input_error(self, tmp_path):
        job = SimJob(config={}, base_dir=str(tmp_path), source="never-run.toml")
        with pytest.raises(InputError, match="already connected"):
            run_pool([job], execution=Execution("ray", ray_address="auto"))
        assert ray.is_initialized()  # the caller's connection stays open
