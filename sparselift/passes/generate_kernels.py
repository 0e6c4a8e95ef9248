"""`generate-kernels{min-tables=2 per-slot-grads=true}`: one fused kernel call per rank instead of one per table.

Table-local lookups (or pooled-gradient updates) that read the same received buffers and run on
the same ranks become one fused op (`sparselift/ir/sparse_fused.py`) whose properties say what
to specialize the generated kernel to: `tables`, `placements`, `slots` (per table) and, for
updates, `optimizer`. `sparse.fused_lookup` returns one pooled value per table;
`sparse.fused_lookup_update` takes one gradient per table (after the shared lengths, indices and
optional weights); `sparse.fused_lookup_grad` (the replicated tables' whole-table gradients,
before their all-reduce) takes one gradient per table and returns one table gradient per table,
which the runtime lays out back to back in one buffer, so the all-reduce that follows reads them
without a copy. A `group` label of the fused ops stays on the fused op. The plan module runs it as one
call of the generated multi-table C kernel; with `kernels="reference"` the same op runs the
per-table reference lowering, so both stay comparable region by region.

Groups smaller than `min-tables` are left alone (a fused call of one table gains little); they
run the generated kernel one table at a time, and the step says so (`kernels = "generated"`). A
table serving several feature slots (an unpooled table has one per id position) is fused even
alone: the fused lookup writes its rows straight into the output exchange's packed buffer and
the fused update reads them from the received one, saving a copy of every row each way. A
table-gradient group is left alone when one of its gradients is read before the group's last
op (the fused op takes that op's place).
Inside `sched.parallel` lanes (from `parallelize-tables`) each lane is fused on its own.

Where a table's pooled gradient is only a pack of its slots' gradients, side by side in slot
order (`lift-sparse` packs an unpooled table's positions so), unpacked whole for the update, the
fused `sparse.fused_lookup_grad` takes the slots' gradients themselves (its per-slot form) and
the pack and unpack go: the kernel reads each slot where the dense backward left it (on DIN, the
category positions' columns of the history's gradient) instead of a copy of every one. It does
so for all the group's tables or for none; where one cannot, the fused op keeps the packed
gradients and a `per-slot` remark names the table and says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from sparselift.ir.sched import ParallelOp, StepOp
from sparselift.ir.sparse import (
    FusedLookupGradOp,
    FusedLookupOp,
    FusedLookupUpdateOp,
    FusedTableOp,
    LookupGradOp,
    LookupOp,
    LookupUpdateOp,
    PackOp,
    UnpackOp,
)
from sparselift.passes.remarks import Refusal, remark

PASS = "generate-kernels"


def _key(op: LookupOp | LookupUpdateOp | LookupGradOp) -> tuple:
    ranks = tuple(op.placement.rank_list) if op.placement.kind.data != "data_parallel" else ("all",)
    weights = op.weights
    extra = (op.optimizer,) if isinstance(op, LookupUpdateOp) else ()
    return (type(op), op.lengths, op.indices, weights, ranks, op.placement.kind.data, op.table.dtype, *extra)


@dataclass(frozen=True)
class GenerateKernels(ModulePass):
    """Fuse table-local lookups and updates into generated multi-table kernels."""

    name = PASS

    min_tables: int = 2
    # Replicated tables' gradients read per slot, where they can be (see the module docstring);
    # false keeps the pack (for `bench ablation`'s paired comparison).
    per_slot_grads: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for step in [s for s in op.walk() if isinstance(s, StepOp)]:
            # Every table op of the step now runs a generated kernel, fused or (a group under
            # `min-tables`) one call per table: the cost model prices them so.
            step.attributes["kernels"] = StringAttr("generated")
            for region in (step.forward, step.backward):
                _fuse_block(region.block, self.min_tables, self.per_slot_grads)
                # After parallelize-tables: fuse within each lane (one kernel per lane and rank),
                # never across lanes, so the lanes stay concurrent.
                for par in [o for o in region.block.ops if isinstance(o, ParallelOp)]:
                    for lane in par.lanes:
                        _fuse_block(lane.block, self.min_tables, self.per_slot_grads)


def _read_early(ops: Sequence[Operation], block: Block) -> bool:
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


def _fused(ops: list[LookupOp | LookupUpdateOp | LookupGradOp], per_slot_grads: bool) -> FusedTableOp:
    """The fused op of `ops` (one kind, same ids): their tables in order, their group label."""
    first = ops[0]
    assert first.lengths is not None and first.indices is not None  # dense updates are never fused
    shared = (first.lengths, first.indices, first.weights)
    tables = ([o.table for o in ops], [o.placement for o in ops], [o.slots for o in ops])
    # `ops` are of one kind (`_key` groups by it): the casts say which.
    if isinstance(first, LookupOp):
        lookups = cast(list[LookupOp], ops)
        fused: FusedTableOp = FusedLookupOp(*shared, *tables, [o.pooled.type for o in lookups])
    elif isinstance(first, LookupGradOp):
        grads = cast(list[LookupGradOp], ops)
        per_slot = _per_slot_grads(grads) if per_slot_grads else None
        given = [g for slot_grads in per_slot for g in slot_grads] if isinstance(per_slot, list) else []
        result_types = [o.table_grad.type for o in grads]
        fused = FusedLookupGradOp(*shared, given or [o.grad for o in grads], *tables, result_types)
        if isinstance(per_slot, Refusal):
            remark(fused, PASS, per_slot.check, per_slot.text)
    else:
        updates = cast(list[LookupUpdateOp], ops)
        fused = FusedLookupUpdateOp(*shared, [o.grad for o in updates], *tables, first.optimizer)
    if "group" in first.attributes:
        fused.attributes["group"] = first.attributes["group"]
    return fused


def _packed_slots(op: LookupGradOp) -> list[SSAValue] | str:
    """The slots' gradients that `op`'s pooled gradient packs side by side (see the module
    docstring), or why it cannot be read per slot."""
    unpack, dim, nslots = op.grad.owner, op.table.dim.data, len(op.slots)
    if not isinstance(unpack, UnpackOp) or not isinstance(unpack.buffer.owner, PackOp):
        return "its gradient is not an unpack of a pack"
    pack = unpack.buffer.owner
    if len(unpack.members) != 1 or unpack.rank is not None or pack.rank is not None:
        return "the unpack is not the whole pack"
    if not op.grad.has_one_use() or not pack.buffer.has_one_use():
        return "its packed gradient has other readers"
    if pack.layout.segments != [[(k * dim, dim) for k in range(nslots)]]:
        return "the pack does not lay the slots' gradients side by side in slot order"
    return list(pack.members)


def _per_slot_grads(ops: list[LookupGradOp]) -> list[list[SSAValue]] | Refusal | None:
    """Every table's slots' gradients, when all can be read per slot; None where no table has
    several slots (nothing to gain); else the refusal naming the first table that cannot."""
    if all(len(o.slots) < 2 for o in ops):
        return None
    out = []
    for o in ops:
        slots = _packed_slots(o) if len(o.slots) > 1 else [o.grad]
        if isinstance(slots, str):
            return Refusal("per-slot", f"slots' gradients packed: table '{o.table.name_str}': {slots}")
        out.append(slots)
    return out


def _erase_dead_packs(grads: Sequence[SSAValue]) -> None:
    """Erase the unpack-of-pack that made each of `grads` once nothing reads it any more."""
    for g in grads:
        unpack = g.owner
        if isinstance(unpack, UnpackOp) and not any(m.uses for m in unpack.members):
            pack = unpack.buffer.owner
            Rewriter.erase_op(unpack)
            if isinstance(pack, PackOp) and not pack.buffer.uses:
                Rewriter.erase_op(pack)


def _fuse_block(block: Block, min_tables: int, per_slot_grads: bool) -> None:
    groups: dict[tuple, list[LookupOp | LookupUpdateOp | LookupGradOp]] = {}
    for op in block.ops:
        if isinstance(op, LookupOp | LookupGradOp) or (isinstance(op, LookupUpdateOp) and not op.dense):
            groups.setdefault(_key(op), []).append(op)
    for ops in groups.values():
        if len(ops) < min_tables and all(len(op.slots) < 2 for op in ops):
            continue
        if isinstance(ops[0], LookupGradOp) and _read_early(ops, block):
            continue
        fused = _fused(ops, per_slot_grads)
        if isinstance(fused, FusedLookupOp):
            Rewriter.insert_op(fused, InsertPoint.before(ops[0]))
            for lookup, r in zip(cast(list[LookupOp], ops), fused.pooled):  # lookups: `fused` is
                lookup.pooled.replace_all_uses_with(r)
        else:
            # After the last gradient is available: where the last update (or table gradient)
            # was; nothing reads the table gradients before (see _read_early).
            Rewriter.insert_op(fused, InsertPoint.after(ops[-1]))
            if isinstance(fused, FusedLookupGradOp):
                for grad, r in zip(cast(list[LookupGradOp], ops), fused.table_grads):  # as `fused` is
                    grad.table_grad.replace_all_uses_with(r)
        packed = [o.grad for o in ops if isinstance(o, LookupGradOp)]
        for o in ops:
            Rewriter.erase_op(o)
        _erase_dead_packs(packed)
