"""Triton kernels for the sparse ops on CUDA: pooled lookup forward and fused backward + update.

Same semantics and signatures as `sparselift.runtime.reference` (`lookup`, `lookup_update`),
plus `fused_lookup` / `fused_lookup_update` over several tables (one launch per table):

- `_lookup_kernel`: one program per output bag (segment, slot, sample) gathers the bag's rows
  `BLOCK_L` ids at a time into a `[BLOCK_L, BLOCK_D]` tile (f32 accumulation, any storage
  dtype), scales by the per-id weight and/or `1 / len` (mean), and writes the pooled row.
- `_update_kernel`: the ids of the table's slots are listed in the reference's order (slot,
  segment, sample, position) and stably sorted by row (torch ops); one program per *unique*
  row sums the pooled-gradient rows of its occurrences (x scale x `grad_scale`) and applies the
  optimizer once: SGD (`w -= lr * g`) or row-wise Adagrad (`state += mean(g^2)`,
  `w -= lr * g / (sqrt(state) + eps)`), exactly as the reference aggregates duplicates. No dense
  or per-id gradient rows are materialized.

The module imports on any machine (torch is imported lazily by the wrappers; without triton
`AVAILABLE` is False). The kernels need CUDA tensors, or CPU tensors when the interpreter is on
(`TRITON_INTERPRET=1` set before this module is imported: triton reads it when `@triton.jit`
decorates the kernels; `INTERPRETED` records what it saw).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

try:
    import triton
    import triton.language as tl

    AVAILABLE = True
except Exception:  # pragma: no cover - triton is a dependency, but stay importable without it
    triton = None
    tl = None
    AVAILABLE = False


def _interpret_on() -> bool:
    if not AVAILABLE:
        return False
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        try:
            return bool(knobs.runtime.interpret)
        except Exception:
            pass
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


INTERPRETED = _interpret_on()

__all__ = [
    "AVAILABLE",
    "INTERPRETED",
    "usable_for",
    "lookup",
    "lookup_update",
    "fused_lookup",
    "fused_lookup_update",
]


if AVAILABLE:

    @triton.jit
    def _lookup_kernel(
        W, idx, offs, wts, slots, out,
        F, B, NS, D,
        HAS_W: tl.constexpr, MEAN: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr,
    ):
        pid = tl.program_id(0).to(tl.int64)
        b = pid % B
        sk = pid // B
        k = sk % NS
        s = sk // NS
        f = tl.load(slots + k).to(tl.int64)
        bag = (s * F + f) * B + b
        start = tl.load(offs + bag)
        end = tl.load(offs + bag + 1)
        d = tl.arange(0, BLOCK_D)
        dmask = d < D
        acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        inv_n = 1.0 / tl.maximum(end - start, 1).to(tl.float32)
        for p0 in range(start, end, BLOCK_L):
            p = p0 + tl.arange(0, BLOCK_L)
            pm = p < end
            ids = tl.load(idx + p, mask=pm, other=0).to(tl.int64)
            rows = tl.load(W + ids[:, None] * D + d[None, :], mask=pm[:, None] & dmask[None, :], other=0.0)
            rows = rows.to(tl.float32)
            if HAS_W:
                sc = tl.load(wts + p, mask=pm, other=0.0)
                if MEAN:
                    sc = sc * inv_n
                rows = rows * sc[:, None]
            elif MEAN:
                rows = rows * inv_n
            acc += tl.sum(rows, axis=0)
        o = out + (s * B + b) * (NS * D) + k * D + d
        tl.store(o, acc.to(out.dtype.element_ty), mask=dmask)

    @triton.jit
    def _update_kernel(
        W, state, urow, ustart, gof, scl, grad,
        D, lr, eps, gs,
        ADAGRAD: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr,
    ):
        u = tl.program_id(0).to(tl.int64)
        row = tl.load(urow + u)
        a = tl.load(ustart + u)
        e = tl.load(ustart + u + 1)
        d = tl.arange(0, BLOCK_D)
        dmask = d < D
        g = tl.zeros([BLOCK_D], dtype=tl.float32)
        for j0 in range(a, e, BLOCK_L):
            j = j0 + tl.arange(0, BLOCK_L)
            jm = j < e
            go = tl.load(gof + j, mask=jm, other=0)
            sc = tl.load(scl + j, mask=jm, other=0.0)
            gr = tl.load(grad + go[:, None] + d[None, :], mask=jm[:, None] & dmask[None, :], other=0.0)
            g += tl.sum((gr * sc[:, None]) * gs, axis=0)
        wp = W + row * D + d
        w = tl.load(wp, mask=dmask, other=0.0).to(tl.float32)
        if ADAGRAD:
            st = tl.load(state + row) + tl.sum(g * g, axis=0) / D
            tl.store(state + row, st)
            w = w + (-lr) * (g / (tl.sqrt(st) + eps))
        else:
            w = w + (-lr) * g
        tl.store(wp, w.to(W.dtype.element_ty), mask=dmask)


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
        raise RuntimeError("the Triton kernels need CUDA tensors (or CPU tensors with TRITON_INTERPRET=1 set "
                           "before sparselift.codegen.triton_kernels is imported)")


def _geometry(names, lengths, indices, weights, slots_per_table, features_per_segment, batch, tables):
    """Checked inputs: (lengths i64 offsets, indices, weights f32, segments)."""
    import torch

    who = ", ".join(f"'{n}'" for n in names)
    where = f"lookup of table {who}"
    if lengths.dim() != 1 or lengths.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{where}: lengths must be a 1-D int32 tensor")
    if indices.dim() != 1 or indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{where}: indices must be a 1-D int32/int64 tensor")
    if weights is not None and (weights.dim() != 1 or weights.numel() != indices.numel()):
        raise ValueError(f"{where}: one weight per id expected")
    f, b = int(features_per_segment), int(batch)
    nbags = lengths.numel()
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
    lengths64 = lengths.to(torch.int64)
    offs = torch.zeros(nbags + 1, dtype=torch.int64, device=lengths.device)
    if nbags:
        if bool((lengths64 < 0).any()):
            bad = int(torch.nonzero(lengths64 < 0)[0])
            raise ValueError(f"{where}: negative bag length {int(lengths64[bad])} at bag {bad}")
        torch.cumsum(lengths64, 0, out=offs[1:])
    if int(offs[-1]) != indices.numel():
        raise ValueError(f"{where}: bag lengths sum to {int(offs[-1])} but there are {indices.numel()} ids")
    # Every id a table's slots read must lie in [0, rows).
    if indices.numel() and segments:
        feature = (torch.repeat_interleave(torch.arange(nbags, device=lengths.device), lengths64) % (f * b)) // b
        for name, slots, t in zip(names, slots_per_table, tables):
            if not len(slots):
                continue
            sel = torch.isin(feature, torch.tensor([int(s) for s in slots], device=feature.device))
            ids = indices[sel]
            if ids.numel():
                bad = (ids < 0) | (ids >= t.shape[0])
                if bool(bad.any()):
                    v = int(ids[torch.nonzero(bad)[0]])
                    raise ValueError(f"lookup of table '{name}': id {v} is out of range for a table of {t.shape[0]} rows")
    w = weights.to(torch.float32).contiguous() if weights is not None else None
    return offs, indices.contiguous(), w, segments


def fused_lookup(tables, lengths, indices, weights, slots_per_table, features_per_segment, batch, poolings,
                 names: Sequence[str] | None = None, block_l: int = 16):
    """`reference.lookup` for several tables reading the same lengths / indices."""
    import torch

    tables = list(tables)
    if isinstance(poolings, str):
        poolings = [poolings] * len(tables)
    names = list(names) if names is not None else [f"#{i}" for i in range(len(tables))]
    _require(tables, lengths, indices, weights)
    offs, indices, w, segments = _geometry(names, lengths, indices, weights, slots_per_table, features_per_segment,
                                           batch, tables)
    outs = []
    for t, slots, pooling in zip(tables, slots_per_table, poolings):
        if pooling not in ("sum", "mean"):
            raise ValueError(f"unknown pooling '{pooling}'")
        t = t.contiguous()
        dim = t.shape[1]
        out = torch.zeros(segments * int(batch), dim * len(slots), dtype=t.dtype, device=t.device)
        n_prog = segments * len(slots) * int(batch)
        if n_prog and dim:
            sl = torch.tensor([int(s) for s in slots], dtype=torch.int32, device=t.device)
            _lookup_kernel[(n_prog,)](
                t, indices, offs, w if w is not None else offs, sl, out,
                int(features_per_segment), int(batch), len(slots), dim,
                HAS_W=w is not None, MEAN=pooling == "mean", BLOCK_L=block_l, BLOCK_D=_next_pow2(dim),
            )
        outs.append(out)
    return outs


def lookup(table, lengths, indices, weights, slots, features_per_segment, batch, pooling):
    """Same signature and result as `reference.lookup`."""
    return fused_lookup([table], lengths, indices, weights, [slots], features_per_segment, batch, [pooling])[0]


def _per_id(offs, lengths, indices, weights, slots, features_per_segment, batch, segments, dim, pooling):
    """(rows, gradient offsets, scales) of the table's ids in the reference's order."""
    import torch

    dev = indices.device
    f, b = int(features_per_segment), int(batch)
    nbags = lengths.numel()
    lengths64 = lengths.to(torch.int64)
    bag_of_id = torch.repeat_interleave(torch.arange(nbags, device=dev), lengths64)
    seg = bag_of_id // (f * b)
    feat = (bag_of_id % (f * b)) // b
    sample = bag_of_id % b
    scale = weights if weights is not None else torch.ones(indices.numel(), device=dev)
    if pooling == "mean":
        scale = scale / lengths64.clamp(min=1)[bag_of_id].to(torch.float32)
    rows, gofs, scls = [], [], []
    ldg = dim * len(slots)
    for k, slot in enumerate(slots):
        m = feat == int(slot)
        rows.append(indices[m].to(torch.int64))
        gofs.append((seg[m] * b + sample[m]) * ldg + k * dim)
        scls.append(scale[m])
    return torch.cat(rows), torch.cat(gofs), torch.cat(scls).to(torch.float32)


def fused_lookup_update(tables, states, lengths, indices, weights, grads, slots_per_table, features_per_segment,
                        batch, poolings, kinds, lr, eps, grad_scale=1.0, names: Sequence[str] | None = None,
                        block_l: int = 16):
    """`reference.lookup_update` for several tables (all inputs are checked before any update)."""
    import torch

    tables = list(tables)
    n = len(tables)
    if isinstance(poolings, str):
        poolings = [poolings] * n
    if isinstance(kinds, str):
        kinds = [kinds] * n
    states = list(states) if states is not None else [None] * n
    names = list(names) if names is not None else [f"#{i}" for i in range(n)]
    _require(tables, lengths, indices, weights, *grads)
    offs, indices, w, segments = _geometry(names, lengths, indices, weights, slots_per_table, features_per_segment,
                                           batch, tables)
    for t, st, g, slots, kind, name in zip(tables, states, grads, slots_per_table, kinds, names):
        if kind not in ("sgd", "rowwise_adagrad"):
            raise ValueError(f"update of table '{name}': unknown optimizer '{kind}'")
        want = (segments * int(batch), t.shape[1] * len(slots))
        if tuple(g.shape) != want:
            raise ValueError(f"update of table '{name}': gradient of shape {tuple(g.shape)}, expected {want}")
        if kind == "rowwise_adagrad" and (st is None or st.numel() != t.shape[0] or st.dtype != torch.float32):
            raise ValueError(f"update of table '{name}': row-wise Adagrad needs a float32 state of {t.shape[0]} entries")
        if not t.is_contiguous():
            raise ValueError(f"update of table '{name}': the table must be contiguous to be updated in place")
    if indices.numel() == 0 or segments == 0:
        return
    for t, st, g, slots, pooling, kind in zip(tables, states, grads, slots_per_table, poolings, kinds):
        if not len(slots):
            continue
        dim = t.shape[1]
        rows, gof, scl = _per_id(offs, lengths, indices, w, slots, features_per_segment, batch, segments, dim, pooling)
        if rows.numel() == 0:
            continue
        rows_sorted, perm = torch.sort(rows, stable=True)
        uniq, counts = torch.unique_consecutive(rows_sorted, return_counts=True)
        ustart = torch.zeros(uniq.numel() + 1, dtype=torch.int64, device=rows.device)
        torch.cumsum(counts, 0, out=ustart[1:])
        gof, scl = gof[perm].contiguous(), scl[perm].contiguous()
        adagrad = kind == "rowwise_adagrad"
        _update_kernel[(uniq.numel(),)](
            t, st if adagrad else scl, uniq, ustart, gof, scl, g.to(torch.float32).contiguous(),
            dim, float(lr), float(eps), float(grad_scale),
            ADAGRAD=adagrad, BLOCK_L=block_l, BLOCK_D=_next_pow2(dim),
        )


def lookup_update(table, state, lengths, indices, weights, grad, slots, features_per_segment, batch, pooling,
                  kind, lr, eps, grad_scale=1.0):
    """Same signature and effect as `reference.lookup_update`."""
    fused_lookup_update([table], [state], lengths, indices, weights, [grad], [slots], features_per_segment, batch,
                        [pooling], [kind], lr, eps, grad_scale)
