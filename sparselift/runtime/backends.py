"""The reference and Triton kernel backends (`kernel_args.KernelBackend`); the C one is `runtime.kernels.CKernels`.

A plan holds one backend, chosen when it is built (`CompiledModel`): the reference for
`kernels = "reference"` plans, else the C kernels for tables on the CPU and the Triton kernels
on CUDA. The reference backend is also what the others inherit for what their kernels do not
cover (another dtype, a device they do not run on), so every backend offers every op and a plan
op never asks which one it holds.

Every table op checks its inputs first (`kernel_args.check_bags`, `check_grads`, `check_states`,
and `check_ids`, which the C entry points make themselves): bad input is a `ValueError` naming
the table, before any table changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

from sparselift.kernel_args import (
    CheckedBags,
    RoutedBags,
    TableArgs,
    UpdateArgs,
    check_bags,
    check_grads,
    check_ids,
    check_outputs,
    check_states,
)
from sparselift.runtime import reference as ref
from sparselift.strided_rows import block_runs, take_run_rows


def one_id_bags(lengths: torch.Tensor, what: str) -> torch.Tensor:
    """The mask of non-empty bags; a bag of more ids than one is not an unpooled lookup's."""
    if lengths.numel() and int(lengths.max()) > 1:
        raise ValueError(f"{what}: a bag holds {int(lengths.max())} ids; unpooled rows travel one per id")
    return lengths.bool()


