"""The compiled model's fused sparse optimizer, as the user's loop sees it: `param_groups` that
`torch.optim.lr_scheduler` classes drive unchanged, and the per-step arguments every update path
(reference, C, Triton) reads.

The tables are updated inside backward, as TorchRec's fused optimizers do, so `step()` has
nothing left to do. A training step's backward starts the optimizer step (`begin_step`): each
group's step count grows by one and its hyperparameters are read and checked then, so a new
learning rate takes effect at the next backward, with no recompile.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from sparselift.kernel_args import OptimizerArgs
from sparselift.optim import TableOptimizers
from sparselift.optim_rules import HYPERPARAMETERS, OptimizerKind, StateScope, rule_for


class SparseOptimizer(torch.optim.Optimizer):
    """`compiled.sparse_optimizer`: one param group per optimizer configuration, holding `kind`,
    `lr`, `eps`, `betas`, `weight_decay` and the IR names of its `tables`; its `params` are this
    rank's shards of those tables (possibly none). `steps[g]`, a 0-d int64 tensor, is group `g`'s
    step count (the checkpoints' `<table>.step` entries are this tensor)."""

    def __init__(self, optimizers: TableOptimizers, shards: Mapping[str, torch.Tensor]):
        groups = []
        for g, config in enumerate(optimizers.groups):
            names = optimizers.group_tables(g) or ([n for n in shards] if g == 0 else [])
            hyper = config.hyperparameters()
            groups.append(
                {
                    "params": [shards[n] for n in names if n in shards],
                    "kind": str(config.kind),
                    "tables": names,
                    "lr": hyper["lr"],
                    "eps": hyper["eps"],
                    "betas": (hyper["beta1"], hyper["beta2"]),
                    "weight_decay": hyper["weight_decay"],
                }
            )
        super().__init__(groups, {})
        self.steps = [torch.zeros((), dtype=torch.int64) for _ in groups]
        self._current: list[OptimizerArgs | None] = [None] * len(groups)

    def step(self, closure=None):  # noqa: D102 - the update ran in backward
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none: bool = True) -> None:  # the tables never hold a .grad
        return None

    def begin_step(self) -> None:
        """Start a training step: every group's step count grows by one and its arguments are
        read from `param_groups` and checked (a NaN or negative learning rate is an error naming
        the group; nothing has been updated yet)."""
        args = [_group_args(k, group) for k, group in enumerate(self.param_groups)]
        for step in self.steps:
            step += 1
        self._current = [a.with_step(int(step)) for a, step in zip(args, self.steps)]
        self._opt_called = True  # the step this is (for torch's LR schedulers' order check)

    def args(self, group: int) -> OptimizerArgs:
        """Group `group`'s arguments for this step (the first step's, before any `begin_step`)."""
        current = self._current[group]
        if current is None:
            g = self.param_groups[group]
            current = self._current[group] = _group_args(group, g).with_step(max(int(self.steps[group]), 1))
        return current

    def step_counts(self) -> list[int]:
        return [int(t) for t in self.steps]

    def set_step_counts(self, counts: Sequence[int]) -> None:
        for t, count in zip(self.steps, counts):
            t.fill_(int(count))
        self._current = [None] * len(self.param_groups)

    def state_dict(self) -> dict[str, Any]:
        """Each group's kind, tables, hyperparameters and step count (no tensors: the per-row
        states are the model's `<table>.<state>` entries)."""
        keep = ("kind", "tables", "lr", "eps", "betas", "weight_decay", "initial_lr")
        groups = [{k: g[k] for k in keep if k in g} for g in self.param_groups]
        return {"param_groups": [{**g, "step": int(t)} for g, t in zip(groups, self.steps)]}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        groups = state_dict.get("param_groups")
        if not isinstance(groups, list) or len(groups) != len(self.param_groups):
            raise ValueError(
                f"sparse_optimizer.load_state_dict: expected {len(self.param_groups)} param groups, "
                f"got {len(groups) if isinstance(groups, list) else groups!r}"
            )
        for k, (mine, saved) in enumerate(zip(self.param_groups, groups)):
            if saved.get("kind") != mine["kind"] or list(saved.get("tables", [])) != mine["tables"]:
                raise ValueError(
                    f"sparse_optimizer.load_state_dict: group {k} is {mine['kind']} on tables {mine['tables']}; "
                    f"the checkpoint's is {saved.get('kind')} on {saved.get('tables')}"
                )
            for key, value in saved.items():
                if key == "step":
                    self.steps[k].fill_(int(value))
                elif key not in ("kind", "tables"):
                    mine[key] = tuple(value) if key == "betas" else value
        self._current = [None] * len(self.param_groups)


def state_slots(kind: str, state: torch.Tensor | None, rows: int, dim: int) -> dict[str, torch.Tensor]:
    """The states of a table's optimizer state buffer (`rows * rule.state_width(dim)` floats) by
    name, as contiguous views of it: `[rows, dim]` for an element state, `[rows]` for a row
    state (`OptimizerRule.state_offset`: each state whole, one after the other)."""
    rule = rule_for(kind)
    if state is None or not rule.states:
        return {}
    flat = state.reshape(-1)
    out = {}
    for slot in rule.states:
        start, width = rows * rule.state_offset(slot.name, dim), slot.width(dim)
        view = flat[start : start + rows * width]
        out[slot.name] = view.view(rows, dim) if slot.scope == StateScope.ELEMENT else view
    return out


def optimizer_args(plan: Any, kind: str, group: int) -> OptimizerArgs:
    """The update arguments of optimizer group `group` of `plan` (its `sparse_optimizer`) for
    this step. `kind` is the IR's, checked against the group's: a plan never runs another
    optimizer than the one it was compiled for."""
    args = plan.sparse_optimizer.args(group)
    if args.kind != kind:
        raise RuntimeError(
            f"sparselift: the plan updates group {group} with {kind}, but sparse_optimizer group {group} is "
            f"{args.kind}; the plan was compiled for another optimizer"
        )
    return args


def _group_args(index: int, group: Mapping[str, Any]) -> OptimizerArgs:
    values = {"lr": group["lr"], "eps": group["eps"], "weight_decay": group["weight_decay"]}
    values["beta1"], values["beta2"] = group["betas"]
    for name in HYPERPARAMETERS:
        v = values[name]
        if isinstance(v, torch.Tensor):
            v = values[name] = float(v)
        if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
            raise ValueError(
                f"sparse_optimizer.param_groups[{index}] ({group['kind']} on tables {', '.join(group['tables'])}): "
                f"{name} is {v!r}; it must be a finite non-negative number (no table was updated)"
            )
    return OptimizerArgs(OptimizerKind(group["kind"]), **{k: float(v) for k, v in values.items()})


__all__ = ["SparseOptimizer", "optimizer_args", "state_slots"]
