"""The `sparse` dialect: embedding tables, their placement, and the sparse-path computations.

`sparse.embedding_bag_collection` is the opaque node the frontend imports (one per sharding
group). `lift-sparse` rewrites it into the lifted ops: `sparse.route`, `sparse.lookup`,
`sparse.lookup_update`, `sparse.pack` / `sparse.unpack` and `sparse.permute`.

Buffers exchanged between ranks are *segmented*: segment `s` is the part sent to (or received
from) rank `s` of the collective's group. A `#sparse.layout` says, per segment, where each
member lives, in elements per sample (static) or as a jagged run of run-time length (`?`).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import auto

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    I64,
    AnyFloat,
    ArrayAttr,
    DenseArrayBase,
    FloatData,
    IntAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    f32,
    i32,
    i64,
)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    opt_result_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.printer import Printer
from xdsl.traits import HasCanonicalizationPatternsTrait, Pure
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from sparselift.ir._refs import (
    check_group_def,
    check_group_label,
    check_rank,
    check_segment_counts,
    check_table_ref,
    check_unpack_segments,
    enclosing_world_size,
    verify_tables_features_placements,
)
from sparselift.ir._syntax import (
    DYNAMIC,
    check_finite,
    dim,
    format_float,
    int_array,
    ints,
    parse_float_or_int,
    parse_int_list,
    parse_int_or_dynamic,
    print_int_list,
    print_int_or_dynamic,
    str_array,
    strs,
    tensor_type,
)

FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")


class Pooling(StrEnum):
    SUM = auto()
    MEAN = auto()


class PlacementKind(StrEnum):
    TABLE_WISE = auto()
    ROW_WISE = auto()
    DATA_PARALLEL = auto()


class OptimizerKind(StrEnum):
    SGD = auto()
    ROWWISE_ADAGRAD = auto()


# --------------------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------------------


@irdl_attr_definition
class TableAttr(ParametrizedAttribute):
    """An embedding table: `#sparse.table<"t0", rows = 1460, dim = 16, f32, sum>`."""

    name = "sparse.table"

    table_name: StringAttr
    rows: IntAttr
    dim: IntAttr
    dtype: Attribute
    pooling: StringAttr

    def __init__(self, table_name: str, rows: int, dim: int, dtype: Attribute, pooling: str = "sum"):
        super().__init__(StringAttr(table_name), IntAttr(rows), IntAttr(dim), dtype, StringAttr(pooling))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            name = parser.parse_str_literal(" for the table name")
            parser.parse_punctuation(",")
            parser.parse_keyword("rows")
            parser.parse_punctuation("=")
            rows = parser.parse_integer(allow_boolean=False)
            parser.parse_punctuation(",")
            parser.parse_keyword("dim")
            parser.parse_punctuation("=")
            dim_ = parser.parse_integer(allow_boolean=False)
            parser.parse_punctuation(",")
            dtype = parser.parse_type()
            parser.parse_punctuation(",")
            pooling = parser.parse_identifier(" for the pooling mode")
        return (StringAttr(name), IntAttr(rows), IntAttr(dim_), dtype, StringAttr(pooling))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.table_name.data)
            printer.print_string(f", rows = {self.rows.data}, dim = {self.dim.data}, ")
            printer.print_attribute(self.dtype)
            printer.print_string(f", {self.pooling.data}")

    def verify(self) -> None:
        where = f"table '{self.table_name.data}'"
        if not self.table_name.data:
            raise VerifyException("table name must not be empty")
        if self.rows.data <= 0:
            raise VerifyException(f"{where} must have at least one row, got {self.rows.data}")
        if self.dim.data <= 0:
            raise VerifyException(f"{where} must have a positive dim, got {self.dim.data}")
        if not isinstance(self.dtype, AnyFloat):
            raise VerifyException(f"{where} must have a float dtype, got {self.dtype}")
        if self.pooling.data not in set(Pooling):
            raise VerifyException(
                f"{where} has pooling '{self.pooling.data}'; supported: {', '.join(Pooling)}"
            )

    @property
    def name_str(self) -> str:
        return self.table_name.data


@irdl_attr_definition
class FeatureAttr(ParametrizedAttribute):
    """A sparse feature and the table it reads: `#sparse.feature<"f0" -> "t0", pooling_factor = 1.0>`.

    `pooling_factor` is the mean number of ids per bag (workload statistics from the example
    inputs or a `stats=` sample); `weighted` marks features with per-sample weights.
    """

    name = "sparse.feature"

    feature_name: StringAttr
    table: StringAttr
    pooling_factor: FloatData
    weighted: IntAttr

    def __init__(self, feature_name: str, table: str, pooling_factor: float = 1.0, weighted: bool = False):
        super().__init__(
            StringAttr(feature_name), StringAttr(table), FloatData(float(pooling_factor)), IntAttr(int(weighted))
        )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            name = parser.parse_str_literal(" for the feature name")
            parser.parse_punctuation("->")
            table = parser.parse_str_literal(" for the table name")
            parser.parse_punctuation(",")
            parser.parse_keyword("pooling_factor")
            parser.parse_punctuation("=")
            pooling_factor = parse_float_or_int(parser)
            weighted = 0
            if parser.parse_optional_punctuation(",") is not None:
                parser.parse_keyword("weighted")
                weighted = 1
        return (StringAttr(name), StringAttr(table), FloatData(pooling_factor), IntAttr(weighted))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.feature_name.data)
            printer.print_string(" -> ")
            printer.print_string_literal(self.table.data)
            printer.print_string(f", pooling_factor = {format_float(self.pooling_factor.data)}")
            if self.weighted.data:
                printer.print_string(", weighted")

    def verify(self) -> None:
        check_finite(self.pooling_factor.data, f"pooling_factor of feature '{self.feature_name.data}'")
        if self.pooling_factor.data < 0:
            raise VerifyException(f"feature '{self.feature_name.data}' has a negative pooling_factor")
        if self.weighted.data not in (0, 1):
            raise VerifyException("weighted must be 0 or 1")

    @property
    def is_weighted(self) -> bool:
        return bool(self.weighted.data)


@irdl_attr_definition
class PlacementAttr(ParametrizedAttribute):
    """Where a table lives.

    - `#sparse.placement<"t0", table_wise, rank = 1>`
    - `#sparse.placement<"t0", row_wise, ranks = [0, 1], row_bounds = [0, 730, 1460]>`: rank
      `ranks[i]` owns rows `[row_bounds[i], row_bounds[i+1])`.
    - `#sparse.placement<"t0", data_parallel>`: replicated on every rank.
    """

    name = "sparse.placement"

    table: StringAttr
    kind: StringAttr
    ranks: ArrayAttr[IntAttr]
    row_bounds: ArrayAttr[IntAttr]

    def __init__(
        self, table: str, kind: str, ranks: Sequence[int] = (), row_bounds: Sequence[int] = ()
    ):
        super().__init__(StringAttr(table), StringAttr(kind), int_array(ranks), int_array(row_bounds))

    @staticmethod
    def table_wise(table: str, rank: int) -> PlacementAttr:
        return PlacementAttr(table, PlacementKind.TABLE_WISE, [rank])

    @staticmethod
    def row_wise(table: str, ranks: Sequence[int], row_bounds: Sequence[int]) -> PlacementAttr:
        return PlacementAttr(table, PlacementKind.ROW_WISE, ranks, row_bounds)

    @staticmethod
    def data_parallel(table: str) -> PlacementAttr:
        return PlacementAttr(table, PlacementKind.DATA_PARALLEL)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        ranks: list[int] = []
        bounds: list[int] = []
        with parser.in_angle_brackets():
            table = parser.parse_str_literal(" for the table name")
            parser.parse_punctuation(",")
            kind = parser.parse_identifier(" for the placement kind")
            if kind == PlacementKind.TABLE_WISE:
                parser.parse_punctuation(",")
                parser.parse_keyword("rank")
                parser.parse_punctuation("=")
                ranks = [parser.parse_integer(allow_boolean=False)]
            elif kind == PlacementKind.ROW_WISE:
                parser.parse_punctuation(",")
                parser.parse_keyword("ranks")
                parser.parse_punctuation("=")
                ranks = parse_int_list(parser)
                parser.parse_punctuation(",")
                parser.parse_keyword("row_bounds")
                parser.parse_punctuation("=")
                bounds = parse_int_list(parser)
        return (StringAttr(table), StringAttr(kind), int_array(ranks), int_array(bounds))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.table.data)
            printer.print_string(f", {self.kind.data}")
            if self.kind.data == PlacementKind.TABLE_WISE:
                printer.print_string(f", rank = {self.rank_list[0]}")
            elif self.kind.data == PlacementKind.ROW_WISE:
                printer.print_string(", ranks = ")
                print_int_list(printer, self.rank_list)
                printer.print_string(", row_bounds = ")
                print_int_list(printer, self.bounds)

    @property
    def rank_list(self) -> list[int]:
        return ints(self.ranks)

    @property
    def bounds(self) -> list[int]:
        return ints(self.row_bounds)

    def verify(self) -> None:
        where = f"placement of table '{self.table.data}'"
        kind = self.kind.data
        ranks = self.rank_list
        if kind not in set(PlacementKind):
            raise VerifyException(f"{where}: unknown kind '{kind}'; expected one of {', '.join(PlacementKind)}")
        if any(r < 0 for r in ranks):
            raise VerifyException(f"{where}: ranks must be non-negative, got {ranks}")
        if len(set(ranks)) != len(ranks):
            raise VerifyException(f"{where}: a rank appears twice in {ranks}")
        if kind == PlacementKind.TABLE_WISE and len(ranks) != 1:
            raise VerifyException(f"{where}: table_wise needs exactly one rank")
        if kind == PlacementKind.DATA_PARALLEL and (ranks or self.bounds):
            raise VerifyException(f"{where}: data_parallel takes no ranks")
        if kind == PlacementKind.ROW_WISE:
            bounds = self.bounds
            if len(ranks) < 1 or len(bounds) != len(ranks) + 1:
                raise VerifyException(
                    f"{where}: row_wise needs one more row bound than ranks, got {len(ranks)} ranks "
                    f"and {len(bounds)} bounds"
                )
            if bounds[0] != 0 or any(b >= e for b, e in zip(bounds, bounds[1:])):
                raise VerifyException(
                    f"{where}: row ranges must start at 0 and be non-empty and increasing, got {bounds}"
                )

    def verify_for_table(self, table: TableAttr) -> None:
        """Checks that need the table: row ranges cover exactly its rows."""
        if self.kind.data == PlacementKind.ROW_WISE and self.bounds[-1] != table.rows.data:
            raise VerifyException(
                f"placement of table '{self.table.data}': row ranges cover rows [0, {self.bounds[-1]}) "
                f"but the table has {table.rows.data} rows"
            )

    def verify_ranks(self, world_size: int) -> None:
        for r in self.rank_list:
            if r >= world_size:
                raise VerifyException(
                    f"placement of table '{self.table.data}': rank {r} is out of range for world size {world_size}"
                )

    def owner_ranks(self, world_size: int) -> list[int]:
        if self.kind.data == PlacementKind.DATA_PARALLEL:
            return list(range(world_size))
        return self.rank_list


@irdl_attr_definition
class OptimizerAttr(ParametrizedAttribute):
    """The optimizer fused into `sparse.lookup_update`.

    `#sparse.optimizer<sgd, lr = 0.1>` or `#sparse.optimizer<rowwise_adagrad, lr = 0.1, eps = 1.0e-08>`.
    """

    name = "sparse.optimizer"

    kind: StringAttr
    lr: FloatData
    eps: FloatData

    def __init__(self, kind: str, lr: float, eps: float = 0.0):
        super().__init__(StringAttr(kind), FloatData(float(lr)), FloatData(float(eps)))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        eps = 0.0
        with parser.in_angle_brackets():
            kind = parser.parse_identifier(" for the optimizer kind")
            parser.parse_punctuation(",")
            parser.parse_keyword("lr")
            parser.parse_punctuation("=")
            lr = parse_float_or_int(parser)
            if parser.parse_optional_punctuation(",") is not None:
                parser.parse_keyword("eps")
                parser.parse_punctuation("=")
                eps = parse_float_or_int(parser)
        return (StringAttr(kind), FloatData(lr), FloatData(eps))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(f"{self.kind.data}, lr = {format_float(self.lr.data)}")
            if self.kind.data == OptimizerKind.ROWWISE_ADAGRAD:
                printer.print_string(f", eps = {format_float(self.eps.data)}")

    def verify(self) -> None:
        if self.kind.data not in set(OptimizerKind):
            raise VerifyException(
                f"unknown optimizer '{self.kind.data}'; expected one of {', '.join(OptimizerKind)}"
            )
        check_finite(self.lr.data, "optimizer lr")
        check_finite(self.eps.data, "optimizer eps")
        if self.lr.data <= 0:
            raise VerifyException(f"optimizer lr must be positive, got {self.lr.data}")
        if self.kind.data == OptimizerKind.ROWWISE_ADAGRAD and self.eps.data <= 0:
            raise VerifyException(f"rowwise_adagrad eps must be positive, got {self.eps.data}")
        if self.kind.data == OptimizerKind.SGD and self.eps.data != 0:
            raise VerifyException("sgd takes no eps")


@irdl_attr_definition
class LayoutAttr(ParametrizedAttribute):
    """Where each member of a packed buffer lives, per segment.

    `#sparse.layout<[[0 : 16, 16 : 8], [0 : 16, ? : ?]]>`: one row per segment (peer), one
    `offset : size` entry per member, in elements per sample. A static member of segment `s`
    occupies columns `[offset, offset + size)` of that segment viewed as `[batch, width_s]`;
    a jagged member (`? : ?`) follows the static part of its segment, in member order, with the
    length it has at run time. A member absent from a segment has size 0 there. A layout with
    no members (`[[], []]`) describes an empty buffer, e.g. what a rank without tables sends.
    """

    name = "sparse.layout"

    # Flattened [segments x members x (offset, size)].
    entries: ArrayAttr[IntAttr]
    num_members: IntAttr
    segment_count: IntAttr

    def __init__(self, segments: Sequence[Sequence[tuple[int, int]]]):
        members = len(segments[0]) if segments else 0
        flat = [v for seg in segments for entry in seg for v in entry]
        super().__init__(int_array(flat), IntAttr(members), IntAttr(len(segments)))

    @property
    def segments(self) -> list[list[tuple[int, int]]]:
        flat = ints(self.entries)
        m = self.num_members.data
        if m == 0:
            return [[] for _ in range(self.segment_count.data)]
        pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        return [pairs[i : i + m] for i in range(0, len(pairs), m)]

    @property
    def num_segments(self) -> int:
        return self.segment_count.data

    def static_width(self, segment: int) -> int:
        return sum(size for off, size in self.segments[segment] if off != DYNAMIC)

    def member_is_dynamic(self, member: int) -> bool:
        return any(seg[member][0] == DYNAMIC for seg in self.segments)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        def entry() -> tuple[int, int]:
            off = parse_int_or_dynamic(parser)
            parser.parse_punctuation(":")
            return off, parse_int_or_dynamic(parser)

        with parser.in_angle_brackets():
            segments = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE,
                lambda: parser.parse_comma_separated_list(parser.Delimiter.SQUARE, entry),
            )
        lengths = {len(s) for s in segments}
        if len(lengths) > 1:
            parser.raise_error("every segment of a layout must list the same members")
        layout = LayoutAttr(segments)
        return (layout.entries, layout.num_members, layout.segment_count)

    def print_parameters(self, printer: Printer) -> None:
        def entry(e: tuple[int, int]) -> None:
            print_int_or_dynamic(printer, e[0])
            printer.print_string(" : ")
            print_int_or_dynamic(printer, e[1])

        with printer.in_angle_brackets():
            printer.print_string("[")
            for i, seg in enumerate(self.segments):
                if i:
                    printer.print_string(", ")
                printer.print_string("[")
                printer.print_list(seg, entry)
                printer.print_string("]")
            printer.print_string("]")

    def verify(self) -> None:
        m, n = self.num_members.data, self.segment_count.data
        if n <= 0:
            raise VerifyException("a layout needs at least one segment")
        if len(self.entries.data) != 2 * m * n:
            raise VerifyException("layout entries do not form whole segments")
        for s, seg in enumerate(self.segments):
            static: list[tuple[int, int, int]] = []
            for i, (off, size) in enumerate(seg):
                if (off == DYNAMIC) != (size == DYNAMIC):
                    raise VerifyException(
                        f"layout member {i} in segment {s}: offset and size must both be static or both '?'"
                    )
                if off == DYNAMIC:
                    continue
                if off < 0 or size < 0:
                    raise VerifyException(f"layout member {i} in segment {s} has a negative offset or size")
                if size:
                    static.append((off, size, i))
            static.sort()
            cursor = 0
            for off, size, i in static:
                if off < cursor:
                    raise VerifyException(
                        f"layout member {i} in segment {s} overlaps another member at offset {off}"
                    )
                if off > cursor:
                    raise VerifyException(
                        f"layout segment {s} is not covered: gap [{cursor}, {off}) before member {i}"
                    )
                cursor = off + size


# --------------------------------------------------------------------------------------
# Helpers for op verifiers
# --------------------------------------------------------------------------------------


def _check_int_1d(value: SSAValue, what: str) -> TensorType:
    t = tensor_type(value, what)
    if len(t.get_shape()) != 1 or not isinstance(t.element_type, IntegerType):
        raise VerifyException(f"{what} must be a 1-D integer tensor, got {t}")
    return t


def _check_float_1d(value: SSAValue, what: str) -> TensorType:
    t = tensor_type(value, what)
    if len(t.get_shape()) != 1 or not isinstance(t.element_type, AnyFloat):
        raise VerifyException(f"{what} must be a 1-D float tensor, got {t}")
    return t


def _check_pooled(type_: Attribute, table: TableAttr, what: str) -> None:
    """A pooled value or its gradient: [bags, dim * k] in the table's dtype."""
    t = tensor_type(type_, what)
    shape = t.get_shape()
    if len(shape) != 2:
        raise VerifyException(f"{what} must be 2-D [bags, dim], got {t}")
    if t.element_type != table.dtype:
        raise VerifyException(
            f"{what} has dtype {t.element_type} but table '{table.name_str}' has dtype {table.dtype}"
        )
    if shape[1] >= 0 and shape[1] % table.dim.data:
        raise VerifyException(
            f"{what} has width {shape[1]} but table '{table.name_str}' has dim {table.dim.data}"
        )


