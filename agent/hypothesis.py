"""Hypothesis files: a claim, its metrics, a baseline, variants that each change one thing, and
acceptance criteria, in TOML (format documented in docs/agent.md).

    [hypothesis]
    name = "least_outstanding"
    claim = "Routing to the instance with the fewest outstanding tokens cuts p90 TTFT against round-robin"
    kind = "cluster"                     # the validators' vocabulary: which of their declarations applies
    metrics = ["ttft_p90_s"]
    validators = ["sim"]                 # which rungs of the ladder may answer, cheapest first
    acceptance = ["least.ttft_p90_s < baseline.ttft_p90_s"]
    seeds = [0]
    repetitions = 1

    [setup]                              # fixed context shared by every arm (the validators' schema)
    config = "sim/azure_conv_colocated.toml"

    [baseline]                           # the knobs of the baseline arm
    "cluster.router" = "round_robin"

    [[variant]]                          # each variant changes ONE knob of its parent
    name = "least"
    change = { "cluster.router" = "least_outstanding_tokens" }
    # from = "baseline"                  # or an earlier variant: v1 -> v2 -> v3 chains

Acceptance expressions read `<arm>.<metric>` (arm = "baseline" or a variant name). What a file may
say (kinds, knobs and their values, metrics, setup keys) is derived from the declarations of the
validators it names (`infralab.agent.validators.base.Declaration`); nothing here knows a study.
Every problem is one `InputError` naming the file, the line (where it can be found in the text),
the key and the allowed values.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from pydantic.dataclasses import dataclass

from infralab.agent.acceptance import Criterion, parse_criterion
from infralab.config_io import STRICT, validate
from infralab.errors import InputError
from infralab.field_types import Int
from infralab.input_files import parse_toml, read_text
from infralab.overrides import dotted_keys


def ladder() -> tuple[str, ...]:
    """The validators' names, cheapest first (discovered: `agent/validators/registry.py`)."""
    from infralab.agent.validators.registry import names

    return names()


Knob = Union[bool, int, float, str]
Seed = Int(ge=0, le=2**63 - 1)
Repetitions = Int(gt=0, le=1000)


# ---- the file, as pydantic validates it --------------------------------------------------------


