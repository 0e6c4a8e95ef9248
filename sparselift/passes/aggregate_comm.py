"""`aggregate-comm{roles=... max-bytes=...}`: merge collectives with matching roles into one.

Within one region (forward or backward) of a step, pairs of collectives are folded together:

- `coll.all_reduce` ops of the same group, reduction and element type become one all-reduce
  with several operands (one flat buffer, one message per peer), e.g. the replicated tables'
  gradients of several embedding modules.
- Static-split `coll.all_to_all` ops (pooled outputs, pooled gradients) whose send buffers are
  made by `sparse.pack` and whose received buffers are only read by `sparse.unpack` become one
  all-to-all: per sender (rank) the two packs become one whose segments hold the first
  collective's columns and then the second's, the splits add up, and per receiver (rank) the
  unpacks become one reading both sides' members at shifted columns. Nothing is copied twice.
- `coll.all_to_all` ops of which at least one is sized at run time (an unpooled table's rows
  one per id, after `compact-rows`) become one dynamic all-to-all (`merge_dynamic.py`): a
  join of both sides' per-peer segments, a split of what arrives. Static pairs merge first, so
  the static exchanges join a dynamic one as one side.
- With role `input`, the exchanged groups' routes become one and their lengths, ids and weights
  one jagged exchange (`sparse.pack_ids` / `sparse.unpack_ids`; see `merge_inputs.py`).
- With role `dense_grad`, the backward's replicated-table gradient all-reduce (role
  `sparse_grad`, a sum) is marked `with_dense_grads`: it rides in the dense gradients'
  all-reduce at the end of backward, and the tables' updates run after it. Refused (remark)
  where its results feed anything but those updates (`dependency`) or it is not a sum.

Feasibility checks, each refusal leaving a `#sched.remark` on the op that names the check:
same group (`group`), same element type (`element-type`) and reduction (`reduction`), layout
mapping computable (`layout`: for static pairs, pack-made send buffers and unpack-only
receivers in compatible per-rank or uniform forms; for dynamic ones, receive sizes known
without a sizes exchange), the merged buffer under `max-bytes` (`max-bytes`; per rank: elements
per sample x `batch` x element size, the SRSV's estimate for a dynamic side), no dependency
between the two collectives (`dependency`; networkx, on the step's def-use graph), and a
consistent order (`order`: the merged collective takes the later one's place; ops between them
that use the earlier one's results move after it, which is only possible when none of them
feeds the later one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import networkx as nx
from xdsl.context import Context
from xdsl.dialects.builtin import DenseArrayBase, ModuleOp, StringAttr, TensorType, UnitAttr
from xdsl.ir import Attribute, Block, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from sparselift.ir._refs import enclosing_world_size
from sparselift.ir._syntax import DYNAMIC
from sparselift.ir.coll import AllReduceOp, AllToAllOp, RoleAttr, SplitsAttr
from sparselift.ir.sched import StepOp
from sparselift.ir.sparse import LayoutAttr, PackOp, UnpackOp
from sparselift.passes.merge_dynamic import dynamic_bytes, dynamic_refusal, merge_dynamic
from sparselift.passes.merge_inputs import merge_input_exchanges
from sparselift.passes.remarks import Refusal, remark
from sparselift.passes.srsv import Sizer, elem_bytes, step_batch

# "input": every exchanged group's lengths, ids and weights in one exchange (merge_inputs.py).
MERGEABLE_ROLES = ("input", "output_pooled", "grad_pooled", "output_rows", "grad_rows", "sparse_grad", "dense_grad")


def _def_use_graph(block: Block) -> nx.DiGraph[Operation]:
    graph: nx.DiGraph[Operation] = nx.DiGraph()
    ops = list(block.ops)
    graph.add_nodes_from(ops)
    for op in ops:
        for operand in op.operands:
            owner = operand.owner
            if isinstance(owner, Operation) and owner.parent_block() is block:
                graph.add_edge(owner, op)
    return graph


@dataclass(frozen=True)
class AggregateComm(ModulePass):
    """Merge same-role collectives (see the module docstring)."""

    name = "aggregate-comm"

    roles: tuple[str, ...] = MERGEABLE_ROLES
    max_bytes: int = 1 << 30
    batch: int = 0  # local batch for the byte estimate; 0: the step's `batch` attribute (else 1)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        unknown = [r for r in self.roles if r not in MERGEABLE_ROLES]
        if unknown:
            from xdsl.utils.exceptions import PassFailedException

            raise PassFailedException(
                f"aggregate-comm: cannot aggregate role '{unknown[0]}'; supported: {', '.join(MERGEABLE_ROLES)}"
            )
        for step in [s for s in op.walk() if isinstance(s, StepOp)]:
            batch = self.batch or step_batch(step) or 1
            if "input" in self.roles:
                merge_input_exchanges(step, self.max_bytes, batch)
            for region in (step.forward, step.backward):
                _Merger(region.block, set(self.roles), self.max_bytes, batch).run()
            if "dense_grad" in self.roles:
                ride_with_dense_grads(step, self.name)


def ride_with_dense_grads(step: StepOp, pass_name: str) -> None:
    """Mark the backward's replicated-table gradient all-reduces `with_dense_grads`: they join
    the dense gradients' all-reduce at the end of backward (one collective less a step).
    `pass_name`: the pass its refusals' remarks name (`lift-sparse` lowers this by default)."""
    if step.world_size.data == 1:
        return
    for op in step.backward.block.ops:
        if not isinstance(op, AllReduceOp) or op.role.role_list != ["sparse_grad"] or op.with_dense_grads:
            continue
        users = {use.operation.name for r in op.outputs for use in r.uses} - {"sparse.lookup_update"}
        if op.reduction.data != "sum":
            remark(op, pass_name, "reduction", "not merged with the dense gradients: not a sum")
        elif users:
            remark(
                op,
                pass_name,
                "dependency",
                f"not merged with the dense gradients: its results feed {', '.join(sorted(users))}, "
                "which cannot wait for the end of backward",
            )
        else:
            op.properties["with_dense_grads"] = UnitAttr()


