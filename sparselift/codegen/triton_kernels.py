"""The `@triton.jit` bodies of the sparse ops on CUDA: pooled lookup and fused backward + update.

Kernels only; their launches, input checks and the update's sort are in
`sparselift.codegen.triton_ops` (call those, not these):

- `lookup_kernel`: one program per output bag (segment, slot, sample) gathers the bag's rows
  `BLOCK_L` ids at a time into a `[BLOCK_L, BLOCK_D]` tile (f32 accumulation, any storage
  dtype), scales by the per-id weight and/or `1 / len` (mean), and writes the pooled row.
- `update_kernel`: one program per position of the table's ids sorted by (row, slot); the
  first position of each row (its head) sums the pooled-gradient rows of its occurrences
  (x scale x `grad_scale`) and applies the optimizer once: SGD (`w -= lr * g`) or row-wise
  Adagrad (`state += mean(g^2)`, `w -= lr * g / (sqrt(state) + eps)`), exactly as the
  reference aggregates duplicates. No dense or per-id gradient rows are materialized.

The module imports on any machine (without triton `AVAILABLE` is False and no kernel is
defined). The kernels need CUDA tensors, or CPU tensors when the interpreter is on
(`TRITON_INTERPRET=1` set before this module is imported: triton reads it when `@triton.jit`
decorates the kernels; `INTERPRETED` records what it saw).
"""

from __future__ import annotations

import os

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

__all__ = ["AVAILABLE", "INTERPRETED", "lookup_kernel", "update_kernel"]


if AVAILABLE:

    @triton.jit
    def lookup_kernel(
        W,
        idx,
        offs,
        wts,
        slots,
        out,
        F,
        B,
        NS,
        D,
        HAS_W: tl.constexpr,
        MEAN: tl.constexpr,
        BLOCK_L: tl.constexpr,
        BLOCK_D: tl.constexpr,
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
    def update_kernel(
        W,
        state,
        keys,
        ends,
        gof,
        scl,
        grad,
        BASE,
        ROW0,
        K,
        D,
        lr,
        eps,
        gs,
        ADAGRAD: tl.constexpr,
        BLOCK_L: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        # One program per sorted id position of this table; only the first position of each row
        # (the head) does work: it sums the row's occurrences and updates the row once.
        p = BASE + tl.program_id(0).to(tl.int64)
        grow = tl.load(keys + p) // K
        prev = tl.load(keys + tl.maximum(p - 1, 0)) // K
        head = (p == BASE) | (prev != grow)
        row = grow - ROW0
        e = tl.where(head, tl.load(ends + p), p)
        d = tl.arange(0, BLOCK_D)
        hmask = tl.full([BLOCK_D], 1, tl.int1) & head
        dmask = (d < D) & hmask
        g = tl.zeros([BLOCK_D], dtype=tl.float32)
        for j0 in range(p, e, BLOCK_L):
            j = j0 + tl.arange(0, BLOCK_L)
            jm = j < e
            go = tl.load(gof + j, mask=jm, other=0)
            sc = tl.load(scl + j, mask=jm, other=0.0)
            gr = tl.load(grad + go[:, None] + d[None, :], mask=jm[:, None] & dmask[None, :], other=0.0)
            g += tl.sum((gr * sc[:, None]) * gs, axis=0)
        wp = W + row * D + d
        w = tl.load(wp, mask=dmask, other=0.0).to(tl.float32)
        if ADAGRAD:
            # only a head writes (lane 0 of a vector store: the interpreter rejects scalar masks)
            st = tl.load(state + row) + tl.sum(g * g, axis=0) / D
            tl.store(state + row + d * 0, st + tl.zeros([BLOCK_D], dtype=tl.float32), mask=hmask & (d == 0))
            w = w + (-lr) * (g / (tl.sqrt(st) + eps))
        else:
            w = w + (-lr) * g
        tl.store(wp, w.to(W.dtype.element_ty), mask=dmask)
