"""`compact-rows{min-empty-share=...}`: exchange an unpooled table's rows one per id, not one per
id position.

After `lift-sparse`, an unpooled group's rows travel padded: its owner looks up a row for every
bag of every id position (`sparse.lookup`: a zero row for an empty bag, i.e. a padded or
dropped position), and the `output_rows` / `grad_rows` exchanges carry all of them. A DIN history
padded to 50 positions with 30 items on average sends 1.65x the bytes it needs, each way.

This pass rewrites such a group into the jagged form (`sparselift/ir/sparse_rows.py`):

- forward: the owner's lookup and pack become `sparse.gather_rows` (the received ids' rows, in
  received order); the `output_rows` all-to-all becomes dynamic, sized by the ids each rank
  routed (`sparse.row_splits` of the route's `splits`); `sparse.expand_rows` puts the rows in
  place of the padded unpack's members, zeros for empty bags;
- backward: `sparse.compact_rows` takes the non-empty bags' gradients, the `grad_rows`
  all-to-all sends them back sized the same way, and `sparse.rows_update` applies them per id
  (per occurrence, in the order `sparse.lookup_update` applies one-id bags: the same result).

A row-wise table is rewritten the same way. Its padded path has every rank look up every bag of
every sample (zeros for the ids outside its row range) and sum the partial rows in a
`coll.reduce_scatter`: the world size times the rows, mostly zeros. Compacted, each id's row
comes back from the one rank whose range holds it; `sparse.expand_rows` takes each bag's row from
that rank's segment, and `sparse.compact_rows` sends each rank the gradients of the ids it
served (the members read once per segment).

Feasibility checks, each refusal leaving a `#sched.remark` on the exchange that names the check:
- `placement`: the group's table is table-wise, or row-wise (a replicated one exchanges
  nothing);
- `tables`: the group holds one table;
- `shape`: the exchanges are the ones `lift-sparse` emits (static splits, made by packs of the
  table's lookup, read by one unpack; the lookup reads the route's exchanged lengths and ids;
  backward, one update of the table from one unpack; a row-wise table's gradients go to every
  rank of the route, laid out as its forward rows): run it before `aggregate-comm`;
- `empty-share`: the padded rows are empty often enough to pay, by the export's measured
  pooling factors: at least `min-empty-share` of them (a one-hot target position is never empty;
  compacting it only adds the scatter). A row-wise table over k ranks pads each bag in every
  rank's segment, so at least (k - 1) / k of its padded rows are empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from xdsl.context import Context
from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseArrayBase, IntegerAttr, ModuleOp, TensorType, i32, i64
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from sparselift.ir.coll import AllToAllOp, ReduceScatterOp, RoleAttr
from sparselift.ir.sched import StepOp, YieldOp
from sparselift.ir.sparse import (
    CompactRowsOp,
    ExpandRowsOp,
    GatherRowsOp,
    LayoutAttr,
    LookupOp,
    LookupUpdateOp,
    PackOp,
    PlacementKind,
    RouteOp,
    RowSplitsOp,
    RowsUpdateOp,
    UnpackOp,
)
from sparselift.passes.remarks import Refusal, remark

PASS = "compact-rows"


@dataclass(frozen=True)
class _Padded:
    """One unpooled group's padded rows path, as `lift-sparse` emitted it."""

    exchange: AllToAllOp | ReduceScatterOp  # output_rows: one owner, or a row-wise table's partial rows summed
    packs: tuple[PackOp, ...]
    lookup: LookupOp
    unpack: UnpackOp
    route: RouteOp
    grad_pack: PackOp
    grad_exchange: AllToAllOp  # grad_rows
    grad_unpack: UnpackOp
    update: LookupUpdateOp

    @property
    def segments(self) -> int:
        """In how many route segments each feature's bags lie: a row-wise table's ranks each
        serve every feature; a table on one rank, its owner."""
        return self.exchange.group.size if isinstance(self.exchange, ReduceScatterOp) else 1


