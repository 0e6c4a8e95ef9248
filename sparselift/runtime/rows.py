"""The jagged rows ops of a generated plan module (`sparselift/ir/sparse_rows.py`): an unpooled
table's rows exchanged one per id.

`plan_ops` re-exports them (a plan module calls them as `rt.<name>`). Features here are bags
of at most one id; a route's lengths list, per destination segment, the features that rank
serves (feature-major, this rank's samples), and the rows travel in that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from sparselift.kernel_args import RoutedBags, UpdateArgs
from sparselift.runtime.backends import table_args
from sparselift.runtime.sparse_optimizer import optimizer_args


def _row_geometry(layout: Sequence[Sequence[tuple[int, int]]], dim: int, batch: int) -> tuple[list[int], int]:
    """Per member: its first row in the padded `[bags, dim]` geometry of a route's lengths
    (segment after segment, each its features' bags feature-major), and in how many segments
    the members lie.

    A table on one rank has each member in one segment (the geometry is every segment's). A
    row-wise table on k ranks has every member in each of its k segments alike (each rank
    returns the rows of the ids in its row range): the starts are within one such segment, and
    each bag's row lies in the one segment where its length is 1."""
    members = len(layout[0]) if layout else 0
    placed = [[(m, off) for m, (off, size) in enumerate(seg) if size] for seg in layout]
    placed = [seg for seg in placed if seg]  # the segments that hold members
    segments = 1
    if len({m for seg in placed for m, _ in seg}) < sum(len(seg) for seg in placed):  # a member twice
        if any(seg != placed[0] for seg in placed):
            raise ValueError(
                "rows members lie in several segments, but not alike in each (a row-wise table's "
                "segments each hold every member at the same place)"
            )
        placed, segments = placed[:1], len(placed)
    starts: list[int | None] = [None] * members
    base = 0
    for seg in placed:
        for m, off in seg:
            starts[m] = base + (off // dim) * batch
        base += len(seg) * batch
    if any(s is None for s in starts):
        raise ValueError("a rows member is in no segment of the layout")
    return starts, segments  # type: ignore[return-value]  # every entry checked above


def gather_rows(
    plan: Any,
    table: str,
    lengths: torch.Tensor,
    indices: torch.Tensor,
    *,
    dim: int,
    dtype: torch.dtype,
    features_per_segment: int,
    segment_batches: Sequence[int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The received ids' rows, back to back in received order, and the elements per source.

    A rank that owns no part of the group receives no ids (and reads no table)."""
    per_source = [features_per_segment * int(b) for b in segment_batches]
    if lengths.numel() != sum(per_source):
        raise ValueError(f"gather_rows of table '{table}': {lengths.numel()} lengths, expected {sum(per_source)}")
    counts = torch.stack([seg.sum(dtype=torch.int64) for seg in lengths.split(per_source)])
    if indices.numel() == 0:
        return torch.empty(0, dtype=dtype, device=indices.device), counts * dim
    rows = plan.kernels.gather_rows(table_args(plan, table), indices)
    return rows.reshape(-1), counts * dim


def row_splits(plan: Any, counts: torch.Tensor, *, dim: int) -> torch.Tensor:
    """Per-peer id counts as elements of rows of `dim`."""
    return counts.to(torch.int64) * dim


def expand_rows(
    plan: Any, rows: torch.Tensor, lengths: torch.Tensor, layout, *, dim: int, batch: int
) -> list[torch.Tensor]:
    """One `[batch, dim]` value per member: the received row of each non-empty bag, zeros for the
    empty ones (views into one padded buffer). A row-wise table's bags lie in each of its ranks'
    segments; a bag's row is in the one where its length is 1."""
    batch = int(batch)
    starts, segments = _row_geometry(layout, dim, batch)
    if rows.numel() % dim:
        raise ValueError(f"expand_rows: {rows.numel()} elements received, not whole rows of {dim}")
    # The C backend: one pass (each bag's row or zeros), where zeroing the whole buffer and then
    # scattering the rows into it writes the ~13 MB of a DIN batch twice.
    padded = plan.kernels.expand_rows(rows.view(-1, dim), lengths, segments)
    return [padded[start : start + batch] for start in starts]


def compact_rows(
    plan: Any, lengths: torch.Tensor, members: Sequence[torch.Tensor], layout, *, dim: int, batch: int
) -> torch.Tensor:
    """The non-empty bags' rows of `members`, in the order their ids were sent (segment after
    segment: a row-wise table's members are read once per segment, for the ids sent there)."""
    batch = int(batch)
    if not members:
        raise ValueError("compact_rows: no members")
    starts, segments = _row_geometry(layout, dim, batch)
    order = sorted(range(len(members)), key=starts.__getitem__)
    blocks = [members[m].reshape(batch, dim) for m in order] * segments
    if len(blocks) * batch != lengths.numel():
        raise ValueError(f"compact_rows: {len(blocks) * batch} bags in the members, {lengths.numel()} lengths")
    return plan.kernels.compact_rows(blocks, lengths).reshape(-1)


def rows_update(plan: Any, table: str, indices: torch.Tensor, grad: torch.Tensor, *, optimizer, group) -> None:
    """The table's update from one gradient row per received id: the one-id bags of
    `lookup_update`, applied by the same kernel (or the reference)."""
    n = indices.numel()
    if n == 0:
        return
    args = table_args(plan, table)
    if grad.numel() != n * args.dim:
        raise ValueError(f"rows_update of table '{table}': {grad.numel()} gradient elements for {n} ids")
    update = UpdateArgs(optimizer_args(plan, optimizer, group), plan.grad_scale)
    plan.kernels.lookup_update(RoutedBags.one_id_each(indices), [args], [grad.view(n, -1)], update)


def unique_ids(plan: Any, indices: torch.Tensor, splits: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each destination segment's distinct ids (sorted, segment after segment), how many each
    keeps, and where each routed id went: one sort over (segment, id) keys."""
    world = splits.numel()
    if indices.numel() == 0:
        return indices, torch.zeros(world, dtype=torch.int64, device=indices.device), indices.to(torch.int64)
    # The C backend: one radix sort (`torch.unique` sorts by comparisons: 1.2 ms for DIN's 30k ids).
    return plan.kernels.unique_ids(indices, splits)


def take_rows(plan: Any, rows: torch.Tensor, inverse: torch.Tensor, *, dim: int) -> torch.Tensor:
    """One row per routed id from one per distinct id."""
    return rows.view(-1, dim).index_select(0, inverse).reshape(-1)


def sum_rows(plan: Any, rows: torch.Tensor, inverse: torch.Tensor, counts: torch.Tensor, *, dim: int) -> torch.Tensor:
    """One row per distinct id: the sum of its routed ids' rows (in routed order)."""
    return plan.kernels.sum_rows(rows.view(-1, dim), inverse, int(counts.sum())).reshape(-1)


__all__ = [
    "gather_rows",
    "row_splits",
    "expand_rows",
    "compact_rows",
    "rows_update",
    "unique_ids",
    "take_rows",
    "sum_rows",
]
