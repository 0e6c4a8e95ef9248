"""The `sparse` dialect's buffer ops: packing members into segmented exchange buffers and back.

`sparse.pack` / `sparse.unpack` follow a `#sparse.layout`; `sparse.pack_ids` /
`sparse.unpack_ids` carry a route's jagged ids in one buffer per peer; `sparse.permute` puts
pooled outputs back in model feature order. `sparselift.ir.sparse` re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from xdsl.dialects.builtin import I64, DenseArrayBase, IntegerAttr, IntegerType, TensorType, f32, i32, i64
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
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
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.traits import HasCanonicalizationPatternsTrait, Pure
from xdsl.utils.exceptions import VerifyException

from sparselift.ir._refs import (
    check_group_label,
    check_rank,
    check_segment_counts,
    enclosing_world_size,
    received_from,
)
from sparselift.ir._syntax import DYNAMIC, tensor_type
from sparselift.ir.coll import GroupAttr, SplitsAttr
from sparselift.ir.sparse_attrs import LayoutAttr


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

    assembly_format = (
        "$members `layout` `=` qualified($layout) (`on_rank` $rank^)? attr-dict `:` type($members) `->` type($buffer)"
    )

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

    assembly_format = (
        "$buffer `layout` `=` qualified($layout) (`on_rank` $rank^)? attr-dict `:` type($buffer) `->` type($members)"
    )

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


def _verify_jagged_members(
    op: IRDLOperation,
    lengths: SSAValue,
    indices: SSAValue,
    weights: SSAValue | None,
    buffer: SSAValue,
    sizes: SSAValue,
    features: DenseArrayBase[I64],
) -> None:
    name = op.name
    for what, v in (("lengths", lengths), ("indices", indices), ("buffer", buffer)):
        t = tensor_type(v, f"{name} {what}")
        if len(t.get_shape()) != 1 or not isinstance(t.element_type, IntegerType):
            raise VerifyException(f"{name}: {what} must be a 1-D integer tensor, got {t}")
    if tensor_type(lengths, "").element_type != i32:
        raise VerifyException(f"{name}: lengths must be i32, got {tensor_type(lengths, '').element_type}")
    if tensor_type(buffer, "").element_type != i64:
        raise VerifyException(
            f"{name}: the packed buffer must be i64 (the widest member), got {tensor_type(buffer, '').element_type}"
        )
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
                    f"sparse.permute: result {i} has type {self.outputs[i].type} but input {j} has "
                    f"{self.inputs[j].type}"
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
        rewriter.replace(op, [], list(src.members))


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
        if (
            isinstance(op, PackOp)
            and len(op.members) == 1
            and _single_member_identity(op.layout, op.members[0], op.buffer)
        ):
            rewriter.replace(op, [], [op.members[0]])


class FoldSingleMemberUnpack(RewritePattern):
    def match_and_rewrite(self, op, rewriter: PatternRewriter, /):
        if (
            isinstance(op, UnpackOp)
            and len(op.members) == 1
            and _single_member_identity(op.layout, op.members[0], op.buffer)
        ):
            rewriter.replace(op, [], [op.buffer])


def check_unpack_segments(op: Operation, layout: LayoutAttr, rank: int | None, buffer: SSAValue) -> None:
    """An unpack of an all-to-all's result reads one segment per peer of the exchange, each as
    wide as that peer sent (column `r` of the static splits, for each rank `r` it runs on)."""
    src = received_from(buffer)
    if src is None or src.name not in ("coll.all_to_all", "coll.all_to_all_start"):
        return
    ranks = cast(GroupAttr, src.properties["group"]).rank_list
    if layout.num_segments != len(ranks):
        raise VerifyException(
            f"{op.name}: its layout has {_segments(layout.num_segments)} but the {src.name} it reads "
            f"exchanges with {len(ranks)} ranks"
        )
    splits = cast(SplitsAttr | None, src.properties.get("splits"))
    segments = layout.segments
    if splits is None or any(size < 0 for seg in segments for _, size in seg):  # jagged members: sizes at run time
        return
    matrix = splits.matrix
    cols = [ranks.index(rank)] if rank is not None and rank in ranks else range(len(ranks))
    for s, seg in enumerate(segments):
        width = sum(size for _, size in seg)
        for col in cols:
            if matrix[s][col] != width:
                raise VerifyException(
                    f"{op.name}: segment {s} holds {width} elements per sample, but the {src.name}'s splits "
                    f"send {matrix[s][col]} from rank {ranks[s]} to rank {ranks[col]}"
                )


def _segments(n: int) -> str:
    return f"{n} segment{'' if n == 1 else 's'}"
