"""The collectives a generated plan module calls (over torch.distributed), and the id buffers they carry.

`plan_ops` re-exports every one of them (a plan module calls them as `rt.<name>`). Exchanges
return their results, or with `async_op=True` a `_Pending` that `wait` finishes; `pack_ids` /
`unpack_ids` lay out and split the jagged per-peer segments of a merged ids exchange, and
`static_sizes` / `join_segments` / `split_segments` those of two exchanges merged into one
dynamic exchange (`sparselift/ir/sparse_segments.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
import torch.distributed as dist

from sparselift.ir.coll import OUTPUT_ROLES


class _Group(Protocol):
    """What the collectives read of a rank's `plan_ops.PlanBase`."""

    rank: int
    world: int
    pg: Any


def _all_to_all_single(plan: _Group, out: torch.Tensor, x: torch.Tensor, recv, send):
    """Start `dist.all_to_all_single` (splits in rows of dim 0) on the plan's transport: shared
    memory where its ranks share a host (`shm_transport`), else the process group's backend."""
    shm = getattr(plan, "shm", None)
    if shm is not None:
        return shm.all_to_all_single(out, x, recv, send)
    return dist.all_to_all_single(out, x, recv, send, group=plan.pg, async_op=True)


def all_reduce_sum_start(shm, pg, flat: torch.Tensor):
    """Start a sum of the contiguous `flat` over the ranks, in place: through shared memory where
    the plan has it (`shm`, every rank adding in rank order), else `dist.all_reduce`."""
    if shm is not None:
        return shm.all_reduce_sum(flat)
    return dist.all_reduce(flat, group=pg, async_op=True)


class _Pending:
    """An in-flight collective and what its wait returns."""

    def __init__(self, works, finish):
        self.works = works
        self.finish = finish

    def wait(self):
        for w in self.works:
            w.wait()
        return self.finish()


def all_to_all(
    plan: _Group,
    inputs,
    *,
    splits,
    role: str,
    batches: Sequence[int],
    async_op: bool = False,
    lengths_known: bool = False,
):
    """A static-splits exchange: `splits[s][p]` elements per sample from rank `s` to `p`, the
    samples being those of the rank that owns them (`batches[r]`: rank `r`'s local batch): the
    sender's for ids and pooled gradients, the receiver's for pooled outputs.

    `lengths_known` (bag lengths, when every rank's bags all hold one id, as agreed by the
    step's batch check): every received length is 1, so nothing is sent."""
    x = inputs[0] if len(inputs) == 1 else inputs[plan.rank]
    r = plan.rank
    send, recv = _static_counts(plan, splits, role, batches)
    if x.numel() != sum(send):
        raise RuntimeError(
            f"{role} exchange on rank {r}: {x.numel()} elements to send, but the batch sizes "
            f"{tuple(batches)} make {sum(send)}"
        )
    if lengths_known:
        known = x.new_ones(sum(recv))
        return _Pending([], lambda: (known,)) if async_op else (known,)
    out = x.new_empty(sum(recv))
    work = _all_to_all_single(plan, out, x.contiguous(), recv, send)
    pending = _Pending([work], lambda: (out,))
    return pending if async_op else pending.wait()


def _static_counts(plan: _Group, splits, role: str, batches: Sequence[int]) -> tuple[list[int], list[int]]:
    """This rank's element counts to each peer and from each source of a static exchange."""
    r, world = plan.rank, plan.world
    if OUTPUT_ROLES & set(role.split("+")):  # from the tables' owners back to the samples' ranks
        return [splits[r][p] * batches[p] for p in range(world)], [splits[s][r] * batches[r] for s in range(world)]
    return [splits[r][p] * batches[r] for p in range(world)], [splits[s][r] * batches[s] for s in range(world)]


def static_sizes(plan: _Group, *, splits, role: str, batches: Sequence[int]):
    """A static exchange's counts as run-time sizes (sparse.static_sizes): to each peer, from each source."""
    send, recv = _static_counts(plan, splits, role, batches)
    return torch.tensor(send, dtype=torch.int64), torch.tensor(recv, dtype=torch.int64)


