"""`infralab reproduce --quick`: every study runs through `infralab test`, and the report folder holds
report.md, report.json, the figures and a verdict per study."""

import json

import pytest

from infralab.agent.reproduce import reproduce
from infralab.agent.studies import discover_studies
from infralab.cli import dispatch, parse
from infralab.errors import InputError

VERDICTS = {"accepted", "rejected", "inconclusive", "partial", "unmeasured"}


def test_quick_reproduce_writes_a_complete_report(tmp_path):
    out = tmp_path / "results" / "run"
    report = reproduce(out, quick=True, progress=lambda text: None)
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["run"]  # no temporary folder left
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    assert on_disk["schema"] == "infralab.reproduce/1" and on_disk["quick"] is True
    assert [s["name"] for s in on_disk["studies"]] == [s.name for s in discover_studies()]
    md = (out / "report.md").read_text()
    for study in on_disk["studies"]:
        assert study["verdict"] in VERDICTS and study["title"] in md
        # a fidelity study (real engine, or public measurements) runs no test: its command is in the report
        runner = study.get("fidelity") or study.get("public_points")
        assert study["tests"] or f"`{runner['command']}`" in md
        for test in study["tests"]:
            assert f"`{test['command']}`" in md
            if test["test"] is None:  # a study decided by its hook (agent/studies.py, HookRun): no test document
                continue
            assert test["test"]["schema"] == "infralab.test/1" and test["test"]["verdict"] == test["verdict"]
            assert test["test"]["findings"], test["hypothesis"]
        for figure in study["figures"]:
            assert (out / figure).stat().st_size > 0 and f"]({figure})" in md
    assert all(s["figures"] for s in on_disk["studies"]), [s["name"] for s in on_disk["studies"] if not s["figures"]]
    gil = next(s for s in on_disk["studies"] if s["name"] == "gil_kv_transfer")
    assert "figures/gil_degradation.png" in gil["figures"]
    assert (out / "studies" / "gil_kv_transfer" / "sim" / "sim_table.md").exists()
    glm = next(s for s in on_disk["studies"] if s["name"] == "glm_stack")
    assert glm["figures"] == ["figures/glm_stack_evolution.png"] and glm["tests"][0]["test"] is None
    assert json.loads((out / "studies" / "glm_stack" / "glm_stack.json").read_text())["mode"] == "quick"
    public = next(s for s in on_disk["studies"] if s["name"] == "fidelity_public")
    families = {f["family"] for f in public["public_points"]["families"]}
    assert families == {"decode", "prefill", "collective", "serving", "overall"}
    points = json.loads((out / public["public_points"]["file"]).read_text())["points"]
    assert len(points) >= 60 and all(p["source"] for p in points)


def test_unknown_study_is_an_input_error():
    args = parse(["reproduce", "--study", "nope"])
    with pytest.raises(InputError, match="--study.*'nope'"):
        dispatch(args)
