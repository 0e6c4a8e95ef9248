"""Input-exchange aggregation for `aggregate-comm{roles=input}`: one exchange for all groups.

Without it each exchanged sharding group (table-wise or row-wise) routes its ids and sends
lengths, ids and weights in separate all-to-alls. Here, in a step's forward region:

1. The routes of all exchanged groups become one `sparse.route` over all their features (each
   destination's segment then holds the first group's served features, then the next's), so a
   lookup's feature slots shift by the number of features the earlier groups serve on its rank.
2. Its lengths, ids and weights travel in one all-to-all (role `input_packed`):
   `sparse.pack_ids` puts each destination's lengths, ids and bit-cast weights in one segment,
   `sparse.unpack_ids` splits what arrives. The runtime exchanges the segment sizes (one
   integer per peer) before the payload.

Feasibility checks, each refusal leaving a `#sched.remark` on the refused group's lengths
exchange that names the check:
- group: same process group as the other exchanges;
- index-dtype: same index dtype (no cast of ids);
- slot-shift: a consistent slot shift: a table served by several ranks (row-wise) must find the same
  number of earlier features on each of them (row-wise groups go first, so this holds unless
  two groups are row-wise over different ranks);
- order: the group's ids and offsets exist where the merged route goes (the first route);
- max-bytes: the packed buffer under `max-bytes` (SRSV estimate for the step's batch);
- split-sizes: only the exchanges' own results are read after them (the received split sizes
  unused).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
from xdsl.dialects.builtin import DYNAMIC_INDEX, ArrayAttr, DenseArrayBase, StringAttr, TensorType, i32, i64
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from sparselift.ir.coll import AllToAllOp, RoleAttr
from sparselift.ir.sched import StepOp, YieldOp
from sparselift.ir.sparse import (
    ExpandRowsOp,
    FusedTableOp,
    LookupGradOp,
    LookupOp,
    LookupUpdateOp,
    PackIdsOp,
    PlacementAttr,
    RouteOp,
    RowSplitsOp,
    UniqueIdsOp,
    UnpackIdsOp,
)
from sparselift.passes.remarks import Refusal, remark
from sparselift.passes.srsv import _served, elem_bytes

INPUT_ROLES = ("input_lengths", "input_indices", "input_weights")


PASS_NAME = "aggregate-comm"  # whose remarks these are: the input merging is part of aggregate-comm


@attrs.frozen
class _Exchanged:
    """One group's route and its exchanges."""

    route: RouteOp
    lengths: AllToAllOp
    indices: AllToAllOp
    weights: AllToAllOp | None

    @property
    def exchanges(self) -> tuple[AllToAllOp, ...]:
        return (self.lengths, self.indices, *([self.weights] if self.weights is not None else []))

    @property
    def served(self) -> list[int]:
        """Features this group's route sends to each rank per sample (static lengths splits)."""
        splits = self.lengths.splits
        assert splits is not None  # `_exchanged_routes` keeps only lengths exchanges with static splits
        return list(splits.matrix[0])


def _exchange_of(value: SSAValue, role: str) -> AllToAllOp | None:
    for use in value.uses:
        op = use.operation
        if isinstance(op, AllToAllOp) and list(op.role.role_list) == [role] and len(op.inputs) == 1:
            return op
    return None


def _exchanged_routes(block: Block) -> list[_Exchanged]:
    found = []
    for op in block.ops:
        if not isinstance(op, RouteOp):
            continue
        lengths = _exchange_of(op.lengths, "input_lengths")
        indices = _exchange_of(op.indices, "input_indices")
        if lengths is None or indices is None or lengths.splits is None:
            continue
        weights = _exchange_of(op.routed_weights[0], "input_weights") if op.routed_weights else None
        if op.routed_weights and weights is None:
            continue
        found.append(_Exchanged(op, lengths, indices, weights))
    return found


_TableReader = LookupOp | LookupUpdateOp | LookupGradOp | FusedTableOp


def _table_readers(value: SSAValue) -> list[_TableReader]:
    """Ops that read `value` as their lengths: lookups, updates, gradients, fused kernels."""
    return [
        u.operation
        for u in value.uses
        if isinstance(u.operation, LookupOp | LookupUpdateOp | LookupGradOp | FusedTableOp) and u.index == 0
    ]


def _owner_ranks(op: _TableReader, world: int) -> list[list[int]]:
    placements: Sequence[PlacementAttr] = op.placements.data if isinstance(op, FusedTableOp) else [op.placement]
    return [p.owner_ranks(world) for p in placements]


