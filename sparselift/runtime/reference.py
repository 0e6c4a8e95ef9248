"""Reference (torch) lowering of the lifted sparse ops: the correctness oracle.

Each function implements one op exactly as `docs/ir-semantics.md` defines it, for the rank it
runs on; the table ops take the checked records of `sparselift.kernel_args` (the reference
backend, `runtime/backends.ReferenceKernels`, checks them). Generated kernels must match these
bit for bit up to fp32 summation order; the planner compares them, and they are the "without
code generation" ablation.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

from sparselift.kernel_args import CheckedBags, OptimizerArgs, Pooling, TableArgs, UpdateArgs
from sparselift.optim_rules import OptimizerKind, StateScope, evaluate, rule_for
from sparselift.runtime.sparse_optimizer import state_slots


@attrs.frozen
class RouteFeature:
    """What `route` needs to know about one feature of its group."""

    name: str
    table: str
    rows: int
    kind: str  # table_wise | row_wise | data_parallel
    ranks: tuple[int, ...]  # owner ranks (table_wise: one; row_wise: in row-range order)
    row_bounds: tuple[int, ...]
    weighted: bool


def validate_feature(name: str, table: str, rows: int, ids: torch.Tensor, offsets: torch.Tensor, batch: int) -> None:
    """Raise ValueError naming the feature and table for any id or offset a kernel must not see."""
    where = f"feature '{name}' (table '{table}')"
    if ids.dim() != 1 or offsets.dim() != 1:
        raise ValueError(
            f"{where}: ids and offsets must be 1-D, got shapes {tuple(ids.shape)} and {tuple(offsets.shape)}"
        )
    if ids.dtype not in (torch.int32, torch.int64) or offsets.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{where}: ids and offsets must be int32 or int64, got {ids.dtype} and {offsets.dtype}")
    if offsets.numel() != batch + 1:
        raise ValueError(f"{where}: expected {batch + 1} offsets for a batch of {batch}, got {offsets.numel()}")
    if int(offsets[0]) != 0 or int(offsets[-1]) != ids.numel():
        raise ValueError(
            f"{where}: offsets must start at 0 and end at the number of ids ({ids.numel()}), "
            f"got {int(offsets[0])} .. {int(offsets[-1])}"
        )
    if batch and bool((offsets[1:] < offsets[:-1]).any()):
        bad = int(torch.nonzero(offsets[1:] < offsets[:-1])[0])
        raise ValueError(f"{where}: offsets decrease at bag {bad} ({int(offsets[bad])} -> {int(offsets[bad + 1])})")
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0:
            raise ValueError(f"{where}: negative id {lo}")
        if hi >= rows:
            raise ValueError(f"{where}: id {hi} is out of range for a table of {rows} rows")


def validate_features(
    features: Sequence[RouteFeature],
    ids: Sequence[torch.Tensor],
    offsets: Sequence[torch.Tensor],
    batch: int,
    check_ids: bool = True,
) -> torch.Tensor | None:
    """`validate_feature` for a whole group at once: a few vectorized checks (two host syncs),
    and the per-feature checks (which name what is wrong) only when one of them fails.
    `check_ids=False` leaves the id range to the caller (a routing kernel that checks each id as
    it copies it).

    Returns the `[features, batch]` int64 bag lengths it computed on the way (None when there
    are no features), so routing need not compute them again."""
    ok = all(
        i.dim() == 1
        and o.dim() == 1
        and o.numel() == batch + 1
        and i.dtype in (torch.int32, torch.int64)
        and o.dtype in (torch.int32, torch.int64)
        for i, o in zip(ids, offsets)
    )
    lengths = None
    if ok and features:
        device = ids[0].device
        same = all(o.dtype == torch.int64 for o in offsets)
        offs = torch.stack(list(offsets)) if same else torch.stack([o.to(torch.int64) for o in offsets])
        lengths = offs[:, 1:] - offs[:, :-1]
        counts = [i.numel() for i in ids]
        bad = (offs[:, 0] != 0).any() | (offs[:, -1] != torch.tensor(counts, device=device)).any()
        if batch:
            bad = bad | (lengths < 0).any()
        ok = not bool(bad)
        if ok and check_ids and sum(counts) > 0:
            flat = _cat_as(ids, torch.int64)
            rows = torch.repeat_interleave(
                torch.tensor([f.rows for f in features], dtype=torch.int64, device=device),
                torch.tensor(counts, device=device),
                output_size=sum(counts),
            )
            ok = not bool(((flat < 0) | (flat >= rows)).any())
    if not ok:
        for f, i, o in zip(features, ids, offsets):
            validate_feature(f.name, f.table, f.rows, i, o, batch)
    return lengths


def _cat_as(tensors: Sequence[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """One concatenation in `dtype` (no per-tensor cast when they already have it)."""
    if all(t.dtype == dtype for t in tensors):
        return torch.cat(list(tensors))
    return torch.cat([t.to(dtype) for t in tensors])


def route(
    features: Sequence[RouteFeature],
    ids: Sequence[torch.Tensor],
    offsets: Sequence[torch.Tensor],
    weights: dict[str, torch.Tensor],
    rank: int,
    world: int,
    with_weights: bool,
    index_dtype: torch.dtype = torch.int64,
    lengths: torch.Tensor | None = None,
    concat_ids=None,
    route_row_wise=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Bucket a group's local ids by destination rank (see `sparse.route`). `lengths`: the
    `[features, batch]` bag lengths when the caller has them (`validate_features`).
    `concat_ids(ids, rows, dtype)`: a checking concatenation for whole features (a kernel's
    `concat_ids`), and `route_row_wise(ids, lengths, bounds, owners, dtype)` a checking bucketing
    of row-wise ones (a kernel's `route_row_wise`), whose bad id is reported here naming the
    feature."""
    if whole_features(features):
        return _route_whole_features(
            features, ids, offsets, weights, rank, world, with_weights, index_dtype, lengths, concat_ids
        )
    if row_wise_over(features, world):
        if route_row_wise is not None and not with_weights:
            if lengths is None:
                lengths = torch.stack([(o[1:] - o[:-1]).to(torch.int64) for o in offsets])
            return _checked_row_wise_route(route_row_wise, features, ids, lengths, index_dtype)
        return _route_row_wise(features, ids, offsets, weights, world, with_weights, index_dtype, lengths)
    return _route_per_feature(features, ids, offsets, weights, rank, world, with_weights, index_dtype)