class _Merger:
    def __init__(self, block: Block, roles: set[str], max_bytes: int, batch: int):
        self.block, self.roles, self.max_bytes, self.batch = block, roles, max_bytes, batch

    def candidates(self) -> list[AllReduceOp | AllToAllOp]:
        return [
            op
            for op in self.block.ops
            if isinstance(op, AllReduceOp | AllToAllOp) and set(op.role.role_list) <= self.roles
        ]

    def run(self) -> None:
        # Static pairs first (their merge adds no ops), then pairs sized at run time, so the
        # static exchanges join a dynamic one as one member (one copy, not one per exchange).
        for dynamic in (False, True):
            self._run(dynamic)

    def _run(self, dynamic: bool) -> None:
        # Greedy: fold every later candidate into the first compatible one, repeatedly.
        changed = True
        while changed:
            changed = False
            ops = self.candidates()
            for i, first in enumerate(ops):
                for second in ops[i + 1 :]:
                    if type(first) is not type(second) or (not dynamic and _sized_at_run_time(first, second)):
                        continue
                    reason = self.refusal(first, second)
                    if reason is not None:
                        remark(second, AggregateComm.name, reason.check, reason.text)
                        continue
                    self.merge(first, second)
                    changed = True
                    break
                if changed:
                    break

    # -- feasibility ----------------------------------------------------------------------
    def refusal(self, a: AllReduceOp | AllToAllOp, b: AllReduceOp | AllToAllOp) -> Refusal | None:
        """Why `b` cannot be folded into `a` (two collectives of the same class), or None."""
        if a.group != b.group:
            return Refusal("group", "not merged with an earlier collective: different groups")
        ta, tb = a.inputs[0].type, b.inputs[0].type
        if not isinstance(ta, TensorType) or not isinstance(tb, TensorType) or ta.element_type != tb.element_type:
            return Refusal("element-type", "not merged with an earlier collective: element types differ")
        if isinstance(a, AllToAllOp):
            assert isinstance(b, AllToAllOp)  # run() pairs collectives of the same class
            if a.splits is None or b.splits is None:  # sized at run time: merge_dynamic.py
                reason = dynamic_refusal(a, b)
                if reason is not None:
                    return reason
                estimate = dynamic_bytes(a, b, Sizer(enclosing_world_size(a) or a.group.size, self.batch))
                if estimate is None:
                    return Refusal("max-bytes", "not merged: the SRSV has no size for the merged buffer")
                bytes_ = int(estimate)
            else:
                reason = _a2a_refusal(a) or _a2a_refusal(b) or _contexts_refusal(a, b)
                if reason is not None:
                    return reason
                elems = max(sum(x + y for x, y in zip(ra, rb)) for ra, rb in zip(a.splits.matrix, b.splits.matrix))
                bytes_ = elems * self.batch * elem_bytes(ta)
        else:
            assert isinstance(b, AllReduceOp)  # run() pairs collectives of the same class
            if a.reduction != b.reduction:
                return Refusal("reduction", "not merged with an earlier collective: reductions differ")
            bytes_ = sum(_static_bytes(cast(TensorType, v.type)) for v in (*a.inputs, *b.inputs))  # verified
        if bytes_ > self.max_bytes:
            return Refusal(
                "max-bytes", f"not merged: the merged buffer would hold {bytes_} bytes, over max-bytes {self.max_bytes}"
            )
        # Descendant sets, not nx.has_path: its "no path" exception prints both ops, whole.
        graph = _def_use_graph(self.block)
        after_a = nx.descendants(graph, a)
        if b in after_a or a in nx.descendants(graph, b):
            return Refusal(
                "dependency", "not merged: the collectives depend on each other (merging would create a cycle)"
            )
        moved = [op for op in self._between(a, b) if op in after_a]
        for op in moved:
            if b in nx.descendants(graph, op):
                return Refusal("order", f"not merged: {op.name} uses the earlier collective and feeds the later one")
        return None

    def _between(self, a: Operation, b: Operation) -> list[Operation]:
        ops = list(self.block.ops)
        return ops[ops.index(a) + 1 : ops.index(b)]

    # -- rewrite --------------------------------------------------------------------------
    def _dependents_between(self, a: Operation, b: Operation) -> list[Operation]:
        """Ops between `a` and `b` that use `a`'s results, in program order."""
        after_a = nx.descendants(_def_use_graph(self.block), a)
        return [op for op in self._between(a, b) if op in after_a]

    def merge(self, a: AllReduceOp | AllToAllOp, b: AllReduceOp | AllToAllOp) -> None:
        if isinstance(a, AllToAllOp):
            assert isinstance(b, AllToAllOp)  # run() pairs collectives of the same class
            self._merge_a2a(a, b)
            return
        dependents = self._dependents_between(a, b)  # before `a`'s uses move to the merged op
        merged = AllReduceOp.create(
            operands=[*a.inputs, *b.inputs],
            result_types=[v.type for v in (*a.outputs, *b.outputs)],
            properties={"group": a.group, "role": _union_roles(a, b), "reduction": a.reduction},
            attributes={k: v for k, v in a.attributes.items() if k not in ("remark", "group")},
        )
        groups = [
            cast(StringAttr, op.attributes["group"]).data
            for op in (a, b)
            if isinstance(op.attributes.get("group"), StringAttr)
        ]
        if groups:
            merged.attributes["group"] = StringAttr("+".join(dict.fromkeys(g for x in groups for g in x.split("+"))))
        Rewriter.insert_op(merged, InsertPoint.before(b))
        for old, new in zip((*a.outputs, *b.outputs), merged.outputs):
            old.replace_all_uses_with(new)
        _move_after(dependents, merged)
        Rewriter.erase_op(a)
        Rewriter.erase_op(b)

    def _merge_a2a(self, a: AllToAllOp, b: AllToAllOp) -> None:
        if a.splits is None or b.splits is None:
            dependents = self._dependents_between(a, b)
            split = merge_dynamic(a, b, _union_roles(a, b), _merged_attrs(a, b))
            _move_after(dependents, split)
            Rewriter.erase_op(a)
            Rewriter.erase_op(b)
            return
        g = a.group.size
        assert a.splits is not None and b.splits is not None  # the dynamic merge returned above
        sa, sb = a.splits.matrix, b.splits.matrix
        dependents = self._dependents_between(a, b)
        # refusal() checked that every send buffer is made by a sparse.pack.
        packs_a = [cast(PackOp, v.owner) for v in a.inputs]
        packs_b = [cast(PackOp, v.owner) for v in b.inputs]
        per_rank = len(packs_a) > 1 or len(packs_b) > 1
        new_packs = []
        for r in range(g) if per_rank else [0]:
            pa = packs_a[r if len(packs_a) > 1 else 0]
            pb = packs_b[r if len(packs_b) > 1 else 0]
            props: dict[str, Attribute] = {"layout": _concat(pa.layout, pb.layout)}
            rank_attr = pa.rank if pa.rank is not None else pb.rank
            if rank_attr is not None:
                props["rank"] = rank_attr
            pack = PackOp.create(
                operands=[*pa.members, *pb.members],
                result_types=[pa.buffer.type],
                properties=props,
                attributes=_merged_attrs(pa, pb),
            )
            Rewriter.insert_op(pack, InsertPoint.before(b))
            new_packs.append(pack)
        segment_sizes = cast(DenseArrayBase, a.properties["operandSegmentSizes"])
        merged = AllToAllOp.create(
            operands=[p.buffer for p in new_packs],
            result_types=[a.outputs[0].type],
            properties={
                "group": a.group,
                "role": _union_roles(a, b),
                "splits": SplitsAttr([[sa[s][p] + sb[s][p] for p in range(g)] for s in range(g)]),
                "operandSegmentSizes": segment_sizes.from_list(segment_sizes.elt_type, [len(new_packs), 0, 0]),
            },
            attributes=_merged_attrs(a, b),
        )
        Rewriter.insert_op(merged, InsertPoint.before(b))
        # One unpack per receiving context (a rank, or every rank): `a`'s members, then `b`'s.
        point: Operation = merged
        unpacks_a = _unpacks_by_context(a)
        unpacks_b = _unpacks_by_context(b)
        for ctx in dict.fromkeys([*unpacks_a, *unpacks_b]):
            ua, ub = unpacks_a.get(ctx), unpacks_b.get(ctx)
            first = ua or ub
            assert first is not None  # `ctx` is a context of one side at least
            la = ua.layout if ua is not None else _empty_layout(g)
            lb = ub.layout if ub is not None else _empty_layout(g)
            members = [*(ua.members if ua else []), *(ub.members if ub else [])]
            props = {"layout": _concat(la, lb)}
            if ctx is not None and first.rank is not None:  # a context other than None is a rank
                props["rank"] = first.rank
            unpack = UnpackOp.create(
                operands=[merged.outputs[0]],
                result_types=[m.type for m in members],
                properties=props,
                attributes=_merged_attrs(first, ub or first),
            )
            Rewriter.insert_op(unpack, InsertPoint.after(point))
            point = unpack
            for old, new in zip(members, unpack.members):
                old.replace_all_uses_with(new)
            for old_unpack in (ua, ub):
                if old_unpack is not None:
                    dependents = [op for op in dependents if op is not old_unpack]
                    Rewriter.erase_op(old_unpack)
        _move_after(dependents, point)
        Rewriter.erase_op(a)
        Rewriter.erase_op(b)
        for pack in dict.fromkeys([*packs_a, *packs_b]):
            if not pack.buffer.uses:
                Rewriter.erase_op(pack)


