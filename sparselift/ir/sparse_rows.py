"""The `sparse` dialect's jagged rows ops: an unpooled table's rows exchanged one per id, not one
per id position.

An unpooled table's features are bags of at most one id (one feature per id position, padding
dropped). A padded rows exchange (`sparse.lookup` + `sparse.pack` / `sparse.unpack`) carries a
row for every bag, empty or not; these ops carry only the ids' rows, sized at run time by the ids
each rank routed:

- `sparse.gather_rows`, on every rank of the group (a rank that owns no table of it received no
  ids): the received ids' rows back to back, in the order the ids arrived (source-major, then
  feature-major, then sample), and how many elements go back to each source. The table is on
  one rank, or row-wise: each id went to the rank whose row range holds it, so either way each
  id has one owner, which returns its whole row;
- `sparse.row_splits`: per-peer id counts (a route's `splits`) as element counts of rows of
  `dim` (what a rank receives back, and sends as gradients);
- `sparse.expand_rows`, on the samples' side: the received rows as one `[batch, dim]` value per
  feature, zeros where a bag is empty, the members placed as the padded exchange's
  `sparse.unpack` layout places them (segment `s`: the features owner `s` serves; a row-wise
  table's ranks each serve every feature, and a bag's row is in the segment of its id's owner);
- `sparse.compact_rows`: the reverse, for the gradients: the rows of the non-empty bags, in the
  order the ids were sent;
- `sparse.rows_update`: the table's update from per-id gradients (one row per received id, in
  received order), per occurrence, as `sparse.lookup_update` applies one-id bags.

`compact-rows` (passes/compact_rows.py) rewrites a padded rows exchange into these.
`dedup-ids` (passes/dedup_ids.py) then sends each distinct id once per destination:

- `sparse.unique_ids`: a route's ids without the repeats of each destination segment, how many
  each segment keeps, and where each routed id went;
- `sparse.take_rows`: the distinct ids' rows back to one row per routed id (before the expand);
- `sparse.sum_rows`: the routed ids' gradient rows summed into one per distinct id (after the
  compaction).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import I64, DenseArrayBase, IntegerAttr, IntegerType, TensorType
from xdsl.ir import SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from sparselift.ir._checks import check_float_1d, check_ids, check_int_1d
from sparselift.ir._refs import check_group_label, check_table_ref, enclosing_world_size
from sparselift.ir._syntax import DYNAMIC, dim, tensor_type
from sparselift.ir.sparse_attrs import LayoutAttr, OptimizerAttr, PlacementAttr, PlacementKind, TableAttr


def _check_table(op: GatherRowsOp | RowsUpdateOp) -> TableAttr:
    """An unpooled table placed table-wise or row-wise (one owner per id), its placement, and its
    rows' element type."""
    table = op.table
    what = f"{op.name} of table '{table.name_str}'"
    if op.placement.table.data != table.name_str:
        raise VerifyException(f"{what}: placement is for table '{op.placement.table.data}'")
    op.placement.verify_for_table(table)
    world = enclosing_world_size(op)
    if world is not None:
        op.placement.verify_ranks(world)
    if not table.is_unpooled:
        raise VerifyException(f"{what}: the table is {table.pooling.data}-pooled; only unpooled rows go one per id")
    if op.placement.kind.data == PlacementKind.DATA_PARALLEL:
        raise VerifyException(
            f"{what}: placement {op.placement.kind.data} (a replicated table's rows are read locally, not sent)"
        )
    slots = list(op.slots.get_values())
    if not slots or len(set(slots)) != len(slots) or min(slots) < 0:
        raise VerifyException(f"{what}: slots {slots} must be distinct, non-negative and not empty")
    return table


def _check_rows(value: SSAValue, table: TableAttr, what: str) -> None:
    t = check_float_1d(value, what)
    if t.element_type != table.dtype:
        raise VerifyException(f"{what} has dtype {t.element_type} but table '{table.name_str}' has {table.dtype}")


def _check_splits(value: SSAValue, world: int | None, what: str) -> None:
    t = check_int_1d(value, what)
    if world is not None and dim(t, 0) not in (DYNAMIC, world):
        raise VerifyException(f"{what} needs one entry per rank ({world}), got {t}")


@irdl_op_definition
class GatherRowsOp(IRDLOperation):
    """The received ids' rows, one per id, back to back; `splits[s]`: the elements of source `s`'s."""

    name = "sparse.gather_rows"

    lengths = operand_def(TensorType)
    indices = operand_def(TensorType)
    rows = result_def(TensorType)
    splits = result_def(TensorType)

    table = prop_def(TableAttr)
    placement = prop_def(PlacementAttr)
    slots = prop_def(DenseArrayBase[I64])

    assembly_format = (
        "$lengths `,` $indices `table` `=` qualified($table) `placement` `=` qualified($placement) "
        "`slots` `=` $slots attr-dict `:` type($lengths) `,` type($indices) `->` type($rows) `,` type($splits)"
    )

    def verify_(self) -> None:
        table = _check_table(self)
        what = f"{self.name} of table '{table.name_str}'"
        check_ids(self.lengths, self.indices, None, what)
        _check_rows(self.rows, table, f"rows of {what}")
        _check_splits(self.splits, enclosing_world_size(self), f"splits of {what}")
        check_table_ref(self, what, table, self.placement, list(self.slots.get_values()), False, self.lengths)
        check_group_label(self)


