"""The `infralab` command: one table of every subcommand, its flags and its handler.

Handlers are named as "module:function" and imported only when their command runs, so that
`infralab sim run` never imports torch or triton and `infralab kernels check` never imports simpy
(the GPU image has neither simpy nor pydantic). Each handler takes the parsed arguments and
returns the exit status; bad input raises `InputError`, printed as one line with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from infralab.errors import InputError


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0, "a non-negative integer")


def fraction(text: str) -> float:
    """argparse type: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


SEED_MAX = 2**63 - 1  # `run.seed`'s bound (infralab/metrics/schema.py RunConfig; a test keeps them equal)


def seed(text: str) -> int:
    """argparse type: a seed, 0 <= N <= 2^63 - 1 (what `run.seed` accepts)."""
    return _int_at_least(text, 0, "an integer from 0 to 2^63 - 1", high=SEED_MAX)


JOBS_MAX = 256  # `setup.processes`' bound (infralab/agent/validators/sim.py ClusterSetup; a test keeps them equal)


def jobs(text: str) -> int:
    """argparse type: workers, 1 <= N <= 256 (what `setup.processes` accepts; a larger --jobs
    reached Ray's resource check as a traceback)."""
    return _int_at_least(text, 1, f"an integer from 1 to {JOBS_MAX}", high=JOBS_MAX)


