"""The sparse optimizers as data: each one's state, hyperparameters and update rule, written once.

An `OptimizerRule` says what a fused embedding optimizer keeps per table row (`StateSlot`s, one
value per row or one per element) and how it updates a touched row from that row's gradient,
as short statements in Python syntax. The reference update (torch), the generated C update and
the Triton update are all rendered from these statements, as FBGEMM generates its TBE optimizers
from one description each; adding an optimizer is adding a rule here.

The statements of a rule read:

- `g`: the row's gradient element (the sum of its occurrences in the batch, already scaled);
- `w`: the row's weight element, in f32 (16-bit tables are rounded once, when it is stored);
- the rule's states by name: a `ROW` state is one value per row, an `ELEMENT` state one per
  element;
- the hyperparameters `HYPERPARAMETERS` (`lr`, `eps`, `beta1`, `beta2`, `weight_decay`), which
  are run-time values (a schedule changes `lr` without a recompile), and the step values
  `bc1 = 1 - beta1 ** t`, `bc2 = 1 - beta2 ** t` of the optimizer's step count `t`;
- `mean_g2`, the mean over the row of `g * g` (in `row` statements only);
- `sqrt(x)`, and `+ - * /` on floats.

`row` statements run once per touched row (after the row's gradient is summed), then `element`
statements once per element. A target that is not a state, `w` or `g` is a temporary. SGD alone
is not summed (`summed=False`): it applies one step per occurrence, in the batch's order, so an
f32 table rounds exactly as `torch.optim.SGD` on a sparse gradient does.

Pure Python (no torch): the IR, the passes and codegen read it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Mapping
from enum import StrEnum, auto

import attrs


class OptimizerKind(StrEnum):
    SGD = auto()
    ADAGRAD = auto()
    ROWWISE_ADAGRAD = auto()
    ADAM = auto()
    ADAMW = auto()
    PARTIAL_ROWWISE_ADAM = auto()


class StateScope(StrEnum):
    ROW = auto()  # one value per table row
    ELEMENT = auto()  # one value per table element (a row's worth per row)


# The run-time hyperparameters every rule may read, in the order of the generated kernels'
# `sl_hyper` struct, then the per-step values derived from the step count.
HYPERPARAMETERS = ("lr", "eps", "beta1", "beta2", "weight_decay")
STEP_VALUES = ("bc1", "bc2")
ARGUMENTS = HYPERPARAMETERS + STEP_VALUES
_BUILTINS = frozenset({"g", "w", "mean_g2"})
_FUNCTIONS = frozenset({"sqrt"})


@attrs.frozen
class StateSlot:
    """One piece of an optimizer's per-row state. `name` is its checkpoint key suffix
    (`<table>.<name>`), as TorchRec names its fused optimizers' states."""

    name: str
    scope: StateScope

    def width(self, dim: int) -> int:
        return dim if self.scope == StateScope.ELEMENT else 1


Statement = tuple[str, str]  # (target, expression)


@attrs.frozen
class OptimizerRule:
    """One optimizer, described once (see the module docstring for what statements may read)."""

    kind: OptimizerKind
    title: str  # the name users know it by
    states: tuple[StateSlot, ...]
    row: tuple[Statement, ...]
    element: tuple[Statement, ...]
    summed: bool = True  # an id's gradient summed over its occurrences first (all but SGD)

    def __attrs_post_init__(self) -> None:
        _check_statements(self)

    def state_width(self, dim: int) -> int:
        """Floats of state per row (all the states together)."""
        return sum(s.width(dim) for s in self.states)

    def state_offset(self, name: str, dim: int) -> int:
        """The floats per row of the states before `name`. A table's state is one float32
        buffer of `rows * state_width(dim)` floats holding each state whole, one after the other
        (`[rows, width]` each, contiguous): state `name` starts at float `rows * state_offset`,
        and its row `r` at `rows * state_offset + r * width`."""
        off = 0
        for s in self.states:
            if s.name == name:
                return off
            off += s.width(dim)
        raise KeyError(f"{self.kind} has no state '{name}'")

    @property
    def counts_steps(self) -> bool:
        """Whether the rule reads the step values (its step count is then part of its state)."""
        return any(n in STEP_VALUES for n in self.names_read())

    def names_read(self) -> frozenset[str]:
        """The names the rule's statements read (parsed once per rule: updates ask every step)."""
        return _names_read(self)