@irdl_op_definition
class RowSplitsOp(IRDLOperation):
    """Per-peer id counts as element counts of rows of `dim` (`counts[p] * dim`)."""

    name = "sparse.row_splits"

    counts = operand_def(TensorType)
    splits = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())

    assembly_format = "$counts `dim` `=` $dim attr-dict `:` type($counts) `->` type($splits)"

    def verify_(self) -> None:
        if self.dim.value.data < 1:
            raise VerifyException(f"{self.name}: dim must be positive, got {self.dim.value.data}")
        world = enclosing_world_size(self)
        _check_splits(self.counts, world, f"counts of {self.name}")
        _check_splits(self.splits, world, f"splits of {self.name}")
        check_group_label(self)


def _check_row_members(op_name: str, layout: LayoutAttr, members: Sequence[SSAValue], rows: SSAValue, width: int):
    """Members `[bags, dim]` of the rows' dtype, each placed in a segment as one feature of `dim`
    elements per sample (or absent there); a static layout."""
    if layout.num_members.data != len(members):
        raise VerifyException(
            f"{op_name}: layout describes {layout.num_members.data} members but the op has {len(members)}"
        )
    rt = check_float_1d(rows, f"rows of {op_name}")
    for i, m in enumerate(members):
        mt = tensor_type(m, f"{op_name} member {i}")
        if len(mt.get_shape()) != 2 or dim(mt, 1) not in (DYNAMIC, width):
            raise VerifyException(f"{op_name}: member {i} must be [bags, {width}], got {mt}")
        if mt.element_type != rt.element_type:
            raise VerifyException(f"{op_name}: member {i} has dtype {mt.element_type}, the rows {rt.element_type}")
    for s, seg in enumerate(layout.segments):  # the layout itself checks for gaps and overlaps
        for i, (off, size) in enumerate(seg):
            if off == DYNAMIC or size == DYNAMIC:
                raise VerifyException(f"{op_name}: member {i} is jagged in segment {s}; rows members are static")
            if size not in (0, width) or off % width:
                raise VerifyException(
                    f"{op_name}: member {i} is {off} : {size} in segment {s}; a feature's row is one slot of {width}"
                )
    placed = [seg for seg in layout.segments if any(size for _, size in seg)]
    held = [sum(1 for seg in placed if seg[i][1]) for i in range(len(members))]
    if any(n > 1 for n in held) and any(seg != placed[0] for seg in placed):
        twice = next(i for i, n in enumerate(held) if n > 1)
        raise VerifyException(
            f"{op_name}: member {twice} is in {held[twice]} segments, but the segments differ; a row-wise "
            "table's segments each hold every member at the same place"
        )


@irdl_op_definition
class ExpandRowsOp(IRDLOperation):
    """Received rows (one per id sent) into one `[batch, dim]` value per feature; `lengths`
    are the route's (bags of at most one id, segment `s` holding the features sent to `s`)."""

    name = "sparse.expand_rows"

    rows = operand_def(TensorType)
    lengths = operand_def(TensorType)
    members = var_result_def(TensorType)
    layout = prop_def(LayoutAttr)
    dim = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())

    assembly_format = (
        "$rows `,` $lengths `layout` `=` qualified($layout) `dim` `=` $dim attr-dict "
        "`:` type($rows) `,` type($lengths) `->` type($members)"
    )

    def verify_(self) -> None:
        check_int_1d(self.lengths, f"lengths of {self.name}")
        _check_row_members(self.name, self.layout, self.members, self.rows, self.dim.value.data)
        check_group_label(self)


@irdl_op_definition
class CompactRowsOp(IRDLOperation):
    """The rows of the non-empty bags of `members` (laid out as `layout`), back to back in the
    order the route sent their ids: `sparse.expand_rows` in reverse."""

    name = "sparse.compact_rows"

    lengths = operand_def(TensorType)
    members = var_operand_def(TensorType)
    rows = result_def(TensorType)
    layout = prop_def(LayoutAttr)
    dim = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())

    assembly_format = (
        "$lengths `,` $members `layout` `=` qualified($layout) `dim` `=` $dim attr-dict "
        "`:` type($lengths) `,` type($members) `->` type($rows)"
    )

    def verify_(self) -> None:
        check_int_1d(self.lengths, f"lengths of {self.name}")
        _check_row_members(self.name, self.layout, self.members, self.rows, self.dim.value.data)
        check_group_label(self)


