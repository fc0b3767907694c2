"""`infralab mcp`: the tools' schemas are their commands' flags, a malformed call is a structured
error naming the argument, and a scripted client (the MCP SDK's own, over stdio) runs a baseline
and a variant, reads explain, and tests a hypothesis, as an LLM agent would."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from infralab.agent import tool_server
from infralab.agent.tool_server import TOOLS, ToolCallError, argv_for, check_arguments, command_of, input_schema
from infralab.cli import SEED_MAX, parse
from support.toml_fixtures import KERNEL_HYPOTHESIS

mcp = pytest.importorskip("mcp", reason="the MCP SDK (extra infralab[mcp]) is not installed")

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "experiments" / "sim" / "azure_conv_colocated.toml"
HYPOTHESIS = KERNEL_HYPOTHESIS


def test_each_tools_schema_is_its_commands_flags() -> None:
    sim_run = input_schema(command_of(("sim", "run")))
    assert sim_run["required"] == ["config", "out"] and sim_run["additionalProperties"] is False
    assert sim_run["properties"]["seed"] == {"type": "integer", "minimum": 0, "maximum": SEED_MAX,
                                             "description": "override run.seed"}
    assert sim_run["properties"]["set"]["type"] == "array" and sim_run["properties"]["no_timeline"]["type"] == "boolean"
    explain = input_schema(command_of(("explain",)))
    assert explain["properties"]["metric"]["enum"][:2] == ["auto", "e2e"] and "json" not in explain["properties"]
    for spec in TOOLS:  # every flag of the command (but --json / --no-progress, which every call sets)
        flags = {a.names[0] for a in command_of(spec.words).args} - set(tool_server.FIXED_FLAGS)
        assert len(input_schema(command_of(spec.words))["properties"]) == len(flags), spec.name


def test_a_calls_arguments_become_the_command_line_the_cli_parses() -> None:
    spec = next(s for s in TOOLS if s.name == "explain")
    argv = argv_for(spec, {"run": "runs/a", "against": "runs/b", "top": 3, "overlap": [["x", "y"]]})
    args = parse(argv)
    assert (args.run, args.against, args.top, args.overlap, args.json) == ("runs/a", "runs/b", 3, [["x", "y"]], True)
    spec = next(s for s in TOOLS if s.name == "sim_run")
    args = parse(argv_for(spec, {"config": "c.toml", "out": "o", "set": ["a=1", "b=2"], "no_timeline": True}))
    assert (args.set, args.no_timeline, args.seed) == (["a=1", "b=2"], True, None)


@pytest.mark.parametrize(("arguments", "field", "problem"), [
    ({"config": "c.toml", "out": "o", "seed": -1}, "seed", "less than the minimum"),
    ({"config": "c.toml", "out": "o", "seed": SEED_MAX + 1}, "seed", "greater than the maximum"),
    ({"config": "c.toml", "out": "o", "set": "a=1"}, "set", "is not of type 'array'"),
    ({"config": "c.toml"}, "out", "required"),
    ({"config": "c.toml", "out": "o", "sede": 1}, "sede", "is not an argument"),
])
def test_a_malformed_call_names_the_argument(arguments: dict, field: str, problem: str) -> None:
    with pytest.raises(ToolCallError) as caught:
        check_arguments(input_schema(command_of(("sim", "run"))), arguments)
    assert caught.value.error["field"] == field and problem in caught.value.error["problem"]
    assert caught.value.error["expected"]


def _client_session(tmp_path: Path):
    """A stdio client of `python -m infralab.cli mcp` run from the repository root."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "infralab.cli", "mcp"], cwd=str(ROOT))
    return stdio_client(params, errlog=(tmp_path / "server.log").open("w"))


def test_a_scripted_client_runs_a_baseline_reads_explain_and_tests_a_hypothesis(tmp_path: Path) -> None:
    import anyio
    from mcp.client.session import ClientSession

    hypothesis = tmp_path / "h.toml"
    hypothesis.write_text(HYPOTHESIS)
    calls: dict[str, object] = {}

    async def script() -> None:
        async with _client_session(tmp_path) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            calls["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
            for name, extra in (("base", []), ("one", ["cluster.instances=1"])):
                calls[name] = await session.call_tool("sim_run", {
                    "config": str(CONFIG), "out": str(tmp_path / name), "set": ["workload.end_s=5", *extra]})
            calls["explain"] = await session.call_tool("explain", {
                "run": str(tmp_path / "one"), "against": str(tmp_path / "base")})
            calls["test"] = await session.call_tool("test", {"hypothesis": str(hypothesis)})
            calls["bad_seed"] = await session.call_tool("sim_run", {"config": str(CONFIG), "out": str(tmp_path / "x"),
                                                                    "seed": -1})
            calls["bad_file"] = await session.call_tool("sim_run", {"config": str(tmp_path / "missing.toml"),
                                                                    "out": str(tmp_path / "y")})
            calls["unknown"] = await session.call_tool("simulate", {})

    anyio.run(script)
    assert calls["tools"] == sorted(s.name for s in TOOLS)
    base, one = calls["base"], calls["one"]
    assert not base.is_error and not one.is_error
    # the run folder's summary.json, as structured content and as text; each run writes its folder
    assert base.structured_content == json.loads((tmp_path / "base" / "summary.json").read_text())
    assert json.loads(base.content[0].text) == base.structured_content
    explain = calls["explain"]
    assert not explain.is_error and explain.structured_content["baseline"]["source"] == str(tmp_path / "base")
    test = calls["test"]
    assert not test.is_error and test.structured_content["verdict"] == "accepted"
    # errors are tool results naming the argument (schema) or the file (the command's own error), no traceback
    bad_seed = calls["bad_seed"]
    assert bad_seed.is_error and bad_seed.structured_content["error"]["field"] == "seed"
    assert not (tmp_path / "x").exists()
    bad_file = calls["bad_file"]
    assert bad_file.is_error and bad_file.structured_content["error"]["exit_status"] == 2
    assert "missing.toml" in bad_file.structured_content["error"]["message"]
    assert "Traceback" not in bad_file.content[0].text
    unknown = calls["unknown"]
    assert unknown.is_error and unknown.structured_content["error"]["field"] == "name"
