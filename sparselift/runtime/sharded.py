"""Table shards as tensors `torch.distributed.checkpoint` can re-split.

A row-wise or table-wise table (and each per-row optimizer state of it) is saved as a
`ShardedTensor` under the parameter's own name: each rank's live shard, with the global row
offset of every shard, as TorchRec saves its sharded tables. DCP then loads it into any other
layout (another world size, another placement) by rows, and into a plain, whole tensor in one
process: `dcp.load(model.state_dict(), checkpoint_id=..., no_dist=True)` fills an uncompiled
model. Replicated tables, and everything at world size 1, are plain tensors.

`load_checkpoint` also reads the earlier format (a plain tensor per shard, `<param>#rows=LO-HI`)
at the layout it was saved with, and says how to convert it otherwise.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor, ShardMetadata
from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata, TensorProperties
from torch.distributed.checkpoint.api import CheckpointException


def sharded_rows(
    local: torch.Tensor | None,
    shards: Sequence[tuple[int, int, int]],
    rank: int,
    row_shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    process_group=None,
) -> ShardedTensor:
    """A ShardedTensor of `sum(rows)` x `row_shape` whose shard `(owner, lo, hi)` holds rows
    [lo, hi); this rank's (`local`, the live storage, when it holds one) is its local shard."""
    rows = max((hi for _, _, hi in shards), default=0)
    metas, local_shards = [], []
    for owner, lo, hi in shards:
        meta = ShardMetadata(
            shard_offsets=[lo, *([0] * len(row_shape))],
            shard_sizes=[hi - lo, *row_shape],
            placement=f"rank:{owner}/{device}",
        )
        metas.append(meta)
        if owner == rank and local is not None:
            local_shards.append(Shard(local, meta))
    size = torch.Size([rows, *row_shape])
    metadata = ShardedTensorMetadata(shards_metadata=metas, size=size, tensor_properties=TensorProperties(dtype=dtype))
    with warnings.catch_warnings():  # ShardedTensor's deprecation notice: TorchRec's format still
        warnings.simplefilter("ignore")
        return ShardedTensor._init_from_local_shards_and_global_metadata(
            local_shards, metadata, process_group=process_group
        )


def legacy_keys(compiled) -> dict:
    """This rank's live tensors under the keys of checkpoints written before the tables were
    saved as ShardedTensors (`<param>#rows=LO-HI`, `<param>.momentum#rows=LO-HI`)."""
    out: dict = {name: p.detach() for name, p in compiled.dense_named_parameters()}
    for info in compiled.table_facts:
        if info.name not in compiled.tables:
            continue
        lo, hi = info.shard_rows(compiled.rank)
        out[f"{info.param}#rows={lo}-{hi}"] = compiled.tables[info.name]
        for state, _, view in compiled._state_views(info):
            if view is not None:
                out[f"{info.param}.{state}#rows={lo}-{hi}"] = view
    return out


def load_checkpoint(compiled, checkpoint_id: str) -> None:
    """`dcp.load(compiled.sharded_state_dict(), checkpoint_id=...)` after checking the checkpoint
    against the compiled model, on every rank alike (each reads the same metadata) and before
    any tensor is written: every key present, with the model's shape and dtype, and no
    optimizer state of another optimizer. Also reads a checkpoint of the earlier format (`#rows=`
    keys) at the placement and world size it was saved with, and says how to convert it
    elsewhere."""
    import torch.distributed.checkpoint as dcp

    saved = dcp.FileSystemReader(checkpoint_id).read_metadata().state_dict_metadata
    if any("#rows=" in key for key in saved):
        wanted = legacy_keys(compiled)
        missing = sorted(k for k in wanted if k not in saved)
        if missing:
            raise ValueError(
                f"{checkpoint_id}: a checkpoint of the earlier format (keys '<table>#rows=LO-HI'), saved at another "
                f"placement or world size (this one needs {missing[0]}): load it with "
                "sparselift.runtime.sharded.load_checkpoint at the placement it was saved with, then save it "
                "again with dcp.save(compiled.sharded_state_dict(), ...), which loads at any world size and placement"
            )
        dcp.load(wanted, checkpoint_id=checkpoint_id)
        return
    expected = compiled.state_keys()
    _check_against(checkpoint_id, saved, expected, compiled)
    try:
        dcp.load(compiled.sharded_state_dict(), checkpoint_id=checkpoint_id, no_dist=not _distributed())
    except CheckpointException as e:  # a BaseException: raised on every rank, as an Exception
        failures = getattr(e, "failures", {}) or {}
        first = next(iter(failures.values()), e)
        raise RuntimeError(
            f"{checkpoint_id}: ranks {sorted(failures)} could not read their part of the checkpoint: "
            f"{type(first).__name__}: {first}"
        ) from None


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _check_against(checkpoint_id: str, saved, expected, compiled) -> None:
    """Raise ValueError naming the first key the checkpoint lacks or holds with another shape or
    dtype, or a table's optimizer state other than the compiled optimizer's (naming both)."""
    for info in compiled.table_facts:
        theirs = {k.removeprefix(f"{info.param}.") for k in saved if k.startswith(f"{info.param}.")}
        ours = {k.removeprefix(f"{info.param}.") for k in expected if k.startswith(f"{info.param}.")}
        if theirs != ours and info.param in saved:
            raise ValueError(
                f"{checkpoint_id}: table '{info.param}' has optimizer state {sorted(theirs) or 'none'} in the "
                f"checkpoint, but it trains with {compiled.optimizer.kind(info.name)} here "
                f"(state {sorted(ours) or 'none'}): a checkpoint of another optimizer's state does not fit"
            )
    for key, (shape, dtype) in expected.items():
        meta = saved.get(key)
        if meta is None:
            raise ValueError(
                f"{checkpoint_id}: no '{key}' in the checkpoint (the compiled model's is {shape}, {dtype})"
            )
        size = tuple(getattr(meta, "size", ()))
        got = getattr(getattr(meta, "properties", None), "dtype", None)
        if size != tuple(shape) or (got is not None and got != dtype):
            raise ValueError(
                f"{checkpoint_id}: '{key}' is {size}, {got} in the checkpoint; the compiled model's is {shape}, {dtype}"
            )


__all__ = ["legacy_keys", "load_checkpoint", "sharded_rows"]
