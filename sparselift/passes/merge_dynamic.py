"""Aggregation of exchanges sized at run time, for `aggregate-comm`: one all-to-all for two.

An unpooled table's rows travel one per id (`compact-rows`): their exchanges are sized at run
time, so `aggregate-comm`'s static merge (concatenated pack layouts) does not apply to them.
Two all-to-alls of the same direction, at least one of them dynamic, become one dynamic
all-to-all (`sparselift/ir/sparse_segments.py`):

- a static side's sizes come from its splits (`sparse.static_sizes`), a dynamic side's are its
  own `send_splits` and `recv_splits`;
- `sparse.join_segments` puts, per peer, the first exchange's segment and then the second's in
  one buffer, with the merged sizes; the merged exchange sends it;
- `sparse.split_segments` returns each side what its own exchange returned, so every reader
  stays as it was (the rows' `sparse.expand_rows`, the pooled vectors' `sparse.unpack`).

The runtime copies nothing where a rank sends (or receives from every source) only one side's
data, as with two table-wise tables on different ranks.

Feasibility (refusals leave a `#sched.remark` naming the check):
- `layout`: a dynamic side knows its receive sizes (`recv_splits`: no sizes exchange of its
  own, which would need the split sizes before the merged exchange);
- `max-bytes`: the SRSV's estimate of the merged buffer is under the cap (refused when it has
  none).
"""

from __future__ import annotations

from xdsl.dialects.builtin import DenseArrayBase, TensorType, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from sparselift.ir.coll import AllToAllOp, RoleAttr
from sparselift.ir.sparse import JoinSegmentsOp, SplitSegmentsOp, StaticSizesOp
from sparselift.passes.remarks import Refusal
from sparselift.passes.srsv import Sizer, elem_bytes

LAYOUT = "layout"


def dynamic_refusal(a: AllToAllOp, b: AllToAllOp) -> Refusal | None:
    """Why `a` and `b` (at least one of them dynamic) cannot become one dynamic exchange."""
    for op in (a, b):
        if op.splits is None and op.recv_splits is None:
            return Refusal(
                LAYOUT,
                "not merged: a dynamic exchange without recv_splits exchanges its sizes first "
                "(layout mapping not computable)",
            )
    return None


def dynamic_bytes(a: AllToAllOp, b: AllToAllOp, sizer: Sizer) -> float | None:
    """The SRSV's estimate of the merged buffer on its busiest rank, or None where it has none."""
    elems = [sizer.a2a_elems(op)[0] for op in (a, b)]
    if elems[0] is None or elems[1] is None:
        return None
    ranks = range(len(elems[0]))
    per_rank = [sum(elems[0][s]) + sum(elems[1][s]) for s in ranks]
    return max(per_rank) * sizer.batch * elem_bytes(a.inputs[0].type)


def _sizes(op: AllToAllOp, before: Operation) -> tuple[SSAValue, SSAValue]:
    """What `op` sends each peer and receives from each source, as run-time sizes."""
    if op.splits is None:
        assert op.send_splits is not None and op.recv_splits is not None  # dynamic_refusal checked
        return op.send_splits, op.recv_splits
    g = op.group.size
    sizes = StaticSizesOp.create(
        result_types=[TensorType(i64, [g]), TensorType(i64, [g])],
        properties={"splits": op.splits, "role": op.role},
        attributes=_label(op),
    )
    Rewriter.insert_op(sizes, InsertPoint.before(before))
    return sizes.send, sizes.recv


def _label(op: Operation) -> dict[str, Attribute]:
    return {"group": op.attributes["group"]} if "group" in op.attributes else {}


def merge_dynamic(a: AllToAllOp, b: AllToAllOp, role: RoleAttr, attributes: dict[str, Attribute]) -> SplitSegmentsOp:
    """Replace `a` and `b` by one dynamic exchange in `b`'s place; returns the op after which
    `a`'s moved readers go (the split). The caller erases `a` and `b`."""
    send_a, recv_a = _sizes(a, b)
    send_b, recv_b = _sizes(b, b)
    buffer_type = a.outputs[0].type
    g = a.group.size
    sizes_type = TensorType(i64, [g])
    join = JoinSegmentsOp.create(
        operands=[*a.inputs, *b.inputs, send_a, send_b, recv_a, recv_b],
        result_types=[buffer_type, sizes_type, sizes_type],
        properties={
            "operandSegmentSizes": _segment_sizes([len(a.inputs), len(b.inputs), 1, 1, 1, 1]),
        },
        attributes=attributes,
    )
    merged = AllToAllOp.create(
        operands=[join.buffer, join.send, join.recv],
        result_types=[buffer_type, sizes_type],
        properties={
            "group": a.group,
            "role": role,
            "operandSegmentSizes": _segment_sizes([1, 1, 1]),
        },
        attributes=attributes,
    )
    split = SplitSegmentsOp.create(
        operands=[merged.outputs[0], recv_a, recv_b],
        result_types=[a.outputs[0].type, b.outputs[0].type],
        attributes=attributes,
    )
    for op in (join, merged, split):
        Rewriter.insert_op(op, InsertPoint.before(b))
    a.outputs[0].replace_all_uses_with(split.first)
    b.outputs[0].replace_all_uses_with(split.second)
    # A dynamic side's received sizes are its recv_splits (what sized it).
    for op, recv in ((a, recv_a), (b, recv_b)):
        if len(op.outputs) > 1:
            op.outputs[1].replace_all_uses_with(recv)
    return split


def _segment_sizes(counts: list[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i32, counts)
