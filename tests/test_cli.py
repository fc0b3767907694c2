"""The command table (infralab/cli.py): every command resolves to a handler, handlers are imported
only when their command runs, and bad flags or input end with status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from infralab.cli import COMMANDS, main, parse, resolve


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c.words))
def test_every_command_resolves_to_a_callable_handler(command):
    assert callable(resolve(command.handler))


def test_parsing_names_the_handler_without_importing_it():
    args = parse(["sim", "run", "x.toml", "--out", "o"])
    assert args.handler == "infralab.sim.cli:run" and args.max_trace_events is None


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_building_the_parser_imports_no_part_of_infralab():
    loaded = _modules_after("from infralab.cli import build_parser; build_parser()")
    assert not {m for m in loaded if m.startswith(("infralab.sim", "infralab.kernels", "infralab.agent"))}
    assert not {"torch", "triton", "simpy", "pydantic"} & loaded


def test_sim_commands_never_import_torch():
    loaded = _modules_after("from infralab.cli import main; main(['sim', 'catalog'])")
    assert "infralab.sim.cli" in loaded and "torch" not in loaded and "triton" not in loaded


def test_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    assert main(["sim", "run", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "missing.toml" in err
    assert not (tmp_path / "o").exists()
