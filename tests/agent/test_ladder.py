"""The validator ladder: each validator on a tiny case, the escalation rule on constructed noisy and
clear results, and the JSON schema of `infralab test --json` (docs/agent.md)."""

import json
from pathlib import Path

import pytest

from infralab.cli import dispatch, parse
from infralab.agent.findings import Evidence, Finding, Where
from infralab.agent.hypothesis import load_hypothesis
from infralab.agent.sim_pool import Execution
from infralab.agent.validators import ladder
from infralab.agent.validators.base import Measurement
from infralab.agent.validators.ladder import run_test
from infralab.agent.validators.ladder import test_json as json_of

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
GIL_EXPERIMENT = EXPERIMENTS / "gil_kv_transfer" / "experiment.toml"
GIL_HOOK = EXPERIMENTS / "gil_kv_transfer" / "hook.py"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- each validator on a tiny case -------------------------------------------------------------

KERNEL = '''
[hypothesis]
name = "tiny_numerics"
claim = "3xTF32 beats TF32 under a K-split; an N-split is bitwise exact"
kind = "kernel-numerics"
metrics = ["rel_err", "bitwise_equal"]
validators = ["kernel-check"]
acceptance = ["x3.rel_err < 0.1 * baseline.rel_err", "nsplit.bitwise_equal"]
seeds = [0, 1]

[baseline]
kernel = "matmul"
variant = "tf32"
shape = "M=8;N=256;K=600"   # N-shards of whole 128-column tiles
split = "row"
tp = 2

[[variant]]
name = "x3"
change = { variant = "3xtf32" }

[[variant]]
name = "nsplit"
change = { split = "column" }
'''


def test_kernel_check_on_a_tiny_matmul(tmp_path):
    result = run_test(load_hypothesis(write(tmp_path, "k.toml", KERNEL)))
    assert result.verdict == "accepted" and result.decided_by == "kernel-check"
    m = result.rung("kernel-check").measurement
    assert not m.varies
    assert m.samples["baseline"][0]["rel_err"] > 1e-5 > m.samples["x3"][0]["rel_err"]
    assert m.samples["baseline"][0]["rel_err"] != m.samples["baseline"][1]["rel_err"]  # seeds draw other inputs
    f = next(f for f in result.findings if f.arm == "x3")
    coords = dict(f.where.coords)
    assert coords["kernel"] == "matmul" and coords["split"].startswith("row/2") and len(coords["worst_index"]) == 2
    assert f.verdict == "accepted" and "rel_err" in f.evidence.numbers


MICRO = '''
[hypothesis]
name = "tiny_kda"
claim = "v2 has fewer divisions than v1"
kind = "kernel-performance"
metrics = ["divisions", "time_s"]
validators = ["microbench"]
acceptance = ["v2.divisions < baseline.divisions", "v2.time_s <= baseline.time_s"]

[baseline]
kernel = "kda_decode"
variant = "v1"
shape = "B=1;H=2;K=16;V=64"

[[variant]]
name = "v2"
change = { variant = "v2" }
'''


def test_microbench_work_counts_decide_what_they_can(tmp_path):
    import torch

    result = run_test(load_hypothesis(write(tmp_path, "m.toml", MICRO)))
    judged = {c["expr"]: c["verdict"] for c in json_of(result)["criteria"]}
    assert judged["v2.divisions < baseline.divisions"] == "accepted"
    if not torch.cuda.is_available():
        assert judged["v2.time_s <= baseline.time_s"] == "unmeasured"
        assert result.verdict == "partial"
    m = result.rung("microbench").measurement
    assert m.samples["v2"][0]["divisions"] < m.samples["baseline"][0]["divisions"]


HOST = f'''
[hypothesis]
name = "tiny_gil"
claim = "releasing the GIL costs prefill less than holding it"
kind = "hook"
metrics = ["max_degradation", "min_kv_python_over_comm"]
validators = ["sim"]
acceptance = ["released.max_degradation < baseline.max_degradation"]

[setup]
experiment = "{GIL_EXPERIMENT}"
hook = "{GIL_HOOK}"
scenarios = ["T2k-ep8-after-page1"]

[baseline]
dispatch_combine_gil = "held"

[[variant]]
name = "released"
change = {{ dispatch_combine_gil = "released" }}
'''


def test_sim_host_model_on_one_scenario(tmp_path):
    work = tmp_path / "work"
    result = run_test(load_hypothesis(write(tmp_path, "h.toml", HOST)), workdir=work)
    m = result.rung("sim").measurement
    assert set(m.samples["baseline"][0]["degradation"]) == {"T2k-ep8-after-page1"}
    held = [f for f in result.findings if f.arm == "baseline"]
    assert len(held) == 1 and dict(held[0].where.coords)["thread"] == "thread/kv-transfer"
    assert (work / "sim" / "figures" / "degradation.png").exists()
    assert result.verdict in ("accepted", "rejected")


