"""Acceptance criteria: small, checkable expressions over named metrics.

    "prefill_throughput_ratio >= 0.95"
    "p90_ttft_s <= 2.0 and goodput_rps >= 3"
    "max_rel_err['3xtf32/ksplit'] <= 1e-6"    (a mapping looked up by key)

Only arithmetic, comparisons, `and`/`or`/`not`, numbers, metric names (dotted names allowed, e.g.
`release.degradation`), subscripts by string, and `abs`/`min`/`max` are accepted; anything else is a
parse error naming the expression. Evaluation never runs user code.
"""

from __future__ import annotations

import ast
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


def _check(node: ast.AST, text: str, where: str, names: set[str]) -> None:
    """Reject every construct outside the small grammar above; collect metric names."""
    dotted = _dotted(node)
    if dotted is not None:
        names.add(dotted)
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, text, where, names)
        _check(node.right, text, where, names)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        _check(node.operand, text, where, names)
        return
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value, text, where, names)
        return
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        for part in (node.left, *node.comparators):
            _check(part, text, where, names)
        return
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        _check(node.value, text, where, names)
        return
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        for arg in node.args:
            _check(arg, text, where, names)
        return
    raise InputError(
        where,
        f"unsupported construct {type(node).__name__} in {text!r}",
        "metric names, numbers, + - * /, comparisons, and/or/not, abs/min/max",
    )


def parse_criterion(text: str, where: str = "acceptance") -> Criterion:
    """Parse one expression; InputError (naming `where`) on syntax errors or forbidden constructs."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise InputError(where, f"cannot parse {text!r}: {exc.msg}", "an expression like 'ratio >= 0.95'") from None
    names: set[str] = set()
    _check(tree.body, text, where, names)
    # A name used only as a function is not a metric.
    names -= set(_FUNCTIONS)
    return Criterion(text=text, tree=tree, names=frozenset(names))


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
    metric that was missing."""

    criterion: str
    outcome: bool | None
    comparisons: tuple[ComparisonJudgement, ...]
    unmeasured: str | None = None

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
        return [float(evaluate(sub, s)) for s in samples]
    except KeyError as exc:
        missing = [n for n in sorted(_names(node)) if any(n not in s for s in samples)]
        raise Unmeasured(f"metric {missing[0]!r}" if missing else str(exc.args[0])) from None


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
        (lm, lvar), (rm, rvar) = _stats(lv), _stats(rv)
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
    return Judgement(criterion.text, outcome, tuple(found))