def join_segments(plan: _Group, first, second, first_send, second_send, first_recv, second_recv):
    """Per peer, `first`'s segment then `second`'s in one buffer (sparse.join_segments), and the
    merged send and receive sizes. Where this rank sends only one side, that side is the buffer."""
    a = first[0] if len(first) == 1 else first[plan.rank]
    b = second[0] if len(second) == 1 else second[plan.rank]
    sa, sb = first_send.tolist(), second_send.tolist()
    for what, x, sizes in (("first", a, sa), ("second", b, sb)):
        if x.numel() != sum(sizes):
            raise RuntimeError(
                f"join_segments on rank {plan.rank}: the {what} member holds {x.numel()} elements, but its "
                f"sizes {sizes} add up to {sum(sizes)}"
            )
    send = torch.tensor([x + y for x, y in zip(sa, sb)], dtype=torch.int64)
    recv = first_recv + second_recv
    if not any(sb):
        return a, send, recv
    if not any(sa):
        return b, send, recv
    parts_a, parts_b = a.reshape(-1).split(sa), b.reshape(-1).split(sb)
    return torch.cat([x for pair in zip(parts_a, parts_b) for x in pair]), send, recv


def split_segments(plan: _Group, buffer, first_recv, second_recv):
    """A received sparse.join_segments buffer back into its two members, each its segments from
    every source in rank order; a member whose segments lie back to back (the other member's
    between them are empty) is a view of the buffer, no copy."""
    ra, rb = first_recv.tolist(), second_recv.tolist()
    if buffer.numel() != sum(ra) + sum(rb):
        raise RuntimeError(
            f"split_segments on rank {plan.rank}: {buffer.numel()} elements received, but the sizes "
            f"{ra} and {rb} add up to {sum(ra) + sum(rb)}"
        )
    sizes = [n for pair in zip(ra, rb) for n in pair]
    return _member(buffer, sizes, 0), _member(buffer, sizes, 1)


def _member(buffer: torch.Tensor, sizes: list[int], side: int) -> torch.Tensor:
    """Member `side` (0: first, 1: second) of a joined buffer of `sizes` (both sides' per source)."""
    filled = [i for i in range(side, len(sizes), 2) if sizes[i]]
    if not filled:
        return buffer[:0]
    lo, hi = filled[0], filled[-1]
    if not any(sizes[i] for i in range(lo, hi + 1) if i % 2 != side):
        start = sum(sizes[:lo])
        return buffer[start : start + sum(sizes[lo : hi + 1])]
    return torch.cat(buffer.split(sizes)[side::2])


def all_to_all_dynamic(plan: _Group, inputs, send_splits, recv_splits=None, *, role: str, async_op: bool = False):
    x = inputs[0] if len(inputs) == 1 else inputs[plan.rank]
    if recv_splits is None:  # exchange the sizes first (one small all-to-all)
        recv_splits = torch.empty_like(send_splits)
        _all_to_all_single(plan, recv_splits, send_splits, None, None).wait()
    send, recv = send_splits.tolist(), recv_splits.tolist()
    out = x.new_empty(sum(recv))
    work = _all_to_all_single(plan, out, x.contiguous(), recv, send)
    pending = _Pending([work], lambda: (out, recv_splits))
    return pending if async_op else pending.wait()


def exchange_sizes(plan: _Group, send_splits: torch.Tensor, async_op: bool = False):
    """What every peer will send us (one integer per peer), for a dynamic all-to-all."""
    recv = torch.empty_like(send_splits)
    work = _all_to_all_single(plan, recv, send_splits, None, None)
    pending = _Pending([work], lambda: (recv,))
    return pending if async_op else pending.wait()


def recv_splits(plan: _Group, lengths: torch.Tensor, batches: Sequence[int]) -> torch.Tensor:
    """Ids each source sends, from the received lengths (source `s`'s segment holds the same
    features' lengths for its `batches[s]` samples)."""
    if len(set(batches)) == 1:
        return lengths.reshape(plan.world, -1).sum(dim=1, dtype=torch.int64)
    per_sample = lengths.numel() // sum(batches)
    return torch.stack([seg.sum(dtype=torch.int64) for seg in lengths.split([per_sample * b for b in batches])])


def wait(pending: _Pending):
    return pending.wait()


