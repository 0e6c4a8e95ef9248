"""Python side of the Triton sparse kernels: checks, geometry, sorting and launches.

Same semantics and signatures as `sparselift.runtime.reference` (`lookup`, `lookup_update`),
plus `fused_lookup` / `fused_lookup_update` over several tables (one launch per table). The
`@triton.jit` bodies are in `sparselift.codegen.triton_kernels`; this module prepares their
arguments:

- lookups: one `lookup_kernel` program per output bag (segment, slot, sample);
- updates: one optimizer for all the call's tables, passed as an `OptimizerArgs`
  (`sparselift.runtime.sparse_optimizer`, read duck-typed: `.kind` and `.values()`, since
  codegen does not import the runtime); the call's ids are stably sorted once, for all tables,
  by the key (table, row, slot index), which leaves each row's occurrences in the reference's
  order (slot, segment, sample, position) (torch ops, one host sync for the per-table counts);
  then one launch per table of the optimizer's update kernel (generated from its rule,
  `triton_kernels.update_kernel_for`), one program per sorted position, whose row heads apply
  the optimizer once per row, exactly as the reference aggregates duplicates.

Inputs are validated before any kernel runs (two host syncs per call): bag lengths, every id a
table's slots read against that table's rows, and each table's optimizer state against its
rule's width, so no kernel reads or writes out of bounds.

Imports on any machine: torch is imported lazily by the wrappers; without triton `AVAILABLE`
is False and every wrapper raises. The kernels need CUDA tensors, or CPU tensors when the
interpreter is on (`INTERPRETED`, decided when `triton_kernels` was imported).
"""

from __future__ import annotations

from collections.abc import Sequence

from sparselift.codegen import triton_kernels as jit
from sparselift.codegen.triton_kernels import AVAILABLE, INTERPRETED
from sparselift.optim_rules import rule_for

__all__ = [
    "AVAILABLE",
    "INTERPRETED",
    "usable_for",
    "lookup",
    "lookup_update",
    "fused_lookup",
    "fused_lookup_update",
]


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


def _require(tables, *tensors) -> None:
    if not AVAILABLE:
        raise RuntimeError("triton is not installed")
    if not usable_for(*tables, *tensors):
        raise RuntimeError(
            "the Triton kernels need CUDA tensors (or CPU tensors with TRITON_INTERPRET=1 set "
            "before sparselift.codegen.triton_kernels is imported)"
        )


class _Geometry:
    """Checked inputs shared by a call's tables: i64 bag offsets, contiguous ids, f32 weights,
    the number of segments, and each id's bag (computed once, on the ids' device)."""

    def __init__(self, offs, indices, weights, segments, bag_of_id):
        self.offs, self.indices, self.weights, self.segments, self.bag_of_id = (
            offs,
            indices,
            weights,
            segments,
            bag_of_id,
        )


