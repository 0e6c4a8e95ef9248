"""`dedup-ids`: send each distinct id of an unpooled table once per destination, and its row once back.

History ids repeat heavily within a batch (Zipf-skewed items: a DIN batch of 1,024 histories
holds ~30,000 ids but ~12,000 distinct items). On a group whose rows already travel one per id
(`compact-rows`), this pass removes the repeats of each destination segment before the ids
exchange, so the owner receives, gathers and returns one row per distinct id:

- forward: `sparse.unique_ids` after the route (the distinct ids per destination, their counts,
  where each routed id went); the ids exchange sends the distinct ids (its receive sizes travel
  first, since the lengths no longer give them); the rows exchange is sized by the distinct
  counts both ways (`sparse.row_splits`); `sparse.take_rows` spreads the rows back to one per
  routed id before `sparse.expand_rows`;
- backward: `sparse.sum_rows` adds the routed ids' gradient rows into one per distinct id after
  `sparse.compact_rows`, and the table's update applies them.

The update then sees one gradient per distinct id and source rank, the sum of its occurrences:
row-wise Adagrad sums a row's occurrences before its step anyway (only the order of the sum
changes), and SGD takes one step of the summed gradient where it took one per occurrence (the
same value up to float rounding). That is why it is an option, not the default.

Feasibility checks, each refusal leaving a `#sched.remark` on the rows exchange:
- `shape`: the group's jagged rows path is the one `compact-rows` emits (run before
  `aggregate-comm` and `hide-latency`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from xdsl.context import Context
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, ModuleOp, TensorType, i64
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from sparselift.ir.coll import AllToAllOp
from sparselift.ir.sched import StepOp, YieldOp
from sparselift.ir.sparse import (
    CompactRowsOp,
    ExpandRowsOp,
    GatherRowsOp,
    RouteOp,
    RowSplitsOp,
    RowsUpdateOp,
    SumRowsOp,
    TakeRowsOp,
    UniqueIdsOp,
)
from sparselift.passes.compact_rows import drop_unused_saved, save_for_backward
from sparselift.passes.remarks import Refusal, remark

PASS = "dedup-ids"


@dataclass(frozen=True)
class _Jagged:
    """One group's jagged rows path, as `compact-rows` emits it."""

    route: RouteOp
    ids_exchange: AllToAllOp
    gather: GatherRowsOp
    rows_exchange: AllToAllOp
    expand: ExpandRowsOp
    compact: CompactRowsOp
    grad_exchange: AllToAllOp


@dataclass(frozen=True)
class DedupIds(ModulePass):
    """Send each distinct id of a jagged unpooled group once per destination, its row once back."""

    name = "dedup-ids"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for step in [s for s in op.walk() if isinstance(s, StepOp)]:
            for gather in [o for o in step.forward.block.ops if isinstance(o, GatherRowsOp)]:
                found = _match(step, gather)
                if isinstance(found, Refusal):
                    anchor = next((u.operation for u in gather.rows.uses), gather)
                    remark(anchor, PASS, found.check, found.text)
                    continue
                _rewrite(step, found)


def _single_use(value: SSAValue) -> Operation | None:
    uses = list(value.uses)
    return uses[0].operation if len(uses) == 1 else None


def _forward_value(step: StepOp, value: SSAValue) -> SSAValue | None:
    """The forward value a backward block argument was saved from."""
    if not isinstance(value, BlockArgument) or value.block is not step.backward.block:
        return None
    fwd_yield = step.forward.block.last_op
    assert isinstance(fwd_yield, YieldOp)  # a verified step's forward region ends with its yield
    return fwd_yield.values[value.index]