@functools.cache
def _names_read(rule: OptimizerRule) -> frozenset[str]:
    out: set[str] = set()
    for _, expr in (*rule.row, *rule.element):
        out |= {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)}
    return frozenset(out - _FUNCTIONS)


def _check_statements(rule: OptimizerRule) -> None:
    """Every name a statement reads is known, and row statements read no element values."""
    states = {s.name: s.scope for s in rule.states}
    known = set(ARGUMENTS) | _BUILTINS | set(states)
    row_values = set(ARGUMENTS) | {"mean_g2"} | {n for n, s in states.items() if s == StateScope.ROW}
    for stage, statements in (("row", rule.row), ("element", rule.element)):
        for target, expr in statements:
            tree = ast.parse(expr, mode="eval")
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS):
                        raise ValueError(f"{rule.kind}: only {sorted(_FUNCTIONS)} may be called: {expr}")
                elif isinstance(node, ast.Name) and node.id not in _FUNCTIONS:
                    if node.id not in known:
                        raise ValueError(f"{rule.kind}: '{node.id}' in '{expr}' is not known yet")
                    if stage == "row" and node.id not in row_values:
                        raise ValueError(f"{rule.kind}: a row statement reads element value '{node.id}'")
            if target in ARGUMENTS or target == "mean_g2":
                raise ValueError(f"{rule.kind}: '{target}' cannot be assigned")
            known.add(target)
            if stage == "row":
                row_values.add(target)


_ROW = StateScope.ROW
_ELEMENT = StateScope.ELEMENT
_ADAM_MOMENTS = ("m = beta1 * m + (1 - beta1) * g",)
_ADAM_STEP = ("w", "w - lr * ((m / bc1) / (sqrt(v / bc2) + eps))")

RULES: dict[OptimizerKind, OptimizerRule] = {
    rule.kind: rule
    for rule in (
        OptimizerRule(OptimizerKind.SGD, "SGD", (), (), (("w", "w - lr * g"),), summed=False),
        OptimizerRule(
            OptimizerKind.ADAGRAD,
            "Adagrad",
            (StateSlot("sum", _ELEMENT),),
            (),
            (("sum", "sum + g * g"), ("w", "w - lr * (g / (sqrt(sum) + eps))")),
        ),
        OptimizerRule(
            OptimizerKind.ROWWISE_ADAGRAD,
            "RowWiseAdagrad",
            (StateSlot("momentum", _ROW),),
            (("momentum", "momentum + mean_g2"), ("den", "sqrt(momentum) + eps")),
            (("w", "w - lr * (g / den)"),),
        ),
        OptimizerRule(
            OptimizerKind.ADAM,
            "Adam",
            (StateSlot("exp_avg", _ELEMENT), StateSlot("exp_avg_sq", _ELEMENT)),
            (),
            (
                ("g", "g + weight_decay * w"),  # L2, as torch.optim.Adam's weight_decay
                ("exp_avg", "beta1 * exp_avg + (1 - beta1) * g"),
                ("exp_avg_sq", "beta2 * exp_avg_sq + (1 - beta2) * (g * g)"),
                ("w", "w - lr * ((exp_avg / bc1) / (sqrt(exp_avg_sq / bc2) + eps))"),
            ),
        ),
        OptimizerRule(
            OptimizerKind.ADAMW,
            "AdamW",
            (StateSlot("exp_avg", _ELEMENT), StateSlot("exp_avg_sq", _ELEMENT)),
            (),
            (
                ("w", "w - (lr * weight_decay) * w"),  # decoupled, as torch.optim.AdamW
                ("exp_avg", "beta1 * exp_avg + (1 - beta1) * g"),
                ("exp_avg_sq", "beta2 * exp_avg_sq + (1 - beta2) * (g * g)"),
                ("w", "w - lr * ((exp_avg / bc1) / (sqrt(exp_avg_sq / bc2) + eps))"),
            ),
        ),
        OptimizerRule(
            OptimizerKind.PARTIAL_ROWWISE_ADAM,
            "PartialRowWiseAdam",
            (StateSlot("exp_avg", _ELEMENT), StateSlot("exp_avg_sq", _ROW)),
            (
                ("exp_avg_sq", "beta2 * exp_avg_sq + (1 - beta2) * mean_g2"),
                ("den", "sqrt(exp_avg_sq / bc2) + eps"),
            ),
            (
                ("exp_avg", "beta1 * exp_avg + (1 - beta1) * g"),
                # FBGEMM's PARTIAL_ROWWISE_ADAM: the weight decay inside the step
                ("w", "w - lr * ((exp_avg / bc1) / den + weight_decay * w)"),
            ),
        ),
    )
}