def _geometry(names, lengths, indices, weights, slots_per_table, features_per_segment, batch, tables) -> _Geometry:
    """Validate a call's lengths, ids and weights (two host syncs in all) before any kernel runs."""
    import torch

    where = f"lookup of table {_who(names)}"
    if lengths.dim() != 1 or lengths.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{where}: lengths must be a 1-D int32 tensor")
    if indices.dim() != 1 or indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{where}: indices must be a 1-D int32/int64 tensor")
    if weights is not None and (weights.dim() != 1 or weights.numel() != indices.numel()):
        raise ValueError(f"{where}: one weight per id expected")
    f, b = int(features_per_segment), int(batch)
    nbags, n = lengths.numel(), indices.numel()
    if f * b == 0:
        if nbags:
            raise ValueError(f"{where}: {nbags} bag lengths for {f} features x batch {b}")
        segments = 0
    elif nbags % (f * b):
        raise ValueError(f"{where}: {nbags} bag lengths is not a whole number of segments")
    else:
        segments = nbags // (f * b)
    for name, slots in zip(names, slots_per_table):
        for s in slots:
            if not 0 <= int(s) < f:
                raise ValueError(f"table '{name}': slot {int(s)} is outside the {f} features of a segment")
    dev = lengths.device
    lengths64 = lengths.to(torch.int64)
    offs = torch.zeros(nbags + 1, dtype=torch.int64, device=dev)
    if nbags:
        torch.cumsum(lengths64, 0, out=offs[1:])
        negative, total = torch.stack([(lengths64 < 0).any().to(torch.int64), offs[-1]]).tolist()
        if negative:
            bad = int(torch.nonzero(lengths64 < 0)[0])
            raise ValueError(f"{where}: negative bag length {int(lengths64[bad])} at bag {bad}")
    else:
        total = 0
    if total != n:
        raise ValueError(f"{where}: bag lengths sum to {total} but there are {n} ids")
    bag_of_id = torch.repeat_interleave(torch.arange(nbags, device=dev), lengths64, output_size=n)
    # Every id a table's slots read must lie in [0, rows): one bound per feature slot.
    limit: list[int | None] = [None] * f
    for slots, t in zip(slots_per_table, tables):
        for s in slots:
            rows = int(t.shape[0])
            seen = limit[int(s)]
            limit[int(s)] = rows if seen is None else min(rows, seen)
    if n and segments and any(x is not None for x in limit):
        bound = torch.tensor([2**62 if x is None else x for x in limit], dtype=torch.int64, device=dev)
        feature = (bag_of_id % (f * b)) // b
        bad = (indices < 0) | (indices >= bound[feature])
        if bool(bad.any()):
            at = int(torch.nonzero(bad)[0])
            slot, v = int(feature[at]), int(indices[at])
            name, rows = next(
                (nm, int(t.shape[0]))
                for nm, sl, t in zip(names, slots_per_table, tables)
                if slot in [int(x) for x in sl] and not 0 <= v < int(t.shape[0])
            )
            raise ValueError(f"lookup of table '{name}': id {v} is out of range for a table of {rows} rows")
    w = weights.to(torch.float32).contiguous() if weights is not None else None
    return _Geometry(offs, indices.contiguous(), w, segments, bag_of_id)


def _slot_tensors(slots_per_table, device) -> list:
    """Each table's slots as an int32 tensor on `device` (one host-to-device copy for all)."""
    import torch

    flat = torch.tensor([int(x) for sl in slots_per_table for x in sl], dtype=torch.int32).to(device)
    return list(flat.split([len(sl) for sl in slots_per_table]))


def fused_lookup(
    tables,
    lengths,
    indices,
    weights,
    slots_per_table,
    features_per_segment,
    batch,
    poolings,
    names: Sequence[str] | None = None,
    block_l: int = 16,
):
    """`reference.lookup` for several tables reading the same lengths / indices."""
    import torch

    tables = list(tables)
    if isinstance(poolings, str):
        poolings = [poolings] * len(tables)
    names = list(names) if names is not None else [f"#{i}" for i in range(len(tables))]
    _require(tables, lengths, indices, weights)
    for pooling, name in zip(poolings, names):
        if pooling not in ("sum", "mean"):
            raise ValueError(f"lookup of table '{name}': unknown pooling '{pooling}'")
    geo = _geometry(names, lengths, indices, weights, slots_per_table, features_per_segment, batch, tables)
    outs = []
    slot_tensors = _slot_tensors(slots_per_table, indices.device)
    for t, slots, sl, pooling in zip(tables, slots_per_table, slot_tensors, poolings):
        t = t.contiguous()
        dim = t.shape[1]
        out = torch.zeros(geo.segments * int(batch), dim * len(slots), dtype=t.dtype, device=t.device)
        n_prog = geo.segments * len(slots) * int(batch)
        if n_prog and dim:
            w = geo.weights
            jit.lookup_kernel[(n_prog,)](
                t,
                geo.indices,
                geo.offs,
                w if w is not None else geo.offs,
                sl,
                out,
                int(features_per_segment),
                int(batch),
                len(slots),
                dim,
                HAS_W=w is not None,
                MEAN=pooling == "mean",
                BLOCK_L=block_l,
                BLOCK_D=_next_pow2(dim),
            )
        outs.append(out)
    return outs


