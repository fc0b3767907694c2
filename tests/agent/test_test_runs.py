"""`infralab test`: a run folder per arm and seed that `infralab explain` reads, and a printed
reproduce command that carries every flag that changes numbers and reruns exactly what ran."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from infralab.cli import main
from support.toml_fixtures import synthetic_config


HYPOTHESIS = """
[hypothesis]
name = "two_instances"
claim = "two instances give no higher p90 TTFT than one"
kind = "cluster"
metrics = ["goodput", "ttft_p90_s"]
validators = ["sim"]
acceptance = ["two.ttft_p90_s <= baseline.ttft_p90_s"]
seeds = [0, 1]

[setup]
config = "base.toml"
processes = 1

[quick]
config = "small.toml"

[baseline]
"cluster.instances" = 1

[[variant]]
name = "two"
change = { "cluster.instances" = 2 }
"""


@pytest.fixture()
def hypothesis(tmp_path) -> Path:
    (tmp_path / "base.toml").write_text(synthetic_config(num_requests=16, rate=4.0, prompt=256, output=8))
    (tmp_path / "small.toml").write_text(synthetic_config(num_requests=6, rate=4.0, prompt=256, output=8))
    path = tmp_path / "h.toml"
    path.write_text(HYPOTHESIS)
    return path


def test_a_run_folder_per_arm_and_seed_that_explain_reads(hypothesis, tmp_path, capsys):
    out = tmp_path / "out"
    main(["test", str(hypothesis), "--out", str(out), "--json"])
    doc = json.loads(capsys.readouterr().out)
    folders = sorted(p.relative_to(out).as_posix() for p in (out / "sim" / "runs").iterdir())
    assert folders == [f"sim/runs/{arm}-seed{seed}" for arm in ("baseline", "two") for seed in (0, 1)]
    (rung,) = doc["rungs"]
    assert set(folders) <= set(rung["files"])  # the JSON names them
    for folder in folders:
        summary = json.loads((out / folder / "summary.json").read_text())
        arm, seed = folder.rsplit("/", 1)[1].split("-seed")
        assert summary["run"]["arm"] == arm and summary["run"]["seed"] == int(seed)
        assert summary["requests"]["total"] == 16
    # The folders hold the numbers the verdict used: their mean is each arm's mean in the result.
    for arm in ("baseline", "two"):
        goodput = [json.loads((out / f"sim/runs/{arm}-seed{s}/summary.json").read_text())["goodput"] for s in (0, 1)]
        assert sum(goodput) / 2 == pytest.approx(rung["arms"][arm]["mean"]["goodput"])
    assert main(["explain", str(out / "sim/runs/two-seed0"), "--against", str(out / "sim/runs/baseline-seed0"),
                 "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["metric"]["units"] == 16 and explained["run"]["missing"]


def run_json(argv: list[str], capsys) -> dict:
    main(argv)
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("flags", [[], ["--quick"]])
def test_the_printed_command_reproduces_what_ran(hypothesis, flags, capsys, monkeypatch):
    monkeypatch.chdir(hypothesis.parent)
    first = run_json(["test", "h.toml", *flags, "--json"], capsys)
    command = first["command"]
    assert command == "infralab test h.toml" + "".join(f" {f}" for f in flags) + " --json"
    again = run_json(shlex.split(command)[1:], capsys)
    assert again == first
    quick = first["rungs"][0]["arms"]["baseline"]["mean"]["completed"]
    assert quick == (6 if flags else 16)  # --quick changed the numbers, and the command keeps it


def test_the_markdown_report_carries_the_same_command(hypothesis, tmp_path, capsys):
    main(["test", str(hypothesis), "--quick", "--out", str(tmp_path / "o")])
    capsys.readouterr()
    report = (tmp_path / "o" / "report.md").read_text()
    assert f"Reproduce: `infralab test {hypothesis} --quick --json`" in report


def test_set_changes_the_hypothesis_and_the_command_carries_it(hypothesis, capsys, monkeypatch):
    monkeypatch.chdir(hypothesis.parent)
    argv = ["test", "h.toml", "--quick", "--set", "hypothesis.seeds=[5]", "--set", "baseline.cluster.instances=3",
            "--json"]
    first = run_json(argv, capsys)
    assert first["hypothesis"]["seeds"] == [5]
    assert first["hypothesis"]["arms"][0]["knobs"] == {"cluster.instances": 3}
    assert first["command"] == ("infralab test h.toml --quick --set 'hypothesis.seeds=[5]' "
                                "--set baseline.cluster.instances=3 --json")
    assert run_json(shlex.split(first["command"])[1:], capsys) == first


@pytest.mark.parametrize("assignment, needle", [("hypothesis.seeds", "no '='"), ("setup.nope=1", "nope"),
                                                ("hypothesis.seeds=[-1]", "seeds")])
def test_a_bad_set_is_one_input_error(hypothesis, assignment, needle, capsys):
    assert main(["test", str(hypothesis), "--set", assignment]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and len(err.splitlines()) == 1


def test_each_arm_s_folder_holds_its_resolved_config_which_sim_run_reproduces(hypothesis, tmp_path, capsys):
    out = tmp_path / "out"
    main(["test", str(hypothesis), "--out", str(out), "--json"])
    capsys.readouterr()
    folder = out / "sim/runs/two-seed1"
    resolved = (folder / "resolved_config.toml").read_text()
    assert "instances = 2" in resolved and "seed = 1" in resolved
    (tmp_path / "again.toml").write_text(resolved)
    assert main(["sim", "run", str(tmp_path / "again.toml"), "--out", str(tmp_path / "again"), "--no-timeline"]) == 0
    capsys.readouterr()
    arm = json.loads((folder / "summary.json").read_text())
    rerun = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert {k: v for k, v in arm.items() if k != "run"} == {k: v for k, v in rerun.items() if k not in ("run", "timeline")}
