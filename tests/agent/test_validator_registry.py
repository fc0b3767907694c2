"""A validator is one module: a module dropped into a temporary folder on the validators package's
path is discovered, put on the ladder by its rung, accepted by hypothesis files and run by the
ladder, with no other file edited. The shipped validators are discovered in ladder order."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from infralab.agent import validators
from infralab.agent.hypothesis import ladder, load_hypothesis
from infralab.agent.validators import registry
from infralab.agent.validators.ladder import run_test
from infralab.errors import InputError

TOY_VALIDATOR = '''
"""A toy validator: "measures" y = 2 * x for each arm's knob x, deterministically."""
from pydantic.dataclasses import dataclass

from infralab.agent.validators.base import Declaration, KnobSpec, Measurement, sample_keys
from infralab.config_io import STRICT


@dataclass(frozen=True, config=STRICT)
class ToySetup:
    """No shared context."""


class Doubler:
    name = "toy-doubler"
    rung = 15  # between kernel-check and microbench

    def declarations(self):
        return (Declaration("toy", ("y",), {"x": KnobSpec(int)}, ToySetup),)

    def unavailable(self, hyp):
        return None

    def measure(self, hyp, workdir, execution):
        samples = {arm.name: [{"y": 2 * arm.config["x"]} for _ in sample_keys(hyp)] for arm in hyp.arms}
        return Measurement(self.name, samples, (), varies=False)


VALIDATOR = Doubler
'''

HYPOTHESIS = '''
[hypothesis]
name = "toy"
claim = "doubling a larger x gives a larger y"
kind = "toy"
metrics = ["y"]
validators = ["toy-doubler"]
acceptance = ["big.y > baseline.y"]

[baseline]
x = 1

[[variant]]
name = "big"
change = { x = 3 }
'''


@pytest.fixture
def toy_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The validators package's path with a folder holding `toy_doubler.py` (removed afterwards)."""
    folder = tmp_path / "extra"
    folder.mkdir()
    (folder / "toy_doubler.py").write_text(textwrap.dedent(TOY_VALIDATOR))
    monkeypatch.setattr(validators, "__path__", [*validators.__path__, str(folder)])
    importlib.invalidate_caches()
    yield tmp_path
    sys.modules.pop("infralab.agent.validators.toy_doubler", None)


def test_the_shipped_validators_are_discovered_in_ladder_order() -> None:
    assert ladder() == registry.names() == ("kernel-check", "microbench", "sim", "real")
    assert [cls.rung for cls in registry.validators().values()] == [10, 20, 30, 40]
    with pytest.raises(InputError, match="validator: is 'oracle'.*one of kernel-check, microbench, sim, real"):
        registry.validator_class("oracle")


def test_a_new_validator_is_one_module(toy_path: Path) -> None:
    assert ladder() == ("kernel-check", "toy-doubler", "microbench", "sim", "real")
    path = toy_path / "h.toml"
    path.write_text(HYPOTHESIS)
    hyp = load_hypothesis(path)
    assert hyp.validators == ("toy-doubler",)
    result = run_test(hyp)
    assert result.verdict == "accepted" and result.decided_by == "toy-doubler"
    # and it answers only the kind it declares
    path.write_text(HYPOTHESIS.replace('kind = "toy"', 'kind = "kernel-numerics"'))
    with pytest.raises(InputError, match="cannot answer"):
        load_hypothesis(path)
