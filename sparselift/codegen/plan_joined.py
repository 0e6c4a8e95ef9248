"""Plan-module emitters of the segment ops of a merged dynamic exchange
(`sparselift/ir/sparse_segments.py`): each op becomes one call of
`sparselift.runtime.collectives` (as `rt.<name>`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from xdsl.ir import Operation, SSAValue

from sparselift.ir.sparse import JoinSegmentsOp, SplitSegmentsOp, StaticSizesOp


class _Emitter(Protocol):
    """What these emitters use of `plan_module._Emitter` (not imported: it imports this module)."""

    def name(self, value: SSAValue | None) -> str: ...
    def names_of(self, values: Sequence[SSAValue]) -> str: ...
    def targets(self, values: Sequence[SSAValue]) -> list[str]: ...
    def const(self, prefix: str, text: str) -> str: ...


def emit_static_sizes(em: _Emitter, op: StaticSizesOp) -> list[str]:
    splits = em.const("SPLITS", repr(tuple(tuple(r) for r in op.splits.matrix)))
    role = "+".join(op.role.role_list)
    return [
        f"{', '.join(em.targets([op.send, op.recv]))} = rt.static_sizes(self, splits={splits}, role={role!r}, "
        "batches=batches.ranks)"
    ]


def emit_join_segments(em: _Emitter, op: JoinSegmentsOp) -> list[str]:
    n = em.name
    sizes = ", ".join(n(v) for v in (op.first_send, op.second_send, op.first_recv, op.second_recv))
    return [
        f"{', '.join(em.targets([op.buffer, op.send, op.recv]))} = rt.join_segments(self, "
        f"[{em.names_of(op.first)}], [{em.names_of(op.second)}], {sizes})"
    ]


def emit_split_segments(em: _Emitter, op: SplitSegmentsOp) -> list[str]:
    n = em.name
    return [
        f"{', '.join(em.targets([op.first, op.second]))} = rt.split_segments(self, {n(op.buffer)}, "
        f"{n(op.first_recv)}, {n(op.second_recv)})"
    ]


# Each emitter takes an op of its key's type (see plan_module._EMITTERS).
SEGMENT_EMITTERS: dict[type[Operation], Callable[..., list[str]]] = {
    StaticSizesOp: emit_static_sizes,
    JoinSegmentsOp: emit_join_segments,
    SplitSegmentsOp: emit_split_segments,
}

__all__ = ["SEGMENT_EMITTERS"]
