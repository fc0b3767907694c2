"""The compiled hot path (sim/native.py, tools/build_native.py): a build is used only while it is
current, INFRALAB_PURE_PYTHON turns it off, and compiled and pure runs give the same bytes.

The byte comparison needs a current build (`make setup` makes one); without it the test is
skipped, unless INFRALAB_REQUIRE_NATIVE=1 (CI sets it), where a missing build fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infralab.sim import native

ROOT = Path(__file__).resolve().parents[2]
# The shipped examples, cut so each run takes seconds (every layout: colocated, P/D with links and
# KV transfer, EPD with an encoder pool, Vidur-calibrated costs).
EXAMPLES = {
    "azure_conv_colocated": ["workload.max_requests=1000"],
    "kimi_epd_multimodal": ["workload.num_requests=150"],
    "llama2_70b_vidur_a100": ["workload.end_s=150.0"],
    "mooncake_conv_pd_rdma": ["workload.max_requests=800"],
}


def _tree(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    sim_root, shared_root = tmp_path / "sim", tmp_path / "infralab"
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sim_root, shared_root


def test_a_build_is_current_only_while_every_source_matches_its_record(tmp_path):
    sim_root, shared_root = _tree(tmp_path, {"sim/a.py": "x = 1\n", "sim/engine/b.py": "y = 2\n",
                                             "infralab/c.py": "z = 3\n"})
    assert native.build_state(sim_root, shared_root) == "no build"
    record = sim_root / native.BUILD_RECORD
    record.write_text(json.dumps({"sources": native.source_digests(sim_root, shared_root)}))
    assert native.build_state(sim_root, shared_root) == "compiled"
    (shared_root / "c.py").write_text("z = 4\n")
    assert native.build_state(sim_root, shared_root) == "stale: infralab/c.py changed"
    (shared_root / "c.py").write_text("z = 3\n")
    (sim_root / "engine" / "new.py").write_text("")  # a source the build did not see
    assert native.build_state(sim_root, shared_root) == "stale: sim/engine/new.py changed"
    record.write_text("{not json")
    assert native.build_state(sim_root, shared_root) == "stale: unreadable build record"


def _python(code: str, pure: bool) -> str:
    env = {**os.environ, native.PURE_ENV: "1" if pure else "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _require_compiled_build() -> None:
    """Skip the test without a current build (fail it where INFRALAB_REQUIRE_NATIVE=1)."""
    state = native.build_state()
    if state == "compiled":
        return
    if os.environ.get("INFRALAB_REQUIRE_NATIVE") == "1":
        pytest.fail(f"no current compiled build ({state}); tools/build_native.py --strict says why")
    pytest.skip(f"no current compiled build ({state}): `make setup` makes one")


def test_the_environment_switch_loads_the_sources():
    code = ("import infralab.sim as s, infralab.sim.engine.scheduler as m, infralab.sim.cost.model as c; "
            "print(s.NATIVE_MODE, m.__file__.endswith('.py'), c.__file__.endswith('.py'))")
    assert _python(code, pure=True) == f"python (forced by {native.PURE_ENV}) True True"
    _require_compiled_build()
    assert _python(code, pure=False) == "compiled False False"


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_compiled_and_pure_runs_write_the_same_bytes(example, tmp_path):
    _require_compiled_build()
    outputs = {}
    for mode, pure in (("compiled", False), ("pure", True)):
        out = tmp_path / mode
        sets = [arg for assignment in EXAMPLES[example] for arg in ("--set", assignment)]
        env = {**os.environ, native.PURE_ENV: "1" if pure else "0"}
        subprocess.run([sys.executable, "-m", "infralab", "sim", "run", str(ROOT / "experiments" / "sim" / f"{example}.toml"),
                        "--out", str(out), "--timeline", *sets], env=env, capture_output=True, check=True)
        outputs[mode] = {name: (out / name).read_bytes() for name in ("summary.json", "requests.csv", "trace.json")}
    for name, data in outputs["compiled"].items():
        assert data == outputs["pure"][name], f"{example}: {name} differs between the compiled and the pure run"


def test_requests_built_from_numpy_scalars_run_as_python_numbers():
    """A compiled module takes no numpy int where it declares an int: `Request` turns numpy scalars
    into Python numbers, so such a workload runs (compiled or not) exactly as one of Python numbers."""
    import numpy as np
    from support.sim_fakes import FakeCost, sim_config

    from infralab.sim.cluster import simulate
    from infralab.workload.request import Request

    plain = [Request(i, i * 0.01, 100 + i, 4) for i in range(12)]
    scalars = [Request(np.int64(i), np.float64(i * 0.01), np.int32(100 + i), np.uint8(4)) for i in range(12)]
    assert all(type(r.id) is int and type(r.prompt_tokens) is int and type(r.arrival_s) is float for r in scalars)
    assert scalars == plain
    runs = [simulate(sim_config(), requests, FakeCost(capacity_tokens=10_000)) for requests in (plain, scalars)]
    assert repr(runs[0].requests) == repr(runs[1].requests)
