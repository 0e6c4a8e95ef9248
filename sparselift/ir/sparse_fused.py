"""The `sparse` dialect's fused table ops: one generated-kernel call for several tables.

`generate-kernels` turns table-local ops that read the same received ids on the same ranks into
one fused op; the plan module runs it as one call of the generated multi-table kernel (or, with
the reference kernels, as the per-table lowering). Each fused op lists its `tables`, their
`placements` and their feature `slots` (one entry per table, in the same order):

- `sparse.fused_lookup`: one pooled `[bags, dim x slots]` value per table;
- `sparse.fused_lookup_update`: the pooled-gradient update, one gradient per table (`grads`), and
  the `optimizer` fused into it;
- `sparse.fused_lookup_grad`: the replicated tables' whole-table gradients (before their
  all-reduce), one `[rows, dim]` gradient per table. Its pooled gradients come one per table
  (`[bags, dim x slots]`), or one per slot (`[bags, dim]` each, table after table): the per-slot
  form reads the slots' gradients where the dense backward left them, without packing them.

All read the shared `lengths`, `indices` and optional `weights`; "reads weights" is
`op.weights is not None`. The verifiers check each table as its per-table op would, against the
routes of the enclosing `sched.step` (`_refs`). `sparselift.ir.sparse` re-exports every name here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from xdsl.dialects.builtin import I64, ArrayAttr, DenseArrayBase, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    prop_def,
    var_operand_def,
    var_result_def,
)
from xdsl.utils.exceptions import VerifyException

from sparselift.ir._checks import check_ids, check_pooled, check_table_grad
from sparselift.ir._refs import check_group_label, check_table_ref, enclosing_world_size
from sparselift.ir.sparse_attrs import OptimizerAttr, PlacementAttr, TableAttr

_SHARED_FORMAT = "$lengths `,` $indices (`weights` $weights^ `:` type($weights))? "
_GRADS_FORMAT = "`grads` `(` $grads `:` type($grads) `)` "
_TABLES_FORMAT = "`tables` `=` $tables `placements` `=` $placements `slots` `=` $slots "


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class FusedTableOp(IRDLOperation, ABC):
    """What the fused table ops share: the received ids and one (table, placement, slots) per table."""

    lengths = operand_def(TensorType)
    indices = operand_def(TensorType)
    weights = opt_operand_def(TensorType)

    tables = prop_def(ArrayAttr[TableAttr])
    placements = prop_def(ArrayAttr[PlacementAttr])
    slots = prop_def(ArrayAttr[DenseArrayBase[I64]])

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @staticmethod
    def table_properties(
        tables: Sequence[TableAttr], placements: Sequence[PlacementAttr], slots: Sequence[DenseArrayBase]
    ) -> dict[str, Attribute]:
        return {"tables": ArrayAttr(tables), "placements": ArrayAttr(placements), "slots": ArrayAttr(slots)}

    @property
    def table_list(self) -> list[TableAttr]:
        return list(self.tables.data)

    @property
    def slot_lists(self) -> list[list[int]]:
        return [list(sl.get_values()) for sl in self.slots.data]

    def owner_ranks(self, world_size: int) -> list[int]:
        """The ranks the call runs on: those of its first table (the verifier checks they all agree)."""
        return self.placements.data[0].owner_ranks(world_size)

    def verify_(self) -> None:
        tables, placements, slots = self.table_list, list(self.placements.data), self.slot_lists
        if not tables or len(placements) != len(tables) or len(slots) != len(tables):
            raise VerifyException(f"{self.name}: 'tables', 'placements' and 'slots' must list the same tables")
        for t, p in zip(tables, placements):
            if p.table.data != t.name_str:
                raise VerifyException(
                    f"{self.name}: placement is for table '{p.table.data}' but the op reads '{t.name_str}'"
                )
            p.verify_for_table(t)
        self._verify_slots_and_ranks(tables, placements, slots)
        check_ids(self.lengths, self.indices, self.weights, self.name)
        self.verify_values(tables, slots)
        for t, p, sl in zip(tables, placements, slots):
            check_table_ref(
                self, f"{self.name}, table '{t.name_str}'", t, p, sl, self.weights is not None, self.lengths
            )
        check_group_label(self)

    def _verify_slots_and_ranks(
        self, tables: list[TableAttr], placements: list[PlacementAttr], slots: list[list[int]]
    ) -> None:
        """Slots distinct and non-negative per table; one set of owner ranks for the whole call
        (the plan runs it on the first placement's ranks)."""
        for t, sl in zip(tables, slots):
            if not sl or len(set(sl)) != len(sl) or min(sl) < 0:
                raise VerifyException(
                    f"{self.name}: slots of table '{t.name_str}' must be distinct, non-negative and not empty, got {sl}"
                )
        world = enclosing_world_size(self)
        if world is None:
            return
        for p in placements:
            p.verify_ranks(world)
        owners = [p.owner_ranks(world) for p in placements]
        for t, ranks in zip(tables, owners):
            if ranks != owners[0]:
                raise VerifyException(
                    f"{self.name}: fuses tables of different ranks: '{tables[0].name_str}' on {owners[0]}, "
                    f"'{t.name_str}' on {ranks}"
                )

    @abstractmethod
    def verify_values(self, tables: list[TableAttr], slots: list[list[int]]) -> None:
        """The op's own gradients and results, one per table (each fused op says which)."""

    def _verify_pooled(
        self, values: Sequence[SSAValue], tables: list[TableAttr], slots: list[list[int]], what: str
    ) -> None:
        """Pooled values (results or gradients): [bags, dim x slots] per table, in its dtype."""
        if len(values) != len(tables):
            raise VerifyException(
                f"{self.name}: needs one {what} per table ({_count(len(tables), 'table')}), got {len(values)}"
            )
        for t, sl, v in zip(tables, slots, values):
            shape = v.type.get_shape() if isinstance(v.type, TensorType) else ()
            if len(shape) != 2 or (shape[1] >= 0 and shape[1] != t.dim.data * len(sl)):
                raise VerifyException(
                    f"{self.name}: {what} for table '{t.name_str}' must be [bags, {t.dim.data * len(sl)}] "
                    f"({_count(len(sl), 'slot')}), got {v.type}"
                )
            check_pooled(v.type, t, f"{self.name}: {what} for table '{t.name_str}'")


@irdl_op_definition
class FusedLookupOp(FusedTableOp):
    """Gather and pool several tables in one call: one pooled value per table."""

    name = "sparse.fused_lookup"

    pooled = var_result_def(TensorType)

    assembly_format = (
        _SHARED_FORMAT + _TABLES_FORMAT + "attr-dict `:` type($lengths) `,` type($indices) `->` type($pooled)"
    )

    def __init__(
        self,
        lengths: SSAValue,
        indices: SSAValue,
        weights: SSAValue | None,
        tables: Sequence[TableAttr],
        placements: Sequence[PlacementAttr],
        slots: Sequence[DenseArrayBase],
        result_types: Sequence[Attribute],
    ):
        super().__init__(
            operands=[lengths, indices, [] if weights is None else [weights]],
            result_types=[list(result_types)],
            properties=self.table_properties(tables, placements, slots),
        )

    def verify_values(self, tables: list[TableAttr], slots: list[list[int]]) -> None:
        self._verify_pooled(self.pooled, tables, slots, "result")


class PooledGradients(IRDLOperation, ABC):
    """The backward fused ops' operands after the shared ids: one pooled gradient per table.

    A base listed after `FusedTableOp`: IRDL orders operands by the class hierarchy (the op's
    own class first), so this keeps `lengths, indices, weights` ahead of `grads`."""

    grads = var_operand_def(TensorType)


@irdl_op_definition
class FusedLookupUpdateOp(FusedTableOp, PooledGradients):
    """Several tables' pooled-gradient backward fused with the optimizer update, in one call."""

    name = "sparse.fused_lookup_update"

    optimizer = prop_def(OptimizerAttr)

    assembly_format = (
        _SHARED_FORMAT
        + _GRADS_FORMAT
        + _TABLES_FORMAT
        + "`optimizer` `=` qualified($optimizer) attr-dict `:` type($lengths) `,` type($indices)"
    )

    def __init__(
        self,
        lengths: SSAValue,
        indices: SSAValue,
        weights: SSAValue | None,
        grads: Sequence[SSAValue],
        tables: Sequence[TableAttr],
        placements: Sequence[PlacementAttr],
        slots: Sequence[DenseArrayBase],
        optimizer: OptimizerAttr,
    ):
        super().__init__(
            operands=[lengths, indices, [] if weights is None else [weights], list(grads)],
            properties=self.table_properties(tables, placements, slots) | {"optimizer": optimizer},
        )

    def verify_values(self, tables: list[TableAttr], slots: list[list[int]]) -> None:
        self._verify_pooled(self.grads, tables, slots, "gradient")


@irdl_op_definition
class FusedLookupGradOp(FusedTableOp, PooledGradients):
    """Several replicated tables' whole-table gradients in one call: one [rows, dim] per table,
    which the runtime lays out back to back so the all-reduce after it reads them without a copy.

    `grads`: one `[bags, dim x slots]` per table, or (the per-slot form) one `[bags, dim]` per
    slot, table after table, in each table's slot order. The two agree where every table has one
    slot."""

    name = "sparse.fused_lookup_grad"

    table_grads = var_result_def(TensorType)

    assembly_format = (
        _SHARED_FORMAT
        + _GRADS_FORMAT
        + _TABLES_FORMAT
        + "attr-dict `:` type($lengths) `,` type($indices) `->` type($table_grads)"
    )

    def __init__(
        self,
        lengths: SSAValue,
        indices: SSAValue,
        weights: SSAValue | None,
        grads: Sequence[SSAValue],
        tables: Sequence[TableAttr],
        placements: Sequence[PlacementAttr],
        slots: Sequence[DenseArrayBase],
        result_types: Sequence[Attribute],
    ):
        super().__init__(
            operands=[lengths, indices, [] if weights is None else [weights], list(grads)],
            result_types=[list(result_types)],
            properties=self.table_properties(tables, placements, slots),
        )

    @property
    def per_slot(self) -> bool:
        """Whether the gradients come one per slot (and some table has several slots)."""
        return len(self.grads) != len(self.tables.data)

    def grads_per_table(self) -> list[list[SSAValue]]:
        """Each table's gradients: its one pooled gradient, or its slots' (the per-slot form)."""
        if not self.per_slot:
            return [[g] for g in self.grads]
        out, at = [], 0
        for sl in self.slot_lists:
            out.append(list(self.grads[at : at + len(sl)]))
            at += len(sl)
        return out

    def _verify_per_slot(self, tables: list[TableAttr], slots: list[list[int]]) -> None:
        """The per-slot form: one [bags, dim] gradient per slot, table after table."""
        grads = iter(self.grads)
        for t, sl in zip(tables, slots):
            for k in range(len(sl)):
                g = next(grads)
                shape = g.type.get_shape() if isinstance(g.type, TensorType) else ()
                if len(shape) != 2 or (shape[1] >= 0 and shape[1] != t.dim.data):
                    raise VerifyException(
                        f"{self.name}: gradient of slot {k} of table '{t.name_str}' must be "
                        f"[bags, {t.dim.data}] (one gradient per slot), got {g.type}"
                    )
                check_pooled(g.type, t, f"{self.name}: gradient of slot {k} of table '{t.name_str}'")

    def verify_values(self, tables: list[TableAttr], slots: list[list[int]]) -> None:
        nslots = sum(len(sl) for sl in slots)
        if len(self.grads) == nslots and nslots != len(tables):
            self._verify_per_slot(tables, slots)
        elif len(self.grads) != len(tables):
            raise VerifyException(
                f"{self.name}: needs one gradient per table ({_count(len(tables), 'table')}) or one per "
                f"slot ({_count(nslots, 'slot')}), got {len(self.grads)}"
            )
        else:
            self._verify_pooled(self.grads, tables, slots, "gradient")
        if len(self.table_grads) != len(tables):
            raise VerifyException(
                f"{self.name}: needs one table gradient per table ({_count(len(tables), 'table')}), "
                f"got {len(self.table_grads)}"
            )
        for t, r in zip(tables, self.table_grads):
            check_table_grad(r.type, t, f"{self.name}: table gradient of '{t.name_str}'")


FUSED_TABLE_OPS = (FusedLookupOp, FusedLookupUpdateOp, FusedLookupGradOp)
