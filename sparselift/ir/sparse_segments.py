"""The `sparse` dialect's segment ops: two exchanges of the same direction as one all-to-all
when at least one of them is sized at run time.

`aggregate-comm` merges static-split exchanges by concatenating their packs' layouts. An
exchange sized at run time (an unpooled table's rows one per id, `sparse.gather_rows`) has no
static layout to concatenate, so the merged exchange is dynamic, and these ops build and take
apart its buffer:

- `sparse.static_sizes`: a static exchange's per-sample splits as this rank's element counts to
  and from each peer (the samples are the receiver's for outputs sent back to the samples'
  ranks, the sender's otherwise, as `coll.all_to_all` counts them);
- `sparse.join_segments`: per peer `p`, the first member's segment `p`, then the second's; and
  the merged send and receive sizes (the sums);
- `sparse.split_segments`: the received buffer back into the two members, each the
  concatenation of its segments from every source (what its own exchange would have returned).

A member is one value every rank sends, or one per group rank (rank `i` sends the `i`-th, as a
`coll.all_to_all` with one input per rank).
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerType, TensorType
from xdsl.ir import SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from sparselift.ir._checks import check_int_1d
from sparselift.ir._refs import check_group_label, enclosing_world_size
from sparselift.ir._syntax import DYNAMIC, dim, tensor_type
from sparselift.ir.coll import INPUT_ROLES, RoleAttr, SplitsAttr


def _check_sizes(op: IRDLOperation, values: list[SSAValue], ranks: int | None, what: str) -> None:
    """Per-peer element counts: `tensor<Gxi64>` (G: the step's world size when known)."""
    for k, v in enumerate(values):
        t = check_int_1d(v, f"{op.name}: {what} {k}")
        if t.element_type != IntegerType(64):
            raise VerifyException(f"{op.name}: {what} {k} must be i64 element counts, got {t}")
        if ranks is not None and dim(t, 0) not in (DYNAMIC, ranks):
            raise VerifyException(f"{op.name}: {what} {k} needs one count per rank ({ranks}), got {t}")


def _check_buffer(op: IRDLOperation, value: SSAValue, what: str, element_type=None) -> TensorType:
    t = tensor_type(value, f"{op.name} {what}")
    if len(t.get_shape()) != 1:
        raise VerifyException(f"{op.name}: {what} must be a 1-D exchange buffer, got {t}")
    if element_type is not None and t.element_type != element_type:
        raise VerifyException(f"{op.name}: {what} has element type {t.element_type}, the buffer {element_type}")
    return t


@irdl_op_definition
class StaticSizesOp(IRDLOperation):
    """A static exchange's element counts on this rank: `send[p]`, to peer `p`, and `recv[s]`,
    from source `s` (`splits` per sample, times the samples' batch: the receiver's for outputs
    sent back to the samples' ranks, the sender's otherwise)."""

    name = "sparse.static_sizes"

    send = result_def(TensorType)
    recv = result_def(TensorType)
    splits = prop_def(SplitsAttr)
    role = prop_def(RoleAttr)

    traits = traits_def(Pure())

    assembly_format = "`splits` qualified($splits) `role` qualified($role) attr-dict `:` type($send) `,` type($recv)"

    def verify_(self) -> None:
        ranks = self.splits.size.data
        world = enclosing_world_size(self)
        if world is not None and ranks > world:
            raise VerifyException(f"{self.name}: splits are {ranks}x{ranks} but the world size is {world}")
        roles = set(self.role.role_list)
        if roles & INPUT_ROLES:
            raise VerifyException(
                f"{self.name}: role {'+'.join(self.role.role_list)} moves ids, whose exchanges are sized by "
                "their routes, not by static splits"
            )
        _check_sizes(self, [self.send, self.recv], ranks, "result")
        check_group_label(self)


@irdl_op_definition
class JoinSegmentsOp(IRDLOperation):
    """Per peer `p`: segment `p` of `first` (`first_send[p]` elements), then segment `p` of
    `second`; `send` and `recv` are the merged exchange's sizes (the members' sums)."""

    name = "sparse.join_segments"

    first = var_operand_def(TensorType)
    second = var_operand_def(TensorType)
    first_send = operand_def(TensorType)
    second_send = operand_def(TensorType)
    first_recv = operand_def(TensorType)
    second_recv = operand_def(TensorType)
    buffer = result_def(TensorType)
    send = result_def(TensorType)
    recv = result_def(TensorType)

    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    assembly_format = (
        "`(` $first `)` `(` $second `)` `send` `(` $first_send `,` $second_send `)` "
        "`recv` `(` $first_recv `,` $second_recv `)` attr-dict "
        "`:` `(` type($first) `)` `(` type($second) `)` `,` type($first_send) `,` type($second_send) `,` "
        "type($first_recv) `,` type($second_recv) `->` type($buffer) `,` type($send) `,` type($recv)"
    )

    def verify_(self) -> None:
        out = _check_buffer(self, self.buffer, "result")
        world = enclosing_world_size(self)
        for what, members in (("first", self.first), ("second", self.second)):
            if world is not None and len(members) not in (1, world):
                raise VerifyException(
                    f"{self.name}: {what} member needs one value or one per rank ({world}), got {len(members)}"
                )
            for v in members:
                _check_buffer(self, v, f"{what} member", out.element_type)
        sizes = [self.first_send, self.second_send, self.first_recv, self.second_recv, self.send, self.recv]
        _check_sizes(self, sizes, world, "sizes")
        check_group_label(self)


@irdl_op_definition
class SplitSegmentsOp(IRDLOperation):
    """A received `sparse.join_segments` buffer back into its members: `first` holds, source by
    source, the `first_recv[s]` elements at the start of source `s`'s segment; `second` the rest."""

    name = "sparse.split_segments"

    buffer = operand_def(TensorType)
    first_recv = operand_def(TensorType)
    second_recv = operand_def(TensorType)
    first = result_def(TensorType)
    second = result_def(TensorType)

    traits = traits_def(Pure())

    assembly_format = (
        "$buffer `recv` `(` $first_recv `,` $second_recv `)` attr-dict `:` type($buffer) `,` "
        "type($first_recv) `,` type($second_recv) `->` type($first) `,` type($second)"
    )

    def verify_(self) -> None:
        t = _check_buffer(self, self.buffer, "buffer")
        _check_buffer(self, self.first, "first member", t.element_type)
        _check_buffer(self, self.second, "second member", t.element_type)
        _check_sizes(self, [self.first_recv, self.second_recv], enclosing_world_size(self), "sizes")
        check_group_label(self)


SEGMENT_OPS = (StaticSizesOp, JoinSegmentsOp, SplitSegmentsOp)

__all__ = ["StaticSizesOp", "JoinSegmentsOp", "SplitSegmentsOp", "SEGMENT_OPS"]
