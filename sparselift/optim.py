"""The sparse (embedding) optimizers a user picks, fused into the backward pass.

Three ways to choose, all ending in the records below:

- `sparse_optimizer=sparselift.optim.Adam(lr=1e-3)`;
- `sparse_optimizer=(torch.optim.Adam, {"lr": 1e-3})`: a torch (or TorchRec) class and its
  keyword arguments;
- TorchRec's `apply_optimizer_in_backward(cls, table_params, kwargs)` on the model before
  `compile()`, per table, as `DistributedModelParallel` honours it.

An optimizer or option SparseLift does not implement is refused (`UnsupportedOptimizer`), never
replaced. The update rules themselves are `sparselift.optim_rules`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from sparselift.optim_rules import HYPERPARAMETERS, OptimizerKind, rule_for


class UnsupportedOptimizer(ValueError):
    """An optimizer, or an option of one, that SparseLift does not implement."""


def _positive(_instance, attribute, value) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise UnsupportedOptimizer(f"{attribute.name} must be a positive finite number, got {value!r}")


def _non_negative(_instance, attribute, value) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise UnsupportedOptimizer(f"{attribute.name} must be a non-negative finite number, got {value!r}")


def _betas(_instance, attribute, value) -> None:
    if len(value) != 2 or not all(isinstance(b, int | float) and 0 <= b < 1 for b in value):
        raise UnsupportedOptimizer(f"betas must be two numbers in [0, 1), got {value!r}")


class _Hyper:
    """What every record shares: its kind and its hyperparameters as the rules name them."""

    kind: ClassVar[OptimizerKind]

    def hyperparameters(self) -> dict[str, float]:
        """`HYPERPARAMETERS` by name (the ones this optimizer has no use for are 0)."""
        values = attrs.asdict(self)  # type: ignore[arg-type]
        betas = values.pop("betas", (0.0, 0.0))
        out = {"beta1": float(betas[0]), "beta2": float(betas[1]), "eps": 0.0, "weight_decay": 0.0}
        out.update({k: float(v) for k, v in values.items()})
        return {h: out[h] for h in HYPERPARAMETERS}

    @property
    def rule(self):
        return rule_for(self.kind)


@attrs.frozen
class SGD(_Hyper):
    """`torch.optim.SGD` on a sparse gradient: one step per occurrence of an id, in order."""

    lr: float = attrs.field(default=0.01, validator=_positive)
    kind: ClassVar[OptimizerKind] = OptimizerKind.SGD


@attrs.frozen
class Adagrad(_Hyper):
    """`torch.optim.Adagrad` on a sparse gradient: `sum += g^2`, `w -= lr * g / (sqrt(sum) + eps)`
    per element, on the rows the batch touches (an id's occurrences summed first)."""

    lr: float = attrs.field(default=0.01, validator=_positive)
    eps: float = attrs.field(default=1e-10, validator=_positive)
    kind: ClassVar[OptimizerKind] = OptimizerKind.ADAGRAD


@attrs.frozen
class RowWiseAdagrad(_Hyper):
    """FBGEMM's EXACT_ROWWISE_ADAGRAD: one accumulator per row, `acc += mean(g^2)`,
    `w -= lr * g / (sqrt(acc) + eps)`."""

    lr: float = attrs.field(default=0.01, validator=_positive)
    eps: float = attrs.field(default=1e-8, validator=_positive)
    kind: ClassVar[OptimizerKind] = OptimizerKind.ROWWISE_ADAGRAD


@attrs.frozen
class Adam(_Hyper):
    """Lazy Adam: `exp_avg` and `exp_avg_sq` per element, updated on touched rows only;
    `w -= lr * m_hat / (sqrt(v_hat) + eps)` with the hats bias-corrected by the step count
    (`torch.optim.Adam`'s and FBGEMM's form; `torch.optim.SparseAdam` adds eps before the
    correction, another number). `weight_decay` is L2, added to the gradient of touched rows."""

    lr: float = attrs.field(default=1e-3, validator=_positive)
    betas: tuple[float, float] = attrs.field(default=(0.9, 0.999), converter=tuple, validator=_betas)
    eps: float = attrs.field(default=1e-8, validator=_positive)
    weight_decay: float = attrs.field(default=0.0, validator=_non_negative)
    kind: ClassVar[OptimizerKind] = OptimizerKind.ADAM


@attrs.frozen
class AdamW(_Hyper):
    """Lazy Adam with decoupled weight decay on the touched rows (`w -= lr * weight_decay * w`
    first), as `torch.optim.AdamW` and FBGEMM's DECOUPLED mode."""

    lr: float = attrs.field(default=1e-3, validator=_positive)
    betas: tuple[float, float] = attrs.field(default=(0.9, 0.999), converter=tuple, validator=_betas)
    eps: float = attrs.field(default=1e-8, validator=_positive)
    weight_decay: float = attrs.field(default=1e-2, validator=_non_negative)
    kind: ClassVar[OptimizerKind] = OptimizerKind.ADAMW


@attrs.frozen
class PartialRowWiseAdam(_Hyper):
    """FBGEMM's PARTIAL_ROWWISE_ADAM: `exp_avg` per element, `exp_avg_sq` per row (the mean of
    `g^2`), `w -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * w)`."""

    lr: float = attrs.field(default=1e-3, validator=_positive)
    betas: tuple[float, float] = attrs.field(default=(0.9, 0.999), converter=tuple, validator=_betas)
    eps: float = attrs.field(default=1e-8, validator=_positive)
    weight_decay: float = attrs.field(default=0.0, validator=_non_negative)
    kind: ClassVar[OptimizerKind] = OptimizerKind.PARTIAL_ROWWISE_ADAM


SparseOptimizerConfig = SGD | Adagrad | RowWiseAdagrad | Adam | AdamW | PartialRowWiseAdam
RECORDS: dict[OptimizerKind, type] = {
    r.kind: r for r in (SGD, Adagrad, RowWiseAdagrad, Adam, AdamW, PartialRowWiseAdam)
}
SUPPORTED = (
    "torch.optim.SGD, Adagrad, Adam, AdamW; torchrec.optim.RowWiseAdagrad, Adagrad, Adam, PartialRowWiseAdam, SGD; "
    "sparselift.optim.SGD, Adagrad, RowWiseAdagrad, Adam, AdamW, PartialRowWiseAdam"
)

# Keyword arguments a torch or TorchRec optimizer may carry, the value each must have for
# SparseLift to honour it (None: any), and where the value goes.
_ACCEPTED_AS = {"foreach": (None, False), "fused": (None, False), "capturable": (False,), "differentiable": (False,)}
_REFUSED_UNLESS = {
    "maximize": (False,),
    "amsgrad": (False,),
    "momentum": (0, 0.0),
    "dampening": (0, 0.0),
    "nesterov": (False,),
    "lr_decay": (0, 0.0),
    "initial_accumulator_value": (0, 0.0),
}


def _torch_kind(cls: type, kwargs: Mapping[str, Any]) -> OptimizerKind | None:
    """The kind a torch / TorchRec / SparseLift optimizer class stands for, or None."""
    name, module = cls.__name__, getattr(cls, "__module__", "")
    if module.startswith("sparselift"):
        return getattr(cls, "kind", None)
    if not (module.startswith("torch.optim") or module.startswith("torchrec.optim")):
        return None
    if name == "Adam" and kwargs.get("decoupled_weight_decay"):
        return OptimizerKind.ADAMW
    return {
        "SGD": OptimizerKind.SGD,
        "Adagrad": OptimizerKind.ADAGRAD,
        "RowWiseAdagrad": OptimizerKind.ROWWISE_ADAGRAD,
        "Adam": OptimizerKind.ADAM,
        "AdamW": OptimizerKind.ADAMW,
        "PartialRowWiseAdam": OptimizerKind.PARTIAL_ROWWISE_ADAM,
    }.get(name)


def from_class(cls: type, kwargs: Mapping[str, Any], where: str = "") -> SparseOptimizerConfig:
    """The record for a torch, TorchRec or SparseLift optimizer class and its keyword arguments.
    Raises `UnsupportedOptimizer` naming `where` (the table), the optimizer and what is supported."""
    label = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__name__', cls)}"
    prefix = f"{where}: " if where else ""
    kind = _torch_kind(cls, kwargs) if isinstance(cls, type) else None
    if kind is None:
        raise UnsupportedOptimizer(f"{prefix}sparse optimizer {label} is not supported; supported: {SUPPORTED}")
    record = RECORDS[kind]
    fields = {f.name for f in attrs.fields(record)}
    args: dict[str, Any] = {k: v for k, v in _class_defaults(cls).items() if k in fields}
    for key, value in kwargs.items():
        if key == "decoupled_weight_decay":
            continue
        if key in _ACCEPTED_AS and value in _ACCEPTED_AS[key]:
            continue
        if key in _REFUSED_UNLESS and value in _REFUSED_UNLESS[key]:
            continue
        if key == "weight_decay" and "weight_decay" not in fields and value in (0, 0.0):
            continue
        if key not in fields:
            raise UnsupportedOptimizer(
                f"{prefix}{label} with {key}={value!r} is not supported by SparseLift's fused "
                f"{record.__name__} (its options: {', '.join(sorted(fields))}); supported: {SUPPORTED}"
            )
        args[key] = tuple(value) if key == "betas" else value
    try:
        return record(**args)
    except (UnsupportedOptimizer, TypeError) as e:
        raise UnsupportedOptimizer(f"{prefix}{label}({args}): {e}") from None


# FBGEMM's defaults, which TorchRec's marker classes (`torchrec.optim.Adam(params, **kwargs)`)
# stand for: they declare none of their own.
_FBGEMM_DEFAULTS = {"lr": 0.01, "eps": 1e-8, "betas": (0.9, 0.999), "weight_decay": 0.0}


def _class_defaults(cls: type) -> dict[str, Any]:
    """The defaults `cls` itself declares (a torch optimizer's signature), so a choice made with
    a class trains with that class's defaults, not SparseLift's."""
    if getattr(cls, "__module__", "").startswith("sparselift"):
        return {}
    params = inspect.signature(cls).parameters
    declared = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
    return declared or dict(_FBGEMM_DEFAULTS)


def as_config(choice: Any, where: str = "") -> SparseOptimizerConfig:
    """A `sparse_optimizer=` argument as a record: a record, or `(class, kwargs)`."""
    if isinstance(choice, SGD | Adagrad | RowWiseAdagrad | Adam | AdamW | PartialRowWiseAdam):
        return choice
    if isinstance(choice, tuple) and len(choice) == 2 and isinstance(choice[1], Mapping):
        return from_class(choice[0], choice[1], where)
    if isinstance(choice, type):
        return from_class(choice, {}, where)
    raise UnsupportedOptimizer(
        f"{where + ': ' if where else ''}sparse_optimizer={choice!r} is not an optimizer; pass "
        "sparselift.optim.Adam(lr=...) (or another record), or (torch.optim.Adam, {'lr': ...})"
    )


@attrs.frozen
class TableOptimizers:
    """Which optimizer each table trains with: `groups[g]` is a configuration, `table_groups`
    maps an IR table name to its group. Tables with equal configurations share a group, and a
    group is one `param_groups` entry of the compiled model's `sparse_optimizer`."""

    groups: tuple[SparseOptimizerConfig, ...]
    table_groups: Mapping[str, int]  # a table not listed is in group 0

    @classmethod
    def of(cls, choice: TableOptimizers | SparseOptimizerConfig) -> TableOptimizers:
        """`choice` as each table's optimizer: one record is every table's (group 0)."""
        return choice if isinstance(choice, TableOptimizers) else cls((choice,), {})

    def group_of(self, table: str) -> int:
        return self.table_groups.get(table, 0)

    def config(self, table: str) -> SparseOptimizerConfig:
        return self.groups[self.group_of(table)]

    def kind(self, table: str) -> OptimizerKind:
        return self.config(table).kind

    def group_tables(self, group: int) -> list[str]:
        return [t for t, g in self.table_groups.items() if g == group]

    def lift_options(self) -> tuple[str, tuple[str, ...]]:
        """`lift-sparse`'s `optimizer` and `table-optimizers`: group 0's kind for every table,
        and "TABLE=KIND:GROUP" for the tables of the other groups."""
        default = str(self.groups[0].kind) if self.groups else "sgd"
        others = tuple(f"{t}={self.groups[g].kind}:{g}" for t, g in self.table_groups.items() if g)
        return default, others


def choose(
    sparse_optimizer: Any, in_backward: Mapping[str, tuple[type, Mapping[str, Any]]], tables: Sequence[tuple[str, str]]
) -> TableOptimizers:
    """Each table's optimizer. `tables`: (IR table name, parameter name) pairs; `in_backward`:
    parameter name -> (class, kwargs) that `apply_optimizer_in_backward` attached to it.

    The model's in-backward optimizers, when it has any (every table must have one then); else
    `sparse_optimizer`; else SGD(lr=0.01). Both at once is an error: neither is dropped silently."""
    names = [name for name, _ in tables]
    if in_backward:
        if sparse_optimizer is not None:
            raise UnsupportedOptimizer(
                "the model's tables carry optimizers from apply_optimizer_in_backward "
                f"({', '.join(sorted(in_backward))}) and sparse_optimizer= was given too; keep one of them"
            )
        missing = [param for _, param in tables if param not in in_backward]
        if missing:
            raise UnsupportedOptimizer(
                f"apply_optimizer_in_backward gave optimizers to some tables but not to {', '.join(missing)}; "
                "give every table one (or none, and pass sparse_optimizer=)"
            )
        configs = [from_class(*in_backward[param], where=f"table '{param}'") for _, param in tables]
    else:
        config = as_config(sparse_optimizer) if sparse_optimizer is not None else SGD()
        configs = [config] * len(names)
    groups: list[SparseOptimizerConfig] = []
    table_groups = {}
    for name, config in zip(names, configs):
        if config not in groups:
            groups.append(config)
        table_groups[name] = groups.index(config)
    return TableOptimizers(tuple(groups), table_groups)


def in_backward_optimizers(named_params: Mapping[str, Any]) -> dict[str, tuple[type, Mapping[str, Any]]]:
    """Parameter name -> (class, kwargs) of the optimizer `apply_optimizer_in_backward` attached
    to it (torch's `_apply_optimizer_in_backward`, which TorchRec's calls). Two on one table are
    refused: the fused update applies one."""
    out: dict[str, tuple[type, Mapping[str, Any]]] = {}
    for name, p in named_params.items():
        classes = getattr(p, "_optimizer_classes", None)
        if not classes:
            continue
        if len(classes) > 1:
            raise UnsupportedOptimizer(
                f"table '{name}': apply_optimizer_in_backward attached {len(classes)} optimizers "
                f"({', '.join(c.__name__ for c in classes)}); a fused embedding update applies one"
            )
        out[name] = (classes[0], dict(p._optimizer_kwargs[0]))
    return out


__all__ = [
    "SGD",
    "Adagrad",
    "Adam",
    "AdamW",
    "PartialRowWiseAdam",
    "RowWiseAdagrad",
    "SparseOptimizerConfig",
    "TableOptimizers",
    "UnsupportedOptimizer",
    "as_config",
    "choose",
    "from_class",
    "in_backward_optimizers",
]
