"""A generated corpus of hostile inputs for the CLI, one `Case` each, grouped by class.

Each case writes its files into a fresh folder and returns the command line to run and the texts
its one-line error must contain (the file and the field at fault). Every case must be refused
before any work: exit status 2, one line `error: ...` on stderr, nothing under the `--out` path.

Classes (CLASSES): unreadable files of every kind the tools read; bad numbers and types per field
of the simulation config; model, accelerator and link specs; hypothesis files; search spaces;
traces; `explain` inputs; command-line flags.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ---- cases -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One hostile input: `build(folder)` writes its files and returns (argv, needles)."""

    cls: str
    name: str
    build: Callable[[Path], tuple[list[str], list[str]]]

    @property
    def id(self) -> str:
        return f"{self.cls}:{self.name}"


OUT = "out"  # every command that writes is pointed at folder / OUT


# ---- TOML rendering ----------------------------------------------------------------------------


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def to_toml(data: dict[str, Any], prefix: str = "") -> str:
    """Plain values first, then one [table] per nested dict."""
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for key, value in data.items():
        if isinstance(value, dict):
            name = f"{prefix}.{key}" if prefix else key
            lines.append(f"\n[{name}]")
            lines.append(to_toml(value, name))
    return "\n".join(lines) + "\n"


_MISSING = object()