def _match(step: StepOp, gather: GatherRowsOp) -> _Jagged | Refusal:
    refusal = Refusal("shape", "not deduplicated: the rows do not travel as compact-rows sends them")
    ids_exchange, rows_exchange = gather.indices.owner, _single_use(gather.rows)
    if not isinstance(ids_exchange, AllToAllOp) or not isinstance(rows_exchange, AllToAllOp):
        return refusal
    route = ids_exchange.inputs[0].owner
    expand = _single_use(rows_exchange.outputs[0])
    if (
        not isinstance(route, RouteOp)
        or ids_exchange.send_splits is not route.splits
        or ids_exchange.recv_splits is not None
        or not isinstance(expand, ExpandRowsOp)
        or rows_exchange.send_splits is not gather.splits
        or rows_exchange.recv_splits is None
        or not isinstance(rows_exchange.recv_splits.owner, RowSplitsOp)
    ):
        return refusal
    table = gather.table.name_str
    updates = [o for o in step.backward.block.ops if isinstance(o, RowsUpdateOp) and o.table.name_str == table]
    if len(updates) != 1 or _forward_value(step, updates[0].indices) is not ids_exchange.outputs[0]:
        return refusal
    grad_exchange = updates[0].grad.owner
    if not isinstance(grad_exchange, AllToAllOp) or _single_use(grad_exchange.outputs[0]) is not updates[0]:
        return refusal
    compact = grad_exchange.inputs[0].owner
    if not isinstance(compact, CompactRowsOp) or len(grad_exchange.inputs) != 1:
        return refusal
    return _Jagged(route, ids_exchange, gather, rows_exchange, expand, compact, grad_exchange)


def _t(shape: list[int], elt: Attribute) -> TensorType:
    return TensorType(elt, [DYNAMIC_INDEX if d < 0 else d for d in shape])


def _rewrite(step: StepOp, j: _Jagged) -> None:
    group = j.rows_exchange.attributes.get("group")
    width = j.gather.table.dim.data
    world = j.rows_exchange.group.size
    rows_type = j.gather.rows.type

    def before(anchor: Operation, op: Operation) -> Operation:
        if group is not None:
            op.attributes["group"] = group
        Rewriter.insert_op(op, InsertPoint.before(anchor))
        return op

    def row_splits(anchor: Operation, counts: SSAValue) -> SSAValue:
        op = RowSplitsOp.create(
            operands=[counts], result_types=[_t([world], i64)], properties={"dim": IntegerAttr(width, i64)}
        )
        return before(anchor, op).results[0]

    ids_type = cast(TensorType, j.route.indices.type)
    unique = before(
        j.ids_exchange,
        UniqueIdsOp.create(
            operands=[j.route.indices, j.route.splits],
            result_types=[ids_type, _t([world], i64), _t([-1], i64)],
        ),
    )
    distinct, counts, inverse = unique.results
    j.ids_exchange.operands[0] = distinct  # the ids exchange sends each distinct id once
    j.ids_exchange.operands[1] = counts
    # Rows back: as many as each source sent distinct ids (what the owner received), and as many
    # as this rank sent (its distinct counts).
    old_recv = j.rows_exchange.recv_splits
    assert old_recv is not None and isinstance(old_recv.owner, RowSplitsOp)  # _match: compact-rows' exchange
    send = row_splits(j.rows_exchange, j.ids_exchange.results[1])
    recv = row_splits(j.rows_exchange, counts)
    j.rows_exchange.operands[1] = send
    j.rows_exchange.operands[2] = recv
    take = before(
        j.expand,
        TakeRowsOp.create(
            operands=[j.rows_exchange.outputs[0], inverse],
            result_types=[rows_type],
            properties={"dim": IntegerAttr(width, i64)},
        ),
    )
    j.expand.operands[0] = take.results[0]

    saved_inverse, saved_counts, saved_send, saved_recv = save_for_backward(step, [inverse, counts, send, recv])
    summed = SumRowsOp.create(
        operands=[j.compact.rows, saved_inverse, saved_counts],
        result_types=[rows_type],
        properties={"dim": IntegerAttr(width, i64)},
    )
    before(j.grad_exchange, summed)
    j.grad_exchange.operands[0] = summed.results[0]
    j.grad_exchange.operands[1] = saved_recv  # gradients go back the way the rows came
    j.grad_exchange.operands[2] = saved_send
    drop_unused_saved(step)
    if not old_recv.uses:  # the route's row counts: the rows now follow the distinct ids' counts
        Rewriter.erase_op(old_recv.owner)


__all__ = ["DedupIds"]
