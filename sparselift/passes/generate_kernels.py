"""`generate-kernels{min-tables=2}`: one fused kernel call per rank instead of one per table.

Table-local lookups (or pooled-gradient updates) that read the same received buffers and run on
the same ranks become one `sched.kernel` op whose attributes say what to specialize the
generated kernel to: `tables`, `placements`, `slots` (per table) and, for updates, `optimizer`.
`kind "lookup"` returns one pooled value per table; `kind "lookup_update"` takes one gradient per
table (after the shared lengths, indices and optional weights); `kind "lookup_grad"` (the
replicated tables' whole-table gradients, before their all-reduce) takes one gradient per table
and returns one table gradient per table, which the runtime lays out back to back in one buffer,
so the all-reduce that follows reads them without a copy. The plan module runs it as one
call of the generated multi-table C kernel; with `kernels="reference"` the same op runs the
per-table reference lowering, so both stay comparable region by region.

Groups smaller than `min-tables` are left alone (a fused call of one table gains nothing). A
table-gradient group is left alone when one of its gradients is read before the group's last
op (the fused op takes that op's place).
Inside `sched.parallel` lanes (from `parallelize-tables`) each lane is fused on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, FlatSymbolRefAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from sparselift.ir.sched import KernelOp, ParallelOp, StepOp
from sparselift.ir.sparse import LookupGradOp, LookupOp, LookupUpdateOp

_KIND = {LookupOp: "lookup", LookupUpdateOp: "lookup_update", LookupGradOp: "lookup_grad"}


def _key(op: LookupOp | LookupUpdateOp | LookupGradOp) -> tuple:
    ranks = tuple(op.placement.rank_list) if op.placement.kind.data != "data_parallel" else ("all",)
    weights = op.weights
    extra = (op.optimizer,) if isinstance(op, LookupUpdateOp) else ()
    return (type(op), op.lengths, op.indices, weights, ranks, op.placement.kind.data, op.table.dtype, *extra)


@dataclass(frozen=True)
class GenerateKernels(ModulePass):
    """Fuse table-local lookups and updates into generated multi-table kernels."""

    name = "generate-kernels"

    min_tables: int = 2

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        counter = iter(range(1 << 30))
        for step in [s for s in op.walk() if isinstance(s, StepOp)]:
            for region in (step.forward, step.backward):
                _fuse_block(region.block, self.min_tables, counter)
                # After parallelize-tables: fuse within each lane (one kernel per lane and rank),
                # never across lanes, so the lanes stay concurrent.
                for par in [o for o in region.block.ops if isinstance(o, ParallelOp)]:
                    for lane in par.lanes:
                        _fuse_block(lane.block, self.min_tables, counter)


def _symbol(kind: str, op: Operation, n: int) -> str:
    group = op.attributes.get("group")
    label = re.sub(r"[^0-9A-Za-z_]", "_", group.data) if isinstance(group, StringAttr) else "group"
    return f"{kind}_{label}_{n}"


def _read_early(ops: list[Operation], block: Block) -> bool:
    """Whether a result of `ops` is read before the last of them."""
    position = {o: k for k, o in enumerate(block.ops)}
    last = position[ops[-1]]
    for o in ops:
        for r in o.results:
            for use in r.uses:
                user = block.find_ancestor_op_in_block(use.operation)
                if user is not None and position[user] <= last:
                    return True
    return False


def _fuse_block(block: Block, min_tables: int, counter) -> None:
    groups: dict[tuple, list[Operation]] = {}
    for op in block.ops:
        if isinstance(op, LookupOp | LookupGradOp) or (isinstance(op, LookupUpdateOp) and not op.dense):
            groups.setdefault(_key(op), []).append(op)
    for ops in groups.values():
        if len(ops) < min_tables:
            continue
        first = ops[0]
        kind = _KIND[type(first)]
        if kind == "lookup_grad" and _read_early(ops, block):
            continue
        shared = [first.lengths, first.indices, *([first.weights] if first.weights is not None else [])]
        attrs = {
            "tables": ArrayAttr([o.table for o in ops]),
            "placements": ArrayAttr([o.placement for o in ops]),
            "slots": ArrayAttr([o.slots for o in ops]),
        }
        if "group" in first.attributes:
            attrs["group"] = first.attributes["group"]
        props = {"callee": FlatSymbolRefAttr(_symbol(kind, first, next(counter))), "kind": StringAttr(kind)}
        if kind == "lookup":
            kernel = KernelOp.create(operands=shared, result_types=[o.pooled.type for o in ops], properties=props,
                                     attributes=attrs)
            Rewriter.insert_op(kernel, InsertPoint.before(first))
            for o, r in zip(ops, kernel.res):
                o.pooled.replace_all_uses_with(r)
        elif kind == "lookup_grad":
            kernel = KernelOp.create(operands=[*shared, *[o.grad for o in ops]],
                                     result_types=[o.table_grad.type for o in ops], properties=props, attributes=attrs)
            # After the last gradient is available; nothing reads the table gradients before.
            Rewriter.insert_op(kernel, InsertPoint.after(ops[-1]))
            for o, r in zip(ops, kernel.res):
                o.table_grad.replace_all_uses_with(r)
        else:
            attrs["optimizer"] = first.optimizer
            kernel = KernelOp.create(operands=[*shared, *[o.grad for o in ops]], result_types=[], properties=props,
                                     attributes=attrs)
            # After the last gradient is available: where the last update was.
            Rewriter.insert_op(kernel, InsertPoint.after(ops[-1]))
        for o in ops:
            Rewriter.erase_op(o)
