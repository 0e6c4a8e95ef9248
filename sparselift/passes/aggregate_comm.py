"""`aggregate-comm{roles=... max-bytes=...}`: merge collectives with matching roles into one.

This version merges `coll.all_reduce` ops (roles `sparse_grad`, `dense_grad`) within one region
(forward or backward) of a step: ops of the same group, reduction and element type become one
all-reduce with several operands (one flat buffer, one message per peer on the wire), e.g. the
replicated tables' gradients of several embedding modules. Merging all-to-alls (pooled outputs
and gradients across groups, through merged pack/unpack layouts) is the next step and not done
here.

Feasibility checks, each refusal leaving a `remark` attribute on the op that names the check:
same group, same element type and reduction, no dependency between the two collectives
(networkx, on the step's def-use graph), a consistent order (the merged collective takes the
later one's place; ops between them that use the earlier one's results move after it, which
is only possible when none of them feeds the later one), and the merged buffer under
`max-bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from sparselift.ir.coll import AllReduceOp, RoleAttr
from sparselift.ir.sched import StepOp

MERGEABLE_ROLES = ("sparse_grad", "dense_grad")
_ELEM_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i32": 4, "i64": 8}


def _remark(op: Operation, text: str) -> None:
    op.attributes["remark"] = StringAttr(f"aggregate-comm: {text}")


def _def_use_graph(block: Block) -> nx.DiGraph:
    graph = nx.DiGraph()
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

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        unknown = [r for r in self.roles if r not in MERGEABLE_ROLES]
        if unknown:
            from xdsl.utils.exceptions import PassFailedException

            raise PassFailedException(
                f"aggregate-comm: cannot aggregate role '{unknown[0]}'; supported: {', '.join(MERGEABLE_ROLES)}"
            )
        for step in [s for s in op.walk() if isinstance(s, StepOp)]:
            for region in (step.forward, step.backward):
                _Merger(region.block, set(self.roles), self.max_bytes).run()


class _Merger:
    def __init__(self, block: Block, roles: set[str], max_bytes: int):
        self.block, self.roles, self.max_bytes = block, roles, max_bytes

    def candidates(self) -> list[AllReduceOp]:
        return [
            op for op in self.block.ops
            if isinstance(op, AllReduceOp) and set(op.role.role_list) <= self.roles
        ]

    def run(self) -> None:
        # Greedy: fold every later candidate into the first compatible one, repeatedly.
        changed = True
        while changed:
            changed = False
            ops = self.candidates()
            for i, first in enumerate(ops):
                for second in ops[i + 1 :]:
                    reason = self.refusal(first, second)
                    if reason is not None:
                        _remark(second, reason)
                        continue
                    self.merge(first, second)
                    changed = True
                    break
                if changed:
                    break

    # -- feasibility ----------------------------------------------------------------------
    def refusal(self, a: AllReduceOp, b: AllReduceOp) -> str | None:
        if a.group != b.group:
            return "not merged with an earlier collective: different groups"
        ta, tb = a.inputs[0].type, b.inputs[0].type
        if not isinstance(ta, TensorType) or not isinstance(tb, TensorType) or ta.element_type != tb.element_type:
            return "not merged with an earlier collective: element types differ"
        if a.reduction != b.reduction:
            return "not merged with an earlier collective: reductions differ"
        bytes_ = sum(_static_bytes(v.type) for v in (*a.inputs, *b.inputs))
        if bytes_ > self.max_bytes:
            return f"not merged: the merged buffer would hold {bytes_} bytes, over max-bytes {self.max_bytes}"
        graph = _def_use_graph(self.block)
        if nx.has_path(graph, a, b) or nx.has_path(graph, b, a):
            return "not merged: the collectives depend on each other (merging would create a cycle)"
        between = self._between(a, b)
        moved = [op for op in between if nx.has_path(graph, a, op)]
        for op in moved:
            if nx.has_path(graph, op, b):
                return f"not merged: {op.name} uses the earlier collective and feeds the later one (ordering)"
        return None

    def _between(self, a: Operation, b: Operation) -> list[Operation]:
        ops = list(self.block.ops)
        return ops[ops.index(a) + 1 : ops.index(b)]

    # -- rewrite --------------------------------------------------------------------------
    def _dependents_between(self, a: Operation, b: Operation) -> list[Operation]:
        """Ops between `a` and `b` that use `a`'s results, in program order."""
        graph = _def_use_graph(self.block)
        return [op for op in self._between(a, b) if nx.has_path(graph, a, op)]

    def merge(self, a: AllReduceOp, b: AllReduceOp) -> None:
        dependents = self._dependents_between(a, b)  # before `a`'s uses move to the merged op
        merged = AllReduceOp.create(
            operands=[*a.inputs, *b.inputs],
            result_types=[v.type for v in (*a.outputs, *b.outputs)],
            properties={"group": a.group, "role": _union_roles(a, b), "reduction": a.reduction},
            attributes={k: v for k, v in a.attributes.items() if k not in ("remark", "group")},
        )
        groups = [op.attributes["group"].data for op in (a, b) if isinstance(op.attributes.get("group"), StringAttr)]
        if groups:
            merged.attributes["group"] = StringAttr("+".join(dict.fromkeys(g for x in groups for g in x.split("+"))))
        Rewriter.insert_op(merged, InsertPoint.before(b))
        for old, new in zip((*a.outputs, *b.outputs), merged.outputs):
            old.replace_all_uses_with(new)
        point: Operation = merged
        for op in dependents:  # they now read the merged op's results: they follow it
            op.detach()
            Rewriter.insert_op(op, InsertPoint.after(point))
            point = op
        Rewriter.erase_op(a)
        Rewriter.erase_op(b)


def _union_roles(a: Operation, b: Operation) -> RoleAttr:
    roles = list(dict.fromkeys([*a.role.role_list, *b.role.role_list]))
    return RoleAttr(*roles)


def _static_bytes(t) -> int:
    if not isinstance(t, TensorType):
        return 0
    n = 1
    for d in t.get_shape():
        n *= max(d, 1)
    return n * _ELEM_BYTES.get(str(t.element_type), 4)
