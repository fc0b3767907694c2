"""`infralab mcp`: infralab's commands as tools an LLM agent calls, over the Model Context Protocol
(stdio, the `mcp` SDK: the extra `infralab[mcp]`).

Each tool is one command of the CLI table (`infralab/cli.py`): `sim_run`, `explain`, `test`,
`search`, `optimize`, `kernels_check` and `fidelity` (`fidelity public`). A tool's JSON schema is generated from
that command's flags (names, types and bounds, choices, what is required, the help text), so a
tool accepts exactly what the command line accepts; files the command reads (configs, hypothesis
and space files) are named by path and validated by the same models as on the command line.

A call runs the command in a child process (`python -m infralab.cli ... --json`), so that every
run writes its normal run folder, a crash or a stray print cannot reach the protocol's stream, and
the server stays up. The result is the JSON document the command's `--json` prints (for `sim_run`,
the run folder's `summary.json`), as structured content and as text. Errors are tool results with
`is_error` set, never a traceback: a call that breaks the schema names the argument, its problem
and the expected form; a command that refuses its input (exit status 2) gives the command's own
one-line error, which names the file and field as the CLI does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infralab.cli import COMMANDS, JOBS_MAX, SEED_MAX, Arg, Command, fraction, jobs, non_negative_int, positive_int, seed


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, the command it runs, and where its result is when the command prints
    none (`result_file`, read from the folder given as `out`)."""

    name: str
    words: tuple[str, ...]
    description: str
    result_file: str | None = None


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("sim_run", ("sim", "run"), "Simulate a serving-cluster config (TOML path) and write a run folder; "
             "returns the run's summary.json (latencies, throughput, SLO attainment, resources).",
             result_file="summary.json"),
    ToolSpec("explain", ("explain",), "Where a run's time went and why it differs from a baseline run: ranked causes "
             "by layer, request and interval (docs/explain.md)."),
    ToolSpec("test", ("test",), "Decide a hypothesis file with the cheapest validator that can (kernel check, "
             "microbenchmark, simulator, real run); returns the verdict, each rung and the findings."),
    ToolSpec("search", ("search",), "Explore a configuration space (SPACE.toml) with the simulator: the best "
             "configurations and the Pareto front."),
    ToolSpec("optimize", ("optimize",), "Walk a search space one trial at a time, each next point chosen from the "
             "feedback of the runs so far (explain-guided), or compare it with grid, random and TPE; returns every "
             "trial with its finding and the trials each method needed."),
    ToolSpec("kernels_check", ("kernels", "check"), "Check every Triton kernel against its reference and under "
             "every tensor-parallel split; returns the findings and a verdict per kernel."),
    ToolSpec("fidelity", ("fidelity", "public"), "Score the simulator's cost model on public measurements "
             "(POINTS.toml): the error per point and per family."),
)

# Flags every call sets: the command prints its JSON document and no progress on stderr.
FIXED_FLAGS: tuple[str, ...] = ("--json", "--no-progress")


class ToolCallError(Exception):
    """A call the server refuses or a command that failed, as a structured tool error."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        super().__init__(json.dumps(dict(error)))
        self.error = dict(error)


# ---- schemas, from the CLI table -------------------------------------------------------------------


def command_of(words: Sequence[str]) -> Command:
    """The CLI table's command for `words`."""
    return next(c for c in COMMANDS if c.words == tuple(words))


def property_name(a: Arg) -> str:
    """The tool argument of a flag or positional: the dest argparse gives it ("--max-trace-events"
    -> "max_trace_events"), asked of argparse itself."""
    return argparse.ArgumentParser(add_help=False).add_argument(*a.names, **a.options).dest