@dataclass(frozen=True)
class CompactRows(ModulePass):
    """Exchange unpooled tables' rows one per id (sized at run time), not one per id position."""

    name = "compact-rows"

    min_empty_share: float = 0.1

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not 0.0 <= self.min_empty_share <= 1.0:
            raise PassFailedException(f"compact-rows: min-empty-share is a share of bags, got {self.min_empty_share:g}")
        for step in [s for s in op.walk() if isinstance(s, StepOp)]:
            if step.world_size.data < 2:
                continue  # no exchange to compact
            for exchange in [o for o in step.forward.block.ops if _rows_exchange(o)]:
                assert isinstance(exchange, AllToAllOp | ReduceScatterOp)  # _rows_exchange checked
                found = _match(step, exchange)
                if isinstance(found, Refusal):
                    remark(exchange, PASS, found.check, found.text)
                    continue
                refusal = self._empty_share_refusal(found)
                if refusal is not None:
                    remark(exchange, PASS, refusal.check, refusal.text)
                    continue
                _rewrite(step, found)

    def _empty_share_refusal(self, padded: _Padded) -> Refusal | None:
        route = padded.route
        table = padded.lookup.table.name_str
        factors = [f.pooling_factor.data for f in route.features.data if f.table.data == table]
        empty = 1.0 - sum(min(pf, 1.0) for pf in factors) / max(len(factors), 1) / padded.segments
        if empty < self.min_empty_share:
            return Refusal(
                "empty-share",
                f"not compacted: {empty:.0%} of the padded rows of table '{table}' are empty, under "
                f"min-empty-share {self.min_empty_share:g}",
            )
        return None


def _rows_exchange(op: Operation) -> bool:
    if isinstance(op, ReduceScatterOp):
        return op.role.role_list == ["output_rows"]
    return isinstance(op, AllToAllOp) and op.role.role_list == ["output_rows"] and op.splits is not None


def _only_use(value: SSAValue) -> Operation | None:
    uses = list(value.uses)
    return uses[0].operation if len(uses) == 1 else None


def _match(step: StepOp, exchange: AllToAllOp | ReduceScatterOp) -> _Padded | Refusal:
    """The group's padded path around its `output_rows` exchange, or why it is not the one
    `lift-sparse` emits for a one-table group, table-wise or row-wise."""
    sent = [exchange.input] if isinstance(exchange, ReduceScatterOp) else list(exchange.inputs)
    packs = [v.owner for v in sent if isinstance(v.owner, PackOp)]
    if len(packs) != len(sent):
        return Refusal("shape", "not compacted: the rows are not sent by sparse.pack (run before aggregate-comm)")
    lookups = {m.owner for p in packs for m in p.operands}
    if len(lookups) != 1:
        return Refusal("tables", f"not compacted: {len(lookups)} lookups fill the rows exchange; it takes one table")
    lookup = lookups.pop()
    if not isinstance(lookup, LookupOp) or any(u.operation not in packs for u in lookup.pooled.uses):
        return Refusal("shape", "not compacted: the rows are not a sparse.lookup's, read by the packs alone")
    kind = lookup.placement.kind.data
    row_wise = isinstance(exchange, ReduceScatterOp)
    if kind != (PlacementKind.ROW_WISE if row_wise else PlacementKind.TABLE_WISE):
        return Refusal(
            "placement",
            f"not compacted: table '{lookup.table.name_str}' is {kind}, its rows sent by {exchange.name}",
        )
    unpack = _only_use(exchange.result if isinstance(exchange, ReduceScatterOp) else exchange.outputs[0])
    lengths_x, indices_x = lookup.lengths.owner, lookup.indices.owner
    if (
        not isinstance(unpack, UnpackOp)
        or unpack.rank is not None
        or not isinstance(lengths_x, AllToAllOp)
        or not isinstance(indices_x, AllToAllOp)
        or lengths_x.role.role_list != ["input_lengths"]
        or indices_x.role.role_list != ["input_indices"]
        or not isinstance(route := lengths_x.inputs[0].owner, RouteOp)
        or indices_x.send_splits is not route.splits
    ):
        return Refusal("shape", "not compacted: the ids or the rows do not travel as lift-sparse sends them")
    backward = _match_backward(step, lookup)
    if isinstance(backward, Refusal):
        return backward
    if row_wise and not _every_rank_serves_alike(exchange.group.size, route, unpack, backward[0]):
        return Refusal(
            "shape",
            f"not compacted: row-wise table '{lookup.table.name_str}' is not served alike by every rank of the route",
        )
    return _Padded(exchange, tuple(packs), lookup, unpack, route, *backward)


