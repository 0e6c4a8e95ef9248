"""The dense regions in evaluation mode: the model exported again under `model.eval()`, so the
compiled model's `eval()` runs dropout off, batch norm on its running statistics and every
`self.training` branch as eval takes it, on the same tables and parameters.

The export may wait for the first `eval()`. Until then the compiled model holds an *eval
skeleton* of the user's model (`eval_skeleton`): its modules copied, its dense parameters and
buffers shared, its embedding tables replaced by meta tensors. Export needs only the tables'
shapes, so the skeleton keeps the model's structure alive without keeping its tables: a user
who deletes the model after compiling frees them, and eval() still works."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable

import torch
import torch.fx as fx
from torch import nn

from sparselift.frontend.errors import ExportError
from sparselift.frontend.export import _jagged_calls, _regions, _separable_lookups, trace
from sparselift.frontend.meta import has_meta_parameters, point_at_model
from sparselift.frontend.program import SparseProgram

log = logging.getLogger(__name__)


def export_eval_regions(model: nn.Module, example_inputs: tuple, program: SparseProgram) -> dict[str, nn.Module]:
    """The torch regions of `model` exported in evaluation mode (`model.eval()`: dropout off,
    batch norm on its running statistics, any `self.training` branch as eval takes it), to run in
    place of `program`'s (the training ones) when the compiled model is in `eval()`.

    The model's mode is restored after. The regions read the model's own parameters and buffers,
    as the training regions do, so each mode sees what the other trained. Raises ExportError
    when the lookups or a region's signature differ between the modes."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        traced = trace(model, example_inputs)
    finally:
        for m, training in modes.items():
            m.training = training
    model_name = type(model).__name__
    calls = _separable_lookups(traced.gm, model_name)
    jagged = _jagged_calls(calls, traced.input_objects, program.max_lengths)
    regions = _regions(traced, calls, jagged)
    shapes = {name: _arity(m) for name, m in regions.modules.items()}
    if shapes != {name: _arity(m) for name, m in program.regions.items()}:
        raise ExportError(
            f"model '{model_name}': its dense regions take other inputs in eval() than in train() "
            f"({shapes} against { ({n: _arity(m) for n, m in program.regions.items()}) }); SparseLift compiles "
            "models whose lookups are the same in both modes"
        )
    if has_meta_parameters(model):
        point_at_model(model, regions.modules)
    for module in regions.modules.values():
        module.train(False)
    return regions.modules


def eval_skeleton(model: nn.Module, table_params: Iterable[str], keep: Iterable[torch.Tensor] = ()) -> nn.Module | None:
    """A copy of `model`'s modules that shares its dense parameters and buffers and holds a meta
    tensor (shape and dtype, no storage) for each table in `table_params` (FQNs), except tables
    in `keep` (those the dense regions read: they stay alive anyway). None where the model
    cannot be copied (a module attribute deepcopy refuses); the caller exports at once then."""
    names = set(table_params)
    kept = {id(t) for t in keep}
    memo: dict[int, object] = {}
    for module in model.modules():
        for slots in (module._parameters, module._buffers):
            for t in slots.values():
                if t is not None:
                    memo[id(t)] = t
        for value in vars(module).values():  # plain tensor attributes: shared, never copied
            if isinstance(value, torch.Tensor):
                memo[id(value)] = value
    for name, t in model.named_parameters(remove_duplicate=False):
        if name in names and id(t) not in kept and t.device.type != "meta":
            memo[id(t)] = nn.Parameter(torch.empty(t.shape, dtype=t.dtype, device="meta"), t.requires_grad)
    try:
        return copy.deepcopy(model, memo)  # type: ignore[arg-type]
    except Exception as e:  # noqa: BLE001 - any attribute's refusal: export now instead
        log.info("sparselift: model '%s' cannot be copied (%s): eval regions exported now", type(model).__name__, e)
        return None


def _arity(region: nn.Module) -> int:
    """How many graph inputs a region's (wrapped) graph takes."""
    gm = getattr(region, "region", region)
    return sum(1 for n in gm.graph.nodes if n.op == "placeholder") if isinstance(gm, fx.GraphModule) else -1