def _check_slots_width(type_: Attribute, table: TableAttr, slots: int, what: str) -> None:
    """A table-local pooled value (or its gradient): [bags, dim * slots] in the table's dtype."""
    _check_pooled(type_, table, what)
    width = dim(tensor_type(type_, what), 1)
    want = table.dim.data * slots
    if width not in (DYNAMIC, want):
        raise VerifyException(
            f"{what} has width {width}, expected dim {table.dim.data} x {slots} slots = {want}"
        )


# --------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------


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
            _check_int_1d(ids, f"ids of feature '{fname}'")
            _check_int_1d(offs, f"offsets of feature '{fname}'")
            _check_pooled(res.type, tables[f.table.data], f"pooled result of feature '{fname}'")
            if dim(tensor_type(res, ""), 1) not in (DYNAMIC, tables[f.table.data].dim.data):
                raise VerifyException(
                    f"pooled result of feature '{fname}' has width {dim(tensor_type(res, ''), 1)} "
                    f"but table '{f.table.data}' has dim {tables[f.table.data].dim.data}"
                )
        for w in self.weights:
            _check_float_1d(w, "per-sample weights")
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
            raise VerifyException(f"sparse.route: feature '{next(x for x in names if names.count(x) > 1)}' is listed twice")
        for f in features:
            if f.table.data not in placed:
                raise VerifyException(
                    f"sparse.route: feature '{f.feature_name.data}' maps to table '{f.table.data}', which has no placement"
                )
        for p in self.placements.data:
            p.verify_ranks(self.world_size.value.data)
        for v in (*self.ids, *self.offsets):
            _check_int_1d(v, "sparse.route operand")
        _check_int_1d(self.lengths, "routed lengths")
        _check_int_1d(self.indices, "routed indices")
        st = _check_int_1d(self.splits, "routed splits")
        if dim(st, 0) not in (DYNAMIC, self.world_size.value.data):
            raise VerifyException(
                f"routed splits must have one entry per rank ({self.world_size.value.data}), got {st}"
            )
        for w in self.routed_weights:
            _check_float_1d(w, "routed weights")
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
    _check_int_1d(op.lengths, f"lengths of table '{table.name_str}'")
    it = _check_int_1d(op.indices, f"indices of table '{table.name_str}'")
    if it.element_type not in (IntegerType(32), IntegerType(64)):
        raise VerifyException(f"indices of table '{table.name_str}' must be i32 or i64, got {it.element_type}")
    if op.weights is not None:
        _check_float_1d(op.weights, f"weights of table '{table.name_str}'")
    return table


