"""The `sparse` dialect's attributes: tables, features, placements, optimizers and buffer layouts.

`sparselift.ir.sparse` re-exports every name here; ops live in the other `sparse_*` modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import auto

from xdsl.dialects.builtin import AnyFloat, ArrayAttr, FloatData, IntAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from sparselift.ir._syntax import (
    DYNAMIC,
    check_finite,
    format_float,
    int_array,
    ints,
    parse_float_or_int,
    parse_int_list,
    parse_int_or_dynamic,
    print_int_list,
    print_int_or_dynamic,
)
from sparselift.optim_rules import OptimizerKind

FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")


class Pooling(StrEnum):
    SUM = auto()
    MEAN = auto()
    NONE = auto()  # unpooled (`nn.Embedding`): every bag of the table's features holds at most one id


class PlacementKind(StrEnum):
    TABLE_WISE = auto()
    ROW_WISE = auto()
    DATA_PARALLEL = auto()


# --------------------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------------------


@irdl_attr_definition
class TableAttr(ParametrizedAttribute):
    """An embedding table: `#sparse.table<"t0", rows = 1460, dim = 16, f32, sum>`.

    `distinct` (printed when under 1, `..., none, distinct = 0.4>`): the share of a batch's ids
    of this table that are distinct, over all its features (workload statistics from the export's
    example inputs, like the features' pooling factors). It sizes what `dedup-ids` sends; 1 (no
    repeats) is the upper bound it takes when nothing was measured.
    """

    name = "sparse.table"

    table_name: StringAttr
    rows: IntAttr
    dim: IntAttr
    dtype: Attribute
    pooling: StringAttr
    distinct: FloatData

    def __init__(
        self, table_name: str, rows: int, dim: int, dtype: Attribute, pooling: str = "sum", distinct: float = 1.0
    ):
        super().__init__(
            StringAttr(table_name), IntAttr(rows), IntAttr(dim), dtype, StringAttr(pooling), FloatData(float(distinct))
        )

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
            distinct = 1.0
            if parser.parse_optional_punctuation(",") is not None:
                parser.parse_keyword("distinct")
                parser.parse_punctuation("=")
                distinct = parse_float_or_int(parser)
        return (StringAttr(name), IntAttr(rows), IntAttr(dim_), dtype, StringAttr(pooling), FloatData(distinct))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.table_name.data)
            printer.print_string(f", rows = {self.rows.data}, dim = {self.dim.data}, ")
            printer.print_attribute(self.dtype)
            printer.print_string(f", {self.pooling.data}")
            if self.distinct.data != 1.0:
                printer.print_string(f", distinct = {format_float(self.distinct.data)}")

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
            raise VerifyException(f"{where} has pooling '{self.pooling.data}'; supported: {', '.join(Pooling)}")
        check_finite(self.distinct.data, f"distinct of {where}")
        if not 0.0 < self.distinct.data <= 1.0:
            raise VerifyException(f"{where}: distinct is a share of its ids, in (0, 1], got {self.distinct.data:g}")

    @property
    def name_str(self) -> str:
        return self.table_name.data

    @property
    def is_unpooled(self) -> bool:
        return self.pooling.data == Pooling.NONE

    @property
    def kernel_pooling(self) -> str:
        """The pooling the table's kernels compute: an unpooled table's bags hold at most one id
        (one bag per id position, an empty bag for a padding id), so their sum is the gather."""
        return Pooling.SUM if self.is_unpooled else self.pooling.data


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

    def __init__(self, table: str, kind: str, ranks: Sequence[int] = (), row_bounds: Sequence[int] = ()):
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
    """The optimizer fused into a table's update: its kind (which fixes the update rule and the
    state kept per row, `sparselift.optim_rules`) and its hyperparameter group.

    `#sparse.optimizer<adam>` (group 0) or `#sparse.optimizer<rowwise_adagrad, group = 1>`. The
    hyperparameters (learning rate, eps, betas, weight decay) are not in the IR: they are run-time
    values of group `group` of the compiled model's `sparse_optimizer`, which a learning-rate
    schedule changes without a recompile and which no plan or cache key depends on.
    """

    name = "sparse.optimizer"

    kind: StringAttr
    group: IntAttr

    def __init__(self, kind: str, group: int = 0):
        super().__init__(StringAttr(str(kind)), IntAttr(int(group)))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        group = 0
        with parser.in_angle_brackets():
            kind = parser.parse_identifier(" for the optimizer kind")
            if parser.parse_optional_punctuation(",") is not None:
                pos = parser.pos
                key = parser.parse_identifier(" for 'group'")
                if key != "group":
                    parser.raise_error(
                        f"expected 'group', got '{key}': hyperparameters such as lr are run-time values "
                        "(the compiled model's sparse_optimizer.param_groups), not part of the IR",
                        pos,
                    )
                parser.parse_punctuation("=")
                group = parser.parse_integer(allow_boolean=False, allow_negative=True)
        return (StringAttr(kind), IntAttr(group))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(self.kind.data)
            if self.group.data:
                printer.print_string(f", group = {self.group.data}")

    @property
    def optimizer_kind(self) -> OptimizerKind:
        return OptimizerKind(self.kind.data)

    def verify(self) -> None:
        if self.kind.data not in set(OptimizerKind):
            raise VerifyException(f"unknown optimizer '{self.kind.data}'; expected one of {', '.join(OptimizerKind)}")
        if self.group.data < 0:
            raise VerifyException(f"optimizer group must be non-negative, got {self.group.data}")


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
                    raise VerifyException(f"layout member {i} in segment {s} overlaps another member at offset {off}")
                if off > cursor:
                    raise VerifyException(f"layout segment {s} is not covered: gap [{cursor}, {off}) before member {i}")
                cursor = off + size