def pack_ids(plan: _Group, lengths, indices, weights, *, features: Sequence[int], batch: int):
    """Per destination: its lengths, ids and bit-cast weights in one int64 segment
    (sparse.pack_ids); `batch` is this rank's."""
    b = batch
    lens = lengths.split([f * b for f in features])
    n_ids = torch.stack([seg.sum(dtype=torch.int64) for seg in lens]).tolist()
    ids = indices.split(n_ids)
    ws = weights.split(n_ids) if weights is not None else None
    parts = []
    for d in range(len(features)):
        parts += [lens[d].to(torch.int64), ids[d].to(torch.int64)]
        if ws is not None:  # bit-exact: the f32 bits, sign-extended
            parts.append(ws[d].contiguous().view(torch.int32).to(torch.int64))
    sizes = [f * b + n * (2 if ws is not None else 1) for f, n in zip(features, n_ids)]
    return torch.cat(parts), torch.tensor(sizes, dtype=torch.int64, device=indices.device)


def unpack_ids(
    plan: _Group, buffer, sizes, *, features: Sequence[int], weighted: bool, index_dtype, batches: Sequence[int]
):
    """Split a received sparse.pack_ids buffer into lengths, ids (and weights), sources in rank
    order; source `s`'s segment starts with the lengths of its `batches[s]` samples."""
    lengths, ids, ws = [], [], []
    for seg, batch in zip(buffer.split(sizes.tolist()), batches):
        n_len = features[plan.rank] * batch
        n_ids = (seg.numel() - n_len) // (2 if weighted else 1)
        lengths.append(seg[:n_len])
        ids.append(seg[n_len : n_len + n_ids])
        ws.append(seg[n_len + n_ids :])
    out = [torch.cat(lengths).to(torch.int32), torch.cat(ids).to(index_dtype)]
    if weighted:
        out.append(torch.cat(ws).to(torch.int32).view(torch.float32))
    return tuple(out)


def reduce_scatter(plan: _Group, x, *, reduction: str, batches: Sequence[int]):
    """Sum over ranks, rank r keeps segment r (an all-to-all plus a local sum: gloo has no
    reduce-scatter); segment `p` holds rank `p`'s `batches[p]` samples."""
    total = sum(batches)
    per_sample = x.numel() // total if total else 0
    if per_sample * total != x.numel():
        raise RuntimeError(
            f"reduce_scatter on rank {plan.rank}: {x.numel()} elements are not whole samples of the "
            f"batch sizes {tuple(batches)}"
        )
    own = batches[plan.rank] * per_sample
    out = x.new_empty(plan.world * own)
    _all_to_all_single(plan, out, x.contiguous(), [own] * plan.world, [b * per_sample for b in batches]).wait()
    summed = out.reshape(plan.world, own).sum(dim=0)
    return summed / plan.world if reduction == "mean" else summed


def all_reduce(plan: _Group, inputs, *, reduction: str, async_op: bool = False):
    """One all-reduce for all operands: flattened into one buffer, reduced, split back.

    Operands that already lie back to back in one buffer (`fused_lookup_grad`) are reduced in
    place, without the copy into a new buffer."""
    flat = _back_to_back(inputs)
    if flat is None:
        flat = torch.cat([x.reshape(-1).to(inputs[0].dtype) for x in inputs]) if len(inputs) > 1 else inputs[0].clone()
    work = all_reduce_sum_start(getattr(plan, "shm", None), plan.pg, flat)

    def finish():
        if reduction == "mean":
            flat.div_(plan.world)
        out, offset = [], 0
        for x in inputs:
            out.append(flat[offset : offset + x.numel()].view_as(x).to(x.dtype))
            offset += x.numel()
        return out

    pending = _Pending([work], finish)
    return pending if async_op else pending.wait()


def _back_to_back(inputs) -> torch.Tensor | None:
    """The `fused_lookup_grad` buffer that `inputs` tile exactly, in order; else None."""
    if len(inputs) < 2:
        return None
    base = inputs[0]._base
    if base is None or not getattr(base, "_sparselift_grad_buffer", False):
        return None
    offset = 0
    for x in inputs:
        if (
            x._base is not base
            or x.dtype != base.dtype
            or not x.is_contiguous()
            or x.storage_offset() != base.storage_offset() + offset
        ):
            return None
        offset += x.numel()
    return base if offset == base.numel() else None
