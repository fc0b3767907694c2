"""Hypothesis files: a claim, its metrics, a baseline, variants that each change one thing, and
acceptance criteria, in TOML (format documented in docs/agent.md).

    [hypothesis]
    name = "gil_release"
    claim = "Releasing the GIL in dispatch/combine keeps KV transfer's prefill cost within 5 %"
    kind = "host-concurrency"           # what the knobs describe; decides which validators can answer
    metrics = ["max_degradation"]
    validators = ["sim", "real"]        # which rungs of the ladder may answer, cheapest first
    acceptance = ["released.max_degradation <= 0.05"]
    seeds = [0]
    repetitions = 3

    [setup]                              # fixed context shared by every arm (per kind)
    experiment = "gil_kv_transfer.toml"

    [baseline]                           # the knobs of the baseline arm
    dispatch_combine_gil = "held"

    [[variant]]                          # each variant changes ONE knob of its parent
    name = "released"
    change = { dispatch_combine_gil = "released" }
    # from = "baseline"                  # or an earlier variant: v1 -> v2 -> v3 chains

Acceptance expressions read `<arm>.<metric>` (arm = "baseline" or a variant name). Every problem is
one `InputError` naming the file, the line (where it can be found in the text) and the key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field
from pydantic.dataclasses import dataclass

from infralab.agent.acceptance import Criterion, parse_criterion
from infralab.config_io import STRICT, load_toml, validate
from infralab.errors import InputError

ValidatorName = Literal["kernel-check", "microbench", "sim", "real"]
LADDER: tuple[str, ...] = ("kernel-check", "microbench", "sim", "real")
"""The validators, cheapest first."""

Kind = Literal["kernel-numerics", "kernel-performance", "host-concurrency", "cluster"]
Knob = Union[bool, int, float, str]
NonNegInt = Annotated[int, Field(ge=0)]
PositiveInt = Annotated[int, Field(gt=0)]


@dataclasses.dataclass(frozen=True)
class KindSpec:
    """What a kind of hypothesis may say: its knobs (None: any dotted sim-config path), metrics,
    the validators that can measure it, and the knobs the baseline must set."""

    validators: tuple[str, ...]
    metrics: tuple[str, ...]
    knobs: Mapping[str, tuple[Any, ...] | type] | None
    required: tuple[str, ...] = ()


KINDS: Mapping[str, KindSpec] = {
    "kernel-numerics": KindSpec(
        validators=("kernel-check",),
        metrics=("rel_err", "rel_err_unsplit", "rel_err_vs_unsplit", "max_rel_err", "max_abs_err", "max_ulp",
                 "bitwise_equal"),
        knobs={"kernel": str, "variant": str, "shape": str, "split": ("none", "column", "row", "head", "batch"),
               "tp": int, "reduction": ("sequential", "tree")},
        required=("kernel", "variant", "shape"),
    ),
    "kernel-performance": KindSpec(
        validators=("microbench",),
        metrics=("bytes", "bytes_loaded", "flops", "divisions", "transcendentals", "repeated_elementwise",
                 "programs", "state_bytes_per_seq", "time_s", "achieved_gbps"),
        knobs={"kernel": ("kda_decode",), "variant": ("v1", "v2", "v3", "replay"), "shape": str, "ring_len": int},
        required=("kernel", "variant", "shape"),
    ),
    "host-concurrency": KindSpec(
        validators=("sim", "real"),
        metrics=("degradation", "max_degradation", "mean_degradation", "kv_python_over_comm",
                 "min_kv_python_over_comm", "main_gil_wait_s"),
        knobs={"dispatch_combine_gil": ("held", "released")},
        required=("dispatch_combine_gil",),
    ),
    "cluster": KindSpec(
        validators=("sim",),
        metrics=("goodput", "goodput_per_instance", "request_throughput", "output_throughput", "ttft_p50_s",
                 "ttft_p90_s", "ttft_p99_s", "tpot_p90_s", "e2e_p90_s", "saturated", "completed", "max_instance_busy",
                 "max_link_busy"),
        knobs=None,
    ),
}


# ---- the file, as pydantic validates it --------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class HypothesisTable:
    name: str
    claim: str
    kind: Kind
    metrics: tuple[str, ...]
    validators: tuple[ValidatorName, ...]
    acceptance: tuple[str, ...]
    seeds: tuple[NonNegInt, ...] = (0,)
    repetitions: PositiveInt = 1


@dataclass(frozen=True, config=STRICT)
class VariantTable:
    name: str
    change: dict[str, Knob]
    note: str = ""
    # `from` is a Python keyword: the TOML key `from` is renamed to `parent` before validation.
    parent: str = "baseline"


@dataclass(frozen=True, config=STRICT)
class HypothesisFile:
    hypothesis: HypothesisTable
    baseline: dict[str, Knob]
    variant: tuple[VariantTable, ...] = ()
    setup: dict[str, Any] = dataclasses.field(default_factory=dict)
    quick: dict[str, Any] = dataclasses.field(default_factory=dict)


# ---- the resolved hypothesis -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Arm:
    """The baseline or a variant, with every knob resolved; `change` is (knob, value) for variants."""

    name: str
    knobs: tuple[tuple[str, Knob], ...]
    parent: str | None = None
    change: tuple[str, Knob] | None = None
    note: str = ""

    @property
    def config(self) -> dict[str, Knob]:
        return dict(self.knobs)

    def describe(self) -> str:
        if self.change is None:
            return "baseline: " + ", ".join(f"{k}={v}" for k, v in self.knobs)
        return f"{self.parent} with {self.change[0]}={self.change[1]}"


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    name: str
    claim: str
    kind: str
    metrics: tuple[str, ...]
    validators: tuple[str, ...]  # ladder order
    acceptance: tuple[Criterion, ...]
    seeds: tuple[int, ...]
    repetitions: int
    arms: tuple[Arm, ...]
    setup: Mapping[str, Any]
    source: str  # the file, as given
    base_dir: Path  # relative paths in `setup` and knobs resolve here

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    def arms_read_by(self, criterion: Criterion) -> frozenset[str]:
        return frozenset(n.split(".", 1)[0] for n in criterion.names)

    def resolve(self, value: str) -> Path:
        """A path from the file: absolute as written, else relative to the hypothesis file."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base_dir / p