def merge_input_exchanges(step: StepOp, max_bytes: int, batch: int) -> None:
    block = step.forward.block
    world = step.world_size.data
    groups = _exchanged_routes(block)
    if world == 1 or not groups:
        return
    # Row-wise (uniformly served) groups first, so later groups shift by the same count everywhere.
    groups.sort(key=lambda g: (len(set(g.served)) != 1, list(block.ops).index(g.route)))
    saved_args = _saved_args(step)
    accepted: list[_Exchanged] = []
    for g in groups:
        reason = _refusal(g, accepted, world, saved_args)
        if reason is not None:
            remark(g.lengths, PASS_NAME, reason.check, reason.text)
        else:
            accepted.append(g)
    if not accepted:
        return
    estimate = _packed_bytes(accepted, world, batch)
    if estimate > max_bytes:
        remark(
            accepted[0].lengths,
            PASS_NAME,
            "max-bytes",
            f"input exchanges not merged: the packed buffer would hold {estimate} bytes, over max-bytes {max_bytes}",
        )
        return
    _rewrite(step, accepted, world, saved_args)


def _saved_args(step: StepOp) -> dict[SSAValue, list[SSAValue]]:
    """Forward value -> the backward block arguments it is saved as."""
    n_out = step.num_outputs.data
    fwd_yield = step.forward.block.last_op
    assert isinstance(fwd_yield, YieldOp)  # a verified step's forward region ends with its yield
    out: dict[SSAValue, list[SSAValue]] = {}
    for value, arg in zip(list(fwd_yield.operands)[n_out:], list(step.backward.block.args)[n_out:]):
        out.setdefault(value, []).append(arg)
    return out


def _readers(value: SSAValue, saved_args: dict[SSAValue, list[SSAValue]]) -> list[_TableReader]:
    ops = _table_readers(value)
    for arg in saved_args.get(value, []):
        ops += _table_readers(arg)
    return ops


# Ops that read a route's own lengths or split sizes (compact-rows' rows exchanges follow them).
ROUTE_READERS = (RowSplitsOp, ExpandRowsOp, UniqueIdsOp)


def _refusal(g: _Exchanged, accepted: list[_Exchanged], world: int, saved_args) -> Refusal | None:
    if g.indices.results[1].uses:
        return Refusal("split-sizes", "input exchanges not merged: the received split sizes of this group are read")
    if any(isinstance(u.operation, ROUTE_READERS) for v in (g.route.lengths, g.route.splits) for u in v.uses):
        return Refusal("split-sizes", "input exchanges not merged: compact-rows sizes its rows by this route's ids")
    if not accepted:
        return _shift_refusal(g, [0] * world, world, saved_args)
    first = accepted[0]
    if g.lengths.group != first.lengths.group:
        return Refusal("group", "input exchanges not merged: different groups")
    ta, tb = g.route.indices.type, first.route.indices.type
    if not isinstance(ta, TensorType) or not isinstance(tb, TensorType) or ta.element_type != tb.element_type:
        return Refusal("index-dtype", "input exchanges not merged: index dtypes differ")
    block = g.route.parent_block()
    assert block is not None  # every candidate route is an op of the step's forward block
    order = list(block.ops)
    anchor = min((a.route for a in accepted), key=order.index)
    for v in g.route.operands:
        if isinstance(v.owner, Operation) and v.owner in order and order.index(v.owner) > order.index(anchor):
            return Refusal(
                "order",
                f"input exchanges not merged: the ids of group '{_group(g.route)}' are computed after "
                f"the route of group '{_group(anchor)}'",
            )
    shift = [sum(a.served[r] for a in accepted) for r in range(world)]
    return _shift_refusal(g, shift, world, saved_args)


def _shift_refusal(g: _Exchanged, shift: list[int], world: int, saved_args) -> Refusal | None:
    for op in _readers(g.lengths.outputs[0], saved_args):
        for ranks in _owner_ranks(op, world):
            if len({shift[r] for r in ranks}) > 1:
                return Refusal(
                    "slot-shift",
                    f"input exchanges not merged: a table of group '{_group(g.route)}' is served by ranks "
                    f"{ranks}, which would shift its feature slots by different counts {[shift[r] for r in ranks]}",
                )
    return None


def _group(op: Operation) -> str:
    attr = op.attributes.get("group")
    return attr.data if isinstance(attr, StringAttr) else "?"


def _packed_bytes(groups: list[_Exchanged], world: int, batch: int) -> int:
    """Largest packed send buffer on one rank: lengths, ids and weights of every feature."""
    per_rank = [0.0] * world
    for g in groups:
        placements = {p.table.data: p for p in g.route.placements.data}
        for f in g.route.features.data:
            for rank, share in _served(placements[f.table.data], world):
                ids = f.pooling_factor.data * share
                per_rank[rank] += 1 + ids * (2 if g.weights is not None else 1)
    return round(sum(per_rank) * batch * elem_bytes(i64))