def lookup(table, lengths, indices, weights, slots, features_per_segment, batch, pooling):
    """Same signature and result as `reference.lookup`."""
    return fused_lookup([table], lengths, indices, weights, [slots], features_per_segment, batch, [pooling])[0]


def _sorted_ids(geo: _Geometry, lengths, tables, slots_per_table, features_per_segment, batch, poolings):
    """All tables' ids sorted once by (table, row, slot index): within each row, the reference's
    order (slot, segment, sample, position). Rows are numbered globally (table `t` starts at
    `row0[t]`), keys are `global_row * K + k`. Returns (keys, ends, gradient offsets, scales, K,
    row0, per-table [start, count)); ids of slots no table reads sort last. One host sync (the
    per-table counts)."""
    import torch

    dev = geo.indices.device
    f, b = int(features_per_segment), int(batch)
    bag = geo.bag_of_id
    seg, feat, sample = bag // (f * b), (bag % (f * b)) // b, bag % b
    nt = len(tables)
    kk = max(1, max(len(sl) for sl in slots_per_table))
    table_of_slot = torch.full((f,), nt, dtype=torch.int64)
    k_of_slot = torch.zeros(f, dtype=torch.int64)
    row0, total = [], 0
    for t, (table, slots) in enumerate(zip(tables, slots_per_table)):
        row0.append(total)
        total += int(table.shape[0])
        for j, s in enumerate(slots):
            table_of_slot[int(s)], k_of_slot[int(s)] = t, j
    ld = torch.tensor([int(t.shape[1]) * len(sl) for t, sl in zip(tables, slots_per_table)] + [0], dtype=torch.int64)
    dims = torch.tensor([int(t.shape[1]) for t in tables] + [0], dtype=torch.int64)
    tid = table_of_slot.to(dev)[feat]
    k = k_of_slot.to(dev)[feat]
    base = torch.tensor(row0 + [total], dtype=torch.int64).to(dev)[tid]
    keys = torch.where(tid < nt, (base + geo.indices.to(torch.int64)) * kk + k, total * kk)
    keys, perm = torch.sort(keys, stable=True)
    grow = keys // kk
    ends = torch.searchsorted(grow, grow, right=True)
    gof = ((seg * b + sample) * ld.to(dev)[tid] + k * dims.to(dev)[tid])[perm]
    scale = geo.weights if geo.weights is not None else torch.ones(bag.numel(), device=dev)
    if any(p == "mean" for p in poolings):
        mean = torch.tensor([p == "mean" for p in poolings] + [False]).to(dev)[tid]
        per_bag = lengths.to(torch.int64).clamp(min=1)[bag].to(torch.float32)
        scale = torch.where(mean, scale / per_bag, scale)
    counts = torch.bincount(tid, minlength=nt + 1)[:nt].tolist()
    starts = [0]
    for c in counts:
        starts.append(starts[-1] + c)
    return keys, ends, gof.contiguous(), scale[perm].to(torch.float32).contiguous(), kk, row0, starts, counts


def _rule_of(optimizer, names):
    """The rule of `optimizer` (anything with `.kind` and `.values()`, as
    `runtime.sparse_optimizer.OptimizerArgs`) and the kernel's run-time values, in order."""
    kind = str(getattr(optimizer, "kind", None))
    try:
        rule = rule_for(kind)
    except ValueError:
        raise ValueError(f"update of table {_who(names)}: unknown optimizer '{kind}'") from None
    values = optimizer.values()
    missing = [a for a in jit.update_arguments(rule.kind) if a not in values]
    if missing:
        raise ValueError(f"update of table {_who(names)}: the {rule.title} arguments lack {', '.join(missing)}")
    return rule, [float(values[a]) for a in jit.update_arguments(rule.kind)]