def _every_rank_serves_alike(ranks: int, route: RouteOp, unpack: UnpackOp, grad_pack: PackOp) -> bool:
    """A row-wise table's gradients go to every rank of the route, each segment placing the
    features where the forward rows' unpack does (what `expand_rows` then reads per segment)."""
    segments = grad_pack.layout.segments
    return (
        ranks == route.world_size.value.data == len(segments)
        and unpack.layout.num_segments == 1
        and all(seg == unpack.layout.segments[0] for seg in segments)
    )


def _match_backward(step: StepOp, lookup: LookupOp) -> tuple[PackOp, AllToAllOp, UnpackOp, LookupUpdateOp] | Refusal:
    table = lookup.table.name_str
    updates = [o for o in step.backward.block.ops if isinstance(o, LookupUpdateOp) and o.table.name_str == table]
    refusal = Refusal("shape", f"not compacted: the update of table '{table}' does not read a grad_rows exchange")
    if len(updates) != 1 or updates[0].indices is None:
        return refusal
    update = updates[0]
    grad_unpack = update.grad.owner
    if not isinstance(grad_unpack, UnpackOp) or _only_use(update.grad) is not update:
        return refusal
    grad_exchange = grad_unpack.buffer.owner
    if not isinstance(grad_exchange, AllToAllOp) or grad_exchange.role.role_list != ["grad_rows"]:
        return refusal
    grad_pack = grad_exchange.inputs[0].owner
    if len(grad_exchange.inputs) != 1 or not isinstance(grad_pack, PackOp) or grad_exchange.splits is None:
        return refusal
    return grad_pack, grad_exchange, grad_unpack, update


def _t(shape: list[int], elt: Attribute) -> TensorType:
    return TensorType(elt, [DYNAMIC_INDEX if d < 0 else d for d in shape])


def _labelled(op: Operation, group: Attribute | None) -> Operation:
    if group is not None:
        op.attributes["group"] = group
    return op


def _dynamic_exchange(
    like: AllToAllOp | ReduceScatterOp, inputs: list[SSAValue], send: SSAValue, recv: SSAValue
) -> AllToAllOp:
    """An all-to-all in `like`'s group and role, with run-time splits (no size exchange: both
    sides know them)."""
    result = like.result if isinstance(like, ReduceScatterOp) else like.outputs[0]
    elt = cast(TensorType, result.type).element_type  # verified: a tensor
    world = like.group.size
    op = AllToAllOp.create(
        operands=[*inputs, send, recv],
        result_types=[_t([-1], elt), _t([world], i64)],
        properties={
            "group": like.group,
            "role": RoleAttr(like.role.role_list[0]),
            "operandSegmentSizes": DenseArrayBase.from_list(i32, [len(inputs), 1, 1]),
        },
    )
    return _labelled(op, like.attributes.get("group"))  # type: ignore[return-value]


def save_for_backward(step: StepOp, values: list[SSAValue]) -> list[BlockArgument]:
    """Thread forward values to backward as saved values; their backward block arguments."""
    fwd_yield = step.forward.block.last_op
    assert isinstance(fwd_yield, YieldOp)  # a verified step's forward region ends with its yield
    bwd = step.backward.block
    args = [bwd.insert_arg(v.type, len(bwd.args)) for v in values]
    Rewriter.replace_op(fwd_yield, YieldOp(*fwd_yield.values, *values))
    return args