def _sized_at_run_time(a: AllReduceOp | AllToAllOp, b: AllReduceOp | AllToAllOp) -> bool:
    return isinstance(a, AllToAllOp) and isinstance(b, AllToAllOp) and (a.splits is None or b.splits is None)


def _move_after(ops: list[Operation], anchor: Operation) -> None:
    """Move `ops` (in order) right after `anchor`: they read results defined there."""
    point = anchor
    for op in ops:
        op.detach()
        Rewriter.insert_op(op, InsertPoint.after(point))
        point = op


def _merged_attrs(a: Operation, b: Operation) -> dict[str, Attribute]:
    attrs = {k: v for k, v in a.attributes.items() if k not in ("remark", "group")}
    groups = [
        cast(StringAttr, op.attributes["group"]).data
        for op in (a, b)
        if isinstance(op.attributes.get("group"), StringAttr)
    ]
    if groups:
        attrs["group"] = StringAttr("+".join(dict.fromkeys(g for x in groups for g in x.split("+"))))
    return attrs


LAYOUT = "layout"  # the check that the merged layout mapping is computable


def _a2a_refusal(op: AllToAllOp) -> Refusal | None:
    if op.splits is None:
        return Refusal(LAYOUT, "not merged: dynamic split sizes (layout mapping not computable)")
    if not all(isinstance(v.owner, PackOp) for v in op.inputs):
        return Refusal(LAYOUT, "not merged: a send buffer is not made by sparse.pack (layout mapping not computable)")
    if any(len(list(v.uses)) != 1 for v in op.inputs):
        return Refusal(LAYOUT, "not merged: a send buffer has other users (layout mapping not computable)")
    for v in op.inputs:
        if any(off == DYNAMIC for seg in cast(PackOp, v.owner).layout.segments for off, _ in seg):  # a pack: above
            return Refusal(LAYOUT, "not merged: jagged members (layout mapping not computable)")
    if any(not isinstance(u.operation, UnpackOp) for u in op.outputs[0].uses):
        return Refusal(LAYOUT, "not merged: the received buffer is read by something other than sparse.unpack")
    contexts = [u.operation.rank.value.data if u.operation.rank is not None else None for u in op.outputs[0].uses]
    if len(set(contexts)) != len(contexts):
        return Refusal(LAYOUT, "not merged: two unpacks read the received buffer in the same context")
    return None