def _int_at_least(text: str, low: int, what: str, high: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


@dataclass(frozen=True)
class Arg:
    """One flag or positional: `names` and `options` as `ArgumentParser.add_argument` takes them."""

    names: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


def arg(*names: str, **options: Any) -> Arg:
    return Arg(names, options)


@dataclass(frozen=True)
class Command:
    """A subcommand: its words (`("sim", "run")`), help, flags and handler ("module:function")."""

    words: tuple[str, ...]
    help: str
    handler: str
    args: tuple[Arg, ...] = ()
    description: str | None = None


# Where simulation jobs run (infralab.agent.sim_pool.Execution), for `search` and `test`. The
# choices are sim_pool.BACKENDS (this table imports no part; tests/agent/test_ray_backend.py checks).
BACKEND_ARGS = (
    arg("--backend", choices=("local", "ray"), default="local",
        help="run simulations in local processes (default) or as tasks on a Ray cluster (extra: infralab[ray])"),
    arg("--ray-address", metavar="ADDR", default=None,
        help="with --backend ray: join the running cluster at ADDR (HOST:PORT, ray://HOST:PORT or auto); "
             "default: start a local one for the run"),
)

# Flags `sim sweep` and `sim capacity` share (their runs go through the agent's simulation pool).
SWEEP_ARGS = (
    arg("--jobs", type=jobs, default=2, metavar="N", help="simulations at once (default 2, at most 256)"),
    arg("--json", action="store_true", help="print the JSON document (docs/sweeps.md)"),
    arg("--no-progress", action="store_true", help="no progress on stderr"),
    *BACKEND_ARGS,
)

BENCH_ARGS = (
    arg("--out", metavar="FILE.csv", default=None,
        help="calibration table to write (default: results/calibration-<grid>-<device>.csv)"),
    arg("--grid", default="small", metavar="small|full",
        help="shape grid: 'small' runs on a CPU in under a minute, 'full' is for GPUs (default: small)"),
    arg("--kernels", default="all", metavar="NAME,...",
        help="comma-separated kernel names from the kernel registry (default: all)"),
    arg("--no-progress", action="store_true", help="no progress bar on stderr"),
    arg("--force", action="store_true", help="replace the --out file if it exists (default: refuse)"),
)

COMMANDS: tuple[Command, ...] = (
    Command(("sim", "run"), "simulate a config; print a summary and write a results folder",
            "infralab.sim.cli:run", (
                arg("config", metavar="CONFIG.toml", help="simulation config (see docs/sim.md)"),
                arg("--out", required=True, metavar="DIR", help="results folder to write"),
                arg("--seed", type=seed, default=None, help="override run.seed"),
                arg("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field before validation, e.g. --set cluster.instances=8 "
                         "(dotted key, TOML value; repeatable, later wins; docs/sim.md)"),
                arg("--percentiles", default=None, metavar="Q,...",
                    help="latency percentiles to report, e.g. 50,90,99.9 (default: the config's metrics.percentiles, 50,90,99)"),
                # The default cap is the timeline's (infralab.metrics.timeline.DEFAULT_MAX_EVENTS); the
                # handler fills it in so that this table imports nothing of the simulator.
                arg("--max-trace-events", type=non_negative_int, default=None, metavar="N",
                    help="cap on timeline events in trace.json (default: infralab.metrics.timeline.DEFAULT_MAX_EVENTS; the earliest are kept)"),
                arg("--timeline", action="store_true",
                    help="write trace.json whatever the run's size (default: only for runs of at most "
                         "20,000 requests, infralab.sim.run.DEFAULT_TIMELINE_MAX_REQUESTS)"),
                arg("--no-timeline", action="store_true",
                    help="write no trace.json and keep no per-step intervals or counter samples (less memory for big runs)"),
            )),
    Command(("sim", "catalog"), "list the shipped specs, or show one spec's derived figures (a model's KV capacity on --accelerator)",
            "infralab.sim.cli:catalog", (
                arg("name", nargs="?", default=None, metavar="NAME",
                    help="a model, accelerator, link or vision encoder of the catalog (or a model spec TOML path)"),
                arg("--json", action="store_true", help="print JSON"),
                arg("--accelerator", default=None, metavar="A", help="for a model: size its KV cache on this accelerator"),
                arg("--tp", type=positive_int, default=1, metavar="N", help="tensor-parallel degree (default 1)"),
                arg("--dtype", default="bf16", choices=("bf16", "fp16", "fp8e4m3", "int8", "fp32"), help="weights (default bf16; int8 and fp8e4m3: W8A8)"),
                arg("--kv-dtype", default=None, choices=("bf16", "fp16", "fp8e4m3", "int8", "fp32"),
                    help="KV cache (default: as --dtype, bf16 for 8-bit weights)"),
                arg("--gpu-memory-utilization", type=fraction, default=0.9, metavar="F", help="default 0.9"),
                arg("--max-num-seqs", type=positive_int, default=None, metavar="N",
                    help="default: vLLM's for the accelerator (docs/sim.md)"),
                arg("--max-batched-tokens", type=positive_int, default=None, metavar="N",
                    help="default: vLLM's for the accelerator (docs/sim.md)"),
                arg("--block-size", type=positive_int, default=16, metavar="N", help="tokens per KV block (default 16)"),
                *(arg(f"--{knob.replace('_', '-')}", type=positive_int, default=None, metavar="N",
                      help=f"GLM-class knob hardware.{knob} (docs/sim.md, \"GLM-class techniques\")")
                  for knob in ("linear_tp", "lm_head_tp", "moe_ep", "layer_split", "pp", "pp_micro_batches")),
                arg("--replay-ssm-ring", type=positive_int, default=None, metavar="L", help="cost.replay_ssm_ring"),
                arg("--kv-layer-dtypes", default=None, metavar="D,D,...",
                    help="cost.kv_layer_dtypes: one KV dtype per full-attention layer (int8, fp8e4m3, bf16, fp32)"),
                arg("--w8a8-check", default=None, metavar="REPORT.json",
                    help="with --dtype int8/fp8e4m3: show W8A8's error from `kernels check --json` output"),
            )),
    Command(("sim", "sweep"), "run configs at several request rates and seeds; write paper figures and their CSVs",
            "infralab.agent.cli:sim_sweep", (
                arg("config", metavar="CONFIG.toml", help="simulation config with a synthetic workload (docs/sweeps.md)"),
                arg("--configs", nargs="+", default=(), metavar="MORE.toml", help="more configs drawn beside it"),
                arg("--rates", required=True, metavar="R1,R2,...", help="request rates, req/s (workload.arrival.rate)"),
                arg("--seeds", default=None, metavar="S1,S2,...", help="seeds (default: each config's run.seed)"),
                arg("--out", required=True, metavar="DIR", help="results folder to write"),
                *SWEEP_ARGS,
            )),
    Command(("sim", "capacity"), "the highest request rate within the SLOs, by bisection; capacity per accelerator",
            "infralab.agent.cli:sim_capacity", (
                arg("config", metavar="CONFIG.toml", help="simulation config with a synthetic workload (docs/sweeps.md)"),
                arg("--configs", nargs="+", default=(), metavar="MORE.toml", help="more configs searched beside it"),
                arg("--seeds", default=None, metavar="S1,S2,...",
                    help="seeds; a rate meets the SLOs only when every seed's run does (default: run.seed)"),
                arg("--tolerance", type=float, default=0.05, metavar="F",
                    help="stop when the bracket [meets, fails] is within F of its upper end (default 0.05)"),
                arg("--quantile", choices=("p50", "p90", "p99"), default="p90",
                    help="the TTFT and TPOT percentile held to the SLOs (default p90)"),
                arg("--start", type=float, default=None, metavar="R",
                    help="first rate tried, req/s (default: the config's workload.arrival.rate)"),
                arg("--out", default=None, metavar="DIR", help="also write capacity.json and capacity_probes.csv here"),
                *SWEEP_ARGS,
            )),
    Command(("kernels", "check"), "every kernel vs its reference and under every TP split; exit 1 if any check fails",
            "infralab.kernels.cli:check", (
                arg("--json", action="store_true", help="print the full report as JSON"),
                arg("--tp", default="1,2,4,8", help="comma-separated TP degrees (default 1,2,4,8)"),
                arg("--kernels", default=None, help="comma-separated kernel names to check (default: all)"),
            )),
    Command(("kernels", "bench"),
            "time every kernel variant over a shape grid and write a calibration table (docs/calibration.md)",
            "infralab.kernels.cli:bench", BENCH_ARGS,
            description="Time every kernel variant over a shape grid and write a calibration table. On a GPU the "
                        "Triton kernels are timed with triton.testing.do_bench; on the CPU the torch references "
                        "are timed and the device is labelled 'cpu'."),
    Command(("real", "run"), "replay a config's workload open loop on the real engine; the same run folder as `sim run`",
            "infralab.real.cli:run", (
                arg("config", metavar="CONFIG.toml", help="a simulation config with hf_* engine fields (docs/fidelity.md)"),
                arg("--out", required=True, metavar="DIR", help="results folder (written atomically)"),
                arg("--seed", type=seed, default=None, help="override run.seed"),
                arg("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="set a config key before validation (repeatable; TOML value), e.g. real.threads=2"),
            )),
    Command(("real", "profile"), "time the real engine's step over a grid: a step table for `[cost] step_table`",
            "infralab.real.cli:profile", (
                arg("config", metavar="CONFIG.toml", help="the config whose engine (and run's steps) to profile"),
                arg("--out", required=True, metavar="DIR", help="results folder: step_table.csv, profile.json"),
                arg("--also", action="append", default=[], metavar="OTHER.toml",
                    help="another config of the same model and engine whose run's steps the grid also spans "
                         "(repeatable: one table for a set of workloads)"),
                arg("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="set a config key before validation (repeatable), e.g. real.profile.repeats=5"),
                arg("--no-progress", action="store_true", help="no progress on stderr"),
            )),
    Command(("test",), "decide a hypothesis file with the cheapest validator that can (docs/agent.md)",
            "infralab.agent.cli:test", (
                arg("hypothesis", help="hypothesis TOML, e.g. experiments/partition_correctness/partition_correctness.toml"),
                arg("--confirm", action="store_true",
                    help="after the first decision, also run the next (more real) validator allowed"),
                arg("--quick", action="store_true", help="use the file's [quick] table (smoke-test sizes)"),
                arg("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="set a key of the hypothesis file before validation (repeatable; TOML value), e.g. "
                         "hypothesis.seeds=[0,1,2], setup.window_s=[0,30], baseline.cluster.router=round_robin"),
                arg("--json", action="store_true", help="print the result as JSON (schema infralab.test/1)"),
                arg("--out", help="also write result.json, report.md and raw files here (atomically)"),
                *BACKEND_ARGS,
            ),
            description="With --backend ray, a cluster hypothesis's runs (arms x seeds) go to Ray; a local "
                        "Ray cluster gets setup.processes CPUs."),
    Command(("reproduce",), "run the studies under experiments/ and write results/<timestamp>/report.md",
            "infralab.agent.cli:reproduce", (
                arg("--out", help="result folder (default results/<UTC timestamp>)"),
                arg("--quick", action="store_true", help="smoke-test sizes (each hypothesis file's [quick] table)"),
                arg("--study", action="append", metavar="NAME",
                    help="run only this study (repeatable): a folder of experiments/ holding a study.toml"),
            )),
    Command(("fidelity", "run"), "run the real engine and the simulator's mirror on the same cases; write the error table and figures",
            "infralab.agent.fidelity.cli:run", (
                arg("study", metavar="STUDY.toml", help="fidelity study (docs/fidelity.md), e.g. experiments/fidelity/full.toml"),
                arg("--out", required=True, metavar="DIR", help="results folder to write"),
                arg("--quick", action="store_true", help="apply the file's [quick] table (smoke-test sizes)"),
                arg("--no-progress", action="store_true", help="no progress lines on stderr"),
            )),
    Command(("fidelity", "calibrate"), "scale a real-run config's step table to the steps of a real run of it (a calibration run)",
            "infralab.agent.fidelity.calibrate:run", (
                arg("config", metavar="CONFIG.toml", help="a `real run` config with [cost] step_table (docs/fidelity.md)"),
                arg("--run", required=True, metavar="RUN_DIR", help="an `infralab real run` folder of that config"),
                arg("--out", required=True, metavar="TABLE.csv", help="the scaled step table to write"),
                arg("--force", action="store_true", help="replace TABLE.csv if it exists"),
            )),
    Command(("fidelity", "public"), "score the cost model on public measurements: error per point and family, parity plot",
            "infralab.agent.public_points.cli:run", (
                arg("points", metavar="POINTS.toml",
                    help="public measurements (docs/calibration.md), e.g. experiments/fidelity_public/points.toml"),
                arg("--out", required=True, metavar="DIR", help="results folder to write"),
                arg("--json", action="store_true", help="print public_points.json instead of the tables"),
                arg("--no-progress", action="store_true", help="no progress lines on stderr"),
            )),
    Command(("explain",), "where a run's time went, and why it differs from a baseline run",
            "infralab.agent.cli:explain", (
                arg("run", metavar="RUN", help="results folder or timeline .json"),
                arg("--against", metavar="BASELINE", default=None, help="the run to compare with"),
                arg("--json", action="store_true", help="print the JSON document (docs/explain.md)"),
                arg("--metric", choices=("auto", "e2e", "ttft", "tpot", "itl", "queue", "span"), default="auto",
                    help="what to explain: a mean request latency (results folders; auto: e2e) or span (timelines; auto: span); docs/explain.md"),
                arg("--top", type=positive_int, default=10, metavar="N", help="requests/steps listed"),
                arg("--overlap", nargs=2, action="append", metavar=("A", "B"), default=None,
                    help="an interval-set pair to compare, each TRACK[:NAMES[:OPS]] "
                         "(repeatable; replaces the default pairs)"),
            ),
            description="RUN and BASELINE: a results folder of `infralab sim run`, or a timeline .json "
                        "(e.g. a study's timelines: `infralab reproduce --study NAME` writes them under studies/NAME/)."),
    Command(("optimize",), "walk a search space one trial at a time from the runs' feedback; compare with grid, random and TPE",
            "infralab.agent.cli:optimize", (
                arg("space", metavar="SPACE.toml", help="search space, the `search` format (docs/explain.md)"),
                arg("--out", required=True, metavar="DIR", help="results folder to write"),
                arg("--methods", default="explain", metavar="M,...",
                    help="explain (the explain-guided walk), grid, random, tpe; several: a comparison (default explain)"),
                arg("--budget", type=positive_int, default=20, metavar="N", help="trials per method and seed (default 20)"),
                arg("--seeds", default="0", metavar="S1,S2,...", help="seeds of each method (default 0)"),
                arg("--jobs", type=jobs, default=2, metavar="N",
                    help="simulations at once when the whole space is simulated up front (a comparison; default 2)"),
                arg("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="set a key of the SPACE file before validation (repeatable; TOML value)"),
                arg("--confirm", action="store_true",
                    help="the real engine decides each step the simulator would keep (explain, one seed; "
                         "a config both rungs read, e.g. experiments/real/token_budget_small_llama.toml)"),
                arg("--json", action="store_true", help="print optimize.json on stdout"),
                *BACKEND_ARGS,
            )),
    Command(("mcp",), "serve infralab's commands as tools for an LLM agent over the Model Context Protocol (stdio)",
            "infralab.agent.tool_server:serve",
            description="Tools: sim_run, explain, test, search, optimize, kernels_check, fidelity; each tool's JSON schema "
                        "is its command's flags (docs/agent.md). Needs the extra infralab[mcp]."),
    Command(("search",), "explore a configuration space with the simulator: best configurations and the Pareto front",
            "infralab.agent.cli:search", (
                arg("space", metavar="SPACE.toml", help="search space (docs/explain.md)"),
                arg("--out", metavar="DIR", default=None,
                    help="results folder (default results/search/<SPACE file stem>)"),
                arg("--jobs", type=jobs, default=2, metavar="N",
                    help="local processes, or the CPUs of the local Ray cluster started for the run (default 2, at most 256; "
                         "a cluster joined with --ray-address runs as many points at once as it has CPUs)"),
                arg("--json", action="store_true", help="print search.json on stdout"),
                arg("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="set a key of the SPACE file before validation (repeatable; TOML value), e.g. "
                         "search.seed=1, fixed.workload.end_s=30"),
                arg("--no-progress", action="store_true", help="no progress bar"),
                *BACKEND_ARGS,
            )),
)

GROUPS = {
    "sim": "discrete-event simulation of a serving cluster",
    "kernels": "Triton kernels: numerics checks and microbenchmarks",
    "fidelity": "the simulator against the real engine and against public measurements: error beside the spread",
    "real": "the real engine (transformers' continuous batching): replays and step profiles",
}


def add_args(parser: argparse.ArgumentParser, args: Sequence[Arg]) -> None:
    for a in args:
        parser.add_argument(*a.names, **a.options)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, `error: ...`, with exit status 2 (the
    shape of every other input error); `--help` still prints the full usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line from `COMMANDS` (no part of infralab is imported). Subparsers are of
    the same class (argparse's default), so every usage error is one line."""
    parser = OneLineParser(prog="infralab", description="infralab: a testbed for LLM-serving hypotheses")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction[OneLineParser]] = {}
    for command in COMMANDS:
        if len(command.words) == 1:
            sub = top.add_parser(command.words[0], help=command.help, description=command.description)
        else:
            group, word = command.words
            if group not in groups:
                holder = top.add_parser(group, help=GROUPS[group])
                groups[group] = holder.add_subparsers(dest=f"{group}_command", required=True, metavar="SUBCOMMAND")
            sub = groups[group].add_parser(word, help=command.help, description=command.description)
        add_args(sub, command.args)
        sub.set_defaults(handler=command.handler)
    return parser


def resolve(handler: str) -> Callable[[argparse.Namespace], int | None]:
    """Import "module:function" and return the function."""
    module, _, name = handler.partition(":")
    function: Callable[[argparse.Namespace], int | None] = getattr(importlib.import_module(module), name)
    return function


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse a command line (argparse exits with status 2 on unknown flags)."""
    return build_parser().parse_args(argv)


def dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command's handler; InputError propagates (main turns it into one line)."""
    return int(resolve(args.handler)(args) or 0)


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that it unwinds through every cleanup (a
    BaseException, so that no `except Exception` swallows it)."""


EXIT_SIGINT = 128 + signal.SIGINT  # 130, as a shell reports a Ctrl-C
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143


def _on_signal(signum: int, frame: object) -> None:
    """Unwind on the first SIGINT/SIGTERM; ignore later ones so that the cleanup is not cut short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt if signum == signal.SIGINT else Terminated


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """Install `_on_signal` for SIGINT and SIGTERM while a command runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; bad input prints one line `error: ...` and exits with status 2.

    Ctrl-C (SIGINT) and SIGTERM print one line and exit 130 and 143; the atomic writers of
    infralab.results remove their temporaries on the way out.
    """
    args = parse(argv)
    try:
        with _signals_unwind():
            return dispatch(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted (SIGINT); no partial output was kept", file=sys.stderr)
        return EXIT_SIGINT
    except Terminated:
        print("error: terminated (SIGTERM); no partial output was kept", file=sys.stderr)
        return EXIT_SIGTERM


if __name__ == "__main__":
    raise SystemExit(main())