def load_hypothesis(path: str | Path, quick: bool = False) -> Hypothesis:
    """Read, validate and resolve a hypothesis file. With `quick`, the `[quick]` table's keys replace
    the same keys of `[setup]` (smaller windows, fewer scenarios) for smoke runs."""
    path = Path(path)
    raw = load_toml(path)
    text = path.read_text(encoding="utf-8")
    source = str(path)
    for i, variant in enumerate(raw.get("variant", []) if isinstance(raw.get("variant"), list) else []):
        if isinstance(variant, dict) and "from" in variant:
            variant["parent"] = variant.pop("from")
    try:
        spec = validate(HypothesisFile, raw, source)
    except InputError as exc:
        raise _with_line(exc, text, source) from None
    where = _Locator(text, source)
    info = spec.hypothesis
    kind = KINDS[info.kind]
    if not info.metrics:
        raise where.error("hypothesis.metrics", "is empty", "at least one metric the claim is about")
    for i, metric in enumerate(info.metrics):
        if metric not in kind.metrics:
            raise where.error(f"hypothesis.metrics[{i}]", f"unknown metric {metric!r} for kind {info.kind!r}",
                              f"one of {', '.join(kind.metrics)}", needle=f'"{metric}"')
    if not info.validators:
        raise where.error("hypothesis.validators", "is empty", f"some of {', '.join(kind.validators)}")
    for i, name in enumerate(info.validators):
        if name not in kind.validators:
            raise where.error(f"hypothesis.validators[{i}]", f"validator {name!r} cannot answer a {info.kind!r} hypothesis",
                              f"one of {', '.join(kind.validators)}", needle=f'"{name}"')
    if not info.seeds:
        raise where.error("hypothesis.seeds", "is empty", "at least one seed, e.g. [0]")
    setup = dict(spec.setup)
    if quick:
        setup.update(spec.quick)
    arms = _arms(spec, kind, where)
    criteria = _criteria(info, arms, where)
    validators = tuple(v for v in LADDER if v in info.validators)
    hyp = Hypothesis(
        name=info.name, claim=info.claim, kind=info.kind, metrics=info.metrics, validators=validators,
        acceptance=criteria, seeds=info.seeds, repetitions=info.repetitions, arms=arms, setup=setup,
        source=source, base_dir=path.resolve().parent,
    )
    check_setup(hyp, where)
    return hyp


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _arms(spec: HypothesisFile, kind: KindSpec, where: _Locator) -> tuple[Arm, ...]:
    for knob, value in spec.baseline.items():
        _check_knob(kind, knob, value, f"baseline.{knob}", where)
    for knob in kind.required:
        if knob not in spec.baseline:
            raise where.error("baseline", f"missing required knob {knob!r}", f"{knob} = ... in [baseline]",
                              needle="[baseline]")
    arms = [Arm("baseline", tuple(sorted(spec.baseline.items())))]
    for i, variant in enumerate(spec.variant):
        key = f"variant[{i}]"
        names = {a.name for a in arms}
        if not _NAME.match(variant.name):
            raise where.error(f"{key}.name", f"{variant.name!r} is not a plain name",
                              "letters, digits and _ (it is used as `name.metric` in acceptance)",
                              needle=variant.name)
        if variant.name in names:
            raise where.error(f"{key}.name", f"{variant.name!r} is used twice", "a unique name per arm",
                              needle=variant.name)
        if variant.parent not in names:
            raise where.error(f"{key}.from", f"unknown arm {variant.parent!r}",
                              f"'baseline' or an earlier variant: {', '.join(sorted(names))}", needle=variant.parent)
        if len(variant.change) != 1:
            things = ", ".join(variant.change) or "nothing"
            raise where.error(f"{key}.change", f"changes {len(variant.change)} things ({things})",
                              "exactly one knob per variant; chain variants with `from` to change more",
                              needle=f'name = "{variant.name}"')
        (knob, value), = variant.change.items()
        _check_knob(kind, knob, value, f"{key}.change.{knob}", where)
        parent = next(a for a in arms if a.name == variant.parent)
        if parent.config.get(knob) == value:
            raise where.error(f"{key}.change.{knob}", f"is {value!r}, as in {parent.name!r}: the variant changes nothing",
                              "a value different from the parent's", needle=f'name = "{variant.name}"')
        knobs = {**parent.config, knob: value}
        arms.append(Arm(variant.name, tuple(sorted(knobs.items())), parent.name, (knob, value), variant.note))
    return tuple(arms)