CLUSTER_CONFIG = '''
model = "llama-3-8b"
[run]
seed = 0
[hardware]
accelerator = "H100"
[workload]
kind = "synthetic"
num_requests = 24
arrival = { kind = "poisson", rate = 20.0 }
prompt = { kind = "fixed", value = 512 }
output = { kind = "fixed", value = 8 }
'''

CLUSTER = '''
[hypothesis]
name = "tiny_cluster"
claim = "one running sequence at a time hurts p90 TTFT"
kind = "cluster"
metrics = ["ttft_p90_s", "goodput"]
validators = ["sim"]
acceptance = ["serial.ttft_p90_s > baseline.ttft_p90_s"]
seeds = [0, 1]

[setup]
config = "c.toml"
processes = 1

[baseline]
"engine.max_num_seqs" = 64

[[variant]]
name = "serial"
change = { "engine.max_num_seqs" = 1 }
'''


def test_sim_cluster_model_with_two_seeds(tmp_path):
    write(tmp_path, "c.toml", CLUSTER_CONFIG)
    result = run_test(load_hypothesis(write(tmp_path, "h.toml", CLUSTER)))
    assert result.verdict == "accepted"
    m = result.rung("sim").measurement
    assert len(m.samples["serial"]) == 2 and m.samples["serial"][0] != m.samples["serial"][1]
    kinds = {f.where.kind for f in result.findings}
    assert {"resource", "request"} <= kinds


def test_real_probe_mechanics(tmp_path):
    from infralab.agent.validators.real import Real

    exp = GIL_EXPERIMENT.read_text().replace("\nsteps = 4\nlayers = 12\n", "\nsteps = 1\nlayers = 2\n")
    write(tmp_path, "exp.toml", exp)
    text = HOST.replace(str(GIL_EXPERIMENT), "exp.toml").replace('validators = ["sim"]', 'validators = ["real"]')
    text = text.replace('scenarios = ["T2k-ep8-after-page1"]',
                        'probe_repeats = 2\nprobe_granularities = ["after_prefill"]')
    hyp = load_hypothesis(write(tmp_path, "h.toml", text))
    reason = Real().unavailable(hyp)
    if reason:
        pytest.skip(reason)
    m = Real().measure(hyp, tmp_path / "real", Execution())
    assert m.varies
    from infralab.kernels.host_probe.affinity import skip_reason

    # Per core count, and 2 cores pinned one per thread (the experiment's own_cores).
    schedules = {f"{c}c-after_prefill" for c in (1, 2) if skip_reason(c) is None}
    schedules |= {"2c-own-after_prefill"} if skip_reason(2) is None else set()
    assert len(m.samples["baseline"]) == 2 and set(m.samples["baseline"][0]["degradation"]) == schedules
    assert {f.arm for f in m.findings} == {"baseline", "released"}
    assert (tmp_path / "real" / "probe.json").exists()


# ---- the escalation rule, on constructed results -----------------------------------------------

FAKE = f'''
[hypothesis]
name = "fake"
claim = "released is faster"
kind = "hook"
metrics = ["max_degradation"]
validators = ["sim", "real"]
acceptance = ["released.max_degradation < baseline.max_degradation"]
repetitions = 3

[setup]
experiment = "{GIL_EXPERIMENT}"
hook = "{GIL_HOOK}"

[baseline]
dispatch_combine_gil = "held"

[[variant]]
name = "released"
change = {{ dispatch_combine_gil = "released" }}
'''

CLEAR = ([0.20, 0.21, 0.19], [0.02, 0.03, 0.01])  # held, released: far apart
NOISY = ([0.10, 0.20, 0.05], [0.12, 0.04, 0.15])  # within two standard deviations
WORSE = ([0.02, 0.03, 0.01], [0.20, 0.21, 0.19])  # released clearly worse


class Fake:
    def __init__(self, name, data, varies=True, unavailable=None):
        self.name, self.data, self.varies, self.reason = name, data, varies, unavailable
        self.calls = 0

    def unavailable(self, hyp):
        return self.reason

    def measure(self, hyp, workdir, execution):
        self.calls += 1
        held, released = self.data
        samples = {"baseline": [{"max_degradation": v} for v in held],
                   "released": [{"max_degradation": v} for v in released]}
        finding = Finding(self.name, "released", Where.of("thread", thread="thread/kv-transfer"), "constructed",
                          Evidence(numbers={"n": len(held)}))
        return Measurement(self.name, samples, (finding,), varies=self.varies)


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    made = {}

    def install(**by_name):
        made.update(by_name)
        monkeypatch.setattr(ladder, "make_validator", lambda name: made[name])
        return load_hypothesis(write(tmp_path, "fake.toml", FAKE))

    return install