def whole_features(features: Sequence[RouteFeature]) -> bool:
    """Every feature goes whole to its destination (none row-wise): `route` concatenates them,
    with the generated `concat_ids` where the caller has it."""
    return bool(features) and all(f.kind != "row_wise" for f in features)


def row_wise_over(features: Sequence[RouteFeature], world: int) -> bool:
    """Every feature row-wise over all `world` ranks: `route` buckets them all at once, with the
    generated `route_row_wise` where the caller has it and no feature is weighted."""
    return bool(features) and all(f.kind == "row_wise" and len(f.ranks) == world for f in features)


def _route_per_feature(features, ids, offsets, weights, rank, world, with_weights, index_dtype):
    """`route` feature by feature and destination by destination (any mix of placements)."""
    lengths_out, ids_out, w_out, splits = [], [], [], []
    per_feature_lengths = [(o[1:] - o[:-1]).to(torch.int32) for o in offsets]
    for dest in range(world):
        seg_ids = 0
        for f, fid, flen in zip(features, ids, per_feature_lengths):
            fw = weights.get(f.name)
            if f.kind == "table_wise":
                if f.ranks[0] != dest:
                    continue
                sel_ids, sel_len, sel_w = fid, flen, fw
            elif f.kind == "data_parallel":
                if dest != rank:
                    continue
                sel_ids, sel_len, sel_w = fid, flen, fw
            else:  # row_wise: keep the ids of dest's row range, shifted to shard-local rows
                if dest not in f.ranks:
                    continue
                i = f.ranks.index(dest)
                lo, hi = f.row_bounds[i], f.row_bounds[i + 1]
                keep = (fid >= lo) & (fid < hi)
                bag = torch.repeat_interleave(torch.arange(flen.numel(), device=fid.device), flen.long())
                sel_len = torch.bincount(bag[keep], minlength=flen.numel()).to(torch.int32)
                sel_ids = fid[keep] - lo
                sel_w = None if fw is None else fw[keep]
            lengths_out.append(sel_len)
            ids_out.append(sel_ids.to(index_dtype))
            if with_weights:
                w_out.append(
                    sel_w.to(torch.float32) if sel_w is not None else torch.ones(sel_ids.numel(), device=sel_ids.device)
                )
            seg_ids += sel_ids.numel()
        splits.append(seg_ids)
    device = ids[0].device if ids else None
    cat = lambda xs, dtype: torch.cat(xs) if xs else torch.empty(0, dtype=dtype, device=device)  # noqa: E731
    return (
        cat(lengths_out, torch.int32),
        cat(ids_out, index_dtype),
        torch.tensor(splits, dtype=torch.int64, device=device),
        cat(w_out, torch.float32) if with_weights else None,
    )


