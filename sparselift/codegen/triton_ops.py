"""Python side of the Triton sparse kernels: sorting and launches, over `kernel_args` records.

`lookup` and `lookup_update` take the same records as every backend (`kernel_args.RoutedBags`,
`TableArgs`, `UpdateArgs`) and have the reference's semantics; `runtime.backends.TritonKernels`
is the backend that calls them. The `@triton.jit` bodies are in
`sparselift.codegen.triton_kernels`; this module prepares their arguments:

- lookups: one `lookup_kernel` program per output bag (segment, slot, sample);
- updates: one optimizer for all the call's tables (`UpdateArgs.optimizer`); the call's ids are
  stably sorted once, for all tables, by the key (table, row, slot index), which leaves each
  row's occurrences in the reference's order (slot, segment, sample, position) (torch ops, one
  host sync for the per-table counts); then one launch per table of the optimizer's update
  kernel (generated from its rule, `triton_kernels.update_kernel_for`), one program per sorted
  position, whose row heads apply the optimizer once per row, exactly as the reference
  aggregates duplicates.

Inputs are validated by the checks every backend shares (`kernel_args.check_bags`,
`check_grads`, `check_states`, `check_ids`: two host syncs) before any kernel runs, so no kernel
reads or writes out of bounds.

Imports on any machine: torch is imported lazily by the wrappers; without triton `AVAILABLE`
is False and every wrapper raises. The kernels need CUDA tensors, or CPU tensors when the
interpreter is on (`INTERPRETED`, decided when `triton_kernels` was imported).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sparselift.codegen import triton_kernels as jit
from sparselift.codegen.triton_kernels import AVAILABLE, INTERPRETED
from sparselift.kernel_args import (
    CheckedBags,
    CheckedIds,
    Pooling,
    RoutedBags,
    TableArgs,
    UpdateArgs,
    check_bags,
    check_grads,
    check_ids,
    check_states,
)
from sparselift.optim_rules import rule_for

if TYPE_CHECKING:
    import torch

__all__ = ["AVAILABLE", "INTERPRETED", "usable_for", "lookup", "lookup_update"]


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def usable_for(*tensors) -> bool:
    """Whether these kernels can run on these tensors (CUDA, or CPU under the interpreter)."""
    if not AVAILABLE:
        return False
    ts = [t for t in tensors if t is not None]
    if all(t.is_cuda for t in ts):
        return True
    return INTERPRETED and all(t.device.type == "cpu" for t in ts)


def _slot_tensors(slots_per_table, device) -> list:
    """Each table's slots as an int32 tensor on `device` (one host-to-device copy for all)."""
    import torch

    flat = torch.tensor([int(x) for sl in slots_per_table for x in sl], dtype=torch.int32).to(device)
    return list(flat.split([len(sl) for sl in slots_per_table]))


def _require(tensors) -> None:
    if not AVAILABLE:
        raise RuntimeError("triton is not installed")
    if not usable_for(*tensors):
        raise RuntimeError(
            "the Triton kernels need CUDA tensors (or CPU tensors with TRITON_INTERPRET=1 set "
            "before sparselift.codegen.triton_kernels is imported)"
        )


def lookup(bags: RoutedBags, tables: Sequence[TableArgs], block_l: int = 16) -> list[torch.Tensor]:
    """Each table's pooled bags, `[segments * batch, width]` (the reference's `lookup`)."""
    import torch

    _require([bags.lengths, bags.indices, bags.weights, *(t.weight for t in tables)])
    checked = check_bags(bags, tables, "lookup")
    ids = check_ids(checked, tables, "lookup")
    weights = checked.weights
    outs = []
    for t, sl in zip(tables, _slot_tensors([t.slots for t in tables], checked.indices.device)):
        w = t.weight.contiguous()
        out = torch.zeros(checked.rows, t.width, dtype=w.dtype, device=w.device)
        n_prog = checked.segments * len(t.slots) * checked.batch
        if n_prog and t.dim:
            jit.lookup_kernel[(n_prog,)](
                w,
                checked.indices,
                ids.offsets,
                weights if weights is not None else ids.offsets,
                sl,
                out,
                checked.features,
                checked.batch,
                len(t.slots),
                t.dim,
                HAS_W=weights is not None,
                MEAN=t.pooling == Pooling.MEAN,
                BLOCK_L=block_l,
                BLOCK_D=_next_pow2(t.dim),
            )
        outs.append(out)
    return outs


