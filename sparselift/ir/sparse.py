"""The `sparse` dialect: embedding tables, their placement, and the sparse-path computations.

`sparse.embedding_bag_collection` is the opaque node the frontend imports (one per sharding
group). `lift-sparse` rewrites it into the lifted ops: `sparse.route`, `sparse.lookup`,
`sparse.lookup_update`, `sparse.pack` / `sparse.unpack` and `sparse.permute`;
`generate-kernels` fuses table-local ops into `sparse.fused_lookup`,
`sparse.fused_lookup_update` and `sparse.fused_lookup_grad`.

Buffers exchanged between ranks are *segmented*: segment `s` is the part sent to (or received
from) rank `s` of the collective's group. A `#sparse.layout` says, per segment, where each
member lives, in elements per sample (static) or as a jagged run of run-time length (`?`).

This module holds the opaque collection, the route and the per-table ops, and the one `Sparse`
dialect; it re-exports the attributes (`sparse_attrs`), the buffer ops (`sparse_buffers`), the
fused table ops (`sparse_fused`), the jagged rows ops (`sparse_rows`) and the segment ops of
merged dynamic exchanges (`sparse_segments`), so
`from sparselift.ir.sparse import ...` reaches them all.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    I64,
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    StringAttr,
    TensorType,
    i32,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    prop_def,
    result_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from sparselift.ir._checks import (
    check_float_1d,
    check_ids,
    check_int_1d,
    check_pooled,
    check_slots_width,
    check_table_grad,
)
from sparselift.ir._refs import (
    check_group_def,
    check_group_label,
    check_table_ref,
    enclosing_world_size,
    verify_tables_features_placements,
)
from sparselift.ir._syntax import DYNAMIC, dim, print_int_list, str_array, strs, tensor_type
from sparselift.ir.sparse_attrs import (
    FLOAT_DTYPES,
    FeatureAttr,
    LayoutAttr,
    OptimizerAttr,
    OptimizerKind,
    PlacementAttr,
    PlacementKind,
    Pooling,
    TableAttr,
)
from sparselift.ir.sparse_buffers import (
    FoldSingleMemberPack,
    FoldSingleMemberUnpack,
    FoldUnpackOfPack,
    PackIdsOp,
    PackOp,
    PackUnpackCanonicalization,
    PermuteOp,
    UnpackIdsOp,
    UnpackOp,
)
from sparselift.ir.sparse_fused import (
    FUSED_TABLE_OPS,
    FusedLookupGradOp,
    FusedLookupOp,
    FusedLookupUpdateOp,
    FusedTableOp,
)
from sparselift.ir.sparse_rows import (
    ROWS_OPS,
    CompactRowsOp,
    ExpandRowsOp,
    GatherRowsOp,
    RowSplitsOp,
    RowsUpdateOp,
    SumRowsOp,
    TakeRowsOp,
    UniqueIdsOp,
)
from sparselift.ir.sparse_segments import SEGMENT_OPS, JoinSegmentsOp, SplitSegmentsOp, StaticSizesOp


@irdl_op_definition
class EmbeddingBagCollectionOp(IRDLOperation):
    """The opaque imported node: a fused multi-table pooled lookup for one sharding group.

    Per feature it takes ids and offsets (and per-sample weights for weighted features, in
    feature order) and returns one pooled `[batch, dim]` tensor per feature.
    """

    name = "sparse.embedding_bag_collection"

    ids = var_operand_def(TensorType)
    offsets = var_operand_def(TensorType)
    weights = var_operand_def(TensorType)
    pooled = var_result_def(TensorType)

    module = prop_def(StringAttr)
    tables = prop_def(ArrayAttr[TableAttr])
    features = prop_def(ArrayAttr[FeatureAttr])
    placements = prop_def(ArrayAttr[PlacementAttr])

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    assembly_format = (
        "$module `ids` `(` $ids `:` type($ids) `)` `offsets` `(` $offsets `:` type($offsets) `)` "
        "(`weights` `(` $weights^ `:` type($weights) `)`)? "
        "`tables` `=` $tables `features` `=` $features `placements` `=` $placements "
        "attr-dict `->` type($pooled)"
    )

    def __init__(
        self,
        module: str,
        ids: Sequence[SSAValue],
        offsets: Sequence[SSAValue],
        weights: Sequence[SSAValue],
        tables: Sequence[TableAttr],
        features: Sequence[FeatureAttr],
        placements: Sequence[PlacementAttr],
    ):
        by_name = {t.name_str: t for t in tables}
        result_types = [
            TensorType(by_name[f.table.data].dtype, [DYNAMIC_INDEX, by_name[f.table.data].dim.data]) for f in features
        ]
        super().__init__(
            operands=[ids, offsets, weights],
            result_types=[result_types],
            properties={
                "module": StringAttr(module),
                "tables": ArrayAttr(tables),
                "features": ArrayAttr(features),
                "placements": ArrayAttr(placements),
            },
        )

    def table_map(self) -> dict[str, TableAttr]:
        return {t.name_str: t for t in self.tables.data}

    def verify_(self) -> None:
        features = self.features.data
        verify_tables_features_placements(self, self.tables.data, features, self.placements.data)
        n = len(features)
        if len(self.ids) != n or len(self.offsets) != n or len(self.pooled) != n:
            raise VerifyException(
                f"module '{self.module.data}': {n} features need {n} ids, offsets and results, got "
                f"{len(self.ids)}, {len(self.offsets)} and {len(self.pooled)}"
            )
        n_weighted = sum(f.is_weighted for f in features)
        if len(self.weights) != n_weighted:
            raise VerifyException(
                f"module '{self.module.data}': {n_weighted} weighted features need {n_weighted} weight "
                f"operands, got {len(self.weights)}"
            )
        tables = self.table_map()
        for f, ids, offs, res in zip(features, self.ids, self.offsets, self.pooled):
            fname = f.feature_name.data
            check_int_1d(ids, f"ids of feature '{fname}'")
            check_int_1d(offs, f"offsets of feature '{fname}'")
            check_pooled(res.type, tables[f.table.data], f"pooled result of feature '{fname}'")
            if dim(tensor_type(res, ""), 1) not in (DYNAMIC, tables[f.table.data].dim.data):
                raise VerifyException(
                    f"pooled result of feature '{fname}' has width {dim(tensor_type(res, ''), 1)} "
                    f"but table '{f.table.data}' has dim {tables[f.table.data].dim.data}"
                )
        for w in self.weights:
            check_float_1d(w, "per-sample weights")
        check_group_def(self)
        check_group_label(self)


@irdl_op_definition
class RouteOp(IRDLOperation):
    """Bucket a group's local ids by destination rank.

    Produces the segmented send buffers of the input exchange: lengths (segment `p` holds the
    bag lengths of the features that rank `p` serves, feature-major), indices and optional
    weights, and the per-destination element counts of the jagged buffers (`splits`). Row-wise
    tables are bucketized by row range; ids are shifted to shard-local rows.
    """

    name = "sparse.route"

    ids = var_operand_def(TensorType)
    offsets = var_operand_def(TensorType)
    weights = var_operand_def(TensorType)

    lengths = result_def(TensorType)
    indices = result_def(TensorType)
    splits = result_def(TensorType)
    routed_weights = var_result_def(TensorType)

    world_size = prop_def(IntegerAttr[I64])
    features = prop_def(ArrayAttr[FeatureAttr])
    placements = prop_def(ArrayAttr[PlacementAttr])

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    assembly_format = (
        "`ids` `(` $ids `:` type($ids) `)` `offsets` `(` $offsets `:` type($offsets) `)` "
        "(`weights` `(` $weights^ `:` type($weights) `)`)? "
        "`features` `=` $features `placements` `=` $placements `world_size` `=` $world_size "
        "attr-dict `->` type($lengths) `,` type($indices) `,` type($splits) (`,` type($routed_weights)^)?"
    )

    def verify_(self) -> None:
        features = self.features.data
        n = len(features)
        if len(self.ids) != n or len(self.offsets) != n:
            raise VerifyException(f"sparse.route: {n} features need {n} ids and offsets operands")
        n_weighted = sum(f.is_weighted for f in features)
        if len(self.weights) != n_weighted:
            raise VerifyException(f"sparse.route: {n_weighted} weighted features need {n_weighted} weight operands")
        if len(self.routed_weights) != (1 if n_weighted else 0):
            raise VerifyException("sparse.route: routed weights are produced exactly when a feature is weighted")
        placed = {p.table.data for p in self.placements.data}
        if len(placed) != len(self.placements.data):
            twice = next(t for t in placed if [p.table.data for p in self.placements.data].count(t) > 1)
            raise VerifyException(f"sparse.route: table '{twice}' is placed twice")
        names = [f.feature_name.data for f in features]
        if len(set(names)) != len(names):
            raise VerifyException(
                f"sparse.route: feature '{next(x for x in names if names.count(x) > 1)}' is listed twice"
            )
        for f in features:
            if f.table.data not in placed:
                raise VerifyException(
                    f"sparse.route: feature '{f.feature_name.data}' maps to table '{f.table.data}', which has "
                    "no placement"
                )
        for p in self.placements.data:
            p.verify_ranks(self.world_size.value.data)
        for v in (*self.ids, *self.offsets):
            check_int_1d(v, "sparse.route operand")
        check_int_1d(self.lengths, "routed lengths")
        check_int_1d(self.indices, "routed indices")
        st = check_int_1d(self.splits, "routed splits")
        if dim(st, 0) not in (DYNAMIC, self.world_size.value.data):
            raise VerifyException(
                f"routed splits must have one entry per rank ({self.world_size.value.data}), got {st}"
            )
        for w in self.routed_weights:
            check_float_1d(w, "routed weights")
        check_group_def(self)
        check_group_label(self)


def _verify_lookup_common(op: LookupOp | LookupUpdateOp | LookupGradOp) -> TableAttr:
    table = op.table
    if op.placement.table.data != table.name_str:
        raise VerifyException(
            f"{op.name}: placement is for table '{op.placement.table.data}' but the op reads table '{table.name_str}'"
        )
    op.placement.verify_for_table(table)
    world = enclosing_world_size(op)
    if world is not None:
        op.placement.verify_ranks(world)
    slots = list(op.slots.get_values())
    if not slots:
        raise VerifyException(f"{op.name} of table '{table.name_str}' serves no feature slot")
    if len(set(slots)) != len(slots) or min(slots) < 0:
        raise VerifyException(f"{op.name} of table '{table.name_str}': slots must be distinct and non-negative")
    # Only a dense update reads no ids, and LookupUpdateOp.verify_ checks that form itself.
    assert op.lengths is not None and op.indices is not None
    check_ids(op.lengths, op.indices, op.weights, f"table '{table.name_str}'")
    return table


def _check_step_refs(op: LookupOp | LookupUpdateOp | LookupGradOp) -> None:
    """Table, placement, slots and weights against the route of the enclosing step (see _refs)."""
    table = op.table
    weighted = None if op.lengths is None else op.weights is not None  # the dense update reads no ids
    check_table_ref(
        op,
        f"{op.name} of table '{table.name_str}'",
        table,
        op.placement,
        list(op.slots.get_values()),
        weighted,
        op.lengths,
    )
    check_group_label(op)


@irdl_op_definition
class LookupOp(IRDLOperation):
    """Table-local gather and pool.

    Reads the received (segmented) lengths/indices buffers of its group; `slots` are the
    positions, within each segment's feature list, of the features this table serves. The result
    has one row per received bag and `dim * len(slots)` columns (the table's features side by side).
    """

    name = "sparse.lookup"

    lengths = operand_def(TensorType)
    indices = operand_def(TensorType)
    weights = opt_operand_def(TensorType)
    pooled = result_def(TensorType)

    table = prop_def(TableAttr)
    placement = prop_def(PlacementAttr)
    slots = prop_def(DenseArrayBase[I64])

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    assembly_format = (
        "$lengths `,` $indices (`weights` $weights^ `:` type($weights))? "
        "`table` `=` qualified($table) `placement` `=` qualified($placement) `slots` `=` $slots "
        "attr-dict `:` type($lengths) `,` type($indices) `->` type($pooled)"
    )

    def verify_(self) -> None:
        table = _verify_lookup_common(self)
        check_slots_width(self.pooled.type, table, len(self.slots), f"pooled result of table '{table.name_str}'")
        _check_step_refs(self)


@irdl_op_definition
class LookupUpdateOp(IRDLOperation):
    """Table-local backward fused with the optimizer update.

    Two forms: from pooled gradients (`lengths, indices [weights] grad %g : [bags, dim * slots]`),
    which never materializes a table-sized gradient; or from a dense table gradient
    (`grad %g : [rows, dim]`), used for replicated tables after their gradient is all-reduced.
    """

    name = "sparse.lookup_update"

    lengths = opt_operand_def(TensorType)
    indices = opt_operand_def(TensorType)
    weights = opt_operand_def(TensorType)
    grad = operand_def(TensorType)

    table = prop_def(TableAttr)
    placement = prop_def(PlacementAttr)
    slots = prop_def(DenseArrayBase[I64])
    optimizer = prop_def(OptimizerAttr)

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @classmethod
    def parse(cls, parser: Parser) -> LookupUpdateOp:
        lengths = parser.parse_optional_unresolved_operand()
        indices = weights = None
        if lengths is not None:
            parser.parse_punctuation(",")
            indices = parser.parse_unresolved_operand()
        if parser.parse_optional_keyword("weights") is not None:
            w = parser.parse_unresolved_operand()
            parser.parse_punctuation(":")
            weights = parser.resolve_operand(w, parser.parse_type())
        parser.parse_keyword("grad")
        grad = parser.parse_unresolved_operand()
        props: dict[str, Attribute] = {}
        for key in ("table", "placement", "slots", "optimizer"):
            parser.parse_keyword(key)
            parser.parse_punctuation("=")
            if key == "slots":
                values = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)
                props[key] = DenseArrayBase.from_list(i64, values)
            else:
                props[key] = parser.parse_attribute()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        unresolved = [u for u in (lengths, indices) if u is not None] + [grad]
        if len(types) != len(unresolved):
            parser.raise_error(f"expected {len(unresolved)} operand types, got {len(types)}")
        resolved = [parser.resolve_operand(u, t) for u, t in zip(unresolved, types)]
        grad_value = resolved.pop()
        segments = [len(resolved) // 2, len(resolved) // 2, int(weights is not None), 1]
        op = cls.create(
            operands=[*resolved[:1], *resolved[1:2], *([weights] if weights is not None else []), grad_value],
            properties=props | {"operandSegmentSizes": DenseArrayBase.from_list(i32, segments)},
            attributes=attrs,
        )
        return op

    def print(self, printer: Printer) -> None:
        if self.lengths is not None:
            assert self.indices is not None  # lengths come with indices (the parser reads them as a pair)
            printer.print_string(" ")
            printer.print_operand(self.lengths)
            printer.print_string(", ")
            printer.print_operand(self.indices)
        if self.weights is not None:
            printer.print_string(" weights ")
            printer.print_operand(self.weights)
            printer.print_string(" : ")
            printer.print_attribute(self.weights.type)
        printer.print_string(" grad ")
        printer.print_operand(self.grad)
        for key in ("table", "placement"):
            printer.print_string(f" {key} = ")
            printer.print_attribute(self.properties[key])
        printer.print_string(" slots = ")
        print_int_list(printer, list(self.slots.get_values()))
        printer.print_string(" optimizer = ")
        printer.print_attribute(self.optimizer)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_list(
            [v.type for v in (self.lengths, self.indices) if v is not None] + [self.grad.type], printer.print_attribute
        )

    @property
    def dense(self) -> bool:
        """True for the dense-gradient form."""
        return self.lengths is None

    def verify_(self) -> None:
        table = self.table
        if self.dense:
            if self.indices is not None or self.weights is not None:
                raise VerifyException(
                    f"sparse.lookup_update of table '{table.name_str}': indices and weights need lengths"
                )
            if self.placement.table.data != table.name_str:
                raise VerifyException(
                    f"sparse.lookup_update: placement is for table '{self.placement.table.data}' but the op "
                    f"updates table '{table.name_str}'"
                )
            check_table_grad(self.grad.type, table, f"dense gradient of table '{table.name_str}'")
            _check_step_refs(self)
            return
        if self.indices is None:
            raise VerifyException(f"sparse.lookup_update of table '{table.name_str}': lengths need indices")
        _verify_lookup_common(self)
        check_slots_width(self.grad.type, table, len(self.slots), f"gradient of table '{table.name_str}'")
        _check_step_refs(self)


@irdl_op_definition
class LookupGradOp(IRDLOperation):
    """The dense gradient of a small replicated (data-parallel) table, to be all-reduced."""

    name = "sparse.lookup_grad"

    lengths = operand_def(TensorType)
    indices = operand_def(TensorType)
    weights = opt_operand_def(TensorType)
    grad = operand_def(TensorType)
    table_grad = result_def(TensorType)

    table = prop_def(TableAttr)
    placement = prop_def(PlacementAttr)
    slots = prop_def(DenseArrayBase[I64])

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    assembly_format = (
        "$lengths `,` $indices (`weights` $weights^ `:` type($weights))? `grad` $grad "
        "`table` `=` qualified($table) `placement` `=` qualified($placement) `slots` `=` $slots "
        "attr-dict `:` type($lengths) `,` type($indices) `,` type($grad) `->` type($table_grad)"
    )

    def verify_(self) -> None:
        table = _verify_lookup_common(self)
        check_slots_width(self.grad.type, table, len(self.slots), f"gradient of table '{table.name_str}'")
        check_table_grad(self.table_grad.type, table, f"table gradient of '{table.name_str}'")
        _check_step_refs(self)


Sparse = Dialect(
    "sparse",
    [
        EmbeddingBagCollectionOp,
        RouteOp,
        LookupOp,
        LookupUpdateOp,
        LookupGradOp,
        PackOp,
        UnpackOp,
        PackIdsOp,
        UnpackIdsOp,
        PermuteOp,
        FusedLookupOp,
        FusedLookupUpdateOp,
        FusedLookupGradOp,
        *ROWS_OPS,
        *SEGMENT_OPS,
    ],
    [TableAttr, FeatureAttr, PlacementAttr, OptimizerAttr, LayoutAttr],
)

__all__ = [
    "Sparse",
    "FLOAT_DTYPES",
    "Pooling",
    "PlacementKind",
    "OptimizerKind",
    "TableAttr",
    "FeatureAttr",
    "PlacementAttr",
    "OptimizerAttr",
    "LayoutAttr",
    "EmbeddingBagCollectionOp",
    "RouteOp",
    "PackIdsOp",
    "UnpackIdsOp",
    "LookupOp",
    "LookupUpdateOp",
    "LookupGradOp",
    "PackOp",
    "UnpackOp",
    "PackUnpackCanonicalization",
    "PermuteOp",
    "FoldUnpackOfPack",
    "FoldSingleMemberPack",
    "FoldSingleMemberUnpack",
    "FusedTableOp",
    "FusedLookupOp",
    "FusedLookupUpdateOp",
    "FusedLookupGradOp",
    "FUSED_TABLE_OPS",
    "GatherRowsOp",
    "RowSplitsOp",
    "ExpandRowsOp",
    "CompactRowsOp",
    "RowsUpdateOp",
    "UniqueIdsOp",
    "TakeRowsOp",
    "SumRowsOp",
    "ROWS_OPS",
    "StaticSizesOp",
    "JoinSegmentsOp",
    "SplitSegmentsOp",
    "SEGMENT_OPS",
    "str_array",
    "strs",
]
