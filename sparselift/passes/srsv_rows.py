"""The SRSV's view of the jagged rows ops (`sparselift/ir/sparse_rows.py`): how many elements
per sample their row buffers carry, from the route whose ids they follow.

A gathered row buffer returns, to each rank, a row per id that rank sent (the route's ids matrix,
transposed); a compacted gradient buffer sends a row per id the other way. Both are estimates
from the export's pooling factors, like the ids exchange's. With `dedup-ids`, the distinct ids,
the rows gathered for them and the gradients summed per distinct id are the table's
`distinct` share of those (measured at export; 1, the upper bound, where it was not).

Rows merged with another exchange into one dynamic exchange (`sparse.join_segments`) carry
the sum of both sides (`joined_sides`).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import BlockArgument, SSAValue

from sparselift.ir.coll import AllToAllOp, AllToAllStartOp, WaitOp
from sparselift.ir.sched import StepOp, YieldOp
from sparselift.ir.sparse import (
    CompactRowsOp,
    GatherRowsOp,
    JoinSegmentsOp,
    RouteOp,
    StaticSizesOp,
    SumRowsOp,
    UniqueIdsOp,
)

Elems = list[list[float]]


def route_of_lengths(value: SSAValue) -> RouteOp | None:
    """The route whose lengths `value` is: itself, received through an exchange (or its wait),
    or saved from forward for backward."""
    for _ in range(3):  # at most: saved -> exchanged -> route
        if isinstance(value, BlockArgument):
            step = value.block.parent_op()
            if not isinstance(step, StepOp) or value.block is not step.backward.block:
                return None
            fwd_yield = step.forward.block.last_op
            if not isinstance(fwd_yield, YieldOp) or value.index >= len(fwd_yield.values):
                return None
            value = fwd_yield.values[value.index]
            continue
        if isinstance(value.owner, RouteOp):
            return value.owner
        sent = _sent(value)
        if sent is None:
            return None
        value = sent
    return None


def _sent(value: SSAValue) -> SSAValue | None:
    """What an exchange (or its wait) that received `value` sent; None for any other value."""
    op = value.owner
    if isinstance(op, WaitOp):
        op = op.handle.owner
    if not isinstance(op, AllToAllOp | AllToAllStartOp) or not op.inputs:
        return None
    return op.inputs[0]


def rows_elems(value: SSAValue, elems: Callable[[SSAValue], Elems | None]) -> Elems | None:
    """`m[s][p]` of a gathered, compacted or summed row buffer, or of the distinct ids (elements
    per sample rank `s` sends `p`), given the sizer's `elems` of the route's ids; None for any
    other value."""
    op = value.owner
    if isinstance(op, UniqueIdsOp) and value is op.unique:
        source = op.indices.owner
        return _scaled(elems(op.indices), distinct_share(source) if isinstance(source, RouteOp) else 1.0)
    if isinstance(op, SumRowsOp) and value is op.result:
        compact = op.rows.owner
        if not isinstance(compact, CompactRowsOp):
            return None
        summed = route_of_lengths(compact.lengths)
        return _scaled(rows_elems(op.rows, elems), distinct_share(summed) if summed is not None else 1.0)
    if not isinstance(op, GatherRowsOp | CompactRowsOp) or value is not op.rows:
        return None
    route = route_of_lengths(op.lengths)
    ids = elems(route.indices) if route is not None else None
    if ids is None:
        return None
    width = op.table.dim.data if isinstance(op, GatherRowsOp) else op.dim.value.data
    if isinstance(op, CompactRowsOp):
        return [[n * width for n in row] for row in ids]
    share = op.table.distinct.data if _deduplicated(op.indices) else 1.0
    return [[ids[p][s] * width * share for p in range(len(ids))] for s in range(len(ids))]


def distinct_share(route: RouteOp) -> float:
    """The distinct share (`TableAttr.distinct`) of the table whose rows follow `route`: that of
    the `sparse.gather_rows` sized by its lengths; 1 without one."""
    block = route.parent_block()
    for op in block.ops if block is not None else ():
        if isinstance(op, GatherRowsOp) and route_of_lengths(op.lengths) is route:
            return op.table.distinct.data
    return 1.0


def _deduplicated(ids: SSAValue) -> bool:
    """Whether `ids` are `sparse.unique_ids`' distinct ids, received through an exchange."""
    sent = _sent(ids)
    return sent is not None and isinstance(sent.owner, UniqueIdsOp) and sent is sent.owner.unique


def _scaled(m: Elems | None, share: float) -> Elems | None:
    return None if m is None else [[v * share for v in row] for row in m]


__all__ = ["distinct_share", "joined_sides", "route_of_lengths", "rows_elems"]


def joined_sides(op: JoinSegmentsOp, elems: Callable[[SSAValue], Elems | None]) -> tuple[Elems, Elems] | None:
    """`m[s][p]` of each side of a `sparse.join_segments` (rows one per id merged with another
    exchange): a static side's splits, or what its member (rank `s`'s, when there is one per
    rank) puts in each segment; None where the sizer has no estimate."""
    sides = []
    for members, send in ((op.first, op.first_send), (op.second, op.second_send)):
        if isinstance(send.owner, StaticSizesOp):
            sides.append([[float(v) for v in row] for row in send.owner.splits.matrix])
            continue
        per_member = [elems(v) for v in members]
        mats = [m for m in per_member if m is not None]
        if len(mats) < len(per_member):
            return None
        sides.append([mats[s % len(mats)][s] for s in range(len(mats[0]))])
    return sides[0], sides[1]
