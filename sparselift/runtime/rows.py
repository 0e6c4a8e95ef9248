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

from sparselift.runtime import reference as ref
from sparselift.runtime.sparse_optimizer import optimizer_args
from sparselift.strided_rows import block_runs, take_run_rows


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


def _one_id_bags(lengths: torch.Tensor, what: str) -> torch.Tensor:
    """The mask of non-empty bags; a bag of more ids than one is not an unpooled lookup's."""
    if lengths.numel() and int(lengths.max()) > 1:
        raise ValueError(f"{what}: a bag holds {int(lengths.max())} ids; unpooled rows travel one per id")
    return lengths.bool()


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
    weights = plan.tables[table]
    kernels = getattr(plan, "kernels", None)
    if kernels is not None and hasattr(kernels, "lookup") and weights.device.type == "cpu":
        # The generated lookup over one-id bags: the same rows, read with software prefetch
        # (the ids are random rows of a big table: `index_select` waits on every miss).
        n = indices.numel()
        rows = kernels.lookup(weights, torch.ones(n, dtype=torch.int32), indices, None, (0,), 1, n, "sum")
    else:
        rows = torch.index_select(weights, 0, indices)
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
    kernels = getattr(plan, "kernels", None)
    if kernels is not None and hasattr(kernels, "expand_rows") and rows.device.type == "cpu":
        # One pass (each bag's row or zeros), where zeroing the whole buffer and then scattering
        # the rows into it writes the ~13 MB of a DIN batch twice.
        padded = kernels.expand_rows(rows.view(-1, dim), lengths, segments)
    else:
        filled = _one_id_bags(lengths, "expand_rows").nonzero().squeeze(1)
        if rows.numel() != filled.numel() * dim:
            raise ValueError(f"expand_rows: {rows.numel() // dim} rows received for {filled.numel()} ids sent")
        bags = lengths.numel() // segments
        if segments > 1 and int(lengths.view(segments, bags).sum(0).max()) > 1:
            raise ValueError("expand_rows: a bag has an id in several segments; each id has one owner")
        padded = rows.new_zeros(bags, dim).index_copy_(0, filled % bags, rows.view(-1, dim))
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
    kernels = getattr(plan, "kernels", None)
    on_cpu = lengths.device.type == blocks[0].device.type == "cpu"
    if kernels is not None and hasattr(kernels, "compact_rows") and on_cpu:
        # One C pass over the filled rows, straight from each member's storage.
        return kernels.compact_rows(blocks, lengths).reshape(-1)
    filled = _one_id_bags(lengths, "compact_rows").nonzero().squeeze(1)
    # The members are mostly slices of one gradient (the stacked positions' `unbind`): read the
    # filled rows straight from each run of them, no copy of the padded geometry first.
    out = blocks[0].new_empty(filled.numel(), dim)
    runs = block_runs(blocks)
    firsts = torch.tensor([first * batch for first, _ in runs] + [lengths.numel()], device=filled.device)
    bounds = torch.searchsorted(filled, firsts).tolist()
    for (first, run), lo, hi in zip(runs, bounds, bounds[1:]):
        if hi > lo:
            take_run_rows(run, filled[lo:hi] - first * batch, out[lo:hi])
    return out.reshape(-1)


def rows_update(plan: Any, table: str, indices: torch.Tensor, grad: torch.Tensor, *, optimizer, group) -> None:
    """The table's update from one gradient row per received id: the one-id bags of
    `lookup_update`, applied by the same kernel (or the reference)."""
    n = indices.numel()
    if n == 0:
        return
    weights = plan.tables[table]
    if grad.numel() != n * weights.shape[1]:
        raise ValueError(f"rows_update of table '{table}': {grad.numel()} gradient elements for {n} ids")
    kernels = plan.kernels if plan.kernels is not None and hasattr(plan.kernels, "lookup_update") else ref
    kernels.lookup_update(
        weights,
        plan.states.get(table),
        torch.ones(n, dtype=torch.int32, device=indices.device),
        indices,
        None,
        grad.view(n, -1),
        (0,),
        1,
        n,
        "sum",
        optimizer_args(plan, optimizer, group),
        plan.grad_scale,
    )


def unique_ids(plan: Any, indices: torch.Tensor, splits: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each destination segment's distinct ids (sorted, segment after segment), how many each
    keeps, and where each routed id went: one sort over (segment, id) keys."""
    world = splits.numel()
    if indices.numel() == 0:
        return indices, torch.zeros(world, dtype=torch.int64, device=indices.device), indices.to(torch.int64)
    kernels = getattr(plan, "kernels", None)
    if kernels is not None and hasattr(kernels, "unique_ids") and indices.device.type == "cpu":
        # One radix sort in C: `torch.unique` sorts by comparisons (1.2 ms for DIN's 30k ids).
        try:
            return kernels.unique_ids(indices, splits.tolist())
        except OverflowError:  # (segment, id) keys over 32 bits: the comparison sort below
            pass
    ids = indices.to(torch.int64)
    span = int(ids.max()) + 1
    segment = torch.repeat_interleave(torch.arange(world, device=ids.device), splits.to(torch.int64))
    keys, inverse = torch.unique(segment * span + ids, return_inverse=True)
    counts = torch.bincount(keys // span, minlength=world)
    return (keys % span).to(indices.dtype), counts, inverse


def take_rows(plan: Any, rows: torch.Tensor, inverse: torch.Tensor, *, dim: int) -> torch.Tensor:
    """One row per routed id from one per distinct id."""
    return rows.view(-1, dim).index_select(0, inverse).reshape(-1)


def sum_rows(plan: Any, rows: torch.Tensor, inverse: torch.Tensor, counts: torch.Tensor, *, dim: int) -> torch.Tensor:
    """One row per distinct id: the sum of its routed ids' rows (in routed order)."""
    kernels: Any = getattr(plan, "kernels", None)
    c_sum = kernels is not None and hasattr(kernels, "sum_rows") and rows.device.type == "cpu"
    if c_sum and rows.dtype == torch.float32:  # one C pass, no zeroing first
        return kernels.sum_rows(rows.view(-1, dim), inverse, int(counts.sum())).reshape(-1)
    out = rows.new_zeros(int(counts.sum()), dim)
    return out.index_add_(0, inverse, rows.view(-1, dim)).reshape(-1)


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