def _route_row_wise(features, ids, offsets, weights, world, with_weights, index_dtype, lengths=None):
    """`route` for a group of row-wise tables spanning all `world` ranks, all features at once:
    each id's destination is the rank whose row range holds it, found for every id together, and
    one stable sort by destination keeps the (feature, sample) order within each destination.
    As `_route_per_feature` computes it, without a Python loop over features (an unpooled table
    has a feature per id position)."""
    device = ids[0].device
    n_features, batch = len(features), offsets[0].numel() - 1
    if lengths is None:
        lengths = torch.stack([(o[1:] - o[:-1]).to(torch.int64) for o in offsets])
    counts = torch.tensor([i.numel() for i in ids], device=device)
    flat = _cat_as(ids, torch.int64)
    feature = torch.repeat_interleave(torch.arange(n_features, device=device), counts, output_size=flat.numel())
    bag = torch.repeat_interleave(
        torch.arange(n_features * batch, device=device), lengths.reshape(-1).long(), output_size=flat.numel()
    )
    lows = torch.tensor([f.row_bounds[:-1] for f in features], dtype=torch.int64, device=device)  # [F, W]
    owners = torch.tensor([f.ranks for f in features], dtype=torch.int64, device=device)
    span = (flat.unsqueeze(1) >= lows[feature]).sum(1) - 1  # the row range holding each id
    dest = owners[feature, span]
    order = torch.sort(dest, stable=True).indices
    routed_lengths = torch.bincount(dest * (n_features * batch) + bag, minlength=world * n_features * batch)
    routed_w = None
    if with_weights:
        w = [
            weights[f.name].to(torch.float32) if f.name in weights else torch.ones(i.numel(), device=device)
            for f, i in zip(features, ids)
        ]
        routed_w = torch.cat(w)[order]
    return (
        routed_lengths.to(torch.int32),
        (flat - lows[feature, span])[order].to(index_dtype),
        torch.bincount(dest, minlength=world).to(torch.int64),
        routed_w,
    )


def _checked_concat(concat_ids, features, ids, order, index_dtype) -> torch.Tensor:
    try:
        return concat_ids([ids[k] for k in order], [features[k].rows for k in order], index_dtype)
    except IndexError as e:
        k, pos, value = e.args
        raise _bad_id(features[order[k]], pos, value) from None


def _checked_row_wise_route(route_row_wise, features, ids, lengths, index_dtype):
    """`route` of row-wise features by the kernel's one checking pass (`route_row_wise`)."""
    bounds = [f.row_bounds for f in features]
    try:
        routed_lengths, routed_ids, splits = route_row_wise(
            ids, lengths, bounds, [f.ranks for f in features], index_dtype
        )
    except IndexError as e:
        k, pos, value = e.args
        raise _bad_id(features[k], pos, value) from None
    return routed_lengths, routed_ids, splits, None