def test_clear_cheap_answer_decides_and_stops(fakes):
    sim, real = Fake("sim", CLEAR), Fake("real", CLEAR)
    result = run_test(fakes(sim=sim, real=real))
    assert (result.verdict, result.decided_by) == ("accepted", "sim")
    assert real.calls == 0 and result.rungs[1].status == "not-needed"


def test_noisy_cheap_answer_escalates(fakes):
    sim, real = Fake("sim", NOISY), Fake("real", CLEAR)
    result = run_test(fakes(sim=sim, real=real))
    assert result.rungs[0].verdict == "inconclusive" and "within noise" in result.rungs[0].reason
    assert (result.verdict, result.decided_by) == ("accepted", "real") and real.calls == 1


def test_confirm_runs_the_next_rung_and_reports_disagreement(fakes):
    sim, real = Fake("sim", CLEAR), Fake("real", WORSE)
    result = run_test(fakes(sim=sim, real=real), confirm=True)
    assert (result.verdict, result.decided_by) == ("rejected", "real")
    ladder_findings = [f for f in result.findings if f.where.kind == "ladder"]
    assert len(ladder_findings) == 1 and "sim said accepted" in ladder_findings[0].what


def test_nothing_decides(fakes):
    result = run_test(fakes(sim=Fake("sim", NOISY), real=Fake("real", NOISY)))
    assert (result.verdict, result.decided_by) == ("inconclusive", None)


def test_unavailable_rung_is_skipped(fakes):
    result = run_test(fakes(sim=Fake("sim", NOISY), real=Fake("real", CLEAR, unavailable="no compiler")))
    assert result.rungs[1].status == "unavailable" and result.rungs[1].reason == "no compiler"
    assert result.verdict == "inconclusive"


def test_deterministic_validator_with_equal_repeats_is_decided(fakes):
    same = ([0.2, 0.2, 0.2], [0.1, 0.1, 0.1])
    result = run_test(fakes(sim=Fake("sim", same, varies=False), real=Fake("real", NOISY)))
    assert (result.verdict, result.decided_by) == ("accepted", "sim")


# ---- JSON schema (docs/agent.md) ---------------------------------------------------------------

VERDICTS = {"accepted", "rejected", "inconclusive", "partial", "unmeasured"}


def check_schema(d):
    assert d["schema"] == "infralab.test/1"
    assert set(d) == {"schema", "hypothesis", "verdict", "decided_by", "confirm", "noise_rule", "criteria", "rungs",
                      "findings", "command"}
    h = d["hypothesis"]
    assert set(h) == {"name", "file", "claim", "kind", "metrics", "validators", "acceptance", "seeds", "repetitions",
                      "arms"}
    for arm in h["arms"]:
        assert set(arm) == {"name", "knobs", "parent", "change"}
    assert d["verdict"] in VERDICTS
    for c in d["criteria"]:
        assert set(c) == {"expr", "verdict", "unmeasured", "comparisons"}
        assert c["verdict"] in VERDICTS - {"partial"}
        for x in c["comparisons"]:
            assert set(x) == {"text", "left", "right", "delta", "noise_std", "samples", "outcome"}
            assert x["outcome"] in ("true", "false", "inconclusive")
    for r in d["rungs"]:
        assert r["status"] in ("ran", "unavailable", "not-needed")
        assert {"validator", "status", "reason", "verdict"} <= set(r)
        if r["status"] == "ran":
            assert {"varies", "notes", "files", "criteria", "arms"} <= set(r)
            for stats in r["arms"].values():
                assert set(stats) == {"mean", "std", "samples"}
    for f in d["findings"]:
        assert set(f) == {"validator", "arm", "where", "what", "evidence", "verdict", "criteria"}
        assert "kind" in f["where"] and set(f["evidence"]) == {"numbers", "reference", "files"}


def test_json_schema_via_the_command(fakes, capsys, tmp_path):
    hyp = fakes(sim=Fake("sim", NOISY), real=Fake("real", CLEAR))
    args = parse(["test", hyp.source, "--json", "--out", str(tmp_path / "out")])
    code = dispatch(args)
    d = json.loads(capsys.readouterr().out)
    check_schema(d)
    assert code == 0 and d["verdict"] == "accepted" and d["decided_by"] == "real"
    assert [r["status"] for r in d["rungs"]] == ["ran", "ran"]
    assert json.loads((tmp_path / "out" / "result.json").read_text()) == d
    assert "ACCEPTED" in (tmp_path / "out" / "report.md").read_text()