def _rewrite(step: StepOp, groups: list[_Exchanged], world: int, saved_args) -> None:
    block = step.forward.block
    order = list(block.ops)
    anchor = min((g.route for g in groups), key=order.index)
    routes = [g.route for g in groups]
    features = [f for r in routes for f in r.features.data]
    placements: dict[str, PlacementAttr] = {}
    for r in routes:
        for p in r.placements.data:
            placements.setdefault(p.table.data, p)
    weighted = any(r.routed_weights for r in routes)
    index_type = routes[0].indices.type
    route = RouteOp.create(
        operands=[
            *[v for r in routes for v in r.ids],
            *[v for r in routes for v in r.offsets],
            *[v for r in routes for v in r.weights],
        ],
        result_types=[
            routes[0].lengths.type,
            index_type,
            routes[0].splits.type,
            *([next(r.routed_weights[0].type for r in routes if r.routed_weights)] if weighted else []),
        ],
        properties={
            "world_size": routes[0].world_size,
            "features": ArrayAttr(features),
            "placements": ArrayAttr(list(placements.values())),
            "operandSegmentSizes": DenseArrayBase.from_list(
                i32,
                [
                    sum(len(r.ids) for r in routes),
                    sum(len(r.offsets) for r in routes),
                    sum(len(r.weights) for r in routes),
                ],
            ),
        },
        attributes={"group": StringAttr("+".join(_group(r) for r in routes))},
    )
    served = [sum(g.served[r] for g in groups) for r in range(world)]
    served_attr = DenseArrayBase.from_list(i64, served)
    pack = PackIdsOp.create(
        operands=[route.lengths, route.indices, *route.routed_weights],
        result_types=[TensorType(i64, [DYNAMIC_INDEX]), TensorType(i64, [world])],
        properties={"features": served_attr},
    )
    exchange = AllToAllOp.create(
        operands=[pack.buffer, pack.sizes],
        result_types=[TensorType(i64, [DYNAMIC_INDEX]), TensorType(i64, [world])],
        properties={
            "group": groups[0].lengths.group,
            "role": RoleAttr("input_packed"),
            "operandSegmentSizes": DenseArrayBase.from_list(i32, [1, 1, 0]),
        },
        attributes={"group": route.attributes["group"]},
    )
    unpack = UnpackIdsOp.create(
        operands=[exchange.results[0], exchange.results[1]],
        result_types=[
            groups[0].lengths.outputs[0].type,
            groups[0].indices.outputs[0].type,
            *([route.routed_weights[0].type] if weighted else []),
        ],
        properties={"features": served_attr},
    )
    for new_op in (route, pack, exchange, unpack):
        Rewriter.insert_op(new_op, InsertPoint.before(anchor))
    shift = [0] * world
    for g in groups:
        # Feature slots move past the earlier groups' features on the table's ranks.
        for op in _readers(g.lengths.outputs[0], saved_args):
            ranks = _owner_ranks(op, world)[0]
            _shift_slots(op, shift[ranks[0]])
        g.lengths.outputs[0].replace_all_uses_with(unpack.lengths)
        g.indices.outputs[0].replace_all_uses_with(unpack.indices)
        if g.weights is not None:
            assert unpack.weights is not None  # a weighted group makes the merged exchange weighted
            g.weights.outputs[0].replace_all_uses_with(unpack.weights)
        for rank in range(world):
            shift[rank] += g.served[rank]
    for g in groups:
        for exchanged in reversed(g.exchanges):
            Rewriter.erase_op(exchanged)
        Rewriter.erase_op(g.route)
    _dedupe_saved(step)


def _shift_slots(op: _TableReader, by: int) -> None:
    if not by:
        return
    if isinstance(op, FusedTableOp):
        op.slots = ArrayAttr([DenseArrayBase.from_list(i64, [s + by for s in sl]) for sl in op.slot_lists])
    else:
        op.properties["slots"] = DenseArrayBase.from_list(i64, [s + by for s in op.slots.get_values()])


def _dedupe_saved(step: StepOp) -> None:
    """One saved value per forward value: later duplicates' backward arguments are folded."""
    n_out = step.num_outputs.data
    fwd_yield = step.forward.block.last_op
    assert isinstance(fwd_yield, YieldOp)  # a verified step's forward region ends with its yield
    bwd = step.backward.block
    values = list(fwd_yield.operands)
    seen: dict[SSAValue, SSAValue] = {}
    keep = []
    for i, (value, arg) in enumerate(zip(values, bwd.args)):
        if i >= n_out and value in seen:
            arg.replace_all_uses_with(seen[value])
            continue
        if i >= n_out:
            seen[value] = arg
        keep.append(i)
    if len(keep) == len(values):
        return
    for i in reversed(range(len(values))):
        if i not in keep:
            bwd.erase_arg(bwd.args[i])
    new_yield = fwd_yield.__class__.create(operands=[values[i] for i in keep])
    Rewriter.replace_op(fwd_yield, new_yield)
