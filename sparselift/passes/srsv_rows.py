"""The SRSV's view of the jagged rows ops (`sparselift/ir/sparse_rows.py`): how many elements
per sample their row buffers carry, from the route whose ids they follow.

A gathered row buffer returns, to each rank, a row per id that rank sent (the route's ids matrix,
transposed); a compacted gradient buffer sends a row per id the other way. Both are estimates
from the export's pooling factors, like the ids exchange's; with `dedup-ids` they are upper
bounds (how often ids repeat is not known before run time).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import BlockArgument, SSAValue

from sparselift.ir.coll import AllToAllOp, AllToAllStartOp, WaitOp
from sparselift.ir.sched import StepOp, YieldOp
from sparselift.ir.sparse import CompactRowsOp, GatherRowsOp, RouteOp, UniqueIdsOp

Elems = list[list[float]]


def route_of_lengths(value: SSAValue) -> RouteOp | None:
    """The route whose lengths `value` is: itself, received through an exchange (or its wait),
    or saved from forward for backward."""
    for _ in range(4):  # at most: saved -> wait -> start -> route
        if isinstance(value, BlockArgument):
            step = value.block.parent_op()
            if not isinstance(step, StepOp) or value.block is not step.backward.block:
                return None
            fwd_yield = step.forward.block.last_op
            if not isinstance(fwd_yield, YieldOp) or value.index >= len(fwd_yield.values):
                return None
            value = fwd_yield.values[value.index]
            continue
        op = value.owner
        if isinstance(op, RouteOp):
            return op
        if isinstance(op, WaitOp):
            op = op.handle.owner
        if not isinstance(op, AllToAllOp | AllToAllStartOp) or not op.inputs:
            return None
        value = op.inputs[0]
    return None


def rows_elems(value: SSAValue, elems: Callable[[SSAValue], Elems | None]) -> Elems | None:
    """`m[s][p]` of a gathered or compacted row buffer (elements per sample rank `s` sends `p`),
    given the sizer's `elems` of the route's ids; None for any other value."""
    op = value.owner
    if isinstance(op, UniqueIdsOp) and value is op.unique:
        return elems(op.indices)  # at most the routed ids (the repeats are data, not shape)
    if not isinstance(op, GatherRowsOp | CompactRowsOp) or value is not op.rows:
        return None
    route = route_of_lengths(op.lengths)
    ids = elems(route.indices) if route is not None else None
    if ids is None:
        return None
    width = op.table.dim.data if isinstance(op, GatherRowsOp) else op.dim.value.data
    if isinstance(op, CompactRowsOp):
        return [[n * width for n in row] for row in ids]
    return [[ids[p][s] * width for p in range(len(ids))] for s in range(len(ids))]


__all__ = ["route_of_lengths", "rows_elems"]