def _sorted_ids(bags: CheckedBags, ids: CheckedIds, tables: Sequence[TableArgs]):
    """All tables' ids sorted once by (table, row, slot index): within each row, the reference's
    order (slot, segment, sample, position). Rows are numbered globally (table `t` starts at
    `row0[t]`), keys are `global_row * K + k`. Returns (keys, ends, gradient offsets, scales, K,
    row0, per-table [start, count)); ids of slots no table reads sort last. One host sync (the
    per-table counts)."""
    import torch

    dev = bags.indices.device
    f, b = bags.features, bags.batch
    bag = ids.bag_of_id
    seg, feat, sample = bag // (f * b), (bag % (f * b)) // b, bag % b
    nt = len(tables)
    kk = max(1, max(len(t.slots) for t in tables))
    table_of_slot = torch.full((f,), nt, dtype=torch.int64)
    k_of_slot = torch.zeros(f, dtype=torch.int64)
    row0, total = [], 0
    for i, table in enumerate(tables):
        row0.append(total)
        total += table.rows
        for j, s in enumerate(table.slots):
            table_of_slot[s], k_of_slot[s] = i, j
    ld = torch.tensor([t.width for t in tables] + [0], dtype=torch.int64)
    dims = torch.tensor([t.dim for t in tables] + [0], dtype=torch.int64)
    tid = table_of_slot.to(dev)[feat]
    k = k_of_slot.to(dev)[feat]
    base = torch.tensor(row0 + [total], dtype=torch.int64).to(dev)[tid]
    keys = torch.where(tid < nt, (base + bags.indices.to(torch.int64)) * kk + k, total * kk)
    keys, perm = torch.sort(keys, stable=True)
    grow = keys // kk
    ends = torch.searchsorted(grow, grow, right=True)
    gof = ((seg * b + sample) * ld.to(dev)[tid] + k * dims.to(dev)[tid])[perm]
    scale = bags.weights if bags.weights is not None else torch.ones(bag.numel(), device=dev)
    if any(t.pooling == Pooling.MEAN for t in tables):
        mean = torch.tensor([t.pooling == Pooling.MEAN for t in tables] + [False]).to(dev)[tid]
        per_bag = bags.lengths.to(torch.int64).clamp(min=1)[bag].to(torch.float32)
        scale = torch.where(mean, scale / per_bag, scale)
    counts = torch.bincount(tid, minlength=nt + 1)[:nt].tolist()
    starts = [0]
    for c in counts:
        starts.append(starts[-1] + c)
    return keys, ends, gof.contiguous(), scale[perm].to(torch.float32).contiguous(), kk, row0, starts, counts


def lookup_update(
    bags: RoutedBags,
    tables: Sequence[TableArgs],
    grads: Sequence[torch.Tensor],
    update: UpdateArgs,
    block_l: int = 16,
) -> None:
    """Apply each table's pooled gradient through `update`'s optimizer (the reference's
    `lookup_update`); every input is checked before any table changes."""
    import torch

    _require([bags.lengths, bags.indices, bags.weights, *(x for t in tables for x in (t.weight, t.state))])
    checked = check_bags(bags, tables, "update")
    check_grads(tables, grads, checked.rows, "update")
    _require(grads)
    check_states(tables, update.optimizer.kind, "update")
    for t in tables:
        if not t.weight.is_contiguous():
            raise ValueError(f"update of table '{t.name}': the table must be contiguous to be updated in place")
    ids = check_ids(checked, tables, "update")
    if not tables or checked.indices.numel() == 0 or checked.segments == 0:
        return
    read = [s for t in tables for s in t.slots]
    if len(read) != len(set(read)):  # a slot read by two tables: one call per table
        for t, g in zip(tables, grads):
            lookup_update(bags, [t], [g], update, block_l)
        return
    rule = rule_for(update.optimizer.kind)
    values = update.optimizer.values()
    hyper = [float(values[a]) for a in jit.update_arguments(rule.kind)]
    keys, ends, gof, scl, kk, row0, starts, counts = _sorted_ids(checked, ids, tables)
    kernel = jit.update_kernel_for(rule.kind)
    for i, (t, g) in enumerate(zip(tables, grads)):
        if not counts[i] or t.dim == 0:
            continue
        kernel[(counts[i],)](
            t.weight,
            t.state if rule.states else scl,
            keys,
            ends,
            gof,
            scl,
            g.to(torch.float32).contiguous(),
            starts[i],
            row0[i],
            kk,
            t.dim,
            t.rows,
            float(update.grad_scale),
            *hyper,
            BLOCK_L=block_l,
            BLOCK_D=_next_pow2(t.dim),
        )