def _unpacks_by_context(op: AllToAllOp) -> dict[int | None, UnpackOp]:
    return {
        (u.operation.rank.value.data if u.operation.rank is not None else None): u.operation for u in op.outputs[0].uses
    }


def _contexts_refusal(a: AllToAllOp, b: AllToAllOp) -> Refusal | None:
    """Both sides must be read in the same kind of context (every rank, or rank by rank), and a
    rank that reads only one side must receive nothing of the other."""
    ca, cb = set(_unpacks_by_context(a)), set(_unpacks_by_context(b))
    if (None in ca or None in cb) and ca != cb:
        return Refusal(
            LAYOUT, "not merged: received buffers are unpacked per rank on one side and on every rank on the other"
        )
    for ctx in ca ^ cb:
        other = b if ctx in ca else a
        # Every-rank contexts (None) are on both sides by now; _a2a_refusal refused dynamic splits.
        assert ctx is not None and other.splits is not None
        if any(row[ctx] for row in other.splits.matrix):
            return Refusal(
                LAYOUT, f"not merged: rank {ctx} receives data it does not unpack (layout mapping not computable)"
            )
    return None


def _empty_layout(segments: int) -> LayoutAttr:
    return LayoutAttr([[] for _ in range(segments)])


def _concat(la: LayoutAttr, lb: LayoutAttr) -> LayoutAttr:
    """Per segment: `la`'s members, then `lb`'s shifted right by `la`'s width in that segment."""
    segments = []
    for sa, sb in zip(la.segments, lb.segments):
        width = sum(size for off, size in sa if off != DYNAMIC)
        segments.append([*sa, *[(off + width if size else 0, size) for off, size in sb]])
    return LayoutAttr(segments)


def _union_roles(a: AllReduceOp | AllToAllOp, b: AllReduceOp | AllToAllOp) -> RoleAttr:
    roles = list(dict.fromkeys([*a.role.role_list, *b.role.role_list]))
    return RoleAttr(*roles)


def _static_bytes(t: TensorType) -> int:
    """Bytes of a tensor whose shape is static (a `?` dimension counts as 1)."""
    n = 1
    for d in t.get_shape():
        n *= max(d, 1)
    return n * elem_bytes(t)