def _rewrite(step: StepOp, p: _Padded) -> None:
    group = p.exchange.attributes.get("group")
    table, lookup = p.lookup.table, p.lookup
    width = table.dim.data
    elt = table.dtype
    world = p.exchange.group.size

    def before(anchor: Operation, op: Operation) -> Operation:
        Rewriter.insert_op(_labelled(op, group), InsertPoint.before(anchor))
        return op

    gather = before(
        lookup,
        GatherRowsOp.create(
            operands=[lookup.lengths, lookup.indices],
            result_types=[_t([-1], elt), _t([world], i64)],
            properties={"table": table, "placement": lookup.placement, "slots": lookup.slots},
        ),
    )
    received = before(
        p.exchange,
        RowSplitsOp.create(
            operands=[p.route.splits], result_types=[_t([world], i64)], properties={"dim": IntegerAttr(width, i64)}
        ),
    )
    exchange = before(
        p.exchange, _dynamic_exchange(p.exchange, [gather.results[0]], gather.results[1], received.results[0])
    )
    # A row-wise table's bags lie in every rank's segment (each id's row in its owner's).
    layout = p.unpack.layout if p.segments == 1 else LayoutAttr([p.unpack.layout.segments[0]] * p.segments)
    expand = before(
        p.unpack,
        ExpandRowsOp.create(
            operands=[exchange.results[0], p.route.lengths],
            result_types=[m.type for m in p.unpack.members],
            properties={"layout": layout, "dim": IntegerAttr(width, i64)},
        ),
    )
    for old, new in zip(p.unpack.members, expand.results):
        old.replace_all_uses_with(new)
    forward_ops: tuple[Operation, ...] = (p.unpack, p.exchange, *p.packs, lookup)
    for op in forward_ops:
        Rewriter.erase_op(op)

    indices = p.update.indices
    assert indices is not None  # _match_backward took an update that reads ids
    route_lengths, send_splits, recv_splits = save_for_backward(
        step, [p.route.lengths, gather.results[1], received.results[0]]
    )
    compact = before(
        p.grad_exchange,
        CompactRowsOp.create(
            operands=[route_lengths, *p.grad_pack.members],
            result_types=[_t([-1], elt)],
            properties={"layout": p.grad_pack.layout, "dim": IntegerAttr(width, i64)},
        ),
    )
    grad_exchange = before(
        p.grad_exchange, _dynamic_exchange(p.grad_exchange, [compact.results[0]], recv_splits, send_splits)
    )
    before(
        p.update,
        RowsUpdateOp.create(
            operands=[indices, grad_exchange.results[0]],
            properties={
                "table": table,
                "placement": p.update.placement,
                "slots": p.update.slots,
                "optimizer": p.update.optimizer,
            },
        ),
    )
    backward_ops: tuple[Operation, ...] = (p.update, p.grad_unpack, p.grad_exchange, p.grad_pack)
    for op in backward_ops:
        Rewriter.erase_op(op)
    drop_unused_saved(step)


def drop_unused_saved(step: StepOp) -> None:
    """Saved values no backward op reads any more (the padded update's lengths)."""
    fwd_yield = step.forward.block.last_op
    assert isinstance(fwd_yield, YieldOp)
    bwd: Block = step.backward.block
    n_out = step.num_outputs.data
    values = list(fwd_yield.values)
    keep = [i for i, arg in enumerate(bwd.args) if i < n_out or arg.uses]
    if len(keep) == len(values):
        return
    for i in reversed(range(len(values))):
        if i not in keep:
            bwd.erase_arg(bwd.args[i])
    Rewriter.replace_op(fwd_yield, YieldOp(*(values[i] for i in keep)))


__all__ = ["CompactRows", "save_for_backward", "drop_unused_saved"]
