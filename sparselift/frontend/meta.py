"""Models built on the meta device: exported from shapes alone, dense parts materialized, and
each table's initializer found (TorchRec users build models too big to build whole this way).

- `fake_meta_parameters`: during torch.export, every meta parameter is swapped for a fake CPU
  tensor (shape, dtype and strides, no storage), since export refuses to mix meta parameters
  with real inputs; the model's own parameters are put back afterwards.
- `materialize_dense`: modules that own meta parameters which are not embedding tables are
  materialized with their `reset_parameters()` (under a seeded, forked RNG, so every rank gets
  the same values), and the exported regions are re-pointed at the real parameters.
- `table_initializers`: for each table on the meta device, how its module would initialize it
  (`nn.EmbeddingBag`/`nn.Embedding`: `reset_parameters`' N(0, 1), padding row zero; TorchRec:
  `EmbeddingBagConfig.init_fn`, whose default is TorchRec's uniform), drawn per chunk of rows
  (`sparselift.init.fill_rows`), or the user's `CompileOptions(table_init=...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import nn

from sparselift.frontend.errors import ExportError
from sparselift.init import fill_rows


def has_meta_parameters(model: nn.Module) -> bool:
    return any(t.device.type == "meta" for t in (*model.parameters(), *model.buffers()))


@contextmanager
def fake_meta_parameters(model: nn.Module, device: torch.device | str = "cpu") -> Iterator[None]:
    """Swap the model's meta parameters and buffers for fake tensors on `device` (no storage)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes: dict[int, torch.Tensor] = {}  # a parameter shared by two modules gets one fake
    swapped: list[tuple[dict, str, torch.Tensor]] = []
    for module in model.modules():
        for slots in (module._parameters, module._buffers):
            for name, t in list(slots.items()):
                if t is None or t.device.type != "meta":
                    continue
                if id(t) not in fakes:
                    with mode:
                        fake = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
                    fakes[id(t)] = (
                        nn.Parameter(fake, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else fake
                    )
                swapped.append((slots, name, t))
                slots[name] = fakes[id(t)]
    try:
        yield
    finally:
        for slots, name, original in swapped:
            slots[name] = original


def is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor) or isinstance(getattr(t, "data", None), FakeTensor)


def materialize_dense(
    model: nn.Module,
    table_params: set[str],
    regions: Mapping[str, nn.Module],
    *,
    seed: int,
    device: torch.device | str = "cpu",
) -> None:
    """Materialize every module owning meta parameters or buffers other than the tables, then
    point the exported regions (which hold the fakes export saw) at the real tensors."""
    tables = {id(p) for name, p in model.named_parameters(remove_duplicate=False) if name in table_params}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for mod_name, module in model.named_modules():
            own = [
                t
                for t in (*module._parameters.values(), *module._buffers.values())
                if t is not None and t.device.type == "meta" and id(t) not in tables
            ]
            if not own:
                continue
            if not hasattr(module, "reset_parameters"):
                raise ExportError(
                    f"module '{mod_name or type(model).__name__}' ({type(module).__name__}) is on the meta device "
                    "and is not an embedding table, but has no reset_parameters() to materialize it with: "
                    "materialize it before sparselift.compile"
                )
            module.to_empty(device=device, recurse=False)
            module.reset_parameters()
    point_at_model(model, regions)


def point_at_model(model: nn.Module, regions: Mapping[str, nn.Module]) -> None:
    """Point the exported regions, which hold the fakes export saw for meta tensors, at the
    model's real tensors."""
    real = dict((*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)))
    for region in regions.values():
        _repoint(region, real)


def _repoint(region: nn.Module, real: Mapping[str, torch.Tensor]) -> None:
    """Replace the fakes a region holds by the model's tensors: regions copy the model's
    attribute paths, under the region's own prefix (`SparseInputs.region.`)."""
    for prefix, module in region.named_modules():
        for slots in (module._parameters, module._buffers):
            for name, t in list(slots.items()):
                if t is None or not is_fake(t):
                    continue
                parts = (f"{prefix}.{name}" if prefix else name).split(".")
                fqn = next((".".join(parts[i:]) for i in range(len(parts)) if ".".join(parts[i:]) in real), None)
                if fqn is None or tuple(real[fqn].shape) != tuple(t.shape):
                    raise ExportError(
                        f"internal error: region tensor '{'.'.join(parts)}' of a meta-device model "
                        "could not be matched to the materialized model"
                    )
                slots[name] = real[fqn]


def table_initializers(
    model: nn.Module, tables: Iterable, user_init: Callable | None, seed: int
) -> dict[str, Callable]:
    """IR table name -> `init(table, shard, row_offset)` for every table on the meta device that
    has a known initializer (the user's hook first). `tables`: the IR's table facts (each with
    `name` and `param`: `sparselift.codegen.table_facts.describe_tables`)."""
    params = dict(model.named_parameters(remove_duplicate=False))
    out: dict[str, Callable] = {}
    for info in tables:
        if params[info.param].device.type != "meta":
            continue
        if user_init is not None:
            out[info.name] = user_init
            continue
        init = _module_init(model, info.param, seed)
        if init is not None:
            out[info.name] = init
    return out


def _chunked(init_fn: Callable[[torch.Tensor], object], seed: int, padding_idx: int | None = None) -> Callable:
    def init(table: str, shard: torch.Tensor, row_offset: int) -> None:
        fill_rows(shard, row_offset, init_fn, seed=seed, table=table)
        if padding_idx is not None and row_offset <= padding_idx < row_offset + shard.shape[0]:
            shard[padding_idx - row_offset].zero_()  # as nn.EmbeddingBag.reset_parameters does

    return init


def _module_init(model: nn.Module, param: str, seed: int) -> Callable | None:
    """How the table's owning module would initialize it, as a shard initializer (None: unknown)."""
    owner_name, _, _ = param.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    parent_name, _, key = owner_name.rpartition(".")
    grandparent_name = parent_name.rpartition(".")[0]
    # TorchRec's collections keep their tables' configs (and their init_fn) beside the modules:
    # EmbeddingBagCollection's embedding_bags[<table>], EmbeddingCollection's embeddings[<table>].
    collection = model.get_submodule(grandparent_name) if grandparent_name else model
    configs = None
    if parent_name.endswith("embedding_bags"):
        configs = getattr(collection, "_embedding_bag_configs", None)
    elif parent_name.endswith("embeddings"):
        configs = getattr(collection, "_embedding_configs", None)
    if configs is not None:
        config = next((c for c in configs if c.name == key), None)
        if config is not None and config.init_fn is not None:
            return _chunked(config.init_fn, seed)
    if isinstance(owner, (nn.EmbeddingBag, nn.Embedding)):
        padding = owner.padding_idx
        return _chunked(nn.init.normal_, seed, None if padding is None else padding % owner.num_embeddings)
    return None


__all__ = ["fake_meta_parameters", "has_meta_parameters", "is_fake", "materialize_dense", "table_initializers"]