def _whole(grad: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """A table's pooled gradient as one tensor (its per-slot form concatenated)."""
    return grad if isinstance(grad, torch.Tensor) else torch.cat(list(grad), dim=1)


def _written(pooled: list[torch.Tensor], out: Sequence[torch.Tensor] | None) -> list[torch.Tensor]:
    """A lookup's results, copied into the caller's `out` buffers where it gave them."""
    if out is None:
        return pooled
    for o, x in zip(out, pooled):
        o.copy_(x)
    return list(out)


class ReferenceKernels:
    """The reference backend: the torch lowering of `runtime.reference`, the correctness oracle."""

    name = "reference"
    nthreads: int | None = None  # OpenMP threads of a C call (None: torch's intra-op count)

    # -- pooled tables --
    def lookup(
        self, bags: RoutedBags, tables: Sequence[TableArgs], out: Sequence[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        check_outputs(tables, out, "lookup")
        checked = check_bags(bags, tables, "lookup")
        check_ids(checked, tables, "lookup")
        return self._reference_lookup(checked, tables, out)

    @staticmethod
    def _reference_lookup(
        checked: CheckedBags, tables: Sequence[TableArgs], out: Sequence[torch.Tensor] | None
    ) -> list[torch.Tensor]:
        return _written([ref.lookup(checked, t) for t in tables], out)

    def lookup_update(
        self, bags: RoutedBags, tables: Sequence[TableArgs], grads: Sequence[torch.Tensor], update: UpdateArgs
    ) -> None:
        checked = check_bags(bags, tables, "update")
        check_grads(tables, grads, checked.rows, "update")
        check_states(tables, update.optimizer.kind, "update")
        check_ids(checked, tables, "update")
        for t, g in zip(tables, grads):
            ref.lookup_update(checked, t, g, update)

    def lookup_grad(
        self,
        bags: RoutedBags,
        tables: Sequence[TableArgs],
        grads: Sequence[torch.Tensor | Sequence[torch.Tensor]],
        out: Sequence[torch.Tensor],
        grad_scale: float = 1.0,
    ) -> None:
        check_outputs(tables, out, "gradient")
        checked = check_bags(bags, tables, "gradient")
        check_grads(tables, grads, checked.rows, "gradient", per_slot_form=True)
        check_ids(checked, tables, "gradient")
        for o, t, g in zip(out, tables, grads):
            g = _whole(g)
            o += ref.lookup_grad(checked, t, g if grad_scale == 1.0 else g * grad_scale)

    def dense_update(self, table: TableArgs, grad: torch.Tensor, update: UpdateArgs) -> None:
        check_states([table], update.optimizer.kind, "update")
        ref.dense_update(table, grad, update)

    # -- exchange buffers --
    def pack(self, members, layout, batch: int, dtype) -> torch.Tensor:
        return ref.pack(members, layout, batch, dtype)

    def unpack(self, buffer: torch.Tensor, layout, batch: int, widths: Sequence[int]) -> list[torch.Tensor]:
        return ref.unpack(buffer, layout, batch, widths)

    # -- unpooled tables' rows (`runtime.rows`) --
    def gather_rows(self, table: TableArgs, indices: torch.Tensor) -> torch.Tensor:
        """`[ids, dim]`: each id's row."""
        return torch.index_select(table.weight, 0, indices)

    def expand_rows(self, rows: torch.Tensor, lengths: torch.Tensor, segments: int) -> torch.Tensor:
        """`[bags, dim]`: each non-empty bag's received row, zeros for the empty ones; `lengths`
        is `segments` segments of the same bags, a bag's row in the one where its length is 1."""
        dim = rows.shape[1]
        filled = one_id_bags(lengths, "expand_rows").nonzero().squeeze(1)
        if rows.shape[0] != filled.numel():
            raise ValueError(f"expand_rows: {rows.shape[0]} rows received for {filled.numel()} ids sent")
        bags = lengths.numel() // segments
        if segments > 1 and int(lengths.view(segments, bags).sum(0).max()) > 1:
            raise ValueError("expand_rows: a bag has an id in several segments; each id has one owner")
        return rows.new_zeros(bags, dim).index_copy_(0, filled % bags, rows)

    def compact_rows(self, blocks: Sequence[torch.Tensor], lengths: torch.Tensor) -> torch.Tensor:
        """`[filled, dim]`: the rows of the non-empty bags of `blocks` (each `[batch, dim]`; block
        k's bags are `lengths[k * batch : (k + 1) * batch]`), back to back."""
        batch, dim = blocks[0].shape
        filled = one_id_bags(lengths, "compact_rows").nonzero().squeeze(1)
        # The members are mostly slices of one gradient (the stacked positions' `unbind`): read the
        # filled rows straight from each run of them, no copy of the padded geometry first.
        out = blocks[0].new_empty(filled.numel(), dim)
        runs = block_runs(blocks)
        firsts = torch.tensor([first * batch for first, _ in runs] + [lengths.numel()], device=filled.device)
        bounds = torch.searchsorted(filled, firsts).tolist()
        for (first, run), lo, hi in zip(runs, bounds, bounds[1:]):
            if hi > lo:
                take_run_rows(run, filled[lo:hi] - first * batch, out[lo:hi])
        return out

    def unique_ids(self, indices: torch.Tensor, splits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each destination segment's distinct ids (sorted, segment after segment), how many each
        keeps, and where each routed id went: one sort over (segment, id) keys."""
        world = splits.numel()
        ids = indices.to(torch.int64)
        span = int(ids.max()) + 1
        segment = torch.repeat_interleave(torch.arange(world, device=ids.device), splits.to(torch.int64))
        keys, inverse = torch.unique(segment * span + ids, return_inverse=True)
        counts = torch.bincount(keys // span, minlength=world)
        return (keys % span).to(indices.dtype), counts, inverse

    def sum_rows(self, rows: torch.Tensor, inverse: torch.Tensor, distinct: int) -> torch.Tensor:
        """`[distinct, dim]`: row k the sum of the rows whose `inverse` entry is k, in order."""
        return rows.new_zeros(distinct, rows.shape[1]).index_add_(0, inverse, rows)


class TritonKernels(ReferenceKernels):
    """The Triton backend (`codegen.triton_ops`): pooled lookups and updates on CUDA (or on the
    CPU under the Triton interpreter); the reference for the rest, and for tensors the kernels
    cannot run on."""

    name = "triton"

    def lookup(
        self, bags: RoutedBags, tables: Sequence[TableArgs], out: Sequence[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        from sparselift.codegen import triton_ops

        if not triton_ops.usable_for(bags.lengths, bags.indices, *(t.weight for t in tables)):
            return super().lookup(bags, tables, out)
        check_outputs(tables, out, "lookup")
        return _written(triton_ops.lookup(bags, tables), out)

    def lookup_update(
        self, bags: RoutedBags, tables: Sequence[TableArgs], grads: Sequence[torch.Tensor], update: UpdateArgs
    ) -> None:
        from sparselift.codegen import triton_ops

        tensors = [g for g in grads if isinstance(g, torch.Tensor)]  # a list is refused by the checks
        if not triton_ops.usable_for(bags.lengths, bags.indices, *(t.weight for t in tables), *tensors):
            return super().lookup_update(bags, tables, grads, update)
        triton_ops.lookup_update(bags, tables, grads, update)


def table_args(plan, name: str, *, slots: Sequence[int] = (0,), pooling: str = "sum") -> TableArgs:
    """Table `name` of `plan` (its storage and optimizer state) as a table op's argument."""
    return TableArgs(name, plan.tables[name], slots, pooling, plan.states.get(name))


def with_weight(table: TableArgs, weight: torch.Tensor) -> TableArgs:
    """`table` read from (or written into) another tensor of its shape: a gradient buffer."""
    return attrs.evolve(table, weight=weight)


__all__ = ["ReferenceKernels", "TritonKernels", "one_id_bags", "table_args", "with_weight"]