def _value_schema(a: Arg) -> dict[str, Any]:
    """The JSON schema of one value of `a` (its type and bounds, or its choices)."""
    options = a.options
    if "choices" in options:
        return {"enum": list(options["choices"])}
    kind = options.get("type")
    if kind is positive_int:
        return {"type": "integer", "minimum": 1}
    if kind is non_negative_int:
        return {"type": "integer", "minimum": 0}
    if kind is seed:
        return {"type": "integer", "minimum": 0, "maximum": SEED_MAX}
    if kind is jobs:
        return {"type": "integer", "minimum": 1, "maximum": JOBS_MAX}
    if kind is fraction:
        return {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
    if kind is float:
        return {"type": "number"}
    if kind is int:
        return {"type": "integer"}
    return {"type": "string"}


def _arg_schema(a: Arg) -> dict[str, Any]:
    options = a.options
    action, nargs = options.get("action"), options.get("nargs")
    if action == "store_true":
        schema: dict[str, Any] = {"type": "boolean", "default": False}
    elif isinstance(nargs, int):
        one = {"type": "array", "items": _value_schema(a), "minItems": nargs, "maxItems": nargs}
        schema = {"type": "array", "items": one} if action == "append" else one
    elif action == "append" or nargs in ("+", "*"):
        schema = {"type": "array", "items": _value_schema(a)}
        if nargs == "+":
            schema["minItems"] = 1
    else:
        schema = _value_schema(a)
        default = options.get("default")
        if default is not None and default is not argparse.SUPPRESS:
            schema["default"] = default
    help_text = options.get("help")
    if help_text:
        schema["description"] = str(help_text).replace("%%", "%")
    return schema


def _is_positional(a: Arg) -> bool:
    return not a.names[0].startswith("-")


def input_schema(command: Command) -> dict[str, Any]:
    """The tool's input schema: one property per flag and positional of `command`, except the
    flags every call sets (`FIXED_FLAGS`); positionals and required flags are required."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for a in command.args:
        if a.names[0] in FIXED_FLAGS:
            continue
        name = property_name(a)
        properties[name] = _arg_schema(a)
        optional = a.options.get("nargs") == "?" or not (_is_positional(a) or a.options.get("required"))
        if not optional:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


# ---- a call -----------------------------------------------------------------------------------------


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
    """Raise ToolCallError naming the first argument that breaks `schema` (its problem and the
    expected form)."""
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(schema).iter_errors(dict(arguments)), key=lambda e: list(e.path))
    if not errors:
        return
    error = errors[0]
    field = ".".join(str(p) for p in error.path)
    if error.validator == "required":
        field = next(name for name in schema["required"] if name not in arguments)
    elif error.validator == "additionalProperties":
        known = ", ".join(schema["properties"])
        extra = sorted(set(arguments) - set(schema["properties"]))
        raise ToolCallError({"field": extra[0], "problem": "is not an argument of this tool", "expected": f"one of {known}"})
    expected = schema["properties"].get(field.split(".")[0], {})
    raise ToolCallError({"field": field or "(arguments)", "problem": error.message,
                         "expected": json.dumps({k: v for k, v in expected.items() if k != "description"})})


def argv_for(spec: ToolSpec, arguments: Mapping[str, Any]) -> list[str]:
    """The command line of a call whose `arguments` passed the schema."""
    command = command_of(spec.words)
    argv = list(spec.words)
    for a in command.args:
        if a.names[0] in FIXED_FLAGS:
            argv.append(a.names[0])
            continue
        name = property_name(a)
        if name not in arguments:
            continue
        value = arguments[name]
        if _is_positional(a):
            argv.append(str(value))
        elif a.options.get("action") == "store_true":
            if value:
                argv.append(a.names[0])
        elif a.options.get("action") == "append":
            for item in value:
                argv += [a.names[0], *(map(str, item) if isinstance(item, list) else [str(item)])]
        elif isinstance(value, list):
            argv += [a.names[0], *map(str, value)]
        else:
            argv += [a.names[0], str(value)]
    return argv


def _error_line(stderr: str) -> str:
    """The command's one-line error (`error: ...`), else its last line of stderr."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    found = next((line for line in reversed(lines) if line.startswith("error:")), lines[-1] if lines else "")
    return found.removeprefix("error: ")


def result_of(spec: ToolSpec, arguments: Mapping[str, Any], status: int, stdout: str, stderr: str) -> dict[str, Any]:
    """The tool's result from the command's exit status and output, or ToolCallError. Status 1
    with a JSON document is a result (a failed kernel check, a rejected hypothesis); anything
    else without one is an error."""
    failed = {"exit_status": status, "message": _error_line(stderr), "command": "infralab " + " ".join(spec.words)}
    if status not in (0, 1):
        raise ToolCallError(failed)
    if spec.result_file is not None:
        path = Path(str(arguments["out"])) / spec.result_file
        if status != 0 or not path.is_file():
            raise ToolCallError(failed)
        return dict(json.loads(path.read_text()))
    try:
        document = json.loads(stdout)
    except json.JSONDecodeError:
        raise ToolCallError(failed) from None
    return document if isinstance(document, dict) else {"result": document}


async def run_tool(spec: ToolSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Check `arguments`, run the command in a child process, return its JSON document."""
    import anyio

    check_arguments(input_schema(command_of(spec.words)), arguments)
    argv = argv_for(spec, arguments)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = await anyio.run_process([sys.executable, "-m", "infralab.cli", *argv], check=False, env=env)
    return result_of(spec, arguments, done.returncode, done.stdout.decode(), done.stderr.decode())


# ---- the server -------------------------------------------------------------------------------------


def tool_specs() -> dict[str, ToolSpec]:
    return {spec.name: spec for spec in TOOLS}


def build_server() -> Any:
    """The MCP server (the SDK's low-level `Server`) with infralab's tools."""
    import mcp_types as types
    from mcp.server import Server

    specs = tool_specs()

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=[
            types.Tool(name=s.name, description=s.description, input_schema=input_schema(command_of(s.words)))
            for s in specs.values()])

    async def call_tool(ctx: Any, params: Any) -> Any:
        spec = specs.get(params.name)
        try:
            if spec is None:
                raise ToolCallError({"field": "name", "problem": f"unknown tool {params.name!r}",
                                     "expected": f"one of {', '.join(specs)}"})
            document = await run_tool(spec, params.arguments or {})
        except ToolCallError as exc:
            body = {"error": exc.error}
            return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))],
                                        structured_content=body, is_error=True)
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(document))],
                                    structured_content=document)

    return Server("infralab", on_list_tools=list_tools, on_call_tool=call_tool)


def serve(args: argparse.Namespace) -> int:
    """`infralab mcp`: serve the tools over stdio until the client closes the connection."""
    try:
        import anyio
        from mcp.server.stdio import stdio_server
    except ImportError as exc:
        from infralab.errors import InputError

        raise InputError("infralab mcp", f"needs the MCP SDK ({exc.name} is not installed)",
                         "the extra infralab[mcp] (`make setup` installs it)") from None

    server = build_server()

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
    return 0