def _check_step_refs(op: LookupOp | LookupUpdateOp | LookupGradOp) -> None:
    """Table, placement, slots and weights against the route of the enclosing step (see _refs)."""
    table = op.table
    weighted = None if op.lengths is None else op.weights is not None  # the dense update reads no ids
    check_table_ref(op, f"{op.name} of table '{table.name_str}'", table, op.placement, list(op.slots.get_values()),
                    weighted, op.lengths)
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
        _check_slots_width(self.pooled.type, table, len(self.slots), f"pooled result of table '{table.name_str}'")
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
        printer.print_list([v.type for v in (self.lengths, self.indices) if v is not None] + [self.grad.type], printer.print_attribute)

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
            _check_table_grad(self.grad.type, table, f"dense gradient of table '{table.name_str}'")
            _check_step_refs(self)
            return
        if self.indices is None:
            raise VerifyException(f"sparse.lookup_update of table '{table.name_str}': lengths need indices")
        _verify_lookup_common(self)
        _check_slots_width(self.grad.type, table, len(self.slots), f"gradient of table '{table.name_str}'")
        _check_step_refs(self)


def _check_table_grad(type_: Attribute, table: TableAttr, what: str) -> None:
    t = tensor_type(type_, what)
    want = [table.rows.data, table.dim.data]
    if t.get_shape() != tuple(want) and list(t.get_shape()) != want:
        raise VerifyException(f"{what} must have the table's shape {want}, got {t}")
    if t.element_type != table.dtype:
        raise VerifyException(f"{what} has dtype {t.element_type} but table '{table.name_str}' has dtype {table.dtype}")


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
        _check_slots_width(self.grad.type, table, len(self.slots), f"gradient of table '{table.name_str}'")
        _check_table_grad(self.table_grad.type, table, f"table gradient of '{table.name_str}'")
        _check_step_refs(self)


