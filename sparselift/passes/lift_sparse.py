"""`lift-sparse`: rewrite every opaque `sparse.embedding_bag_collection` into its sparse path.

Per sharding group (world size W > 1):

- table_wise: `sparse.route` buckets ids by owner rank; per-role `coll.all_to_all` moves lengths,
  indices and weights; each owner runs one `sparse.lookup` per table; `sparse.pack` (one per owner
  rank, `on_rank`) and a per-rank `coll.all_to_all` return pooled vectors; `sparse.unpack` and
  `sparse.permute` restore the features in model order. Backward: the pooled gradients go the
  reverse way and each owner runs one `sparse.lookup_update` per table.
- row_wise (every table spans all ranks): ids are bucketized by row range; every rank pools its
  shard and `coll.reduce_scatter` sums the partial pools onto the sample's rank. Backward: every
  shard owner receives all pooled gradients of every rank.
- data_parallel: local lookups; backward computes each table's dense gradient
  (`sparse.lookup_grad`), all-reduces the group's gradients in one `coll.all_reduce` and applies
  them (`sparse.lookup_update` in its dense-gradient form).

Unpooled tables' rows travel padded (a row per id position) or, with `rows=jagged`, one per id
where `compact-rows` applies (what the compiler lowers by default: `CompileOptions.rows`).

The replicated tables' gradients get an all-reduce of their own (`replicated-grads=own`) or,
with `replicated-grads=with-dense`, ride in the dense gradients' all-reduce at the end of backward
(`with_dense_grads`, as `aggregate-comm{roles=dense_grad}` marks them; what the compiler lowers by
default: `CompileOptions.replicated_grads`).

Routed ids are i32 where the model's ids are, or, with `narrow-ids=true`, wherever every table of
the group has fewer than 2^31 rows (each id is checked against its table's rows before it is
narrowed, so none is cut; half the bytes of i64 ids in the ids exchange and the kernels' index
reads; what the compiler lowers by default: `CompileOptions.narrow_ids`).

World size 1 emits no collective at all. Afterwards no opaque op is left and every table is
looked up once and updated once per step; the pass checks both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from xdsl.context import Context
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    DenseArrayBase,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    f32,
    i32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriteWalker
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from sparselift.ir.coll import AllReduceOp, AllToAllOp, GroupAttr, ReduceScatterOp, RoleAttr, SplitsAttr
from sparselift.ir.sched import DenseOp, StepOp, YieldOp
from sparselift.ir.sparse import (
    EmbeddingBagCollectionOp,
    FeatureAttr,
    FoldUnpackOfPack,
    LayoutAttr,
    LookupGradOp,
    LookupOp,
    LookupUpdateOp,
    OptimizerAttr,
    OptimizerKind,
    PackOp,
    PermuteOp,
    PlacementAttr,
    RouteOp,
    TableAttr,
    UnpackOp,
)
from sparselift.passes.aggregate_comm import ride_with_dense_grads
from sparselift.passes.compact_rows import CompactRows

_OpT = TypeVar("_OpT", bound=Operation)

REPLICATED_GRADS = ("own", "with-dense")
"""`LiftSparse.replicated_grads`'s values."""


def _t(shape: Sequence[int], elt: Attribute) -> TensorType:
    return TensorType(elt, [DYNAMIC_INDEX if d < 0 else d for d in shape])


def _segments(*sizes: int) -> DenseArrayBase:
    return DenseArrayBase.from_list(i32, list(sizes))