def _bad_id(f: RouteFeature, pos: int, value: int) -> ValueError:
    where = f"feature '{f.name}' (table '{f.table}')"
    return ValueError(
        f"{where}: negative id {value} (position {pos})"
        if value < 0
        else f"{where}: id {value} is out of range for a table of {f.rows} rows (position {pos})"
    )


def _route_whole_features(
    features, ids, offsets, weights, rank, world, with_weights, index_dtype, lengths=None, concat_ids=None
):
    """`route` when every feature goes whole to its destination (table-wise, data-parallel): one
    gather of the lengths and one concatenation of the ids, in destination-then-feature order."""
    order = [
        k
        for dest in range(world)
        for k, f in enumerate(features)
        if (f.kind == "table_wise" and f.ranks[0] == dest) or (f.kind == "data_parallel" and dest == rank)
    ]
    if lengths is None:
        lengths = torch.stack([(o[1:] - o[:-1]).to(torch.int64) for o in offsets])
    lengths = lengths.to(torch.int32)
    splits = [0] * world
    for k in order:
        f = features[k]
        splits[f.ranks[0] if f.kind == "table_wise" else rank] += ids[k].numel()
    device = ids[0].device
    routed_w = None
    if with_weights:
        routed_w = (
            torch.cat(
                [
                    weights[features[k].name].to(torch.float32)
                    if features[k].name in weights
                    else torch.ones(ids[k].numel(), device=device)
                    for k in order
                ]
            )
            if order
            else torch.empty(0, dtype=torch.float32, device=device)
        )
    return (
        (lengths if order == list(range(len(features))) else lengths[order]).reshape(-1)
        if order
        else torch.empty(0, dtype=torch.int32, device=device),
        (
            _cat_as([ids[k] for k in order], index_dtype)
            if concat_ids is None
            else _checked_concat(concat_ids, features, ids, order, index_dtype)
        )
        if order
        else torch.empty(0, dtype=index_dtype, device=device),
        torch.tensor(splits, dtype=torch.int64, device=device),
        routed_w,
    )


def _bag_geometry(bags: CheckedBags):
    """For each id: its bag's segment, feature slot and sample (bags are segment, feature, sample-major)."""
    lengths, batch = bags.lengths.long(), bags.batch
    bag_of_id = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)
    per_seg = bags.features * batch
    segment = bag_of_id // per_seg
    feature = (bag_of_id % per_seg) // batch
    sample = bag_of_id % batch
    return bag_of_id, segment, feature, sample


def _per_id_scale(lengths, bag_of_id, weights, pooling):
    scale = weights.to(torch.float32) if weights is not None else torch.ones(bag_of_id.numel(), device=bag_of_id.device)
    if pooling == Pooling.MEAN:
        scale = scale / lengths.long().clamp(min=1)[bag_of_id].to(torch.float32)
    return scale


def lookup(bags: CheckedBags, table: TableArgs) -> torch.Tensor:
    """Gather and pool one table's bags: `[segments * batch, dim * len(slots)]`."""
    weight, dim, batch = table.weight, table.dim, bags.batch
    out = torch.zeros(bags.rows, table.width, dtype=weight.dtype, device=weight.device)
    if bags.indices.numel() == 0:
        return out
    bag_of_id, segment, feature, sample = _bag_geometry(bags)
    scale = _per_id_scale(bags.lengths, bag_of_id, bags.weights, table.pooling)
    for k, slot in enumerate(table.slots):
        mask = feature == slot
        rows = weight[bags.indices[mask].long()] * scale[mask, None].to(weight.dtype)
        out[:, k * dim : (k + 1) * dim].index_add_(0, segment[mask] * batch + sample[mask], rows)
    return out


def _grad_per_id(bags: CheckedBags, table: TableArgs, grad: torch.Tensor):
    """(row ids, gradient rows) for every id of the table's slots."""
    dim, batch = table.dim, bags.batch
    bag_of_id, segment, feature, sample = _bag_geometry(bags)
    scale = _per_id_scale(bags.lengths, bag_of_id, bags.weights, table.pooling)
    rows, grads = [], []
    for k, slot in enumerate(table.slots):
        mask = feature == slot
        out_row = segment[mask] * batch + sample[mask]
        rows.append(bags.indices[mask].long())
        grads.append(grad[out_row, k * dim : (k + 1) * dim] * scale[mask, None].to(grad.dtype))
    return torch.cat(rows), torch.cat(grads)


