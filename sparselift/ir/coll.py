"""The `coll` dialect: role-tagged collectives between the ranks of a group.

Every collective carries a `#coll.role` saying what it moves (lengths, indices, pooled
embeddings, gradients, ...), so passes can match collectives by meaning. Collectives are never
`Pure`: removing or reordering one on a single rank deadlocks the others.

`coll.all_to_all` split sizes are either static, per sample (`#coll.splits<[[a, b], [c, d]]>`:
row `i` is what rank `i` sends to each peer, multiplied by the local batch at run time), or
dynamic (`send_splits(%s)` computed on the fly, e.g. by `sparse.route`).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import auto
from typing import cast

from xdsl.dialects.builtin import AnyFloat, ArrayAttr, IntAttr, IntegerType, StringAttr, TensorType, UnitAttr
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.printer import Printer
from xdsl.traits import HasCanonicalizationPatternsTrait
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from sparselift.ir._refs import check_group_label, check_segment_counts, enclosing_world_size
from sparselift.ir._syntax import DYNAMIC, dim, int_array, ints, parse_int_list, print_int_list, tensor_type
from sparselift.ir.sparse_attrs import LayoutAttr


class Role(StrEnum):
    INPUT_SPLITS = auto()
    INPUT_LENGTHS = auto()
    INPUT_INDICES = auto()
    INPUT_WEIGHTS = auto()
    INPUT_PACKED = auto()  # lengths, ids and bit-cast weights in one jagged buffer (sparse.pack_ids)
    OUTPUT_POOLED = auto()
    GRAD_POOLED = auto()
    OUTPUT_ROWS = auto()  # unpooled lookups' rows (one per id position), back to the samples' ranks
    GRAD_ROWS = auto()  # their gradients, to the tables' ranks
    DENSE_GRAD = auto()
    SPARSE_GRAD = auto()


INTEGER_ROLES = frozenset({Role.INPUT_SPLITS, Role.INPUT_LENGTHS, Role.INPUT_INDICES, Role.INPUT_PACKED})
# What moves the ids to the tables (vs. pooled vectors and gradients).
INPUT_ROLES = frozenset(
    {Role.INPUT_SPLITS, Role.INPUT_LENGTHS, Role.INPUT_INDICES, Role.INPUT_WEIGHTS, Role.INPUT_PACKED}
)
FLOAT_ROLES = frozenset(
    {
        Role.INPUT_WEIGHTS,
        Role.OUTPUT_POOLED,
        Role.GRAD_POOLED,
        Role.OUTPUT_ROWS,
        Role.GRAD_ROWS,
        Role.DENSE_GRAD,
        Role.SPARSE_GRAD,
    }
)
# From the tables' ranks back to the samples' ranks (pooled vectors, unpooled rows), and their
# gradients the other way: segment `s` of such an exchange holds rank `s`'s samples.
OUTPUT_ROLES = frozenset({Role.OUTPUT_POOLED, Role.OUTPUT_ROWS})
GRAD_ROLES = frozenset({Role.GRAD_POOLED, Role.GRAD_ROWS})


class Reduction(StrEnum):
    SUM = auto()
    MEAN = auto()


@irdl_attr_definition
class GroupAttr(ParametrizedAttribute):
    """The ranks taking part in a collective: `#coll.group<[0, 1, 2]>`."""

    name = "coll.group"

    ranks: ArrayAttr[IntAttr]

    def __init__(self, ranks: Sequence[int]):
        super().__init__(int_array(ranks))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (int_array(parse_int_list(parser)),)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            print_int_list(printer, self.rank_list)

    @property
    def rank_list(self) -> list[int]:
        return ints(self.ranks)

    @property
    def size(self) -> int:
        return len(self.ranks.data)

    def verify(self) -> None:
        ranks = self.rank_list
        if not ranks:
            raise VerifyException("a collective group needs at least one rank")
        if any(r < 0 for r in ranks):
            raise VerifyException(f"group ranks must be non-negative, got {ranks}")
        if len(set(ranks)) != len(ranks):
            raise VerifyException(f"a rank appears twice in group {ranks}")


@irdl_attr_definition
class RoleAttr(ParametrizedAttribute):
    """What a collective moves: `#coll.role<input_indices>`; an aggregated one lists several roles."""

    name = "coll.role"

    roles: ArrayAttr[StringAttr]

    def __init__(self, *roles: str):
        super().__init__(ArrayAttr([StringAttr(r) for r in roles]))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            roles = parser.parse_comma_separated_list(
                parser.Delimiter.NONE, lambda: parser.parse_identifier(" for the collective role")
            )
        return (ArrayAttr([StringAttr(r) for r in roles]),)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(", ".join(self.role_list))

    @property
    def role_list(self) -> list[str]:
        return [r.data for r in self.roles.data]

    def verify(self) -> None:
        roles = self.role_list
        if not roles:
            raise VerifyException("a collective needs at least one role")
        for r in roles:
            if r not in set(Role):
                raise VerifyException(f"unknown collective role '{r}'; expected one of {', '.join(Role)}")
        if len(set(roles)) != len(roles):
            raise VerifyException(f"role listed twice in {roles}")

    def check_element_type(self, element_type: Attribute, op_name: str) -> None:
        """A role must fit the data it tags: ids and lengths are integers, embeddings floats."""
        for r in self.role_list:
            if r in INTEGER_ROLES and not isinstance(element_type, IntegerType):
                raise VerifyException(f"{op_name}: role '{r}' needs integer data, got {element_type}")
            if r in FLOAT_ROLES and not isinstance(element_type, AnyFloat):
                raise VerifyException(f"{op_name}: role '{r}' needs float data, got {element_type}")


@irdl_attr_definition
class SplitsAttr(ParametrizedAttribute):
    """Static all-to-all split sizes per sample: row `i` is what group rank `i` sends to each peer."""

    name = "coll.splits"

    flat: ArrayAttr[IntAttr]
    size: IntAttr

    def __init__(self, matrix: Sequence[Sequence[int]]):
        super().__init__(int_array([v for row in matrix for v in row]), IntAttr(len(matrix)))

    @property
    def matrix(self) -> list[list[int]]:
        flat, n = ints(self.flat), self.size.data
        return [flat[i * n : (i + 1) * n] for i in range(n)] if n else []

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            rows = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_int_list(parser))
        if any(len(r) != len(rows) for r in rows):
            parser.raise_error("all-to-all splits must be a square matrix (one row and column per rank)")
        s = SplitsAttr(rows)
        return (s.flat, s.size)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string("[")
            printer.print_list(self.matrix, lambda row: print_int_list(printer, row))
            printer.print_string("]")

    def verify(self) -> None:
        n = self.size.data
        if len(self.flat.data) != n * n:
            raise VerifyException(f"all-to-all splits must be {n}x{n}")
        if any(v < 0 for v in ints(self.flat)):
            raise VerifyException("all-to-all split sizes must be non-negative")


@irdl_attr_definition
class HandleType(ParametrizedAttribute, TypeAttribute):
    """An in-flight collective; `coll.wait` turns it into the listed result types."""

    name = "coll.handle"

    types: ArrayAttr[Attribute]

    def __init__(self, types: Sequence[Attribute]):
        super().__init__(ArrayAttr(types))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        return (ArrayAttr(types),)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_list(self.types.data, printer.print_attribute)


# --------------------------------------------------------------------------------------
# Verifier helpers
# --------------------------------------------------------------------------------------


def _verify_group_in_world(op: IRDLOperation, group: GroupAttr) -> None:
    """Group ranks exist in the step's world; the op's `group` label names a group of the step."""
    world = enclosing_world_size(op)
    if world is None:
        return
    for r in group.rank_list:
        if r >= world:
            raise VerifyException(f"{op.name}: group rank {r} is out of range for world size {world}")
    check_group_label(op)


def _verify_packed_inputs(op: _AllToAllBase) -> None:
    """Inputs made by `sparse.pack` hold one segment per group rank, each as wide as the splits
    send (row `i` of the splits is what input `i`, or the one input, packs); the lengths a route
    sends hold, per destination, as many features as it serves there."""
    g = op.group.size
    rows = op.splits.matrix if op.splits is not None else None
    if rows is not None and op.role.role_list == [Role.INPUT_LENGTHS] and len(op.inputs) == 1:
        for i, row in enumerate(rows):
            check_segment_counts(op, row, op.inputs[0], f"splits row {i} is")
    for k, v in enumerate(op.inputs):
        pack = v.owner
        if not isinstance(pack, Operation) or pack.name != "sparse.pack":
            continue
        layout = cast(LayoutAttr, pack.properties["layout"])
        if layout.num_segments != g:
            raise VerifyException(
                f"{op.name}: input {k} is packed in {layout.num_segments} "
                f"segment{'' if layout.num_segments == 1 else 's'} "
                f"but the group has {g} ranks"
            )
        segments = layout.segments
        if rows is None or any(off == DYNAMIC for seg in segments for off, _ in seg):
            continue
        widths = [sum(size for _, size in seg) for seg in segments]
        for i in [k] if len(op.inputs) == g else range(g):
            if rows[i] != widths:
                raise VerifyException(
                    f"{op.name}: splits row {i} is {rows[i]} but input {k} (sparse.pack) holds {widths} elements "
                    "per sample per segment"
                )


class _AllToAllBase(IRDLOperation):
    """Shared operands and checks of `coll.all_to_all` and `coll.all_to_all_start`.

    `inputs` holds one value sent by every rank, or one value per group rank (rank `i` sends
    `inputs[i]`) when what is sent differs by rank.
    """

    inputs = var_operand_def(TensorType)
    send_splits = opt_operand_def(TensorType)
    recv_splits = opt_operand_def(TensorType)

    group = prop_def(GroupAttr)
    role = prop_def(RoleAttr)
    splits = opt_prop_def(SplitsAttr)

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def output_types(self) -> list[Attribute]:
        raise NotImplementedError

    def verify_(self) -> None:
        g = self.group.size
        _verify_group_in_world(self, self.group)
        if len(self.inputs) not in (1, g):
            raise VerifyException(
                f"{self.name}: expected one input or one per group rank ({g}), got {len(self.inputs)}"
            )
        out_types = self.output_types()
        want_results = 2 if self.send_splits is not None else 1
        if len(out_types) != want_results:
            raise VerifyException(
                f"{self.name}: expected {want_results} results (the data"
                + (" and the received splits)" if want_results == 2 else ")")
            )
        out = tensor_type(out_types[0], f"{self.name} result")
        for v in self.inputs:
            t = tensor_type(v, f"{self.name} input")
            if t.element_type != out.element_type:
                raise VerifyException(
                    f"{self.name}: input element type {t.element_type} differs from result {out.element_type}"
                )
            if len(t.get_shape()) != 1:
                raise VerifyException(f"{self.name}: all-to-all buffers are 1-D, got {t}")
        self.role.check_element_type(out.element_type, self.name)
        if (self.splits is None) == (self.send_splits is None):
            raise VerifyException(f"{self.name}: give either static splits or send_splits, not both or neither")
        if self.splits is not None:
            if self.splits.size.data != g:
                raise VerifyException(
                    f"{self.name}: splits are {self.splits.size.data}x{self.splits.size.data} but the group "
                    f"has {g} ranks"
                )
            if self.recv_splits is not None:
                raise VerifyException(f"{self.name}: recv_splits only go with dynamic send_splits")
        for name, sizes in (("send_splits", self.send_splits), ("recv_splits", self.recv_splits)):
            if sizes is None:
                continue
            t = tensor_type(sizes, f"{self.name} {name}")
            if len(t.get_shape()) != 1 or not isinstance(t.element_type, IntegerType):
                raise VerifyException(f"{self.name}: {name} must be a 1-D integer tensor, got {t}")
            if dim(t, 0) not in (DYNAMIC, g):
                raise VerifyException(f"{self.name}: {name} needs one entry per group rank ({g}), got {t}")
        _verify_packed_inputs(self)


class FoldSingleRankCollective(RewritePattern):
    """A collective over a one-rank group moves nothing: its result is its input."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter, /):
        if isinstance(op, AllToAllOp):
            if op.group.size != 1 or len(op.inputs) != 1 or op.send_splits is not None:
                return
            if op.inputs[0].type != op.outputs[0].type:
                return
            rewriter.replace(op, [], [op.inputs[0]])
        elif isinstance(op, AllReduceOp):
            if op.group.size == 1:
                rewriter.replace(op, [], list(op.inputs))
        elif isinstance(op, ReduceScatterOp):
            if op.group.size != 1 or op.input.type != op.result.type:
                return
            rewriter.replace(op, [], [op.input])