def rule_for(kind: str | OptimizerKind) -> OptimizerRule:
    try:
        return RULES[OptimizerKind(kind)]
    except ValueError:
        raise ValueError(f"unknown optimizer '{kind}'; expected one of {', '.join(OptimizerKind)}") from None


# ---- rendering ------------------------------------------------------------------------------


def render_expression(
    expr: str,
    name: Callable[[str], str],
    sqrt: str,
    constant: Callable[[float], str],
    fold: Callable[[str], str] | None = None,
) -> str:
    """`expr` in another language: names through `name`, `sqrt(x)` as `sqrt(x)` under the
    target's name, number literals through `constant`; fully parenthesized, so the evaluation
    order is the statement's, whatever the target's precedence rules.

    `fold`: how the target evaluates a subexpression of run-time values alone (`ARGUMENTS`
    and numbers, `1 - beta1`) given its double-precision source (names as `name` gives them,
    numbers as plain doubles): the reference computes such a value in Python's double precision
    and rounds it once to f32 where it meets a tensor, and a kernel that does the same rounds as
    it does."""

    def walk(node: ast.AST, folding: bool) -> str:
        if isinstance(node, ast.Expression):
            return walk(node.body, folding)
        if not folding and fold is not None and _runtime_only(node) and not isinstance(node, ast.Constant):
            return fold(walk(node, True))
        if isinstance(node, ast.Name):
            return name(node.id)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return repr(float(node.value)) if folding else constant(float(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return f"(-{walk(node.operand, folding)})"
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return f"({walk(node.left, folding)} {_OPS[type(node.op)]} {walk(node.right, folding)})"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sqrt":
            return f"{sqrt}({walk(node.args[0], folding)})"
        raise ValueError(f"unsupported expression: {ast.unparse(node)}")

    return walk(ast.parse(expr, mode="eval"), False)


def _runtime_only(node: ast.AST) -> bool:
    """Whether `node` reads run-time values (`ARGUMENTS`) and numbers alone, and calls nothing."""
    parts = list(ast.walk(node))
    return not any(isinstance(n, ast.Call) for n in parts) and all(
        n.id in ARGUMENTS for n in parts if isinstance(n, ast.Name)
    )


_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def c_float(value: float) -> str:
    return f"{value!r}f" if "." in repr(value) or "e" in repr(value) else f"{value!r}.0f"


def evaluate(statements: tuple[Statement, ...], values: dict, sqrt: Callable) -> dict:
    """Run `statements` on `values` (names -> numbers or tensors), in place; returns `values`.
    The reference update evaluates a rule so, on tensors."""
    for target, expr in statements:
        values[target] = _compiled(expr)({"sqrt": sqrt, **values})
    return values


_CACHE: dict[str, Callable[[Mapping], object]] = {}


def _compiled(expr: str) -> Callable[[Mapping], object]:
    """`expr` as a function of its names' values (compiled once; no builtins reachable)."""
    fn = _CACHE.get(expr)
    if fn is None:
        code = compile(ast.parse(expr, mode="eval"), f"<optimizer rule: {expr}>", "eval")

        def fn(env: Mapping, code=code) -> object:
            return eval(code, {"__builtins__": {}}, dict(env))  # noqa: S307

        _CACHE[expr] = fn
    return fn


__all__ = [
    "ARGUMENTS",
    "HYPERPARAMETERS",
    "RULES",
    "STEP_VALUES",
    "OptimizerKind",
    "OptimizerRule",
    "StateScope",
    "StateSlot",
    "c_float",
    "evaluate",
    "render_expression",
    "rule_for",
]
