"""Plan-module emitters of the jagged rows ops (`sparselift/ir/sparse_rows.py`): each op becomes
one call of `sparselift.runtime.rows` (as `rt.<name>`).

The owner's gather runs on every rank (a rank without the table receives no ids and sends an
empty buffer, so the exchange after it has one input); the update runs on the table's ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, cast

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

from sparselift.ir.sparse import (
    CompactRowsOp,
    ExpandRowsOp,
    GatherRowsOp,
    LayoutAttr,
    RowSplitsOp,
    RowsUpdateOp,
    SumRowsOp,
    TakeRowsOp,
    UniqueIdsOp,
)


class _Emitter(Protocol):
    """What these emitters use of `plan_module._Emitter` (not imported: it imports this module)."""

    world: int

    def name(self, value: SSAValue | None) -> str: ...
    def names_of(self, values: Sequence[SSAValue]) -> str: ...
    def targets(self, values: Sequence[SSAValue]) -> list[str]: ...
    def const(self, prefix: str, text: str) -> str: ...
    def _served(self, lengths: SSAValue) -> tuple[dict[int, int], bool]: ...
    @staticmethod
    def _segment_batches(exchanged: bool) -> str: ...
    def _guard(self, ranks: Sequence[int], line: str, results: Sequence[SSAValue]) -> list[str]: ...


_DTYPES = {"f32": "torch.float32", "f16": "torch.float16", "bf16": "torch.bfloat16", "f64": "torch.float64"}


def _layout(em: _Emitter, layout: LayoutAttr) -> str:
    return em.const("LAYOUT", repr(tuple(tuple(seg) for seg in layout.segments)))


def emit_gather_rows(em: _Emitter, op: GatherRowsOp) -> list[str]:
    served, exchanged = em._served(op.lengths)
    fps = em.const("FEATURES_PER_SEGMENT", repr(served))
    dtype = _DTYPES[str(cast(TensorType, op.rows.type).element_type)]  # verified: the table's float dtype
    return [
        f"{em.name(op.rows)}, {em.name(op.splits)} = rt.gather_rows(self, {op.table.name_str!r}, "
        f"{em.name(op.lengths)}, {em.name(op.indices)}, dim={op.table.dim.data}, dtype={dtype}, "
        f"features_per_segment={fps}[self.rank], segment_batches={em._segment_batches(exchanged)})"
    ]


def emit_row_splits(em: _Emitter, op: RowSplitsOp) -> list[str]:
    return [f"{em.name(op.splits)} = rt.row_splits(self, {em.name(op.counts)}, dim={op.dim.value.data})"]


def emit_expand_rows(em: _Emitter, op: ExpandRowsOp) -> list[str]:
    targets = ", ".join(em.targets(list(op.members)))
    return [
        f"{targets}, = rt.expand_rows(self, {em.name(op.rows)}, {em.name(op.lengths)}, {_layout(em, op.layout)}, "
        f"dim={op.dim.value.data}, batch=batches.own)"
    ]


def emit_compact_rows(em: _Emitter, op: CompactRowsOp) -> list[str]:
    return [
        f"{em.name(op.rows)} = rt.compact_rows(self, {em.name(op.lengths)}, [{em.names_of(op.members)}], "
        f"{_layout(em, op.layout)}, dim={op.dim.value.data}, batch=batches.own)"
    ]


def emit_rows_update(em: _Emitter, op: RowsUpdateOp) -> list[str]:
    opt = op.optimizer
    return em._guard(
        op.placement.owner_ranks(em.world),
        f"rt.rows_update(self, {op.table.name_str!r}, {em.name(op.indices)}, {em.name(op.grad)}, "
        f"optimizer={str(opt.kind.data)!r}, group={opt.group.data})",
        [],
    )


def emit_unique_ids(em: _Emitter, op: UniqueIdsOp) -> list[str]:
    targets = ", ".join(em.targets([op.unique, op.counts, op.inverse]))
    return [f"{targets} = rt.unique_ids(self, {em.name(op.indices)}, {em.name(op.splits)})"]


def emit_take_rows(em: _Emitter, op: TakeRowsOp) -> list[str]:
    return [
        f"{em.name(op.result)} = rt.take_rows(self, {em.name(op.rows)}, {em.name(op.inverse)}, dim={op.dim.value.data})"
    ]


def emit_sum_rows(em: _Emitter, op: SumRowsOp) -> list[str]:
    return [
        f"{em.name(op.result)} = rt.sum_rows(self, {em.name(op.rows)}, {em.name(op.inverse)}, "
        f"{em.name(op.counts)}, dim={op.dim.value.data})"
    ]


# Each emitter takes an op of its key's type (see plan_module._EMITTERS).
ROWS_EMITTERS: dict[type[Operation], Callable[..., list[str]]] = {
    GatherRowsOp: emit_gather_rows,
    RowSplitsOp: emit_row_splits,
    ExpandRowsOp: emit_expand_rows,
    CompactRowsOp: emit_compact_rows,
    RowsUpdateOp: emit_rows_update,
    UniqueIdsOp: emit_unique_ids,
    TakeRowsOp: emit_take_rows,
    SumRowsOp: emit_sum_rows,
}

__all__ = ["ROWS_EMITTERS"]
