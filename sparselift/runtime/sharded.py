"""Table shards as tensors `torch.distributed.checkpoint` can re-split.

A row-wise or table-wise table (and each per-row optimizer state of it) is saved as a
`ShardedTensor` under the parameter's own name: each rank's live shard, with the global row
offset of every shard, as TorchRec saves its sharded tables. DCP then loads it into any other
layout (another world size, another placement) by rows, and into a plain, whole tensor in one
process: `dcp.load(model.state_dict(), checkpoint_id=..., no_dist=True)` fills an uncompiled
model. Replicated tables, and everything at world size 1, are plain tensors.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor, ShardMetadata
from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata, TensorProperties


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


__all__ = ["sharded_rows"]