def _member_width(type_: TensorType) -> int:
    """Elements per sample of a member: columns of a 2-D member, 1 for a static 1-D one."""
    shape = type_.get_shape()
    if len(shape) == 2:
        return DYNAMIC if shape[1] < 0 else shape[1]
    return DYNAMIC


def _verify_layout_members(op_name: str, layout: LayoutAttr, members: Sequence[SSAValue], buffer: SSAValue) -> None:
    if layout.num_members.data != len(members):
        raise VerifyException(
            f"{op_name}: layout describes {layout.num_members.data} members but the op has {len(members)}"
        )
    bt = tensor_type(buffer, f"{op_name} buffer")
    if len(bt.get_shape()) != 1:
        raise VerifyException(f"{op_name}: the packed buffer must be 1-D, got {bt}")
    for i, m in enumerate(members):
        mt = tensor_type(m, f"{op_name} member {i}")
        if len(mt.get_shape()) not in (1, 2):
            raise VerifyException(f"{op_name}: member {i} must be 1-D or 2-D, got {mt}")
        same = mt.element_type == bt.element_type
        widening = (
            isinstance(mt.element_type, IntegerType)
            and isinstance(bt.element_type, IntegerType)
            and mt.element_type.width.data < bt.element_type.width.data
        )
        if not (same or widening):
            raise VerifyException(
                f"{op_name}: member {i} has element type {mt.element_type}, which the {bt.element_type} "
                f"buffer cannot hold exactly"
            )
        width = _member_width(mt)
        dynamic = layout.member_is_dynamic(i)
        if dynamic and len(mt.get_shape()) != 1:
            raise VerifyException(f"{op_name}: jagged member {i} ('?' in the layout) must be 1-D, got {mt}")
        if not dynamic and len(mt.get_shape()) == 2 and width != DYNAMIC:
            sizes = {seg[i][1] for seg in layout.segments if seg[i][1]}
            for size in sizes:
                if width == 0 or size % width:
                    raise VerifyException(
                        f"{op_name}: member {i} has {width} columns but the layout gives it {size} per sample"
                    )