def _slots(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


class _GroupLifter:
    """Lifts one opaque EBC op of a step."""

    def __init__(
        self, step: StepOp, ebc: EmbeddingBagCollectionOp, optimizers: Mapping[str, OptimizerAttr], narrow_ids: bool
    ):
        self.step = step
        self.ebc = ebc
        self.optimizers = optimizers  # table name -> its update's optimizer
        self.world = step.world_size.data
        self.features: list[FeatureAttr] = list(ebc.features.data)
        self.tables: dict[str, TableAttr] = ebc.table_map()
        self.placements: dict[str, PlacementAttr] = {p.table.data: p for p in ebc.placements.data}
        self.table_order = [t.name_str for t in ebc.tables.data]
        self.group_name = ebc.attributes.get("group", StringAttr(ebc.module.data))
        kinds = {p.kind.data for p in self.placements.values()}
        if len(kinds) != 1:
            raise PassFailedException(
                f"lift-sparse: module '{ebc.module.data}' mixes placement kinds {sorted(kinds)} in one group"
            )
        self.kind = kinds.pop()
        dtypes = {t.dtype for t in self.tables.values()}
        if len(dtypes) != 1:
            raise PassFailedException(f"lift-sparse: module '{ebc.module.data}' mixes table dtypes in one group")
        self.dtype = dtypes.pop()
        # An unpooled group's exchanges carry rows (one per id position), with roles of their own
        # (the collection's verifier keeps pooled and unpooled tables in separate groups).
        unpooled = any(t.is_unpooled for t in self.tables.values())
        self.output_role, self.grad_role = (
            ("output_rows", "grad_rows") if unpooled else ("output_pooled", "grad_pooled")
        )
        self.weighted = any(f.is_weighted for f in self.features)
        id_types = {cast(TensorType, v.type).element_type for v in ebc.ids}  # verified: tensors
        fits = all(t.rows.data < 2**31 for t in self.tables.values())
        self.index_type = i32 if fits and (narrow_ids or id_types == {i32}) else i64
        self.group = GroupAttr(list(range(self.world)))
        self.fwd_point = InsertPoint.before(ebc)
        self._bwd_cursor: InsertPoint | None = None

    # -- helpers ---------------------------------------------------------------------------
    def _insert(self, op: _OpT, point: InsertPoint) -> _OpT:
        op.attributes["group"] = self.group_name
        Rewriter.insert_op(op, point)
        if self._bwd_cursor is point:  # backward ops go one after another
            self._bwd_cursor = InsertPoint.after(op)
        return op

    def _next(self) -> InsertPoint:
        """Insertion point after the last op inserted in backward."""
        assert self._bwd_cursor is not None  # set when `_lift_backward` starts
        return self._bwd_cursor

    def _table_features(self, table: str) -> list[int]:
        return [i for i, f in enumerate(self.features) if f.table.data == table]

    def _width(self, table: str) -> int:
        return self.tables[table].dim.data * len(self._table_features(table))

    def _a2a(self, point, inputs, role, splits=None, send_splits=None) -> AllToAllOp:
        elt = inputs[0].type.element_type
        results = [_t([-1], elt)] + ([_t([self.world], i64)] if send_splits is not None else [])
        props = {"group": self.group, "role": RoleAttr(role)}
        if splits is not None:
            props["splits"] = SplitsAttr(splits)
        op = AllToAllOp.create(
            operands=[*inputs, *([send_splits] if send_splits is not None else [])],
            result_types=results,
            properties=props | {"operandSegmentSizes": _segments(len(inputs), int(send_splits is not None), 0)},
        )
        return self._insert(op, point)

    def _pack(self, point, members, layout_segments, rank=None) -> PackOp:
        props: dict[str, Attribute] = {"layout": LayoutAttr(layout_segments)}
        if rank is not None:
            props["rank"] = IntegerAttr(rank, i64)
        return self._insert(
            PackOp.create(operands=list(members), result_types=[_t([-1], self.dtype)], properties=props), point
        )

    def _unpack(self, point, buffer, types, layout_segments, rank=None) -> UnpackOp:
        props: dict[str, Attribute] = {"layout": LayoutAttr(layout_segments)}
        if rank is not None:
            props["rank"] = IntegerAttr(rank, i64)
        return self._insert(UnpackOp.create(operands=[buffer], result_types=list(types), properties=props), point)

    def _permute(self, point, inputs, order) -> PermuteOp:
        return self._insert(
            PermuteOp.create(
                operands=list(inputs),
                result_types=[inputs[j].type for j in order],
                properties={"order": _slots(order)},
            ),
            point,
        )

    @staticmethod
    def _layout(
        members_per_segment: Sequence[Sequence[tuple[int, int]]], n_members: int
    ) -> list[list[tuple[int, int]]]:
        """Per segment, the (member index, width) pairs placed contiguously in that order."""
        segments = []
        for placed in members_per_segment:
            entries = [(0, 0)] * n_members
            cursor = 0
            for member, width in placed:
                entries[member] = (cursor, width)
                cursor += width
            segments.append(entries)
        return segments

    # -- the lift -------------------------------------------------------------------------
    def lift(self) -> None:
        ebc, W = self.ebc, self.world
        point = self.fwd_point
        route_results = [_t([-1], i32), _t([-1], self.index_type), _t([W], i64)]
        if self.weighted:
            route_results.append(_t([-1], f32))
        route = self._insert(
            RouteOp.create(
                operands=[*ebc.ids, *ebc.offsets, *ebc.weights],
                result_types=route_results,
                properties={
                    "world_size": IntegerAttr(W, i64),
                    "features": ebc.features,
                    "placements": ebc.placements,
                    "operandSegmentSizes": _segments(len(ebc.ids), len(ebc.offsets), len(ebc.weights)),
                },
            ),
            point,
        )
        lengths, indices, splits = route.lengths, route.indices, route.splits
        weights = route.routed_weights[0] if self.weighted else None
        distributed = W > 1 and self.kind != "data_parallel"
        if distributed:
            served = self._served_features()
            lengths = self._a2a(point, [lengths], "input_lengths", [[len(served[p]) for p in range(W)]] * W).outputs[0]
            indices = self._a2a(point, [indices], "input_indices", send_splits=splits).outputs[0]
            if weights is not None:
                weights = self._a2a(point, [weights], "input_weights", send_splits=splits).outputs[0]
        else:
            served = {p: list(range(len(self.features))) for p in range(W)}
        self.received = (lengths, indices, weights)

        # One lookup per table, on the ranks that hold it.
        lookups: dict[str, LookupOp] = {}
        for name in self.table_order:
            table, placement = self.tables[name], self.placements[name]
            rank = placement.owner_ranks(W)[0]
            slots = [served[rank].index(i) for i in self._table_features(name)]
            use_weights = weights is not None and any(self.features[i].is_weighted for i in self._table_features(name))
            lookups[name] = self._insert(
                LookupOp.create(
                    operands=[lengths, indices, *([weights] if use_weights and weights is not None else [])],
                    result_types=[_t([-1, self._width(name)], self.dtype)],
                    properties={
                        "table": table,
                        "placement": placement,
                        "slots": _slots(slots),
                        "operandSegmentSizes": _segments(1, 1, int(use_weights)),
                    },
                ),
                point,
            )

        pooled = self._combine_forward(point, lookups)
        for old, new in zip(ebc.pooled, pooled):
            old.replace_all_uses_with(new)
        grads = self._collect_grads(pooled)
        self._lift_backward(grads, lookups)
        Rewriter.erase_op(ebc)

    def _served_features(self) -> dict[int, list[int]]:
        """Per rank, the group's features whose table it holds, in group order."""
        served: dict[int, list[int]] = {p: [] for p in range(self.world)}
        for i, f in enumerate(self.features):
            for r in self.placements[f.table.data].owner_ranks(self.world):
                served[r].append(i)
        return served

    def _packing_order(self) -> list[tuple[int, str, int]]:
        """(owner rank, table, feature index) in the order pooled vectors are packed."""
        order = []
        if self.world > 1 and self.kind == "table_wise":
            for rank in range(self.world):
                for name in self.table_order:
                    if self.placements[name].rank_list == [rank]:
                        order += [(rank, name, i) for i in self._table_features(name)]
        else:
            for name in self.table_order:
                order += [(0, name, i) for i in self._table_features(name)]
        return order

    def _combine_forward(self, point, lookups: dict[str, LookupOp]) -> list[SSAValue]:
        W = self.world
        order = self._packing_order()
        member_types = [_t([-1, self.tables[name].dim.data], self.dtype) for _, name, _ in order]
        feature_width = [self.tables[name].dim.data for _, name, _ in order]
        if W > 1 and self.kind == "table_wise":
            packs = []
            for rank in range(W):
                owned = [n for n in self.table_order if self.placements[n].rank_list == [rank]]
                seg = [(i, self._width(n)) for i, n in enumerate(owned)]
                packs.append(
                    self._pack(point, [lookups[n].pooled for n in owned], self._layout([seg] * W, len(owned)), rank)
                )
            width = [
                sum(self._width(n) for n in self.table_order if self.placements[n].rank_list == [r]) for r in range(W)
            ]
            sent = self._a2a(point, [p.buffer for p in packs], self.output_role, [[width[r]] * W for r in range(W)])
            per_segment = [[(m, feature_width[m]) for m, (r, _, _) in enumerate(order) if r == p] for p in range(W)]
            members = self._unpack(point, sent.outputs[0], member_types, self._layout(per_segment, len(order))).members
        else:
            seg = [(i, self._width(n)) for i, n in enumerate(self.table_order)]
            if W > 1 and self.kind == "row_wise":
                pack = self._pack(
                    point, [lookups[n].pooled for n in self.table_order], self._layout([seg] * W, len(seg))
                )
                buffer = self._insert(
                    ReduceScatterOp.create(
                        operands=[pack.buffer],
                        result_types=[_t([-1], self.dtype)],
                        properties={
                            "group": self.group,
                            "role": RoleAttr(self.output_role),
                            "reduction": StringAttr("sum"),
                        },
                    ),
                    point,
                ).result
            else:
                buffer = self._pack(
                    point, [lookups[n].pooled for n in self.table_order], self._layout([seg], len(seg))
                ).buffer
            whole = [[(m, feature_width[m]) for m in range(len(order))]]
            members = self._unpack(point, buffer, member_types, self._layout(whole, len(order))).members
        position = {feature: m for m, (_, _, feature) in enumerate(order)}
        return list(self._permute(point, members, [position[i] for i in range(len(self.features))]).outputs)

    # -- backward --------------------------------------------------------------------------
    def _collect_grads(self, pooled: Sequence[SSAValue]) -> list[SSAValue]:
        """The backward value holding the gradient of each pooled output."""
        bwd = self.step.backward.block
        fwd_yield = self.step.forward.block.last_op
        assert isinstance(fwd_yield, YieldOp)
        adjoint = {
            op.callee.root_reference.data: op
            for op in bwd.ops
            if isinstance(op, DenseOp) and op.phase.data == "backward"
        }
        grads: list[SSAValue] = []
        for f, value in zip(self.features, pooled):
            uses = list(value.uses)
            where = f"lift-sparse: feature '{f.feature_name.data}' of module '{self.ebc.module.data}'"
            if len(uses) != 1:
                raise PassFailedException(
                    f"{where}: its pooled output has {len(uses)} uses; exactly one dense region or output may read it"
                )
            use = uses[0]
            if use.operation is fwd_yield and use.index < self.step.num_outputs.data:
                grads.append(bwd.args[use.index])
            elif isinstance(use.operation, DenseOp) and use.operation.phase.data == "forward":
                callee = use.operation.callee.root_reference.data
                if callee not in adjoint:
                    raise PassFailedException(f"{where}: dense region @{callee} has no backward adjoint")
                grads.append(adjoint[callee].res[use.index])
            else:
                raise PassFailedException(f"{where}: it is read by {use.operation.name}, not by a dense region")
        return grads

    def _lift_backward(self, grads: Sequence[SSAValue], lookups: dict[str, LookupOp]) -> None:
        bwd = self.step.backward.block
        producers = [g.owner for g in grads if isinstance(g.owner, Operation)]
        last = max(producers, key=lambda op: bwd.get_operation_index(op)) if producers else None
        self._bwd_cursor = InsertPoint.after(last) if last is not None else InsertPoint.at_start(bwd)

        # Gradients are gathered straight into packing order (no permute needed backward).
        order = self._packing_order()
        by_packing = [grads[i] for _, _, i in order]
        saved = self._save_received()
        table_grads = self._exchange_grads(order, by_packing)
        dense_grads = self._update_tables(lookups, table_grads, saved)
        if dense_grads:
            self._update_replicated(lookups, dense_grads)

    def _exchange_grads(
        self, order: Sequence[tuple[int, str, int]], by_packing: Sequence[SSAValue]
    ) -> dict[str, SSAValue]:
        """The pooled gradients (in packing order) packed, sent to the tables' ranks and unpacked
        there: each table's gradient."""
        W = self.world
        feature_width = [self.tables[n].dim.data for _, n, _ in order]
        table_types = {n: _t([-1, self._width(n)], self.dtype) for n in self.table_order}
        if W > 1 and self.kind == "table_wise":
            per_owner = [[(m, feature_width[m]) for m, (r, _, _) in enumerate(order) if r == p] for p in range(W)]
            pack = self._pack(self._next(), by_packing, self._layout(per_owner, len(order)))
            width = [
                sum(self._width(n) for n in self.table_order if self.placements[n].rank_list == [r]) for r in range(W)
            ]
            sent = self._a2a(self._next(), [pack.buffer], self.grad_role, [[width[p] for p in range(W)]] * W)
            table_grads: dict[str, SSAValue] = {}
            for rank in range(W):
                owned = [n for n in self.table_order if self.placements[n].rank_list == [rank]]
                if not owned:
                    continue
                seg = [(i, self._width(n)) for i, n in enumerate(owned)]
                unpack = self._unpack(
                    self._next(),
                    sent.outputs[0],
                    [table_types[n] for n in owned],
                    self._layout([seg] * W, len(owned)),
                    rank,
                )
                table_grads.update(zip(owned, unpack.members))
            return table_grads
        segments = W if (W > 1 and self.kind == "row_wise") else 1
        everything = [(m, feature_width[m]) for m in range(len(order))]
        pack = self._pack(self._next(), by_packing, self._layout([everything] * segments, len(order)))
        buffer = pack.buffer
        if segments > 1:
            total = sum(feature_width)
            buffer = self._a2a(self._next(), [pack.buffer], self.grad_role, [[total] * W] * W).outputs[0]
        seg = [(i, self._width(n)) for i, n in enumerate(self.table_order)]
        unpack = self._unpack(
            self._next(),
            buffer,
            [table_types[n] for n in self.table_order],
            self._layout([seg] * segments, len(seg)),
        )
        return dict(zip(self.table_order, unpack.members))

    def _update_tables(
        self,
        lookups: dict[str, LookupOp],
        table_grads: dict[str, SSAValue],
        saved: tuple[SSAValue, SSAValue, SSAValue | None],
    ) -> dict[str, SSAValue]:
        """Each table's update from its pooled gradient and the saved ids; replicated tables'
        dense gradients instead (returned, for `_update_replicated`)."""
        saved_lengths, saved_indices, saved_weights = saved
        dense_grads: dict[str, SSAValue] = {}
        for name in self.table_order:
            lookup = lookups[name]
            use_weights = lookup.weights is not None
            weights = [saved_weights] if use_weights and saved_weights is not None else []
            operands = [saved_lengths, saved_indices, *weights, table_grads[name]]
            common = {"table": lookup.table, "placement": lookup.placement, "slots": lookup.slots}
            if self.world > 1 and self.kind == "data_parallel":
                table = self.tables[name]
                dense_type = TensorType(self.dtype, [table.rows.data, table.dim.data])
                dense_grads[name] = self._insert(
                    LookupGradOp.create(
                        operands=operands,
                        result_types=[dense_type],
                        properties=common | {"operandSegmentSizes": _segments(1, 1, int(use_weights), 1)},
                    ),
                    self._next(),
                ).table_grad
            else:
                self._insert(
                    LookupUpdateOp.create(
                        operands=operands,
                        properties=common
                        | {
                            "optimizer": self.optimizers[name],
                            "operandSegmentSizes": _segments(1, 1, int(use_weights), 1),
                        },
                    ),
                    self._next(),
                )
        return dense_grads

    def _update_replicated(self, lookups: dict[str, LookupOp], dense_grads: dict[str, SSAValue]) -> None:
        """Replicated tables: one all-reduce for the whole group's dense gradients, then the updates."""
        reduced = self._insert(
            AllReduceOp.create(
                operands=list(dense_grads.values()),
                result_types=[v.type for v in dense_grads.values()],
                properties={"group": self.group, "role": RoleAttr("sparse_grad"), "reduction": StringAttr("sum")},
            ),
            self._next(),
        )
        for name, grad in zip(dense_grads, reduced.outputs):
            lookup = lookups[name]
            self._insert(
                LookupUpdateOp.create(
                    operands=[grad],
                    properties={
                        "table": lookup.table,
                        "placement": lookup.placement,
                        "slots": lookup.slots,
                        "optimizer": self.optimizers[name],
                        "operandSegmentSizes": _segments(0, 0, 0, 1),
                    },
                ),
                self._next(),
            )

    def _save_received(self) -> tuple[SSAValue, SSAValue, SSAValue | None]:
        """Thread the received lengths/indices/weights from forward to backward as saved values."""
        fwd_yield = self.step.forward.block.last_op
        assert isinstance(fwd_yield, YieldOp)  # a verified step's forward region ends with its yield
        bwd = self.step.backward.block
        out: list[SSAValue | None] = []
        extra: list[SSAValue] = []
        for value in self.received:
            if value is None:
                out.append(None)
                continue
            extra.append(value)
            out.append(bwd.insert_arg(value.type, len(bwd.args)))
        new_yield = YieldOp(*fwd_yield.values, *extra)
        Rewriter.replace_op(fwd_yield, new_yield)
        lengths, indices, weights = out
        assert lengths is not None and indices is not None  # only the weights may be absent
        return lengths, indices, weights


def verify_lifted(module: ModuleOp) -> None:
    """No opaque op left; every table looked up once and updated once per step."""
    for step in module.walk():
        if not isinstance(step, StepOp):
            continue
        looked: dict[str, int] = {}
        updated: dict[str, int] = {}
        for op in step.walk():
            if isinstance(op, EmbeddingBagCollectionOp):
                raise PassFailedException(
                    f"lift-sparse: an opaque sparse.embedding_bag_collection ('{op.module.data}') is left in "
                    f"@{step.sym_name.data}"
                )
            if isinstance(op, LookupOp):
                looked[op.table.name_str] = looked.get(op.table.name_str, 0) + 1
            if isinstance(op, LookupUpdateOp):
                updated[op.table.name_str] = updated.get(op.table.name_str, 0) + 1
        for table in sorted(set(looked) | set(updated)):
            if looked.get(table, 0) != 1 or updated.get(table, 0) != 1:
                raise PassFailedException(
                    f"lift-sparse: table '{table}' is looked up {looked.get(table, 0)} and updated "
                    f"{updated.get(table, 0)} times in @{step.sym_name.data}; expected once each"
                )


@dataclass(frozen=True)
class LiftSparse(ModulePass):
    """Lift opaque embedding-bag collections into per-table, per-role subgraphs."""

    name = "lift-sparse"

    # The optimizer kind of every table's update (`sparselift.optim_rules.OptimizerKind`), group 0,
    # except the tables `table-optimizers` names: entries "TABLE=KIND" or "TABLE=KIND:GROUP".
    # Hyperparameters are run-time values of the group (see `#sparse.optimizer`).
    optimizer: str = "sgd"
    table_optimizers: tuple[str, ...] = ()
    # How unpooled tables' rows travel: "padded", a row per id position (empty ones included);
    # "jagged", a row per id where `compact-rows` can and it pays (its checks, its remarks).
    rows: str = "padded"
    # Where the replicated tables' gradients are summed: "own", an all-reduce of their own in
    # backward; "with-dense", in the dense gradients' all-reduce (one collective less a step).
    replicated_grads: str = "own"
    # Routed ids as i32 wherever the group's tables all have fewer than 2^31 rows, whatever the
    # model's id dtype (false: i32 only where the model's ids are).
    narrow_ids: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.rows not in ("padded", "jagged"):
            raise PassFailedException(f"lift-sparse: rows must be 'padded' or 'jagged', got '{self.rows}'")
        if self.replicated_grads not in REPLICATED_GRADS:
            raise PassFailedException(
                f"lift-sparse: replicated-grads must be {' or '.join(map(repr, REPLICATED_GRADS))}, "
                f"got '{self.replicated_grads}'"
            )
        default, chosen = self._optimizers()
        known = {t for e in op.walk() if isinstance(e, EmbeddingBagCollectionOp) for t in e.table_map()}
        if set(chosen) - known:
            raise PassFailedException(
                f"lift-sparse: table-optimizers names no table {', '.join(sorted(set(chosen) - known))} "
                f"(tables: {', '.join(sorted(known))})"
            )
        for step in [s for s in op.walk() if isinstance(s, StepOp)]:
            for ebc in [o for o in step.forward.block.ops if isinstance(o, EmbeddingBagCollectionOp)]:
                self._check_supported(step, ebc)
                optimizers = {name: chosen.get(name, default) for name in ebc.table_map()}
                _GroupLifter(step, ebc, optimizers, self.narrow_ids).lift()
        _fold_local_regroups(op)
        verify_lifted(op)
        if self.rows == "jagged":
            CompactRows().apply(ctx, op)
        if self.replicated_grads == "with-dense":
            for step in [s for s in op.walk() if isinstance(s, StepOp)]:
                ride_with_dense_grads(step, self.name)

    def _optimizers(self) -> tuple[OptimizerAttr, dict[str, OptimizerAttr]]:
        """The default optimizer and the tables' own (`table-optimizers`), checked."""
        kinds = ", ".join(OptimizerKind)
        if self.optimizer not in set(OptimizerKind):
            raise PassFailedException(f"lift-sparse: unknown optimizer '{self.optimizer}'; expected one of {kinds}")
        chosen = {}
        for entry in self.table_optimizers:
            table, _, rest = entry.partition("=")
            kind, _, group = rest.partition(":")
            if not table or kind not in set(OptimizerKind) or not (group or "0").isdigit():
                raise PassFailedException(
                    f"lift-sparse: table-optimizers entry '{entry}' is not TABLE=KIND or TABLE=KIND:GROUP "
                    f"(KIND one of {kinds})"
                )
            chosen[table] = OptimizerAttr(kind, int(group or 0))
        return OptimizerAttr(self.optimizer), chosen

    @staticmethod
    def _check_supported(step: StepOp, ebc: EmbeddingBagCollectionOp) -> None:
        world = step.world_size.data
        tables = ebc.table_map()
        for p in ebc.placements.data:
            if p.kind.data != "row_wise" or world == 1:
                continue
            name = p.table.data
            if sorted(p.rank_list) != list(range(world)):
                raise PassFailedException(
                    f"lift-sparse: row_wise table '{name}' of module '{ebc.module.data}' must span all "
                    f"{world} ranks (it spans {p.rank_list})"
                )
            if tables[name].kernel_pooling != "sum":
                raise PassFailedException(
                    f"lift-sparse: row_wise table '{name}' of module '{ebc.module.data}' uses mean pooling, "
                    "which row-wise partial pools cannot express yet; place it table_wise"
                )


def _fold_local_regroups(module: ModuleOp) -> None:
    """Drop the pack -> unpack pairs with one layout that a group without an exchange (replicated
    tables, one rank) lowers to: they would copy every pooled vector and gradient twice for
    nothing. Pairs that regroup (a table reading several features) stay."""
    PatternRewriteWalker(FoldUnpackOfPack(), apply_recursively=False).rewrite_module(module)
    for pack in [o for o in module.walk() if isinstance(o, PackOp) and not o.buffer.uses]:
        Rewriter.erase_op(pack)


__all__ = ["LiftSparse", "verify_lifted"]