def _check_knob(kind: KindSpec, knob: str, value: Knob, key: str, where: _Locator) -> None:
    if kind.knobs is None:  # cluster: checked against the simulation config in check_setup
        return
    if knob not in kind.knobs:
        raise where.error(key, f"unknown knob {knob!r}", f"one of {', '.join(kind.knobs)}")
    allowed = kind.knobs[knob]
    if isinstance(allowed, tuple):
        if value not in allowed:
            raise where.error(key, f"bad value {value!r}", f"one of {', '.join(map(str, allowed))}")
    elif allowed is int and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise where.error(key, f"bad value {value!r}", "a non-negative integer")
    elif allowed is str and not isinstance(value, str):
        raise where.error(key, f"bad value {value!r}", "a string")


def _criteria(info: HypothesisTable, arms: tuple[Arm, ...], where: _Locator) -> tuple[Criterion, ...]:
    if not info.acceptance:
        raise where.error("hypothesis.acceptance", "is empty", "at least one expression, e.g. \"variant.metric <= 0.05\"")
    arm_names = [a.name for a in arms]
    criteria = []
    for i, text in enumerate(info.acceptance):
        key = f"hypothesis.acceptance[{i}]"
        try:
            criterion = parse_criterion(text, key)
        except InputError as exc:
            raise where.error(key, exc.problem, exc.expected, needle=text) from None
        for name in sorted(criterion.names):
            arm, _, metric = name.partition(".")
            if arm not in arm_names or not metric:
                raise where.error(key, f"{name!r} does not name an arm's metric",
                                  f"<arm>.<metric> with arm one of {', '.join(arm_names)}", needle=text)
            if metric not in info.metrics:
                raise where.error(key, f"metric {metric!r} is not in hypothesis.metrics",
                                  f"one of {', '.join(info.metrics)} (declare it in metrics)", needle=text)
        criteria.append(criterion)
    return tuple(criteria)


# ---- per-kind setup ------------------------------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class NoSetup:
    """kernel-performance needs no shared context."""


@dataclass(frozen=True, config=STRICT)
class KernelSetup:
    """kernel-numerics: `dims` replaces named dimensions in every arm's shape (e.g. a smaller K for
    quick runs; dimensions an arm's shape lacks are left alone)."""

    dims: dict[str, PositiveInt] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, config=STRICT)
class HostConcurrencySetup:
    experiment: str  # the GIL experiment file (issue 4's format), relative to the hypothesis file
    scenarios: tuple[str, ...] = ()  # subset of its scenarios (empty: all)
    probe_repeats: PositiveInt | None = None  # override the experiment's [probe] repeats
    probe_granularities: tuple[Literal["per_layer", "after_prefill"], ...] = ()


@dataclass(frozen=True, config=STRICT)
class ClusterSetup:
    config: str  # a simulation config (`infralab sim run` format), relative to the hypothesis file
    window_s: tuple[float, float] | None = None  # trace time window [start, end) in seconds
    max_requests: PositiveInt | None = None
    processes: PositiveInt = 2  # arms x seeds run in parallel over this many local processes


SETUPS: Mapping[str, type] = {
    "kernel-numerics": KernelSetup,
    "kernel-performance": NoSetup,
    "host-concurrency": HostConcurrencySetup,
    "cluster": ClusterSetup,
}