class PackUnpackCanonicalization(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        return (FoldUnpackOfPack(), FoldSingleMemberPack(), FoldSingleMemberUnpack())


@irdl_op_definition
class PackOp(IRDLOperation):
    """Pack members into one segmented buffer following an explicit layout."""

    name = "sparse.pack"

    members = var_operand_def(TensorType)
    buffer = result_def(TensorType)
    layout = prop_def(LayoutAttr)
    rank = opt_prop_def(IntegerAttr[I64])

    traits = traits_def(Pure(), PackUnpackCanonicalization())

    assembly_format = "$members `layout` `=` qualified($layout) (`on_rank` $rank^)? attr-dict `:` type($members) `->` type($buffer)"

    def verify_(self) -> None:
        _verify_layout_members(self.name, self.layout, self.members, self.buffer)
        if self.rank is not None:
            check_rank(self, self.rank.value.data)
        check_group_label(self)


@irdl_op_definition
class UnpackOp(IRDLOperation):
    """Split a segmented buffer into members. Its layout may slice the buffer differently from the
    `sparse.pack` that made it (e.g. pack per table, unpack per feature), but it must read the
    same segments with the same widths."""

    name = "sparse.unpack"

    buffer = operand_def(TensorType)
    members = var_result_def(TensorType)
    layout = prop_def(LayoutAttr)
    rank = opt_prop_def(IntegerAttr[I64])

    traits = traits_def(Pure(), PackUnpackCanonicalization())

    assembly_format = "$buffer `layout` `=` qualified($layout) (`on_rank` $rank^)? attr-dict `:` type($buffer) `->` type($members)"

    def verify_(self) -> None:
        _verify_layout_members(self.name, self.layout, self.members, self.buffer)
        if self.rank is not None:
            check_rank(self, self.rank.value.data)
        check_group_label(self)
        check_unpack_segments(self, self.layout, None if self.rank is None else self.rank.value.data, self.buffer)
        src = self.buffer.owner
        if isinstance(src, PackOp) and src.layout == self.layout:
            for i, (a, b) in enumerate(zip(src.members, self.members)):
                if a.type != b.type:
                    raise VerifyException(
                        f"sparse.unpack does not match its sparse.pack: member {i} was packed as {a.type} "
                        f"but is unpacked as {b.type}"
                    )
        elif isinstance(src, PackOp):
            packed, unpacked = src.layout, self.layout
            if packed.num_segments != unpacked.num_segments:
                raise VerifyException(
                    f"sparse.unpack does not match its sparse.pack: {unpacked.num_segments} segments are read "
                    f"but {packed.num_segments} were packed"
                )
            for seg in range(packed.num_segments):
                if packed.static_width(seg) != unpacked.static_width(seg):
                    raise VerifyException(
                        f"sparse.unpack does not match its sparse.pack: segment {seg} holds "
                        f"{packed.static_width(seg)} elements per sample but {unpacked.static_width(seg)} are read"
                    )


def _verify_jagged_members(op: IRDLOperation, lengths: SSAValue, indices: SSAValue, weights: SSAValue | None,
                           buffer: SSAValue, sizes: SSAValue, features: DenseArrayBase) -> None:
    name = op.name
    for what, v in (("lengths", lengths), ("indices", indices), ("buffer", buffer)):
        t = tensor_type(v, f"{name} {what}")
        if len(t.get_shape()) != 1 or not isinstance(t.element_type, IntegerType):
            raise VerifyException(f"{name}: {what} must be a 1-D integer tensor, got {t}")
    if tensor_type(lengths, "").element_type != i32:
        raise VerifyException(f"{name}: lengths must be i32, got {tensor_type(lengths, '').element_type}")
    if tensor_type(buffer, "").element_type != i64:
        raise VerifyException(f"{name}: the packed buffer must be i64 (the widest member), got {tensor_type(buffer, '').element_type}")
    if weights is not None:
        t = tensor_type(weights, f"{name} weights")
        if len(t.get_shape()) != 1 or t.element_type != f32:
            raise VerifyException(f"{name}: weights must be a 1-D f32 tensor (bit-cast into the buffer), got {t}")
    counts = list(features.get_values())
    if not counts or any(c < 0 for c in counts):
        raise VerifyException(f"{name}: features must list a non-negative count per rank, got {counts}")
    world = enclosing_world_size(op)
    if world is not None and len(counts) != world:
        raise VerifyException(f"{name}: features has {len(counts)} entries but the world size is {world}")
    t = tensor_type(sizes, f"{name} sizes")
    if t.get_shape() != (len(counts),) or t.element_type != i64:
        raise VerifyException(f"{name}: sizes must be tensor<{len(counts)}xi64> (one count per rank), got {t}")


@irdl_op_definition
class PackIdsOp(IRDLOperation):
    """Pack a route's jagged outputs into one buffer per destination rank, for one exchange.

    Segment `d` of the buffer holds what goes to rank `d`: its `features[d] x batch` lengths,
    then its ids, then (when present) the ids' weights, bit-cast from f32 and sign-extended, so
    the round trip is exact. `sizes[d]` is the segment's element count (the exchange's send
    splits).
    """

    name = "sparse.pack_ids"

    lengths = operand_def(TensorType)
    indices = operand_def(TensorType)
    weights = opt_operand_def(TensorType)
    buffer = result_def(TensorType)
    sizes = result_def(TensorType)
    features = prop_def(DenseArrayBase[I64])

    traits = traits_def(Pure())

    assembly_format = (
        "$lengths `,` $indices (`weights` $weights^ `:` type($weights))? `features` `=` $features attr-dict "
        "`:` type($lengths) `,` type($indices) `->` type($buffer) `,` type($sizes)"
    )

    def verify_(self) -> None:
        _verify_jagged_members(self, self.lengths, self.indices, self.weights, self.buffer, self.sizes, self.features)
        check_segment_counts(self, list(self.features.get_values()), self.lengths, "features =")


@irdl_op_definition
class UnpackIdsOp(IRDLOperation):
    """Split a received `sparse.pack_ids` buffer back into lengths, ids and weights.

    Every source segment holds `features[r] x batch` lengths for this rank `r`, then as many ids
    as those lengths add up to, then their weights when `weights` is produced; `sizes` are the
    received segment sizes. The results concatenate the sources in rank order, as separate
    exchanges of lengths, ids and weights would.
    """

    name = "sparse.unpack_ids"

    buffer = operand_def(TensorType)
    sizes = operand_def(TensorType)
    lengths = result_def(TensorType)
    indices = result_def(TensorType)
    weights = opt_result_def(TensorType)
    features = prop_def(DenseArrayBase[I64])

    traits = traits_def(Pure())

    assembly_format = (
        "$buffer `,` $sizes `features` `=` $features attr-dict `:` type($buffer) `,` type($sizes) `->` "
        "type($lengths) `,` type($indices) (`,` type($weights)^)?"
    )

    def verify_(self) -> None:
        _verify_jagged_members(self, self.lengths, self.indices, self.weights, self.buffer, self.sizes, self.features)
        check_segment_counts(self, list(self.features.get_values()), self.buffer, "features =")


@irdl_op_definition
class PermuteOp(IRDLOperation):
    """Put pooled outputs back in model feature order: result `i` is operand `order[i]`."""

    name = "sparse.permute"

    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    order = prop_def(DenseArrayBase[I64])

    traits = traits_def(Pure())

    assembly_format = "$inputs `order` `=` $order attr-dict `:` type($inputs) `->` type($outputs)"

    def verify_(self) -> None:
        order = list(self.order.get_values())
        n = len(self.inputs)
        if sorted(order) != list(range(n)) or len(self.outputs) != n:
            raise VerifyException(f"sparse.permute: order {order} is not a permutation of {n} inputs")
        for i, j in enumerate(order):
            if self.outputs[i].type != self.inputs[j].type:
                raise VerifyException(
                    f"sparse.permute: result {i} has type {self.outputs[i].type} but input {j} has {self.inputs[j].type}"
                )
        check_group_label(self)


# --------------------------------------------------------------------------------------
# Canonicalization patterns
# --------------------------------------------------------------------------------------


class FoldUnpackOfPack(RewritePattern):
    """unpack(pack(x)) with the same layout and member types is x."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter, /):
        if not isinstance(op, UnpackOp):
            return
        src = op.buffer.owner
        if not isinstance(src, PackOp) or src.layout != op.layout or src.rank != op.rank:
            return
        if [m.type for m in src.members] != [r.type for r in op.members]:
            return
        rewriter.replace_op(op, [], list(src.members))


def _single_member_identity(layout: LayoutAttr, member: SSAValue, buffer: SSAValue) -> bool:
    """A one-member, one-segment layout with the member's exact element type is a no-op."""
    if layout.num_members.data != 1 or layout.num_segments != 1:
        return False
    mt, bt = tensor_type(member, ""), tensor_type(buffer, "")
    if mt.element_type != bt.element_type or len(mt.get_shape()) != 1:
        return False
    return mt == bt


class FoldSingleMemberPack(RewritePattern):
    def match_and_rewrite(self, op, rewriter: PatternRewriter, /):
        if isinstance(op, PackOp) and len(op.members) == 1 and _single_member_identity(
            op.layout, op.members[0], op.buffer
        ):
            rewriter.replace_op(op, [], [op.members[0]])


class FoldSingleMemberUnpack(RewritePattern):
    def match_and_rewrite(self, op, rewriter: PatternRewriter, /):
        if isinstance(op, UnpackOp) and len(op.members) == 1 and _single_member_identity(
            op.layout, op.members[0], op.buffer
        ):
            rewriter.replace_op(op, [], [op.buffer])


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
    ],
    [TableAttr, FeatureAttr, PlacementAttr, OptimizerAttr, LayoutAttr],
)

__all__ = [
    "Sparse",
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
    "PermuteOp",
    "str_array",
    "strs",
]