def apply_optimizer(
    table: torch.Tensor,
    state: torch.Tensor | None,
    rows: torch.Tensor,
    grad_rows: torch.Tensor,
    optimizer: OptimizerArgs,
) -> None:
    """Update the touched rows (`rows`, one per gradient row, repeats allowed) by the rule of
    `optimizer.kind` (`sparselift.optim_rules`), evaluated on tensors.

    SGD is `torch.optim.SGD` on a sparse gradient: one fused `w + (-lr) * g` per occurrence, in
    the given order (what `index_add_` with alpha does), so an f32 table rounds exactly as
    `nn.EmbeddingBag(sparse=True)` + `torch.optim.SGD` would. Tables stored in 16 bits accumulate
    a row's steps in f32 and round once. Every other optimizer sums a row's occurrences first,
    then runs its rule on the row's state (`state`: the table's state buffer, each of the rule's
    states whole, one after the other: `sparse_optimizer.state_slots`) once per touched row.
    """
    if rows.numel() == 0:
        return
    rule = rule_for(optimizer.kind)
    if not rule.summed:
        if table.dtype == torch.float32:
            table.index_add_(0, rows, grad_rows.float(), alpha=-optimizer.lr)
        else:
            unique, inverse = torch.unique(rows, return_inverse=True)
            w = table[unique].float().index_add_(0, inverse, grad_rows.float(), alpha=-optimizer.lr)
            table[unique] = w.to(table.dtype)
        return
    unique, inverse = torch.unique(rows, return_inverse=True)
    dim = table.shape[1]
    g = torch.zeros(unique.numel(), dim, dtype=torch.float32, device=table.device).index_add_(
        0, inverse, grad_rows.float()
    )
    values: dict = {**optimizer.values(), "g": g, "w": table[unique].float()}
    slots = state_slots(optimizer.kind, state, table.shape[0], dim)
    for slot in rule.states:
        taken = slots[slot.name][unique]  # [n, dim], or [n] for a row state
        values[slot.name] = taken if slot.scope == StateScope.ELEMENT else taken[:, None]
    if "mean_g2" in rule.names_read():
        values["mean_g2"] = (g * g).mean(dim=1, keepdim=True)
    evaluate(rule.row, values, sqrt_rn)
    evaluate(rule.element, values, sqrt_rn)
    for slot in rule.states:
        value = values[slot.name]
        slots[slot.name][unique] = value if slot.scope == StateScope.ELEMENT else value.reshape(-1)
    table[unique] = values["w"].to(table.dtype)


def sqrt_rn(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded square root of an f32 tensor (computed in double, rounded once), as
    C's `sqrtf` and Triton's `sqrt_rn`: torch's own f32 `sqrt` on the CPU is not (torch 2.13 gives
    12.392230034 for sqrt(153.56735229), the nearest f32 being 12.392229080)."""
    return x.double().sqrt().to(x.dtype) if x.dtype == torch.float32 else x.sqrt()


def lookup_update(bags: CheckedBags, table: TableArgs, grad: torch.Tensor, update: UpdateArgs) -> None:
    """Apply one table's pooled gradient (`[segments * batch, width]`) to the rows its bags read."""
    if bags.indices.numel() == 0:
        return
    rows, g = _grad_per_id(bags, table, grad)
    apply_optimizer(table.weight, table.state, rows, g * update.grad_scale, update.optimizer)


def lookup_grad(bags: CheckedBags, table: TableArgs, grad: torch.Tensor) -> torch.Tensor:
    """One table's whole-table float32 gradient from its pooled gradient."""
    dense = torch.zeros_like(table.weight, dtype=torch.float32)
    if bags.indices.numel():
        rows, g = _grad_per_id(bags, table, grad)
        dense.index_add_(0, rows, g.float())
    return dense


