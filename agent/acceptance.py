"""Acceptance criteria: small, checkable expressions over named metrics.

    "prefill_throughput_ratio >= 0.95"
    "p90_ttft_s <= 2.0 and goodput_rps >= 3"
    "max_rel_err['3xtf32/ksplit'] <= 1e-6"    (a mapping metric looked up by key)

Only arithmetic (+ - * /), comparisons, `and`/`or`/`not`, finite numbers, metric names (dotted names
allowed, e.g. `release.degradation`), subscripts by a string key on a metric declared as a mapping,
and `abs(x)`, `min(x, y, ...)`, `max(x, y, ...)` are accepted. Everything is checked when the
expression is loaded, so that evaluation cannot fail on the expression itself:

- at most `MAX_TEXT` characters, `MAX_NODES` syntax nodes and `MAX_DEPTH` levels of nesting (measured
  without recursion, before any recursive walk);
- numbers and strings are not mixed: strings appear only as subscript keys, subscripts only on mapping
  metrics, and every operand of arithmetic, comparisons and functions is a number;
- calls have the right number of arguments (`abs` one, `min`/`max` at least two);
- the expression reads at least one metric (`"1 == 1"` decides nothing).

Evaluation never runs user code. What can still fail is arithmetic on measured values (division by
zero, a value that is not a number, a non-finite result): `judge` turns that into an inconclusive
judgement with a reason.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infralab.errors import InputError

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_COMPARE = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_FUNCTIONS = {"abs": abs, "min": min, "max": max}
# Allowed argument counts: (least, most); None means no upper bound.
_ARITY: dict[str, tuple[int, int | None]] = {"abs": (1, 1), "min": (2, None), "max": (2, None)}

MAX_TEXT = 1000  # characters
MAX_NODES = 200  # syntax nodes (ast.walk count)
MAX_DEPTH = 40  # nesting levels of the syntax tree (a 30-term sum is 33 deep)
GRAMMAR = ("metric names (arm.metric), finite numbers, + - * /, comparisons, and/or/not, "
           "abs(x), min(x, y, ...), max(x, y, ...), mapping_metric['key']")

# The two kinds a sub-expression can have; a mapping is only ever subscripted.
_NUMBER = "number"
_MAPPING = "mapping"


@dataclass(frozen=True)
class Criterion:
    """One parsed acceptance expression; `names` are the metrics it reads."""

    text: str
    tree: ast.Expression
    names: frozenset[str]


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _bounded(tree: ast.AST, text: str, where: str) -> None:
    """Reject trees too large or too deep, walking with an explicit stack (no recursion), so that
    the recursive checks below never meet a tree deeper than MAX_DEPTH."""
    stack = [(tree, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            raise InputError(where, f"expression nested deeper than {MAX_DEPTH} levels: {_short(text)}",
                             f"a flatter expression of {GRAMMAR}")
        if nodes > MAX_NODES:
            raise InputError(where, f"expression has more than {MAX_NODES} parts: {_short(text)}",
                             f"a shorter expression of {GRAMMAR}")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _short(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:57] + "...")


class _Checker:
    """Type-checks a bounded tree: every node must be a number (or a mapping metric, subscripted)."""

    def __init__(self, text: str, where: str, mappings: frozenset[str]) -> None:
        self.text, self.where, self.mappings = text, where, mappings
        self.names: set[str] = set()

    def fail(self, problem: str) -> InputError:
        return InputError(self.where, f"{problem} in {_short(self.text)}", GRAMMAR)

    def number(self, node: ast.AST) -> None:
        if self.kind(node) != _NUMBER:
            name = ast.unparse(node)
            raise self.fail(f"{name!r} is a mapping metric; look a key up, e.g. {name}['key']")

    def kind(self, node: ast.AST) -> str:
        dotted = _dotted(node)
        if dotted is not None:
            if dotted in _FUNCTIONS:
                raise self.fail(f"function {dotted!r} used as a value")
            self.names.add(dotted)
            return _MAPPING if dotted in self.mappings else _NUMBER
        if isinstance(node, ast.Constant):
            return self.constant(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            self.number(node.left)
            self.number(node.right)
            if isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) and node.right.value == 0:
                raise self.fail("division by the constant 0")
            return _NUMBER
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
            self.number(node.operand)
            return _NUMBER
        if isinstance(node, ast.BoolOp):
            for value in node.values:
                self.number(value)
            return _NUMBER
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            for part in (node.left, *node.comparators):
                self.number(part)
            return _NUMBER
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.fail(f"unsupported construct {type(node).__name__}")

    def constant(self, value: Any) -> str:
        if isinstance(value, str):
            raise self.fail(f"string {_short(value)} outside a subscript (strings are only mapping keys)")
        if not isinstance(value, (int, float)):  # bool is an int; complex, bytes, None, ... are not
            raise self.fail(f"constant {value!r} is not a number")
        try:
            finite = math.isfinite(float(value))
        except OverflowError:
            finite = False
        if not finite:
            raise self.fail(f"number {_short(str(value))} is not finite")
        return _NUMBER

    def subscript(self, node: ast.Subscript) -> str:
        base = _dotted(node.value)
        if base is None or base not in self.mappings:
            raise self.fail(f"subscript on {ast.unparse(node.value)!r}, which is a number, not a mapping metric")
        if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            raise self.fail("a subscript key that is not a string constant")
        self.names.add(base)
        return _NUMBER

    def call(self, node: ast.Call) -> str:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in _FUNCTIONS or node.keywords:
            raise self.fail(f"call to {ast.unparse(node.func)!r} (only abs, min, max, without keywords)")
        least, most = _ARITY[name]
        if len(node.args) < least or (most is not None and len(node.args) > most):
            wanted = f"exactly {least}" if least == most else f"at least {least}"
            raise self.fail(f"{name}() takes {wanted} argument(s), got {len(node.args)}")
        for arg in node.args:
            self.number(arg)
        return _NUMBER


def parse_criterion(text: str, where: str = "acceptance", mappings: frozenset[str] = frozenset()) -> Criterion:
    """Parse and check one expression; InputError (naming `where`) on anything outside the grammar.

    `mappings`: the metric names whose values are mappings (looked up by string key); every
    other metric is a number.
    """
    if not isinstance(text, str) or not text.strip():
        raise InputError(where, f"got {text!r}", "a non-empty expression like 'variant.metric <= 0.05'")
    if len(text) > MAX_TEXT:
        raise InputError(where, f"expression is {len(text)} characters long: {_short(text)}",
                         f"at most {MAX_TEXT} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        msg = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        raise InputError(where, f"cannot parse {_short(text)}: {msg}", "an expression like 'ratio >= 0.95'") from None
    _bounded(tree.body, text, where)
    checker = _Checker(text, where, frozenset(mappings))
    checker.number(tree.body)
    if not checker.names:
        raise InputError(where, f"{_short(text)} reads no measurement, so it would decide nothing",
                         "an expression over at least one metric, e.g. 'variant.metric <= 0.05'")
    return Criterion(text=text, tree=tree, names=frozenset(checker.names))


def evaluate(criterion: Criterion, metrics: Mapping[str, Any]) -> Any:
    """Evaluate against `metrics` (a flat mapping from dotted names to numbers or mappings).

    Raises KeyError naming the first metric that is missing.
    """

    def ev(node: ast.AST) -> Any:
        dotted = _dotted(node)
        if dotted is not None:
            if dotted not in metrics:
                raise KeyError(f"metric {dotted!r} (needed by {criterion.text!r}) was not measured")
            return metrics[dotted]
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp):
            value = ev(node.operand)
            return -value if isinstance(node.op, ast.USub) else not value
        if isinstance(node, ast.BoolOp):
            values = [bool(ev(v)) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Subscript):
            return ev(node.value)[node.slice.value]  # type: ignore[attr-defined]
        if isinstance(node, ast.Call):
            return _FUNCTIONS[node.func.id](*(ev(a) for a in node.args))  # type: ignore[attr-defined]
        raise AssertionError(f"unchecked node {node!r}")

    return ev(criterion.tree.body)


def comparison_sides(criterion: Criterion, metrics: Mapping[str, Any]) -> tuple[float, float] | None:
    """For a criterion that is one comparison `L op R`: L and R evaluated on `metrics` (raising as
    `evaluate` does for an undefined metric); None for any other expression."""
    body = criterion.tree.body
    if not (isinstance(body, ast.Compare) and len(body.ops) == 1):
        return None
    return float(evaluate(_sub(body.left), metrics)), float(evaluate(_sub(body.comparators[0]), metrics))


def shortfall(criterion: Criterion, metrics: Mapping[str, Any]) -> float:
    """How far `metrics` are from meeting `criterion`, for ranking near misses: 0 when it holds;
    for one comparison `L op R` that fails, |L - R| / max(|R|, |L|) (0 < gap <= 1 for same-sign
    sides; 2 for a sign flip); 1 for any other failing expression (`not saturated`, and/or); inf
    when it cannot be evaluated (an undefined metric)."""
    try:
        if bool(evaluate(criterion, metrics)):
            return 0.0
        sides = comparison_sides(criterion, metrics)
        if sides is None:
            return 1.0
        left, right = sides
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return math.inf
    scale = max(abs(left), abs(right))
    gap = abs(left - right) / scale if scale > 0 else 1.0
    return gap if math.isfinite(gap) else math.inf


# ---- judging against repeated measurements ---------------------------------------------------

NOISE_FACTOR = 2.0
NOISE_RULE = (
    "each comparison L op R is judged on the means over repetitions (seeds x repetitions, arms "
    "paired by index); it is INCONCLUSIVE when the pooled standard deviation s > 0 and "
    f"|mean(L) - mean(R)| < {NOISE_FACTOR:g}*s, where s = sqrt(mean of the sample variances (ddof=1) of "
    "the sides that vary); a validator whose results vary from run to run (timings, real threads) "
    "with fewer than 2 repetitions cannot estimate s and is INCONCLUSIVE; and/or/not combine "
    "comparisons in three-valued (Kleene) logic, so a decided 'False and ...' is still False"
)


_OP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class Unmeasured(KeyError):
    """A metric the criterion needs was not measured by this validator."""


class Undefined(ArithmeticError):
    """The measured values make a part of the criterion undefined (division by zero, a value that is
    not a finite number); the criterion is then inconclusive, with this as the reason."""


@dataclass(frozen=True)
class ComparisonJudgement:
    """One comparison inside a criterion, with the numbers the noise rule used."""

    text: str
    left: float
    right: float
    delta: float
    noise_std: float | None  # None: not estimable (a varying validator with < 2 repetitions)
    samples: int
    outcome: bool | None  # None: inconclusive

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "left": self.left, "right": self.right, "delta": self.delta,
                "noise_std": self.noise_std, "samples": self.samples,
                "outcome": {True: "true", False: "false", None: "inconclusive"}[self.outcome]}


@dataclass(frozen=True)
class Judgement:
    """A criterion judged on samples: True, False, None (inconclusive), or `unmeasured` naming the
    metric that was missing. `undefined` says why the values could not be judged at all (then
    the outcome is None)."""

    criterion: str
    outcome: bool | None
    comparisons: tuple[ComparisonJudgement, ...]
    unmeasured: str | None = None
    undefined: str | None = None

    @property
    def verdict(self) -> str:
        if self.unmeasured is not None:
            return "unmeasured"
        return {True: "accepted", False: "rejected", None: "inconclusive"}[self.outcome]


def _sub(node: ast.AST) -> Criterion:
    return Criterion(text=ast.unparse(node), tree=ast.Expression(body=node), names=frozenset())


def _values(node: ast.AST, samples: list[Mapping[str, Any]]) -> list[float]:
    sub = _sub(node)
    try:
        values = [float(evaluate(sub, s)) for s in samples]
    except KeyError as exc:
        missing = [n for n in sorted(_names(node)) if any(n not in s for s in samples)]
        raise Unmeasured(f"metric {missing[0]!r}" if missing else str(exc.args[0])) from None
    except ZeroDivisionError:
        raise Undefined(f"{sub.text} divides by zero") from None
    except (ArithmeticError, TypeError, ValueError) as exc:
        raise Undefined(f"{sub.text} is not a number here ({type(exc).__name__}: {exc})") from None
    if not all(math.isfinite(v) for v in values):
        raise Undefined(f"{sub.text} is not finite ({next(v for v in values if not math.isfinite(v))})")
    return values


def _names(node: ast.AST) -> set[str]:
    """Metric names (maximal dotted names) read by `node`."""
    dotted = _dotted(node)
    if dotted is not None:
        return {dotted}
    if isinstance(node, ast.Call):  # the function's own name is not a metric
        children: list[ast.AST] = list(node.args)
    else:
        children = list(ast.iter_child_nodes(node))
    return set().union(*(_names(c) for c in children)) if children else set()


def _stats(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, var


def judge(criterion: Criterion, samples: list[Mapping[str, Any]], varies: bool) -> Judgement:
    """Judge `criterion` on repeated measurements (one metrics mapping per repetition).

    `varies`: whether the validator's results vary from run to run (then fewer than 2 samples
    make every comparison inconclusive). The rule is `NOISE_RULE`.
    """
    if not samples:
        return Judgement(criterion.text, None, (), unmeasured="(no samples)")
    found: list[ComparisonJudgement] = []

    def compare(left_node: ast.AST, op: ast.cmpop, right_node: ast.AST) -> bool | None:
        lv, rv = _values(left_node, samples), _values(right_node, samples)
        try:
            (lm, lvar), (rm, rvar) = _stats(lv), _stats(rv)
        except OverflowError:
            lm = lvar = rm = rvar = math.inf
        if not all(math.isfinite(x) for x in (lm, rm, lvar, rvar)):
            raise Undefined(f"the means of {ast.unparse(left_node)} and {ast.unparse(right_node)} overflow")
        outcome: bool | None = bool(_COMPARE[type(op)](lm, rm))
        varying = [var for var, vals in ((lvar, lv), (rvar, rv)) if len(set(vals)) > 1]
        if varies and len(samples) < 2:
            noise: float | None = None
            outcome = None
        else:
            noise = (sum(varying) / len(varying)) ** 0.5 if varying else 0.0
            if noise > 0 and abs(lm - rm) < NOISE_FACTOR * noise:
                outcome = None
        text = f"{ast.unparse(left_node)} {_OP_TEXT[type(op)]} {ast.unparse(right_node)}"
        found.append(ComparisonJudgement(text, lm, rm, lm - rm, noise, len(samples), outcome))
        return outcome

    def truth(node: ast.AST) -> bool | None:
        if isinstance(node, ast.BoolOp):
            parts = [truth(v) for v in node.values]
            if isinstance(node.op, ast.And):
                return False if False in parts else (None if None in parts else True)
            return True if True in parts else (None if None in parts else False)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = truth(node.operand)
            return None if inner is None else not inner
        if isinstance(node, ast.Compare):
            results, left = [], node.left
            for op, right in zip(node.ops, node.comparators):
                results.append(compare(left, op, right))
                left = right
            return False if False in results else (None if None in results else True)
        # A bare value in boolean context: decided only when every repetition agrees.
        flags = {bool(v) for v in _values(node, samples)}
        return flags.pop() if len(flags) == 1 else None

    try:
        outcome = truth(criterion.tree.body)
    except Unmeasured as exc:
        return Judgement(criterion.text, None, tuple(found), unmeasured=str(exc.args[0]))
    except Undefined as exc:
        return Judgement(criterion.text, None, tuple(found), undefined=str(exc.args[0]))
    return Judgement(criterion.text, outcome, tuple(found))
