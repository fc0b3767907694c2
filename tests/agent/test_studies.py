"""Studies as data: discovery of experiments/<study>/study.toml, the experiments folder's one
lookup, hooks loaded by path, and the generic report of a study without a hook."""

from pathlib import Path

import pytest

from infralab.agent.studies import discover_studies, load_hook, load_study
from infralab.errors import InputError
from infralab.locations import EXPERIMENTS_ENV, experiments_dir

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"

CLUSTER = '''
[hypothesis]
name = "tiny_cluster"
claim = "a second instance lowers p90 TTFT"
kind = "cluster"
metrics = ["ttft_p90_s", "goodput"]
validators = ["sim"]
acceptance = ["two.ttft_p90_s < baseline.ttft_p90_s"]

[setup]
config = "sim.toml"
processes = 1

[baseline]
"cluster.instances" = 1

[[variant]]
name = "two"
change = { "cluster.instances" = 2 }
'''

SIM = '''
model = "llama-3-8b"

[run]
name = "tiny"
seed = 0

[hardware]
accelerator = "H100"
tp = 1

[workload]
kind = "synthetic"
num_requests = 40
arrival = { kind = "poisson", rate = 40.0 }
prompt = { kind = "fixed", value = 2048 }
output = { kind = "fixed", value = 4 }

[cluster]
layout = "colocated"
instances = 1
'''


def test_the_shipped_studies_are_discovered_in_order():
    names = [s.name for s in discover_studies()]
    assert names[:4] == ["partition_correctness", "gil_kv_transfer", "kda_tuning", "whatif_mooncake_pd"]
    for study in discover_studies():
        if study.fidelity is not None:  # a fidelity study names its study file instead (agent/fidelity)
            assert not study.hypotheses and study.fidelity.is_file()
            continue
        if study.measurements is not None:  # public measurements (agent/public_points)
            assert not study.hypotheses and study.measurements.is_file()
            continue
        # hypothesis files, or none and a hook that decides the study (agent/studies.py, HookRun)
        assert (study.hypotheses or study.hook_path) and all(p.is_file() for p in study.hypotheses)


def test_experiments_dir_follows_the_environment(tmp_path, monkeypatch):
    assert experiments_dir() == EXPERIMENTS
    monkeypatch.setenv(EXPERIMENTS_ENV, str(tmp_path))
    assert experiments_dir() == tmp_path and discover_studies() == []
    monkeypatch.setenv(EXPERIMENTS_ENV, str(tmp_path / "absent"))
    with pytest.raises(InputError, match=EXPERIMENTS_ENV):
        experiments_dir()


def test_bad_study_file_names_file_and_field(tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "study.toml").write_text('[study]\ntitle = "t"\nhypotheses = ["nope.toml"]\n')
    with pytest.raises(InputError, match=r"study.toml: study.hypotheses\[0\]"):
        load_study(folder)
    (folder / "study.toml").write_text('[study]\ntitle = "t"\nhypotheses = []\n')
    with pytest.raises(InputError, match="study.hypotheses"):
        load_study(folder)
    (folder / "p.toml").write_text("")
    (folder / "study.toml").write_text('[study]\ntitle = "t"\nfidelity = "p.toml"\nmeasurements = "p.toml"\n')
    with pytest.raises(InputError, match="study.fidelity: given together with study.measurements"):
        load_study(folder)
    (folder / "study.toml").write_text('[study]\ntitle = "t"\nmeasurements = "nope.toml"\n')
    with pytest.raises(InputError, match="study.measurements"):
        load_study(folder)


def test_a_hook_is_one_module_per_file(tmp_path):
    path = tmp_path / "hook.py"
    path.write_text("import dataclasses\n\n@dataclasses.dataclass(frozen=True)\nclass Thing:\n    x: int = 1\n")
    first, again = load_hook(path), load_hook(path)
    assert first is again and first.Thing().x == 1


def test_a_study_without_a_hook_gets_the_generic_report(tmp_path, monkeypatch):
    from infralab.agent.reproduce import reproduce

    folder = tmp_path / "more_instances"
    folder.mkdir()
    (folder / "sim.toml").write_text(SIM)
    (folder / "hypothesis.toml").write_text(CLUSTER)
    (folder / "study.toml").write_text('[study]\ntitle = "More instances"\nhypotheses = ["hypothesis.toml"]\n')
    monkeypatch.setenv(EXPERIMENTS_ENV, str(tmp_path))
    out = tmp_path / "out"
    report = reproduce(out, progress=lambda text: None)
    (study,) = report["studies"]
    assert study["name"] == "more_instances" and study["figures"] == ["figures/tiny_cluster_ttft_p90_s.png"]
    assert (out / study["figures"][0]).stat().st_size > 0
    md = (out / "report.md").read_text()
    assert "| arm | change | ttft_p90_s | goodput |" in md and "| two | baseline with cluster.instances=2 |" in md


def test_a_study_decided_by_a_hook_without_run_is_one_error_naming_the_file(tmp_path, monkeypatch):
    from infralab.agent.reproduce import reproduce
    from infralab.agent.studies import DecidingHook, deciding_hook, reporting_hook

    folder = tmp_path / "by_hook"
    folder.mkdir()
    (folder / "study.toml").write_text('[study]\ntitle = "Decided by its hook"\n')
    (folder / "hook.py").write_text("def report(results, out):\n    return [], ''\n")  # run is missing
    study = load_study(folder)
    with pytest.raises(InputError, match=r"hook.py: does not define run\(out, quick\)"):
        deciding_hook(study)
    monkeypatch.setenv(EXPERIMENTS_ENV, str(tmp_path))
    with pytest.raises(InputError, match="does not define run"):
        reproduce(tmp_path / "out", progress=lambda text: None)
    assert not (tmp_path / "out").exists()  # nothing half-written
    assert reporting_hook(study) is not None  # its report function is the other contract
    (folder / "hook.py").write_text("from infralab.agent.studies import HookRun\n\n"
                                    "def run(out, quick):\n    return HookRun('accepted', 'c', 'cmd', (), 'md')\n")
    other = tmp_path / "again" / "by_hook"
    other.mkdir(parents=True)
    (other / "study.toml").write_text('[study]\ntitle = "Decided by its hook"\n')
    (other / "hook.py").write_text((folder / "hook.py").read_text())
    hook: DecidingHook = deciding_hook(load_study(other))
    assert hook.run(tmp_path, quick=True).verdict == "accepted" and reporting_hook(load_study(other)) is None