def with_value(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A deep copy of `data` with `dotted` set to `value` (or removed when value is _MISSING)."""
    copy = json.loads(json.dumps(data))
    keys = dotted.split(".")
    node = copy
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    if value is _MISSING:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value
    return copy


# ---- the base inputs (tiny, valid) ---------------------------------------------------------------

BASE_CONFIG: dict[str, Any] = {
    "model": "llama-3-8b",
    "run": {"name": "tiny", "seed": 0},
    "hardware": {"accelerator": "H100", "tp": 1},
    "workload": {
        "kind": "synthetic",
        "num_requests": 3,
        "arrival": {"kind": "poisson", "rate": 2.0},
        "prompt": {"kind": "fixed", "value": 16},
        "output": {"kind": "fixed", "value": 4},
    },
    "cost": {
        "dtype": "bf16",
        "efficiency": {"gemm": 0.7, "attention": 0.5, "memory": 0.8, "collective": 0.7},
        "host": {"per_step_s": 0.0, "per_request_s": 0.0, "per_output_token_s": 0.0},
    },
    "engine": {"max_num_seqs": 8, "max_batched_tokens": 256, "block_size": 16,
               "gpu_memory_utilization": 0.9, "prefix_cache": True, "prefix_block_tokens": 512},
    # Only the colocated layout's fields: a field of the other layout is an error of its own (the
    # bad values of those fields below are still caught first, by their type and range).
    "cluster": {"layout": "colocated", "instances": 1},
    "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
}

MODEL_SPEC: dict[str, Any] = {
    "name": "tiny", "source": "test", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
    "num_kv_heads": 2, "head_dim": 16, "vocab_size": 1000, "intermediate_size": 128,
    "context_length": 4096,
}
ACCELERATOR_SPEC: dict[str, Any] = {
    "name": "acc", "peak_flops": {"bf16": 1e15}, "hbm_bandwidth": 3e12, "hbm_capacity": 80e9,
    "calibration_device": "acc",
}
LINK_SPEC: dict[str, Any] = {"name": "lnk", "bandwidth": 5e10, "latency": 1e-6}

HYPOTHESIS: dict[str, Any] = {
    "hypothesis": {
        "name": "h", "claim": "c", "kind": "cluster", "metrics": ["ttft_p90_s"], "validators": ["sim"],
        "acceptance": ["fast.ttft_p90_s < baseline.ttft_p90_s"], "seeds": [0], "repetitions": 1,
    },
    "setup": {"config": "cfg.toml"},
    "baseline": {"engine.max_num_seqs": 8},
    "variant": [{"name": "fast", "change": {"engine.max_num_seqs": 16}}],
}

SPACE: dict[str, Any] = {
    "search": {"base": "cfg.toml", "name": "s", "seed": 0, "objective": "maximize goodput", "top": 2},
    "axes": {"engine.max_num_seqs": [4, 8]},
}

MOONCAKE_ROWS = [
    {"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]},
    {"timestamp": 10, "input_length": 200, "output_length": 5, "hash_ids": [2]},
    {"timestamp": 20, "input_length": 300, "output_length": 5, "hash_ids": [3]},
]


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def sim_run(folder: Path, config: Path | str) -> list[str]:
    return ["sim", "run", str(config), "--out", str(folder / OUT)]


def trace_config(trace: str, fmt: str) -> dict[str, Any]:
    data = with_value(BASE_CONFIG, "workload", {"kind": "trace", "path": trace, "format": fmt})
    return data


def mooncake_text(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


# ---- class: unreadable files ---------------------------------------------------------------------

# Ways a file can be unreadable, each as (name, writer): the writer makes the file at `path` and
# returns the path to name in the command (which may differ: /dev/zero).
def _binary(path: Path) -> str:
    path.write_bytes(bytes(range(256)) * 4)
    return str(path)


def _latin1(path: Path) -> str:
    path.write_bytes('name = "café"\n'.encode("latin-1"))
    return str(path)


def _folder(path: Path) -> str:
    path.mkdir()
    return str(path)


def _dev_zero(path: Path) -> str:
    return "/dev/zero"


def _huge(path: Path) -> str:
    with path.open("wb") as handle:  # sparse: costs no disk
        handle.truncate(1 << 31)
    return str(path)


def _deep_toml(path: Path) -> str:
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    return str(path)


def _deep_dotted_toml(path: Path) -> str:
    path.write_text(".".join(f"k{i}" for i in range(200)) + " = 1\n")
    return str(path)


def _missing(path: Path) -> str:
    return str(path.parent / "does-not-exist.toml")


UNREADABLE = {
    "binary": _binary, "latin1": _latin1, "folder": _folder, "dev-zero": _dev_zero, "huge": _huge,
    "missing": _missing,
}
UNREADABLE_TOML = {**UNREADABLE, "deep-arrays": _deep_toml, "deep-dotted-keys": _deep_dotted_toml}


def _needle(path_text: str) -> str:
    return "/dev/zero" if path_text == "/dev/zero" else Path(path_text).name


def unreadable_cases() -> Iterator[Case]:
    # The file named on the command line.
    for how, make in UNREADABLE_TOML.items():
        def config(folder: Path, make=make) -> tuple[list[str], list[str]]:
            name = make(folder / "cfg.toml")
            return sim_run(folder, name), [_needle(name)]

        def hypothesis(folder: Path, make=make) -> tuple[list[str], list[str]]:
            name = make(folder / "h.toml")
            return ["test", name, "--out", str(folder / OUT)], [_needle(name)]

        def space(folder: Path, make=make) -> tuple[list[str], list[str]]:
            name = make(folder / "space.toml")
            return ["search", name, "--out", str(folder / OUT), "--no-progress"], [_needle(name)]

        yield Case("unreadable", f"config-{how}", config)
        yield Case("unreadable", f"hypothesis-{how}", hypothesis)
        yield Case("unreadable", f"space-{how}", space)
    # Files a config names: specs, a calibration table, traces.
    for how, make in UNREADABLE_TOML.items():
        for field, name in (("model", "m.toml"), ("hardware.accelerator", "a.toml"), ("hardware.tp_link", "l.toml")):
            def spec(folder: Path, make=make, how=how, field=field, name=name) -> tuple[list[str], list[str]]:
                path = make(folder / name)
                if how == "missing":
                    path = str(folder / name)
                cfg = write(folder, "cfg.toml", to_toml(with_value(BASE_CONFIG, field, path)))
                return sim_run(folder, cfg), [_needle(path)]

            yield Case("unreadable", f"{field}-{how}", spec)
    for how, make in UNREADABLE.items():
        if how == "missing":
            continue
        def calibration(folder: Path, make=make) -> tuple[list[str], list[str]]:
            path = make(folder / "cal.csv")
            cfg = write(folder, "cfg.toml", to_toml(with_value(BASE_CONFIG, "cost.calibration", path)))
            return sim_run(folder, cfg), [_needle(path)]

        yield Case("unreadable", f"calibration-{how}", calibration)
        for fmt in ("mooncake", "azure", "vidur", "csv"):
            def trace(folder: Path, make=make, fmt=fmt) -> tuple[list[str], list[str]]:
                path = make(folder / "t.trace")
                cfg = write(folder, "cfg.toml", to_toml(trace_config(path, fmt)))
                return sim_run(folder, cfg), [_needle(path)]

            yield Case("unreadable", f"trace-{fmt}-{how}", trace)
        def explain_timeline(folder: Path, make=make) -> tuple[list[str], list[str]]:
            path = make(folder / "t.json")
            return ["explain", path], [_needle(path)]

        if how not in ("folder",):  # a folder is read as a results folder: its own cases below
            yield Case("unreadable", f"explain-timeline-{how}", explain_timeline)


# ---- class: bad numbers and types in the simulation config -----------------------------------------

POSITIVE_INTS = (
    "workload.num_requests", "workload.prompt.value", "workload.output.value", "hardware.tp",
    "engine.max_num_seqs", "engine.max_batched_tokens", "engine.block_size", "engine.prefix_block_tokens",
    "cluster.instances", "cluster.prefill_instances", "cluster.decode_instances",
    "cluster.transfer.layer_groups",
)
FRACTIONS = ("cost.efficiency.gemm", "cost.efficiency.attention", "cost.efficiency.memory",
             "cost.efficiency.collective", "engine.gpu_memory_utilization")
SECONDS = ("cost.host.per_step_s", "cost.host.per_request_s", "cost.host.per_output_token_s",
           "slo.ttft_s", "slo.tpot_s")

BAD_INTS: dict[str, Any] = {
    "true": True, "string": "1", "decimal": 1.5, "zero": 0, "negative": -3, "2**63": 2**63,
    "10**12": 10**12,
}
BAD_FLOATS: dict[str, Any] = {
    "nan": math.nan, "inf": math.inf, "-inf": -math.inf, "true": True, "string": "0.5", "negative": -1.0,
    "1e300": 1e300,
}


def config_field_cases() -> Iterator[Case]:
    def mutated(field: str, value: Any, needles: tuple[str, ...] = ()) -> Callable:
        def build(folder: Path) -> tuple[list[str], list[str]]:
            cfg = write(folder, "cfg.toml", to_toml(with_value(BASE_CONFIG, field, value)))
            return sim_run(folder, cfg), ["cfg.toml", *(needles or (field,))]

        return build

    for field in POSITIVE_INTS:
        for label, value in BAD_INTS.items():
            yield Case("config-field", f"{field}={label}", mutated(field, value))
    for label, value in {"true": True, "negative": -1, "2**64": 2**64, "decimal": 0.5}.items():
        yield Case("config-field", f"run.seed={label}", mutated("run.seed", value))
    for field in FRACTIONS:
        for label, value in {**BAD_FLOATS, "1e-300": 1e-300, "above-1": 1.5}.items():
            yield Case("config-field", f"{field}={label}", mutated(field, value))
    for field in SECONDS:
        for label, value in BAD_FLOATS.items():
            yield Case("config-field", f"{field}={label}", mutated(field, value))
    for label, value in {**BAD_FLOATS, "1e-300": 1e-300, "0": 0}.items():
        yield Case("config-field", f"workload.arrival.rate={label}", mutated("workload.arrival.rate", value))
    for label, value in {"int": 1, "zero": 0, "yes": "yes", "string-true": "true"}.items():
        yield Case("config-field", f"engine.prefix_cache={label}", mutated("engine.prefix_cache", value))
    for field, value in (("cost.dtype", "fp7"), ("cost.kv_dtype", "int3"), ("cluster.layout", "ring"),
                         ("cluster.router", "random"), ("model", 5), ("hardware.accelerator", True),
                         ("run.name", 3), ("engine.preemption", "swap"), ("workload.kind", "magic"),
                         ("workload.arrival.kind", "burst"), ("engine.max_position_embeddings", 4096)):
        yield Case("config-field", f"{field}={value!r}", mutated(field, value))
    # Length distributions and their cross-field checks.
    lognormal = {"kind": "lognormal", "median": 100.0, "sigma": 1.0}
    uniform = {"kind": "uniform", "low": 10, "high": 20}
    for label, spec, needle in (
        ("lognormal-sigma-inf", {**lognormal, "sigma": math.inf}, "workload.prompt.sigma"),
        ("lognormal-sigma-huge", {**lognormal, "sigma": 1e6}, "workload.prompt.sigma"),
        ("lognormal-median-nan", {**lognormal, "median": math.nan}, "workload.prompt.median"),
        ("lognormal-max-true", {**lognormal, "max": True}, "workload.prompt.max"),
        ("uniform-high-1e19", {**uniform, "high": 1e19}, "workload.prompt.high"),
        ("uniform-high-10**19", {**uniform, "high": 10**19}, "workload.prompt.high"),
        ("uniform-reversed", {**uniform, "low": 30}, "workload.prompt.high"),
        ("fixed-2**63", {"kind": "fixed", "value": 2**63}, "workload.prompt.value"),
        ("fixed-longer-than-context", {"kind": "fixed", "value": 9000}, "workload.prompt"),
        ("uniform-longer-than-context", {"kind": "uniform", "low": 8000, "high": 9000}, "workload.prompt"),
        ("missing-kind", {"value": 3}, "workload.prompt.kind"),
        ("missing-value", {"kind": "fixed"}, "workload.prompt.value"),
    ):
        yield Case("config-field", f"prompt-{label}", mutated("workload.prompt", spec, ("cfg.toml", needle)))
    # A prompt that fits with an output that does not: the request's KV outgrows the context.
    beyond = with_value(with_value(BASE_CONFIG, "workload.prompt.value", 8000), "workload.output.value", 500)
    yield Case("config-field", "prompt-plus-output-beyond-context",
               lambda folder: (sim_run(folder, write(folder, "cfg.toml", to_toml(beyond))), ["cfg.toml", "workload.output"]))
    for field in ("workload.num_requests", "hardware", "model"):
        yield Case("config-field", f"missing-{field}", mutated(field, _MISSING))
    # Sizes that need more memory than any machine: refused before a request is drawn.
    huge = with_value(with_value(BASE_CONFIG, "workload.num_requests", 10_000_000), "workload.output.value", 10_000_000)
    yield Case("config-field", "memory-requests-x-output",
               lambda folder: (sim_run(folder, write(folder, "cfg.toml", to_toml(huge))), ["cfg.toml", "workload.num_requests"]))
    yield Case("config-field", "instances-10**7", mutated("cluster.instances", 10**7))


# ---- class: model, accelerator and link specs ----------------------------------------------------


def spec_cases() -> Iterator[Case]:
    def spec_case(kind_field: str, spec: dict[str, Any], field: str, value: Any) -> Callable:
        def build(folder: Path) -> tuple[list[str], list[str]]:
            write(folder, "spec.toml", to_toml(with_value(spec, field, value)))
            cfg = with_value(BASE_CONFIG, kind_field, "spec.toml")
            return sim_run(folder, write(folder, "cfg.toml", to_toml(cfg))), ["spec.toml", field]

        return build

    for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "vocab_size", "context_length"):
        for label, value in {"true": True, "zero": 0, "negative": -1, "2**63": 2**63, "decimal": 2.5}.items():
            yield Case("spec", f"model.{field}={label}", spec_case("model", MODEL_SPEC, field, value))
    for label, value in {"yes": "yes", "one": 1}.items():
        yield Case("spec", f"model.tie_word_embeddings={label}", spec_case("model", MODEL_SPEC, "tie_word_embeddings", value))
    yield Case("spec", "model.max_position_embeddings", spec_case("model", MODEL_SPEC, "max_position_embeddings", 4096))
    for field in ("peak_flops.bf16", "hbm_bandwidth", "hbm_capacity"):
        for label, value in {"inf": math.inf, "nan": math.nan, "zero": 0, "true": True, "1e300": 1e300}.items():
            yield Case("spec", f"accelerator.{field}={label}",
                       spec_case("hardware.accelerator", ACCELERATOR_SPEC, field, value))
    for field, values in (("latency", {"inf": math.inf, "nan": math.nan, "negative": -1.0, "1e9": 1e9}),
                          ("bandwidth", {"inf": math.inf, "zero": 0, "true": True, "string": "fast"})):
        for label, value in values.items():
            yield Case("spec", f"link.{field}={label}", spec_case("hardware.tp_link", LINK_SPEC, field, value))


# ---- class: hypothesis files ---------------------------------------------------------------------


def hypothesis_cases() -> Iterator[Case]:
    def hyp_case(field: str, value: Any, needle: str) -> Callable:
        def build(folder: Path) -> tuple[list[str], list[str]]:
            write(folder, "cfg.toml", to_toml(BASE_CONFIG))
            write(folder, "h.toml", to_toml(with_value(HYPOTHESIS, field, value)))
            return ["test", str(folder / "h.toml"), "--out", str(folder / OUT)], ["h.toml", needle]

        return build

    for label, value in {"true": True, "negative": -1, "2**64": 2**64, "string": "0"}.items():
        yield Case("hypothesis", f"seeds={label}", hyp_case("hypothesis.seeds", [value], "hypothesis.seeds"))
    for label, value in {"zero": 0, "true": True, "10**9": 10**9}.items():
        yield Case("hypothesis", f"repetitions={label}", hyp_case("hypothesis.repetitions", value, "hypothesis.repetitions"))
    for label, value in {"true": True, "zero": 0, "nan": math.nan, "10**12": 10**12}.items():
        yield Case("hypothesis", f"knob-max_num_seqs={label}",
                   hyp_case("baseline", {"engine.max_num_seqs": value}, "baseline"))
    for label, value in {"reversed": [60.0, 10.0], "nan": [0.0, math.nan], "negative": [-5.0, 1.0]}.items():
        yield Case("hypothesis", f"window_s={label}", hyp_case("setup.window_s", value, "setup.window_s"))
    yield Case("hypothesis", "processes=true", hyp_case("setup.processes", True, "setup.processes"))
    yield Case("hypothesis", "missing-claim", hyp_case("hypothesis.claim", _MISSING, "hypothesis.claim"))
    for label, value in {"zero": 0, "true": True, "huge": 10**6}.items():
        def kernel(folder: Path, value=value) -> tuple[list[str], list[str]]:
            data = {
                "hypothesis": {"name": "k", "claim": "c", "kind": "kernel-numerics", "metrics": ["rel_err"],
                               "validators": ["kernel-check"], "acceptance": ["row.rel_err <= 1"]},
                "baseline": {"kernel": "matmul", "variant": "tf32", "shape": "M=8;N=128;K=64", "split": "none",
                             "tp": value},
                "variant": [{"name": "row", "change": {"split": "row"}}],
            }
            write(folder, "h.toml", to_toml(data))
            return ["test", str(folder / "h.toml"), "--out", str(folder / OUT)], ["h.toml", "baseline.tp"]

        yield Case("hypothesis", f"kernel-tp={label}", kernel)

    def kernel_shape(folder: Path) -> tuple[list[str], list[str]]:
        data = {
            "hypothesis": {"name": "k", "claim": "c", "kind": "kernel-numerics", "metrics": ["rel_err"],
                           "validators": ["kernel-check"], "acceptance": ["row.rel_err <= 1"]},
            # K x V states of 4096 x 64 heads x 4096 x 4096: far beyond any machine's memory
            "baseline": {"kernel": "kda_decode", "variant": "v3", "shape": "S=3;B=4096;H=64;K=4096;V=4096",
                         "split": "none", "tp": 4},
            "variant": [{"name": "row", "change": {"split": "head"}}],
        }
        write(folder, "h.toml", to_toml(data))
        return ["test", str(folder / "h.toml"), "--out", str(folder / OUT)], ["h.toml", "baseline.shape"]

    yield Case("hypothesis", "kernel-shape-beyond-memory", kernel_shape)
    for label, change, needle in (
        ("variant-table-unknown-key", {"engine": {"bogus": 1}}, "'engine.bogus'"),
        ("variant-table-two-knobs", {"engine": {"max_num_seqs": 16, "block_size": 32}}, "engine.block_size"),
    ):
        variant = [{"name": "fast", "change": change}]
        yield Case("hypothesis", label, hyp_case("variant", variant, needle))


# ---- class: search spaces ------------------------------------------------------------------------


def space_cases() -> Iterator[Case]:
    def space_case(field: str, value: Any, needle: str) -> Callable:
        def build(folder: Path) -> tuple[list[str], list[str]]:
            write(folder, "cfg.toml", to_toml(BASE_CONFIG))
            write(folder, "space.toml", to_toml(with_value(SPACE, field, value)))
            return ["search", str(folder / "space.toml"), "--out", str(folder / OUT), "--no-progress"], ["space.toml", needle]

        return build

    for label, value in {"true": True, "zero": 0, "10**9": 10**9}.items():
        yield Case("search-space", f"top={label}", space_case("search.top", value, "search.top"))
    for label, value in {"true": True, "negative": -1}.items():
        yield Case("search-space", f"seed={label}", space_case("search.seed", value, "search.seed"))
    grid = {f"engine.{k}": list(range(1, 101)) for k in ("max_num_seqs", "block_size", "prefix_block_tokens")}
    yield Case("search-space", "10**6-points", space_case("axes", grid, "axes"))
    yield Case("search-space", "axis-true", space_case("axes", {"engine.max_num_seqs": [True, 4]}, "axes"))
    yield Case("search-space", "axis-inf", space_case("axes", {"slo.ttft_s": [math.inf, 1.0]}, "axes"))
    yield Case("search-space", "missing-base", space_case("search.base", _MISSING, "search.base"))
    yield Case("search-space", "axis-empty", space_case("axes", {"engine.max_num_seqs": []}, "axes.engine.max_num_seqs"))
    yield Case("search-space", "axis-unknown-knob", space_case("axes", {"engine.speed": [1, 2]}, "engine.speed"))
    yield Case("search-space", "axis-nan", space_case("axes", {"workload.arrival.rate": [math.nan]}, "axes"))
    yield Case("search-space", "objective-unknown", space_case("search.objective", "maximize luck", "search.objective"))
    yield Case("search-space", "base-folder", space_case("search.base", ".", "search.base"))


# ---- class: traces ---------------------------------------------------------------------------------


def trace_cases() -> Iterator[Case]:
    def mooncake_case(rows_text: str, needle: str, extra: dict[str, Any] | None = None) -> Callable:
        def build(folder: Path) -> tuple[list[str], list[str]]:
            write(folder, "t.jsonl", rows_text)
            cfg = trace_config("t.jsonl", "mooncake")
            for key, value in (extra or {}).items():
                cfg = with_value(cfg, key, value)
            # A config field (workload.*) is blamed in the config; anything else in the trace.
            where = "cfg.toml" if needle.startswith("workload.") else "t.jsonl"
            return sim_run(folder, write(folder, "cfg.toml", to_toml(cfg))), [where, needle]

        return build

    def row(line: int, **change: Any) -> str:
        rows = [dict(r) for r in MOONCAKE_ROWS]
        rows[line - 1].update(change)
        return mooncake_text(rows)

    for label, change, needle in (
        ("prompt-1e9", {"input_length": 10**9}, "t.jsonl:2: input_length"),
        ("prompt-beyond-context", {"input_length": 9000}, "t.jsonl:2: input_length"),
        ("output-1e9", {"output_length": 10**9}, "t.jsonl:2: output_length"),
        ("prompt-negative", {"input_length": -1}, "t.jsonl:2: input_length"),
        ("prompt-true", {"input_length": True}, "t.jsonl:2: input_length"),
        ("prompt-decimal", {"input_length": 1.5}, "t.jsonl:2: input_length"),
        ("timestamp-string", {"timestamp": "soon"}, "t.jsonl:2: timestamp"),
        ("timestamp-backwards", {"timestamp": -5}, "t.jsonl:2: timestamp"),
        ("hash-ids-text", {"hash_ids": "abc"}, "t.jsonl:2: hash_ids"),
        ("hash-ids-beyond-prompt", {"hash_ids": list(range(50))}, "t.jsonl:2: hash_ids"),  # 200 tokens: 1 block
        ("output-beyond-context", {"input_length": 8000, "output_length": 500}, "t.jsonl:2: output_length"),
    ):
        yield Case("trace", f"mooncake-{label}", mooncake_case(row(2, **change), needle))
    yield Case("trace", "mooncake-nan-timestamp",
               mooncake_case(mooncake_text(MOONCAKE_ROWS[:1]) + '{"timestamp": NaN, "input_length": 1, "output_length": 1}\n',
                             "t.jsonl:2: timestamp"))
    yield Case("trace", "mooncake-array-row", mooncake_case(mooncake_text(MOONCAKE_ROWS[:1]) + "[1, 2, 3]\n", "t.jsonl:2"))
    yield Case("trace", "mooncake-deep-row",
               mooncake_case("[" * 100000 + "]" * 100000 + "\n", "t.jsonl"))
    yield Case("trace", "mooncake-empty", mooncake_case("", "t.jsonl"))
    yield Case("trace", "mooncake-window-empty",
               mooncake_case(mooncake_text(MOONCAKE_ROWS), "t.jsonl", {"workload.start_s": 500.0}))
    yield Case("trace", "mooncake-window-reversed",
               mooncake_case(mooncake_text(MOONCAKE_ROWS), "workload.end_s", {"workload.start_s": 5.0, "workload.end_s": 1.0}))
    yield Case("trace", "mooncake-rate-scale-inf",
               mooncake_case(mooncake_text(MOONCAKE_ROWS), "workload.rate_scale", {"workload.rate_scale": math.inf}))

    def csv_case(fmt: str, text: str, needle: str) -> Callable:
        def build(folder: Path) -> tuple[list[str], list[str]]:
            write(folder, "t.csv", text)
            cfg = trace_config("t.csv", fmt)
            return sim_run(folder, write(folder, "cfg.toml", to_toml(cfg))), ["t.csv", needle]

        return build

    azure_head = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,100,5\n"
    for label, line, needle in (
        ("prompt-1e9", "2023-11-16 18:15:47.0,1000000000,5\n", "t.csv:3: ContextTokens"),
        ("prompt-nan", "2023-11-16 18:15:47.0,nan,5\n", "t.csv:3: ContextTokens"),
        ("bad-time", "yesterday,10,5\n", "t.csv:3: TIMESTAMP"),
        ("short-row", "2023-11-16 18:15:47.0,10\n", "t.csv:3"),
        ("field-over-csv-limit", "2023-11-16 18:15:47.0," + "1" * 200_000 + ",5\n", "t.csv:3"),
    ):
        yield Case("trace", f"azure-{label}", csv_case("azure", azure_head + line, needle))
    vidur_head = "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,5\n"
    for label, line, needle in (
        ("time-inf", "inf,10,5\n", "t.csv:3: arrived_at"),
        ("time-nan", "nan,10,5\n", "t.csv:3: arrived_at"),
        ("decode-1e9", "1.0,10,1000000000\n", "t.csv:3: num_decode_tokens"),
        ("field-over-csv-limit", "1.0," + "1" * 200_000 + ",5\n", "t.csv:3"),
        ("prompt-plus-output-beyond-context", "1.0,8000,500\n", "t.csv:3: num_decode_tokens"),
    ):
        yield Case("trace", f"vidur-{label}", csv_case("vidur", vidur_head + line, needle))


# ---- class: explain inputs -------------------------------------------------------------------------


def explain_cases() -> Iterator[Case]:
    def timeline_case(doc_text: str, needle: str) -> Callable:
        def build(folder: Path) -> tuple[list[str], list[str]]:
            write(folder, "t.json", doc_text)
            return ["explain", str(folder / "t.json")], ["t.json", needle]

        return build

    def event(**change: Any) -> dict[str, Any]:
        return {"ph": "X", "name": "batch", "pid": 1, "tid": 1, "ts": 0, "dur": 10, **change}

    yield Case("explain", "list-of-ints", timeline_case("[1, 2, 3]", "traceEvents[0]"))
    yield Case("explain", "nan-ts", timeline_case('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "ts": NaN, "dur": 1}]}', "t.json"))
    yield Case("explain", "negative-dur", timeline_case(json.dumps({"traceEvents": [event(dur=-5)]}), "traceEvents[0]"))
    yield Case("explain", "string-ts", timeline_case(json.dumps({"traceEvents": [event(ts="0")]}), "traceEvents[0]"))
    yield Case("explain", "bool-ts", timeline_case(json.dumps({"traceEvents": [event(ts=True)]}), "traceEvents[0]"))
    yield Case("explain", "huge-ts", timeline_case('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "ts": 1e999, "dur": 1}]}', "t.json"))
    yield Case("explain", "counter-text", timeline_case(json.dumps({"traceEvents": [{"ph": "C", "name": "c", "pid": 1, "ts": 0, "args": {"v": "x"}}]}), "traceEvents[0]"))
    yield Case("explain", "no-events", timeline_case(json.dumps({"events": []}), "traceEvents"))
    yield Case("explain", "deep", timeline_case("[" * 100000 + "]" * 100000, "t.json"))
    yield Case("explain", "not-json", timeline_case("{oops", "line 1"))

    def folder_case(name: str, text: str | bytes, needle: str) -> Callable:
        def build(folder: Path) -> tuple[list[str], list[str]]:
            run = folder / "run"
            run.mkdir()
            write(run, "summary.json", "{}")
            write(run, "requests.csv", "id\n")
            write(run, "trace.json", json.dumps({"traceEvents": []}))
            write(run, name, text)
            return ["explain", str(run)], [name, needle]

        return build

    yield Case("explain", "summary-list", folder_case("summary.json", "[1, 2, 3]", "summary.json"))
    yield Case("explain", "summary-nan", folder_case("summary.json", '{"x": NaN}', "summary.json"))
    yield Case("explain", "summary-binary", folder_case("summary.json", b"\xff\xfe{}", "summary.json"))
    yield Case("explain", "requests-missing-columns", folder_case("requests.csv", "id,foo\n1,2\n", "header"))
    def edited_run(edit: Callable[[Path], None], needle: str) -> Callable:
        def build(folder: Path) -> tuple[list[str], list[str]]:
            run = tiny_run(folder / "run")
            edit(run)
            return ["explain", str(run)], [needle]

        return build

    def summary_edit(dotted: str, value: Any) -> Callable[[Path], None]:
        def edit(run: Path) -> None:
            data = json.loads((run / "summary.json").read_text())
            (run / "summary.json").write_text(json.dumps(with_value(data, dotted, value)))

        return edit

    def event_edit(ph: str, key: str, value: Any) -> Callable[[Path], None]:
        def edit(run: Path) -> None:
            doc = json.loads((run / "trace.json").read_text())
            next(ev for ev in doc["traceEvents"] if ev.get("ph") == ph)[key] = value
            (run / "trace.json").write_text(json.dumps(doc))

        return edit

    def requests_edit(column: str, value: str) -> Callable[[Path], None]:
        def edit(run: Path) -> None:
            lines = (run / "requests.csv").read_text().splitlines()
            header = lines[0].split(",")
            cells = lines[1].split(",")
            cells[header.index(column)] = value
            (run / "requests.csv").write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")

        return edit

    for label, edit, needle in (
        ("summary-table-for-a-number", summary_edit("duration_s", {"a": 1}), "duration_s"),
        ("summary-text-for-a-number", summary_edit("e2e_s.p50", "fast"), "e2e_s.p50"),
        ("summary-null-busy-fraction", summary_edit("instances.instance/instance-0.busy_fraction", None), "busy_fraction"),
        ("event-pid-list", event_edit("M", "pid", [1]), "traceEvents["),
        ("event-args-text", event_edit("M", "args", "x"), "traceEvents["),
        ("event-dur-negative", event_edit("X", "dur", -1), "traceEvents["),
        ("event-ts-null", event_edit("X", "ts", None), "traceEvents["),
        ("requests-negative-time", requests_edit("arrival_s", "-1.0"), "arrival_s"),
        ("requests-inf-time", requests_edit("finish_s", "inf"), "finish_s"),
        ("requests-text-count", requests_edit("prompt_tokens", "many"), "prompt_tokens"),
    ):
        yield Case("explain", label, edited_run(edit, needle))

    def empty_folder(folder: Path) -> tuple[list[str], list[str]]:
        (folder / "run").mkdir()
        return ["explain", str(folder / "run")], ["summary.json"]

    yield Case("explain", "empty-folder", empty_folder)


_TINY_RUN: list[Path] = []  # one results folder of BASE_CONFIG per test process, copied per case


def tiny_run(dest: Path) -> Path:
    """A copy, at `dest`, of the results folder `infralab sim run` writes for BASE_CONFIG."""
    import atexit
    import contextlib
    import io
    import shutil
    import tempfile

    from infralab.cli import main

    if not _TINY_RUN:
        folder = Path(tempfile.mkdtemp(prefix="infralab-tiny-run-"))
        atexit.register(shutil.rmtree, folder, True)
        config = write(folder, "cfg.toml", to_toml(BASE_CONFIG))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["sim", "run", str(config), "--out", str(folder / "run")]) == 0
        _TINY_RUN.append(folder / "run")
    shutil.copytree(_TINY_RUN[0], dest)
    return dest


# ---- class: flags ------------------------------------------------------------------------------------


def flag_cases() -> Iterator[Case]:
    def flags(argv: list[str], needle: str) -> Callable:
        def build(folder: Path) -> tuple[list[str], list[str]]:
            cfg = write(folder, "cfg.toml", to_toml(BASE_CONFIG))
            return [a.replace("CFG", str(cfg)).replace("OUT", str(folder / OUT)) for a in argv], [needle]

        return build

    for label, argv, needle in (
        ("no-command", [], "COMMAND"),
        ("unknown-command", ["fly"], "fly"),
        ("sim-no-config", ["sim", "run", "--out", "OUT"], "CONFIG.toml"),
        ("sim-no-out", ["sim", "run", "CFG"], "--out"),
        ("sim-seed-negative", ["sim", "run", "CFG", "--out", "OUT", "--seed", "-1"], "--seed"),
        ("sim-seed-text", ["sim", "run", "CFG", "--out", "OUT", "--seed", "x"], "--seed"),
        ("sim-unknown-flag", ["sim", "run", "CFG", "--out", "OUT", "--fast"], "--fast"),
        ("sim-max-trace-events", ["sim", "run", "CFG", "--out", "OUT", "--max-trace-events", "1e3"], "--max-trace-events"),
        ("search-jobs-zero", ["search", "CFG", "--out", "OUT", "--jobs", "0"], "--jobs"),
        ("explain-top-zero", ["explain", "CFG", "--top", "0"], "--top"),
        ("explain-metric", ["explain", "CFG", "--metric", "speed"], "--metric"),
        ("explain-overlap-one", ["explain", "CFG", "--overlap", "a"], "--overlap"),
        ("kernels-no-verb", ["kernels"], "SUBCOMMAND"),
        ("test-no-file", ["test", "--quick"], "hypothesis"),
        # A number beyond what the field it sets accepts: the flag's own one-line error.
        ("sim-seed-2**63", ["sim", "run", "CFG", "--out", "OUT", "--seed", str(2**63)], "--seed"),
        ("catalog-tp-2**70", ["sim", "catalog", "llama-3-8b", "--accelerator", "H100", "--tp", str(2**70)], "--tp"),
        ("catalog-max-num-seqs-2**70", ["sim", "catalog", "llama-3-8b", "--accelerator", "H100",
                                        "--max-num-seqs", str(2**70)], "--max-num-seqs"),
        ("catalog-ring-2**70", ["sim", "catalog", "kimi-linear-48b-a3b", "--accelerator", "H100",
                                "--replay-ssm-ring", str(2**70)], "--replay-ssm-ring"),
        ("sweep-seeds-2**63", ["sim", "sweep", "CFG", "--rates", "1", "--seeds", str(2**63), "--out", "OUT"], "--seeds"),
        ("capacity-seeds-2**63", ["sim", "capacity", "CFG", "--seeds", f"0,{2**63}", "--out", "OUT"], "--seeds"),
        ("sweep-jobs-2**70", ["sim", "sweep", "CFG", "--rates", "1", "--jobs", str(2**70), "--out", "OUT"], "--jobs"),
        ("search-jobs-257", ["search", "CFG", "--jobs", "257", "--out", "OUT"], "--jobs"),
        # A rate beyond workload.arrival.rate's bound: named by the flag, not by the config's field.
        ("sweep-rates-1e308", ["sim", "sweep", "CFG", "--rates", "1,1e308", "--out", "OUT"], "--rates"),
        ("capacity-start-2e9", ["sim", "capacity", "CFG", "--start", "2e9", "--out", "OUT"], "--start"),
    ):
        yield Case("flags", label, flags(argv, needle))


CLASSES: dict[str, Callable[[], Iterator[Case]]] = {
    "unreadable": unreadable_cases,
    "config-field": config_field_cases,
    "spec": spec_cases,
    "hypothesis": hypothesis_cases,
    "search-space": space_cases,
    "trace": trace_cases,
    "explain": explain_cases,
    "flags": flag_cases,
}


def all_cases() -> list[Case]:
    cases = [case for make in CLASSES.values() for case in make()]
    if os.geteuid() != 0:  # root reads any file: a permission case means something only for others
        cases.extend(permission_cases())
    return cases


def permission_cases() -> Iterator[Case]:
    def unreadable_config(folder: Path) -> tuple[list[str], list[str]]:
        cfg = write(folder, "cfg.toml", to_toml(BASE_CONFIG))
        cfg.chmod(0)
        return sim_run(folder, cfg), ["cfg.toml", "cannot read"]

    yield Case("unreadable", "config-no-permission", unreadable_config)


def counts(cases: list[Case]) -> dict[str, int]:
    """Cases per class, in CLASSES order."""
    out: dict[str, int] = {}
    for case in cases:
        out[case.cls] = out.get(case.cls, 0) + 1
    return out