def dense_update(table: TableArgs, dense_grad: torch.Tensor, update: UpdateArgs) -> None:
    """Optimizer step from a whole-table gradient; rows with a zero gradient are untouched (for
    the Adam family a touched row whose summed gradient is exactly zero is then not stepped:
    the whole-table gradient does not say which rows the batch read)."""
    weight, optimizer, grad_scale = table.weight, update.optimizer, update.grad_scale
    if optimizer.kind == OptimizerKind.SGD and weight.dtype == dense_grad.dtype == torch.float32:
        # An untouched row has a zero gradient and fma(0, -lr, t) == t, so the whole-table update
        # equals the touched-rows one, with the same rounding (one fused multiply-add), without
        # searching for the touched rows.
        weight.add_(dense_grad if grad_scale == 1.0 else dense_grad * grad_scale, alpha=-optimizer.lr)
        return
    touched = torch.nonzero(dense_grad.abs().sum(dim=1) > 0).flatten()
    apply_optimizer(weight, table.state, touched, dense_grad[touched] * grad_scale, optimizer)


def segment_rows(batch: int | Sequence[int], segments: int) -> list[int]:
    """Samples in each segment of a packed buffer: `batch` in every one, or one count per segment."""
    if isinstance(batch, int):
        return [batch] * segments
    rows = [int(b) for b in batch]
    if len(rows) != segments:
        raise ValueError(f"{len(rows)} batch sizes for a layout of {segments} segments")
    return rows


def pack(
    members: Sequence[torch.Tensor],
    layout: Sequence[Sequence[tuple[int, int]]],
    batch: int | Sequence[int],
    dtype: torch.dtype,
) -> torch.Tensor:
    """Segment `s` is a `[B_s, width_s]` block: member columns side by side (see `sparse.pack`).

    `batch` an int: every segment has `batch` rows, from a `[batch, ...]` member whole or from
    rows `s * batch ..` of a `[segments * batch, ...]` one. `batch` a sequence (segment `s` holds
    rank `s`'s samples, whose batches differ): members hold the segments' rows one after another,
    rows `sum(batch[:s]) ..`."""
    rows = segment_rows(batch, len(layout))
    first = None if isinstance(batch, int) else [sum(rows[:s]) for s in range(len(layout))]
    device = members[0].device if members else None
    blocks = []
    for s, seg in enumerate(layout):
        b = rows[s]
        width = sum(size for off, size in seg if off >= 0)
        block = torch.empty(b, width, dtype=dtype, device=device)
        for m, (off, size) in enumerate(seg):
            if size <= 0 or b == 0:  # nothing to copy (an empty batch's rows cannot be reshaped)
                continue
            x = members[m]
            x = x.reshape(x.shape[0], -1)
            if first is not None:
                x = x[first[s] : first[s] + b]
            elif x.shape[0] != b:
                x = x[s * b : (s + 1) * b]
            block[:, off : off + size] = x.reshape(b, size)
        blocks.append(block.reshape(-1))
    return torch.cat(blocks) if blocks else torch.empty(0, dtype=dtype, device=device)


def unpack(
    buffer: torch.Tensor,
    layout: Sequence[Sequence[tuple[int, int]]],
    batch: int | Sequence[int],
    member_widths: Sequence[int],
) -> list[torch.Tensor]:
    """Inverse of `pack`: member `m` gathers its columns from the segments it appears in, in
    segment order (segment `s` has `batch` rows, or `batch[s]`)."""
    rows = segment_rows(batch, len(layout))
    widths = [sum(size for off, size in seg if off >= 0) for seg in layout]
    starts = [0]
    for w, b in zip(widths, rows):
        starts.append(starts[-1] + w * b)
    blocks = [buffer[starts[s] : starts[s + 1]].reshape(rows[s], widths[s]) for s in range(len(layout))]
    out = []
    for m, width in enumerate(member_widths):
        parts = [blocks[s][:, seg[m][0] : seg[m][0] + seg[m][1]] for s, seg in enumerate(layout) if seg[m][1] > 0]
        out.append(torch.cat(parts).reshape(-1, width).contiguous() if parts else buffer.new_empty(0, width))
    return out