def _who(names) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _check_update(tables, states, grads, slots_per_table, poolings, names, rule, geo, batch) -> None:
    """Per-table checks of an update: pooling, gradient shape, the optimizer state (float32,
    contiguous, `rows * W` floats with `W = rule.state_width(dim)`: `OptimizerRule.state_offset`), and an
    in-place-updatable table."""
    import torch

    for t, st, g, slots, pooling, name in zip(tables, states, grads, slots_per_table, poolings, names):
        if pooling not in ("sum", "mean"):
            raise ValueError(f"update of table '{name}': unknown pooling '{pooling}'")
        want = (geo.segments * int(batch), t.shape[1] * len(slots))
        if tuple(g.shape) != want:
            raise ValueError(f"update of table '{name}': gradient of shape {tuple(g.shape)}, expected {want}")
        rows, width = int(t.shape[0]), rule.state_width(int(t.shape[1]))
        if width:
            shapes = [(rows * width,)]
            ok = st is not None and tuple(st.shape) in shapes and st.dtype == torch.float32 and st.is_contiguous()
            if not ok:
                got = "none" if st is None else f"{st.dtype} of shape {tuple(st.shape)}"
                raise ValueError(
                    f"update of table '{name}': {rule.title} needs a contiguous float32 state of shape "
                    f"{' or '.join(str(s) for s in shapes)} ({width} float{'s' if width > 1 else ''} a row); got {got}"
                )
        if not t.is_contiguous():
            raise ValueError(f"update of table '{name}': the table must be contiguous to be updated in place")


def fused_lookup_update(
    tables,
    states,
    lengths,
    indices,
    weights,
    grads,
    slots_per_table,
    features_per_segment,
    batch,
    poolings,
    optimizer,
    grad_scale=1.0,
    names: Sequence[str] | None = None,
    block_l: int = 16,
):
    """`reference.lookup_update` for several tables, all updated by `optimizer` (an
    `OptimizerArgs`: its `.kind` picks the rule, `.values()` gives its arguments). Every input
    is checked before any update."""
    import torch

    tables = list(tables)
    n = len(tables)
    if isinstance(poolings, str):
        poolings = [poolings] * n
    states = list(states) if states is not None else [None] * n
    names = list(names) if names is not None else [f"#{i}" for i in range(n)]
    rule, hyper = _rule_of(optimizer, names)
    _require(tables, lengths, indices, weights, *grads, *states)
    geo = _geometry(names, lengths, indices, weights, slots_per_table, features_per_segment, batch, tables)
    _check_update(tables, states, grads, slots_per_table, poolings, names, rule, geo, batch)
    if geo.indices.numel() == 0 or geo.segments == 0:
        return
    read = [int(x) for sl in slots_per_table for x in sl]
    if len(read) != len(set(read)):  # a slot read by two tables: one call per table
        for i in range(n):
            fused_lookup_update(
                [tables[i]],
                [states[i]],
                lengths,
                indices,
                weights,
                [grads[i]],
                [slots_per_table[i]],
                features_per_segment,
                batch,
                [poolings[i]],
                optimizer,
                grad_scale,
                [names[i]],
                block_l,
            )
        return
    keys, ends, gof, scl, kk, row0, starts, counts = _sorted_ids(
        geo, lengths, tables, slots_per_table, features_per_segment, batch, poolings
    )
    kernel = jit.update_kernel_for(rule.kind)
    for i, (t, st, g) in enumerate(zip(tables, states, grads)):
        if not counts[i] or t.shape[1] == 0:
            continue
        kernel[(counts[i],)](
            t,
            st if rule.states else scl,
            keys,
            ends,
            gof,
            scl,
            g.to(torch.float32).contiguous(),
            starts[i],
            row0[i],
            kk,
            t.shape[1],
            t.shape[0],
            float(grad_scale),
            *hyper,
            BLOCK_L=block_l,
            BLOCK_D=_next_pow2(t.shape[1]),
        )


def lookup_update(
    table,
    state,
    lengths,
    indices,
    weights,
    grad,
    slots,
    features_per_segment,
    batch,
    pooling,
    optimizer,
    grad_scale=1.0,
):
    """Same signature and effect as `reference.lookup_update`."""
    fused_lookup_update(
        [table],
        [state],
        lengths,
        indices,
        weights,
        [grad],
        [slots],
        features_per_segment,
        batch,
        [pooling],
        optimizer,
        grad_scale,
    )