class CollectiveCanonicalization(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        return (FoldSingleRankCollective(),)


_A2A_FORMAT = (
    "$inputs `on` qualified($group) `role` qualified($role) (`splits` qualified($splits)^)? "
    "(`send_splits` `(` $send_splits^ `:` type($send_splits) `)`)? "
    "(`recv_splits` `(` $recv_splits^ `:` type($recv_splits) `)`)? "
    "attr-dict `:` type($inputs) `->` "
)


@irdl_op_definition
class AllToAllOp(_AllToAllBase):
    """Synchronous all-to-all; with dynamic splits it also returns the received split sizes."""

    name = "coll.all_to_all"

    outputs = var_result_def(TensorType)

    traits = traits_def(CollectiveCanonicalization())

    assembly_format = _A2A_FORMAT + "type($outputs)"

    def output_types(self) -> list[Attribute]:
        return [r.type for r in self.outputs]


@irdl_op_definition
class AllToAllStartOp(_AllToAllBase):
    """Asynchronous all-to-all: returns a handle that exactly one `coll.wait` consumes."""

    name = "coll.all_to_all_start"

    handle = result_def(HandleType)

    assembly_format = _A2A_FORMAT + "type($handle)"

    def output_types(self) -> list[Attribute]:
        assert isinstance(self.handle.type, HandleType)
        return list(self.handle.type.types.data)

    def verify_(self) -> None:
        super().verify_()
        _verify_single_wait(self)


def _verify_single_wait(op: AllToAllStartOp | AllReduceStartOp) -> None:
    uses = list(op.handle.uses)
    if len(uses) != 1:
        raise VerifyException(f"{op.name}: its handle must be waited on exactly once, found {len(uses)} uses")
    if not isinstance(uses[0].operation, WaitOp):
        raise VerifyException(f"{op.name}: its handle may only be used by coll.wait")


@irdl_op_definition
class WaitOp(IRDLOperation):
    """Wait for an in-flight collective and get its results."""

    name = "coll.wait"

    handle = operand_def(HandleType)
    outputs = var_result_def(TensorType)

    assembly_format = "$handle attr-dict `:` type($handle) `->` type($outputs)"

    def verify_(self) -> None:
        assert isinstance(self.handle.type, HandleType)
        expected = list(self.handle.type.types.data)
        if [r.type for r in self.outputs] != expected:
            raise VerifyException(
                f"coll.wait: results {[str(r.type) for r in self.outputs]} do not match handle "
                f"{[str(t) for t in expected]}"
            )
        if not isinstance(self.handle.owner, AllToAllStartOp | AllReduceStartOp):
            raise VerifyException("coll.wait: the handle must come from a collective start op")


class _ReduceBase(IRDLOperation):
    input = operand_def(TensorType)
    result = result_def(TensorType)
    group = prop_def(GroupAttr)
    role = prop_def(RoleAttr)
    reduction = prop_def(StringAttr)

    traits = traits_def(CollectiveCanonicalization())

    assembly_format = (
        "$input `on` qualified($group) `role` qualified($role) `reduce` $reduction attr-dict "
        "`:` type($input) `->` type($result)"
    )

    def verify_(self) -> None:
        _verify_group_in_world(self, self.group)
        if self.reduction.data not in set(Reduction):
            raise VerifyException(
                f"{self.name}: unknown reduction '{self.reduction.data}'; expected one of {', '.join(Reduction)}"
            )
        t_in = tensor_type(self.input, f"{self.name} input")
        t_out = tensor_type(self.result, f"{self.name} result")
        if t_in.element_type != t_out.element_type:
            raise VerifyException(f"{self.name}: input and result element types differ")
        self.role.check_element_type(t_in.element_type, self.name)


class _AllReduceBase(IRDLOperation):
    """Shared operands and checks of `coll.all_reduce` and `coll.all_reduce_start`.

    Several operands make one aggregated collective (one message per peer for all of them);
    result `i` is the reduction of operand `i`.
    """

    inputs = var_operand_def(TensorType)
    group = prop_def(GroupAttr)
    role = prop_def(RoleAttr)
    reduction = prop_def(StringAttr)

    def output_types(self) -> list[Attribute]:
        raise NotImplementedError

    def verify_(self) -> None:
        _verify_group_in_world(self, self.group)
        if self.reduction.data not in set(Reduction):
            raise VerifyException(
                f"{self.name}: unknown reduction '{self.reduction.data}'; expected one of {', '.join(Reduction)}"
            )
        outputs = self.output_types()
        if not self.inputs or len(self.inputs) != len(outputs):
            raise VerifyException(
                f"{self.name}: needs one result per operand (and at least one), got {len(self.inputs)} "
                f"operands and {len(outputs)} results"
            )
        for i, (a, r) in enumerate(zip(self.inputs, outputs)):
            t = tensor_type(a, f"{self.name} input")
            if a.type != r:
                raise VerifyException(
                    f"{self.name}: result type must equal input type" + (f" (operand {i})" if i else "")
                )
            self.role.check_element_type(t.element_type, self.name)


_ALL_REDUCE_FORMAT = (
    "$inputs `on` qualified($group) `role` qualified($role) `reduce` $reduction attr-dict `:` type($inputs) `->` "
)


@irdl_op_definition
class AllReduceOp(_AllReduceBase):
    """Reduce tensors across the group; every rank gets the results.

    `with_dense_grads` (set by `aggregate-comm`'s `dense_grad` role): the replicated tables'
    gradients ride in the step's dense-gradient all-reduce at the end of backward instead of a
    collective of their own. Its results are then only available after backward, so they may
    feed only replicated tables' updates (`sparse.lookup_update`), which wait for it.
    """

    name = "coll.all_reduce"

    outputs = var_result_def(TensorType)
    with_dense_grads = opt_prop_def(UnitAttr)

    traits = traits_def(CollectiveCanonicalization())

    assembly_format = (
        "$inputs `on` qualified($group) `role` qualified($role) `reduce` $reduction "
        "(`with_dense_grads` $with_dense_grads^)? attr-dict `:` type($inputs) `->` type($outputs)"
    )

    def output_types(self) -> list[Attribute]:
        return [r.type for r in self.outputs]

    def verify_(self) -> None:
        super().verify_()
        if self.with_dense_grads is None:
            return
        if self.role.role_list != ["sparse_grad"] or self.reduction.data != "sum":
            raise VerifyException(
                "coll.all_reduce: with_dense_grads needs role sparse_grad and reduction sum (replicated "
                f"tables' gradients), got role {'+'.join(self.role.role_list)} and reduction {self.reduction.data}"
            )
        for result in self.outputs:
            for use in result.uses:
                if use.operation.name != "sparse.lookup_update":
                    raise VerifyException(
                        f"coll.all_reduce: with_dense_grads results are ready only after backward; "
                        f"they may feed only sparse.lookup_update, not {use.operation.name}"
                    )
                if use.operation.parent_block() is not self.parent_block():
                    raise VerifyException(
                        "coll.all_reduce: with_dense_grads results are ready only after backward; the "
                        "updates they feed must be in its block (not in a sched.parallel lane)"
                    )


@irdl_op_definition
class AllReduceStartOp(_AllReduceBase):
    """Asynchronous all-reduce: returns a handle that exactly one `coll.wait` consumes."""

    name = "coll.all_reduce_start"

    handle = result_def(HandleType)

    assembly_format = _ALL_REDUCE_FORMAT + "type($handle)"

    def output_types(self) -> list[Attribute]:
        assert isinstance(self.handle.type, HandleType)
        return list(self.handle.type.types.data)

    def verify_(self) -> None:
        super().verify_()
        _verify_single_wait(self)


@irdl_op_definition
class ReduceScatterOp(_ReduceBase):
    """Reduce across the group and scatter dim 0: rank `i` keeps chunk `i`."""

    name = "coll.reduce_scatter"

    def verify_(self) -> None:
        super().verify_()
        pack = self.input.owner
        if isinstance(pack, Operation) and pack.name == "sparse.pack":  # one segment (chunk) per group rank
            segments = cast(LayoutAttr, pack.properties["layout"]).num_segments
            if segments != self.group.size:
                raise VerifyException(
                    f"coll.reduce_scatter: its input is packed in {segments} segment{'' if segments == 1 else 's'} "
                    f"but the group has {self.group.size} ranks"
                )
        t_in, t_out = tensor_type(self.input, ""), tensor_type(self.result, "")
        if len(t_in.get_shape()) != len(t_out.get_shape()):
            raise VerifyException("coll.reduce_scatter: input and result ranks differ")
        if t_in.get_shape()[1:] != t_out.get_shape()[1:]:
            raise VerifyException("coll.reduce_scatter: only dim 0 may change")
        if not t_in.get_shape():
            raise VerifyException("coll.reduce_scatter: input and result must have a dim 0 to scatter")
        din, dout = dim(t_in, 0), dim(t_out, 0)
        if DYNAMIC not in (din, dout) and din != dout * self.group.size:
            raise VerifyException(
                f"coll.reduce_scatter: dim 0 of the input ({din}) must be the group size ({self.group.size}) "
                f"times dim 0 of the result ({dout})"
            )


Coll = Dialect(
    "coll",
    [AllToAllOp, AllToAllStartOp, WaitOp, AllReduceOp, AllReduceStartOp, ReduceScatterOp],
    [GroupAttr, RoleAttr, SplitsAttr, HandleType],
)

__all__ = [
    "Coll",
    "Role",
    "GRAD_ROLES",
    "INPUT_ROLES",
    "OUTPUT_ROLES",
    "Reduction",
    "GroupAttr",
    "RoleAttr",
    "SplitsAttr",
    "HandleType",
    "AllToAllOp",
    "AllToAllStartOp",
    "WaitOp",
    "AllReduceOp",
    "AllReduceStartOp",
    "ReduceScatterOp",
    "SSAValue",
]