@irdl_op_definition
class RowsUpdateOp(IRDLOperation):
    """The table's optimizer update from per-id gradients: row `i` of `grad` is the gradient of
    received id `i` (per occurrence, in received order)."""

    name = "sparse.rows_update"

    indices = operand_def(TensorType)
    grad = operand_def(TensorType)

    table = prop_def(TableAttr)
    placement = prop_def(PlacementAttr)
    slots = prop_def(DenseArrayBase[I64])
    optimizer = prop_def(OptimizerAttr)

    assembly_format = (
        "$indices `grad` $grad `table` `=` qualified($table) `placement` `=` qualified($placement) "
        "`slots` `=` $slots `optimizer` `=` qualified($optimizer) attr-dict `:` type($indices) `,` type($grad)"
    )

    def verify_(self) -> None:
        table = _check_table(self)
        what = f"{self.name} of table '{table.name_str}'"
        it = check_int_1d(self.indices, f"indices of {what}")
        if it.element_type not in (IntegerType(32), IntegerType(64)):
            raise VerifyException(f"indices of {what} must be i32 or i64, got {it.element_type}")
        _check_rows(self.grad, table, f"gradient of {what}")
        check_table_ref(self, what, table, self.placement, list(self.slots.get_values()), False, None)
        check_group_label(self)


@irdl_op_definition
class UniqueIdsOp(IRDLOperation):
    """A route's ids, each destination segment's repeats removed (`dedup-ids`): `unique` holds
    segment `p`'s distinct ids (sorted) after segment `p - 1`'s, `counts[p]` how many, and
    `inverse[i]` where routed id `i` went in `unique`."""

    name = "sparse.unique_ids"

    indices = operand_def(TensorType)
    splits = operand_def(TensorType)
    unique = result_def(TensorType)
    counts = result_def(TensorType)
    inverse = result_def(TensorType)

    traits = traits_def(Pure())

    assembly_format = (
        "$indices `,` $splits attr-dict `:` type($indices) `,` type($splits) `->` "
        "type($unique) `,` type($counts) `,` type($inverse)"
    )

    def verify_(self) -> None:
        world = enclosing_world_size(self)
        it = check_int_1d(self.indices, f"indices of {self.name}")
        if self.unique.type != it:
            raise VerifyException(f"{self.name}: unique ids have type {self.unique.type}, the ids {it}")
        _check_splits(self.splits, world, f"splits of {self.name}")
        _check_splits(self.counts, world, f"counts of {self.name}")
        check_int_1d(self.inverse, f"inverse of {self.name}")
        check_group_label(self)


class _RowsByInverse(IRDLOperation):
    """Rows of `dim` elements back to back, moved through an `inverse` of `sparse.unique_ids`."""

    rows = operand_def(TensorType)
    inverse = operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])

    def verify_(self) -> None:
        if self.dim.value.data < 1:
            raise VerifyException(f"{self.name}: dim must be positive, got {self.dim.value.data}")
        rt = check_float_1d(self.rows, f"rows of {self.name}")
        if self.result.type != rt:
            raise VerifyException(f"{self.name}: the result has type {self.result.type}, the rows {rt}")
        check_int_1d(self.inverse, f"inverse of {self.name}")
        check_group_label(self)


@irdl_op_definition
class TakeRowsOp(_RowsByInverse):
    """One row per routed id from one row per distinct id: `result[i] = rows[inverse[i]]`."""

    name = "sparse.take_rows"

    traits = traits_def(Pure())

    assembly_format = (
        "$rows `,` $inverse `dim` `=` $dim attr-dict `:` type($rows) `,` type($inverse) `->` type($result)"
    )


@irdl_op_definition
class SumRowsOp(_RowsByInverse):
    """One row per distinct id from one row per routed id, summed: `result[inverse[i]] += rows[i]`;
    `counts` (of `sparse.unique_ids`) size the result."""

    name = "sparse.sum_rows"

    rows = operand_def(TensorType)
    inverse = operand_def(TensorType)
    counts = operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())

    assembly_format = (
        "$rows `,` $inverse `,` $counts `dim` `=` $dim attr-dict `:` type($rows) `,` type($inverse) `,` "
        "type($counts) `->` type($result)"
    )

    def verify_(self) -> None:
        super().verify_()
        _check_splits(self.counts, enclosing_world_size(self), f"counts of {self.name}")


ROWS_OPS = (
    GatherRowsOp,
    RowSplitsOp,
    ExpandRowsOp,
    CompactRowsOp,
    RowsUpdateOp,
    UniqueIdsOp,
    TakeRowsOp,
    SumRowsOp,
)

__all__ = [
    "GatherRowsOp",
    "RowSplitsOp",
    "ExpandRowsOp",
    "CompactRowsOp",
    "RowsUpdateOp",
    "UniqueIdsOp",
    "TakeRowsOp",
    "SumRowsOp",
    "ROWS_OPS",
]