@dataclass(frozen=True, config=STRICT)
class HypothesisTable:
    name: str
    claim: str
    kind: str
    metrics: tuple[str, ...]
    validators: tuple[str, ...]
    acceptance: tuple[str, ...]
    seeds: tuple[Seed, ...] = (0,)
    repetitions: Repetitions = 1


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
    # How the file was read, so that a printed command reproduces exactly what ran: `[quick]`
    # applied, and `--set` assignments (dotted.key=value) applied before validation, in order.
    quick: bool = False
    overrides: tuple[str, ...] = ()

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    def arms_read_by(self, criterion: Criterion) -> frozenset[str]:
        return frozenset(n.split(".", 1)[0] for n in criterion.names)

    def resolve(self, value: str) -> Path:
        """A path from the file: absolute as written, else relative to the hypothesis file."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base_dir / p


OVERRIDE_FLAG = "--set"


def with_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """`raw` (a parsed hypothesis file) with each `dotted.key=value` set, in order
    (infralab/overrides.py: TOML values, bare words as strings). Knobs are dotted names themselves,
    so under `baseline.` the rest of the key is one knob: `baseline.cluster.router=round_robin` sets
    [baseline] "cluster.router". Everything else is a path of tables: `hypothesis.seeds=[0, 1, 2]`,
    `setup.window_s=[0.0, 30.0]`."""
    from infralab.overrides import apply_overrides, parse_assignment

    out = raw
    for assignment in overrides:
        parts, value = parse_assignment(assignment, OVERRIDE_FLAG)
        if parts[0] == "baseline" and len(parts) > 1:
            table = out.get("baseline", {})
            if not isinstance(table, dict):
                raise InputError(f"{OVERRIDE_FLAG} {assignment!r}", "baseline is not a table", "a [baseline] table of knobs")
            out = {**out, "baseline": {**table, ".".join(parts[1:]): value}}
        else:
            out = apply_overrides(out, [assignment], OVERRIDE_FLAG)
    return out


def load_hypothesis(path: str | Path, quick: bool = False, overrides: Sequence[str] = ()) -> Hypothesis:
    """Read, validate and resolve a hypothesis file. With `quick`, the `[quick]` table's keys replace
    the same keys of `[setup]` (smaller windows, fewer scenarios) for smoke runs. `overrides`
    (`infralab test --set`) are `dotted.key=value` assignments applied to the file's document
    before validation (`with_overrides`)."""
    path = Path(path)
    source = str(path)
    text = read_text(path, "config", "a hypothesis TOML")  # read once, through the input boundary
    raw = with_overrides(parse_toml(text, source, "a hypothesis TOML"), overrides)
    if isinstance(raw.get("baseline"), dict):
        raw["baseline"] = dotted_keys(raw["baseline"])
    for i, variant in enumerate(raw.get("variant", []) if isinstance(raw.get("variant"), list) else []):
        if isinstance(variant, dict) and "from" in variant:
            variant["parent"] = variant.pop("from")
        if isinstance(variant, dict) and isinstance(variant.get("change"), dict):
            variant["change"] = dotted_keys(variant["change"])
    try:
        spec = validate(HypothesisFile, raw, source)
    except InputError as exc:
        raise _with_line(exc, text, source) from None
    where = Locator(text, source)
    info = spec.hypothesis
    known = ladder()
    if not info.validators:
        raise where.error("hypothesis.validators", "is empty", f"some of {', '.join(known)}")
    for i, name in enumerate(info.validators):
        if name not in known:
            raise where.error(f"hypothesis.validators[{i}]", f"unknown validator {name!r}", f"one of {', '.join(known)}",
                              needle=f'"{name}"')
    setup = dict(spec.setup)
    if quick:
        setup.update(spec.quick)
    allowed = resolved(allowed_for(info.kind, info.validators, where), setup, path.resolve().parent, where)
    _check_quick(spec.quick, dict(spec.setup), allowed, where)
    if not info.metrics:
        raise where.error("hypothesis.metrics", "is empty", "at least one metric the claim is about")
    for i, metric in enumerate(info.metrics):
        if metric not in allowed.metrics:
            raise where.error(f"hypothesis.metrics[{i}]", f"unknown metric {metric!r} for {', '.join(info.validators)}",
                              f"one of {', '.join(allowed.metrics)}", needle=f'"{metric}"')
    if not info.seeds:
        raise where.error("hypothesis.seeds", "is empty", "at least one seed, e.g. [0]")
    arms = _arms(spec, allowed, where)
    criteria = _criteria(info, arms, allowed, where)
    validators = tuple(v for v in known if v in info.validators)
    hyp = Hypothesis(
        name=info.name, claim=info.claim, kind=info.kind, metrics=info.metrics, validators=validators,
        acceptance=criteria, seeds=info.seeds, repetitions=info.repetitions, arms=arms, setup=setup,
        source=source, base_dir=path.resolve().parent, quick=quick, overrides=tuple(overrides),
    )
    check_setup(hyp, allowed, where)
    return hyp


# ---- what the named validators allow -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Allowed:
    """What a hypothesis of `kind` answered by some validators may say: the union of their
    declarations' metrics, knobs and required knobs (None knobs: checked by the declarations' `check`)."""

    kind: str
    metrics: tuple[str, ...]
    knobs: Mapping[str, Any] | None
    required: tuple[str, ...]
    declarations: tuple[Any, ...]  # validators.base.Declaration, in ladder order


def declarations_of(name: str) -> tuple[Any, ...]:
    """The declarations of validator `name` (one per kind of hypothesis it answers)."""
    from infralab.agent.validators.registry import validator_class

    return validator_class(name)().declarations()


def allowed_for(kind: str, validators: tuple[str, ...], where: Locator | None = None) -> Allowed:
    """Derive what a file may say from the declarations of `validators` for `kind`."""
    where = where or Locator("", "hypothesis")
    every = {name: {d.kind: d for d in declarations_of(name)} for name in ladder()}
    kinds = sorted({k for by_kind in every.values() for k in by_kind})
    if kind not in kinds:
        raise where.error("hypothesis.kind", f"unknown kind {kind!r}", f"one of {', '.join(kinds)}")
    able = [name for name in every if kind in every[name]]
    for i, name in enumerate(validators):
        if kind not in every[name]:
            raise where.error(f"hypothesis.validators[{i}]", f"validator {name!r} cannot answer a {kind!r} hypothesis",
                              f"one of {', '.join(able)}", needle=f'"{name}"')
    decls = [every[name][kind] for name in every if name in validators]
    return _allowed_of(kind, decls)


def _allowed_of(kind: str, decls: list[Any]) -> Allowed:
    metrics = tuple(dict.fromkeys(m for d in decls for m in d.metrics))
    knobs = None if any(d.knobs is None for d in decls) else {k: v for d in reversed(decls) for k, v in d.knobs.items()}
    required = tuple(dict.fromkeys(k for d in decls for k in d.required))
    return Allowed(kind, metrics, knobs, required, tuple(decls))


def resolved(allowed: Allowed, setup: Mapping[str, Any], base_dir: Path, where: Locator | None = None) -> Allowed:
    """`allowed` with every declaration that depends on the setup (a study's hook) resolved."""
    if not any(d.resolve is not None for d in allowed.declarations):
        return allowed
    where = where or Locator("", "hypothesis")
    decls = [d.resolve(setup, base_dir, where) if d.resolve is not None else d for d in allowed.declarations]
    return _allowed_of(allowed.kind, decls)


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _arms(spec: HypothesisFile, allowed: Allowed, where: Locator) -> tuple[Arm, ...]:
    for knob, value in spec.baseline.items():
        _check_knob(allowed, knob, value, spec.baseline, f"baseline.{knob}", where)
    for knob in allowed.required:
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
        parent = next(a for a in arms if a.name == variant.parent)
        knobs = {**parent.config, knob: value}
        _check_knob(allowed, knob, value, knobs, f"{key}.change.{knob}", where)
        _check_dependents(allowed, knob, knobs, f"{key}.change.{knob}", parent.name, where)
        if parent.config.get(knob) == value:
            raise where.error(f"{key}.change.{knob}", f"is {value!r}, as in {parent.name!r}: the variant changes nothing",
                              "a value different from the parent's", needle=f'name = "{variant.name}"')
        arms.append(Arm(variant.name, tuple(sorted(knobs.items())), parent.name, (knob, value), variant.note))
    return tuple(arms)


# Integer knobs are counts (TP shards, ReplaySSM's ring length), bounded so that a shape stays small.
MAX_INT_KNOB = 65536
_TYPES = {int: f"an integer from 1 to {MAX_INT_KNOB}", float: "a finite number", str: "a string",
          bool: "true or false"}


def _check_knob(allowed: Allowed, knob: str, value: Knob, knobs: Mapping[str, Knob], key: str,
                where: Locator) -> None:
    """`value` against the declared knob: its type, then its allowed values (given the arm's knobs)."""
    if allowed.knobs is None:  # not a fixed list: the declarations' `check` validates them
        return
    if knob not in allowed.knobs:
        raise where.error(key, f"unknown knob {knob!r}", f"one of {', '.join(allowed.knobs)}")
    spec = allowed.knobs[knob]
    if not _has_type(value, spec.type):
        raise where.error(key, f"bad value {value!r}", spec.describe or _TYPES.get(spec.type, spec.type.__name__))
    choices = spec.allowed(knobs)
    if choices is not None and value not in choices:
        raise where.error(key, f"bad value {value!r}", f"one of {', '.join(map(str, choices)) or '(none here)'}")


def _check_dependents(allowed: Allowed, changed: str, knobs: Mapping[str, Knob], key: str, parent: str,
                      where: Locator) -> None:
    """Knobs inherited from the parent whose allowed values depend on the changed one (a variant
    that changes the kernel keeps the parent's kernel variant only if the new kernel has it)."""
    if allowed.knobs is None:
        return
    for knob, value in knobs.items():
        spec = allowed.knobs.get(knob)
        if knob == changed or spec is None or spec.choices is None:
            continue
        choices = spec.allowed(knobs)
        if choices is not None and value not in choices:
            raise where.error(key, f"keeps {knob}={value!r} from {parent!r}, which {changed}={knobs[changed]!r} "
                                   f"does not allow", f"{knob} one of {', '.join(map(str, choices))}")


def _has_type(value: Knob, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_INT_KNOB
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, kind)


def _criteria(
    info: HypothesisTable, arms: tuple[Arm, ...], allowed: Allowed, where: Locator
) -> tuple[Criterion, ...]:
    """Parse and check every acceptance expression (acceptance.py's rules): each reads only declared
    metrics of declared arms, and subscripts only the metrics the validators declare as mappings."""
    if not info.acceptance:
        raise where.error("hypothesis.acceptance", "is empty", "at least one expression, e.g. \"variant.metric <= 0.05\"")
    arm_names = [a.name for a in arms]
    mapping_metrics = {m for d in allowed.declarations for m in d.mappings}
    mappings = frozenset(f"{arm}.{m}" for arm in arm_names for m in mapping_metrics)
    criteria = []
    for i, text in enumerate(info.acceptance):
        key = f"hypothesis.acceptance[{i}]"
        try:
            criterion = parse_criterion(text, key, mappings)
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


# ---- the setup, as the validators declare it ---------------------------------------------------


def setup_as(hyp: Hypothesis, schema: type) -> Any:
    """The `[setup]` table of `hyp` validated by `schema` (a validator's declared setup dataclass)."""
    return validate(schema, dict(hyp.setup), hyp.source, prefix="setup")


def setup_of(hyp: Hypothesis) -> Any:
    """The validated `[setup]` table of `hyp`, by the first declaration of its validators."""
    allowed = resolved(allowed_for(hyp.kind, hyp.validators), hyp.setup, hyp.base_dir)
    return setup_as(hyp, allowed.declarations[0].setup)


def check_setup(hyp: Hypothesis, allowed: Allowed, where: Locator) -> None:
    """Setup keys by each declared schema, then each declaration's own check (referenced files,
    scenarios, knobs that are config paths), with the file's lines in every error."""
    checked: list[Any] = []
    for decl in allowed.declarations:
        try:
            setup = setup_as(hyp, decl.setup)
        except InputError as exc:
            raise _with_line(exc, where.text, where.source) from None
        if decl.check is not None and decl.check not in checked:
            checked.append(decl.check)
            decl.check(hyp, setup, where)


def _check_quick(quick: dict[str, Any], setup: dict[str, Any], allowed: Allowed, where: Locator) -> None:
    """[quick]'s keys replace [setup]'s under --quick; they are checked by the setup's schemas with or
    without --quick (a misspelt one passed unnoticed until a quick run), and an error in one is
    named `quick.<key>`, the table the user wrote it in (it was named `setup.<key>`). An error in
    [setup]'s own keys is left to `check_setup`."""
    for decl in allowed.declarations if quick else ():
        try:
            validate(decl.setup, {**setup, **quick}, where.source, prefix="setup")
        except InputError as exc:
            key = exc.where.split(": ", 1)[-1]
            name = re.match(r"setup\.([\w\-]+)", key)
            if name and name.group(1) in quick:
                raise where.error("quick" + key[len("setup"):], exc.problem, exc.expected) from None


# ---- error locations -----------------------------------------------------------------------------


class Locator:
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