def setup_of(hyp: Hypothesis) -> Any:
    """The validated `[setup]` table of `hyp` (a kind-specific dataclass)."""
    return validate(SETUPS[hyp.kind], dict(hyp.setup), hyp.source, prefix="setup")


def check_setup(hyp: Hypothesis, where: _Locator) -> None:
    """Setup keys and referenced files; for clusters, every arm's knobs applied to the config."""
    try:
        setup = setup_of(hyp)
    except InputError as exc:
        raise _with_line(exc, where.text, where.source) from None
    if isinstance(setup, HostConcurrencySetup):
        from infralab.agent.gil_case import load_experiment

        try:
            exp = load_experiment(hyp.resolve(setup.experiment))
        except InputError as exc:
            raise where.error("setup.experiment", f"{exc.where}: {exc.problem}", exc.expected) from None
        names = [s.name for s in exp.scenario]
        for name in setup.scenarios:
            if name not in names:
                raise where.error("setup.scenarios", f"unknown scenario {name!r}", f"one of {', '.join(names)}",
                                  needle=name)
    if isinstance(setup, ClusterSetup):
        from infralab.agent.sim_pool import arm_config
        from infralab.sim.config import load_config

        try:
            load_config(hyp.resolve(setup.config))
        except InputError as exc:
            raise where.error("setup.config", f"{exc.where}: {exc.problem}", exc.expected) from None

        for i, arm in enumerate(hyp.arms):
            key = "baseline" if arm.change is None else f"variant[{i - 1}].change"
            arm_config(hyp, setup, arm, where=lambda knob, k=key: where.at(f"{k}.{knob}" if k == "baseline" else k))


# ---- error locations -----------------------------------------------------------------------------


class _Locator:
    """Builds InputErrors as 'file:line: key', finding the line by searching the raw text."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source

    def at(self, key: str, needle: str | None = None) -> str:
        line = find_line(self.text, key, needle)
        return f"{self.source}:{line}: {key}" if line else f"{self.source}: {key}"

    def error(self, key: str, problem: str, expected: str | None = None, needle: str | None = None) -> InputError:
        return InputError(self.at(key, needle), problem, expected)


def find_line(text: str, key: str, needle: str | None = None) -> int | None:
    """1-based line of `key` (dotted, with [i] for array-of-table indices) in TOML `text`.

    Search strategy: the table header of the key's first part (the i-th `[[variant]]` for
    `variant[i]`), then the key's last name as `name =` inside that table; `needle` (a literal text
    such as an expression) is searched from the table's start when given. None when not found.
    """
    lines = text.splitlines()
    parts = re.findall(r"[A-Za-z_][\w\-]*|\[\d+\]", key)
    if not parts:
        return None
    table, start, end = parts[0], 0, len(lines)
    index = int(parts[1][1:-1]) if len(parts) > 1 and parts[1].startswith("[") else None
    header = re.compile(rf"^\s*\[\[\s*{re.escape(table)}\s*\]\]" if index is not None else rf"^\s*\[\s*{re.escape(table)}\s*\]")
    hits = [i for i, line in enumerate(lines) if header.match(line)]
    if index is not None and index < len(hits):
        start = hits[index]
    elif index is None and hits:
        start = hits[0]
    else:
        start = 0
    for j in range(start + 1, len(lines)):
        if re.match(r"^\s*\[", lines[j]):
            end = j
            break
    if needle:
        for j in range(start, len(lines)):
            if needle in lines[j]:
                return j + 1
    names = [p for p in parts[1:] if not p.startswith("[")]
    if len(names) > 1:  # a quoted dotted key, e.g. "engine.max_num_seqs" = 64 (longest match first)
        for i in range(len(names) - 1):
            pattern = re.compile(rf'["\']{re.escape(".".join(names[i:]))}["\']\s*=')
            for j in range(start, end):
                if pattern.search(lines[j]):
                    return j + 1
    for name in reversed(names):
        pattern = re.compile(rf"^\s*{re.escape(name)}\s*=|[{{,]\s*{re.escape(name)}\s*=")
        for j in range(start, end):
            if pattern.search(lines[j]):
                return j + 1
    return start + 1 if hits else None


def _with_line(exc: InputError, text: str, source: str) -> InputError:
    """Add the line to an InputError of the form 'source: key'."""
    prefix = f"{source}: "
    if not exc.where.startswith(prefix):
        return exc
    key = exc.where[len(prefix):]
    line = find_line(text, key)
    where = f"{source}:{line}: {key}" if line else exc.where
    return InputError(where, exc.problem, exc.expected)
