"""The generated C kernels' buffer ops: `concat_ids`, `pack` and `unpack` (strided block copies),
`expand_rows` / `compact_rows` (an unpooled table's received rows spread to their bags, and
the gradients' rows of the non-empty bags packed back), and `dedup-ids`' `unique_ids` /
`sum_rows` (distinct ids by one radix sort, and their gradients' sums).

`BufferOps` is a base of `sparselift.runtime.kernels.CKernels` (which provides `_lib` and
`_ensure`); jagged layouts, tensors off the CPU and what the C kernels do not cover use the
reference backend it extends (`runtime.backends.ReferenceKernels`).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from sparselift.runtime import reference as ref
from sparselift.runtime.backends import ReferenceKernels
from sparselift.runtime.kernel_checks import _INDEX, _addr_array, _on_cpu

if TYPE_CHECKING:
    from sparselift.codegen.ckernels import TableSpec
    from sparselift.runtime.kernel_library import _Library


@functools.lru_cache(maxsize=64)
def _row_ranges(bounds: tuple[tuple[int, ...], ...], owners: tuple[tuple[int, ...], ...]):
    """A route's row ranges as `sl_route_row_wise` reads them: the world size, and the bounds and
    owners as C arrays (with their addresses). Checked and built once per route, not per step:
    every feature has `world + 1` bounds from 0, rising, and its ranges' owners are the ranks."""
    world = len(owners[0]) if owners else 0
    if (
        not bounds
        or len(owners) != len(bounds)
        or any(len(b) != world + 1 or b[0] != 0 or any(x > y for x, y in zip(b, b[1:])) for b in bounds)
        or any(sorted(o) != list(range(world)) for o in owners)
    ):
        raise ValueError("route_row_wise: per feature, world + 1 rising bounds from 0 and the ranks owning its ranges")
    flat_bounds = _addr_array(ctypes.c_int64, [x for b in bounds for x in b])
    flat_owners = _addr_array(ctypes.c_int64, [x for o in owners for x in o])
    return world, flat_bounds, flat_owners


class BufferOps(ReferenceKernels):
    """`concat_ids`, `pack`, `unpack`, `expand_rows`, `compact_rows`, `unique_ids` and `sum_rows`
    of `CKernels`."""

    if TYPE_CHECKING:  # what CKernels provides
        _lib: _Library | None

        def _ensure(self, specs: set[TableSpec]) -> _Library: ...

    def concat_ids(self, ids: Sequence[torch.Tensor], rows: Sequence[int], index_dtype: torch.dtype) -> torch.Tensor:
        """`torch.cat` of several features' 1-D int32/int64 ids in `index_dtype`, every id checked to
        lie in `[0, rows[k])` in the same pass. A bad id raises `IndexError` whose `args` are
        (feature number, position, value); callers turn that into a message naming the feature."""
        ids = [i if i.is_contiguous() else i.contiguous() for i in ids]
        if (
            index_dtype not in _INDEX
            or len(ids) != len(rows)
            or not _on_cpu(*ids)
            or any(i.dim() != 1 or i.dtype not in _INDEX for i in ids)
        ):
            raise ValueError("concat_ids: 1-D int32/int64 CPU ids, one row count per feature, int32/int64 output")
        counts = [i.numel() for i in ids]
        out = torch.empty(sum(counts), dtype=index_dtype)
        if not ids:
            return out
        lib = self._lib or self._ensure(set())
        s, s_p = _addr_array(ctypes.c_void_p, [i.data_ptr() for i in ids])
        w, w_p = _addr_array(ctypes.c_int32, [int(i.dtype == torch.int64) for i in ids])
        c, c_p = _addr_array(ctypes.c_int64, counts)
        r, r_p = _addr_array(ctypes.c_int64, [int(x) for x in rows])
        err = (ctypes.c_int64 * 4)()
        if lib.lib.sl_concat_ids(
            len(ids), s_p, w_p, c_p, r_p, out.data_ptr(), int(index_dtype == torch.int64), ctypes.addressof(err)
        ):
            raise IndexError(int(err[3]), int(err[1]), int(err[2]))
        return out

    def route_row_wise(
        self,
        ids: Sequence[torch.Tensor],
        lengths: torch.Tensor,
        bounds: Sequence[Sequence[int]],
        owners: Sequence[Sequence[int]],
        index_dtype: torch.dtype,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Row-wise features' ids to the ranks whose row ranges hold them, in one C counting
        sort: the routed `[world, features, batch]` int32 lengths, the ids shifted to shard-local
        rows (destination-major, then feature and bag) in `index_dtype`, and each destination's
        id count. `lengths`: the features' `[features, batch]` bag lengths; `bounds[k]`: feature
        k's `world + 1` row bounds, range s on rank `owners[k][s]`. A bad id raises `IndexError`
        whose `args` are (feature number, position, value), as `concat_ids`'s."""
        ids = [i if i.is_contiguous() else i.contiguous() for i in ids]
        if (
            index_dtype not in _INDEX
            or not ids
            or not _on_cpu(lengths, *ids)
            or any(i.dim() != 1 or i.dtype not in _INDEX for i in ids)
            or lengths.dim() != 2
            or lengths.shape[0] != len(ids)
            or len(bounds) != len(ids)
        ):
            raise ValueError("route_row_wise: 1-D CPU ids, [features, batch] lengths, per feature its bounds")
        world, (bnd, bnd_p), (own, own_p) = _row_ranges(tuple(map(tuple, bounds)), tuple(map(tuple, owners)))
        nfeat, batch = lengths.shape
        lengths = lengths.to(torch.int32).contiguous()
        out_lengths = torch.empty(world * nfeat * batch, dtype=torch.int32)
        out = torch.empty(sum(i.numel() for i in ids), dtype=index_dtype)
        splits = torch.empty(world, dtype=torch.int64)
        lib = self._lib or self._ensure(set())
        src, src_p = _addr_array(ctypes.c_void_p, [i.data_ptr() for i in ids])
        wide, wide_p = _addr_array(ctypes.c_int32, [int(i.dtype == torch.int64) for i in ids])
        cnt, cnt_p = _addr_array(ctypes.c_int64, [i.numel() for i in ids])
        err = (ctypes.c_int64 * 4)()
        rc = lib.lib.sl_route_row_wise(
            nfeat,
            src_p,
            wide_p,
            cnt_p,
            lengths.data_ptr(),
            batch,
            world,
            bnd_p,
            own_p,
            out_lengths.data_ptr(),
            out.data_ptr(),
            int(index_dtype == torch.int64),
            splits.data_ptr(),
            ctypes.addressof(err),
        )
        if rc == 1:
            raise IndexError(int(err[1]), int(err[2]), int(err[3]))
        if rc == 2:
            raise ValueError(f"route_row_wise: feature {err[1]}'s bag lengths do not add up to its ids")
        if rc:
            raise MemoryError("route_row_wise: no scratch for the destinations")
        return out_lengths, out, splits

    def _copy(self, descs: list[int]) -> None:
        # Each block: destination, its row stride, source, its row stride, bytes per row, rows.
        if not descs:
            return
        lib = self._lib or self._ensure(set())
        arr, p = _addr_array(ctypes.c_int64, descs)
        lib.lib.sl_copy_blocks(len(descs) // 6, p)

    def pack(
        self,
        members: Sequence[torch.Tensor],
        layout: Sequence[Sequence[tuple[int, int]]],
        batch: int,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        """Same signature and result as `reference.pack` (jagged layouts use the reference)."""
        if any(off < 0 or size < 0 for seg in layout for off, size in seg) or not _on_cpu(*members):
            return ref.pack(members, layout, batch, dtype)
        batch = int(batch)
        widths = [sum(size for off, size in seg) for seg in layout]
        buf = torch.empty(batch * sum(widths), dtype=dtype)
        if batch == 0 or buf.numel() == 0:
            return buf
        esz = buf.element_size()
        prepared: dict[int, torch.Tensor] = {}
        descs: list[int] = []
        start = 0
        for s, seg in enumerate(layout):
            if len(seg) != len(members):
                raise ValueError(f"pack: segment {s} of the layout lists {len(seg)} members, got {len(members)}")
            for m, (off, size) in enumerate(seg):
                if size <= 0:
                    continue
                x = prepared.get(m)
                if x is None:
                    x = _rows_view(members[m], dtype)
                    prepared[m] = x
                if x.shape[1] != size:
                    raise ValueError(
                        f"pack: member {m} has {x.shape[1]} columns, the layout gives it {size} in segment {s}"
                    )
                row0 = 0 if x.shape[0] == batch else s * batch
                if x.shape[0] < row0 + batch:
                    raise ValueError(
                        f"pack: member {m} has {x.shape[0]} rows, segment {s} needs rows {row0}..{row0 + batch}"
                    )
                descs += [
                    buf.data_ptr() + (start + off) * esz,
                    widths[s] * esz,
                    x.data_ptr() + row0 * x.stride(0) * esz,
                    x.stride(0) * esz,
                    size * esz,
                    batch,
                ]
            start += batch * widths[s]
        self._copy(descs)
        return buf

    def expand_rows(self, rows: torch.Tensor, lengths: torch.Tensor, segments: int = 1) -> torch.Tensor:
        """`[lengths.numel() / segments, dim]`: `lengths` is `segments` segments of the same bags,
        and `rows` their rows, segment after segment. Bag i's row is the next row of the segment
        where its length is 1, zeros where it is 0 in every segment; one pass over the output (no
        zeroing first). A length other than 0 or 1, a bag in two segments, or a row count that is
        not the lengths' sum raises `ValueError` before anything is read."""
        if not _on_cpu(rows, lengths):
            return super().expand_rows(rows, lengths, segments)
        if rows.dim() != 2 or lengths.dim() != 1:
            raise ValueError("expand_rows: 2-D rows and 1-D lengths")
        if segments < 1 or lengths.numel() % segments:
            raise ValueError(f"expand_rows: {lengths.numel()} lengths are not {segments} segments of the same bags")
        rows = rows.contiguous()
        lengths = lengths.to(torch.int32).contiguous()
        bags = lengths.numel() // segments
        out = rows.new_empty(bags, rows.shape[1])
        lib = self._lib or self._ensure(set())
        err = (ctypes.c_int64 * 3)()
        row_bytes = rows.shape[1] * rows.element_size()
        rc = lib.lib.sl_expand_rows(
            segments, bags, lengths.data_ptr(), rows.data_ptr(), rows.shape[0], row_bytes, out.data_ptr(), err
        )
        if rc == 1:
            raise ValueError(f"expand_rows: a bag holds {err[2]} ids (bag {err[1]}); unpooled rows travel one per id")
        if rc == 2:
            raise ValueError(f"expand_rows: {err[2]} rows received for {err[1]} ids sent")
        if rc == 3:
            raise ValueError(f"expand_rows: bag {err[1]} has an id in {err[2]} segments; each id has one owner")
        if rc:
            raise MemoryError(f"expand_rows: no scratch for {segments} segments")
        return out

    def compact_rows(self, blocks: Sequence[torch.Tensor], lengths: torch.Tensor) -> torch.Tensor:
        """The rows of the non-empty bags of `blocks` (each `[batch, dim]`, rows any distance apart;
        block k's bags are `lengths[k * batch : (k + 1) * batch]`), back to back: `[filled, dim]`.
        A length other than 0 or 1 raises `ValueError` before anything is written."""
        if blocks and not _on_cpu(lengths, *blocks):
            return super().compact_rows(blocks, lengths)
        if not blocks or lengths.dim() != 1:
            raise ValueError("compact_rows: blocks and 1-D lengths")
        batch, dim = blocks[0].shape
        blocks = [b if b.stride(1) == 1 else b.contiguous() for b in blocks]
        if any(b.shape != (batch, dim) or b.dtype != blocks[0].dtype for b in blocks):
            raise ValueError(f"compact_rows: blocks of different shapes or dtypes (the first is {batch} x {dim})")
        if len(blocks) * batch != lengths.numel():
            raise ValueError(f"compact_rows: {len(blocks) * batch} bags in the blocks, {lengths.numel()} lengths")
        lengths = lengths.to(torch.int32).contiguous()
        out = blocks[0].new_empty(int(lengths.sum()), dim)
        esz = out.element_size()
        lib = self._lib or self._ensure(set())
        arr, arr_p = _addr_array(ctypes.c_int64, [v for b in blocks for v in (b.data_ptr(), b.stride(0) * esz)])
        err = (ctypes.c_int64 * 3)()
        rc = lib.lib.sl_compact_rows(
            len(blocks), arr_p, batch, lengths.data_ptr(), dim * esz, out.data_ptr(), out.shape[0], err
        )
        if rc == 1:
            raise ValueError(f"compact_rows: a bag holds {err[2]} ids (bag {err[1]}); unpooled rows travel one per id")
        if rc:
            raise ValueError(f"compact_rows: {err[1]} filled bags, {err[2]} rows")
        return out

    def unique_ids(self, indices: torch.Tensor, splits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`rows.unique_ids` in one C pass (a radix sort): each destination segment's distinct ids
        (sorted, segment after segment, in the ids' dtype), how many each keeps (int64) and where
        each routed id went (int64). `ValueError` on splits that do not tile the ids or a
        negative id. Where the (segment, id) keys do not fit 32 bits, or off the CPU, the
        reference's comparison sort."""
        if not _on_cpu(indices):
            return super().unique_ids(indices, splits)
        if indices.dim() != 1 or indices.dtype not in _INDEX:
            raise ValueError("unique_ids: 1-D int32/int64 ids")
        try:
            return self._c_unique_ids(indices, [int(x) for x in splits.tolist()])
        except OverflowError:
            return super().unique_ids(indices, splits)

    def _c_unique_ids(self, ids: torch.Tensor, splits: Sequence[int]) -> tuple[torch.Tensor, ...]:
        ids = ids.contiguous()
        n, nseg = ids.numel(), len(splits)
        distinct = torch.empty(n, dtype=ids.dtype)
        counts = torch.zeros(nseg, dtype=torch.int64)
        inverse = torch.empty(n, dtype=torch.int64)
        lib = self._lib or self._ensure(set())
        sp, sp_p = _addr_array(ctypes.c_int64, [int(x) for x in splits])
        total = ctypes.c_int64(0)
        err = (ctypes.c_int64 * 3)()
        rc = lib.lib.sl_unique_ids(
            n,
            ids.data_ptr(),
            int(ids.dtype == torch.int64),
            nseg,
            sp_p,
            distinct.data_ptr(),
            counts.data_ptr(),
            inverse.data_ptr(),
            ctypes.addressof(total),
            err,
        )
        if rc == 5:
            raise OverflowError(f"unique_ids: {nseg} segments of ids up to {err[2] - 1} do not fit 32-bit keys")
        if rc == 4:
            raise MemoryError(f"unique_ids: no memory to sort {n} ids")
        if rc == 3:
            raise ValueError(f"unique_ids: id {err[2]} at position {err[1]} is negative")
        if rc:
            raise ValueError(f"unique_ids: splits {list(splits)} do not tile {n} ids")
        return distinct[: total.value], counts, inverse

    def sum_rows(self, rows: torch.Tensor, inverse: torch.Tensor, distinct: int) -> torch.Tensor:
        """`[distinct, dim]`: row k the sum of the rows of `rows` whose `inverse` entry is k, added
        in order (as `index_add_` adds them); one C pass for float32 CPU rows. An inverse entry
        outside `[0, distinct)` raises `ValueError` before anything is written."""
        if rows.dtype != torch.float32 or not _on_cpu(rows, inverse):
            return super().sum_rows(rows, inverse, distinct)
        if rows.dim() != 2 or inverse.dim() != 1:
            raise ValueError("sum_rows: 2-D rows and 1-D inverse")
        if inverse.numel() != rows.shape[0]:
            raise ValueError(f"sum_rows: {inverse.numel()} inverse entries for {rows.shape[0]} rows")
        rows = rows.contiguous()
        inverse = inverse.to(torch.int64).contiguous()
        out = torch.empty(int(distinct), rows.shape[1], dtype=torch.float32)
        lib = self._lib or self._ensure(set())
        err = (ctypes.c_int64 * 3)()
        rc = lib.lib.sl_sum_rows(
            rows.shape[0], rows.data_ptr(), inverse.data_ptr(), out.shape[0], rows.shape[1], out.data_ptr(), err
        )
        if rc:
            raise ValueError(f"sum_rows: routed id {err[1]} goes to distinct id {err[2]}, of {out.shape[0]}")
        return out

    def unpack(
        self,
        buffer: torch.Tensor,
        layout: Sequence[Sequence[tuple[int, int]]],
        batch: int,
        widths: Sequence[int],
    ) -> list[torch.Tensor]:
        """Same signature and result as `reference.unpack` (jagged layouts use the reference)."""
        if any(off < 0 or size < 0 for seg in layout for off, size in seg) or not _on_cpu(buffer):
            return ref.unpack(buffer, layout, batch, widths)
        batch = int(batch)
        segment_widths = [sum(size for off, size in seg) for seg in layout]
        starts = [0]
        for w in segment_widths:
            starts.append(starts[-1] + w * batch)
        if buffer.dim() != 1 or buffer.numel() < starts[-1]:
            raise ValueError(f"unpack: buffer of shape {tuple(buffer.shape)}, the layout needs {starts[-1]} elements")
        buffer = buffer.contiguous()
        esz = buffer.element_size()
        members = [self._unpacked_member(m, width, layout, batch) for m, width in enumerate(widths)]
        # One allocation, member after member: each member stays contiguous, and the members of
        # an unpooled call's positions lie at a regular stride, so the dense region stacks them
        # as a view (`sparselift.strided_rows`) instead of copying them once more.
        whole = torch.empty(sum(total for total, _ in members), dtype=buffer.dtype)
        out, descs, first = [], [], 0
        for (total, parts), width in zip(members, widths):
            if not parts:
                out.append(torch.empty(0, width, dtype=buffer.dtype))
                continue
            o = whole[first : first + total]
            first += total
            pos = 0
            for s, (off, sz) in parts:
                if batch:
                    descs += [
                        o.data_ptr() + pos * esz,
                        sz * esz,
                        buffer.data_ptr() + (starts[s] + off) * esz,
                        segment_widths[s] * esz,
                        sz * esz,
                        batch,
                    ]
                pos += batch * sz
            out.append(o.reshape(-1, width))
        self._copy(descs)
        return out

    @staticmethod
    def _unpacked_member(
        m: int, width: int, layout: Sequence[Sequence[tuple[int, int]]], batch: int
    ) -> tuple[int, list[tuple[int, tuple[int, int]]]]:
        """Member `m`'s elements and its `(segment, (offset, size))` parts, its sizes checked."""
        parts = [(s, seg[m]) for s, seg in enumerate(layout) if seg[m][1] > 0]
        if not parts:
            return 0, parts
        sizes = {size for _, (_, size) in parts}
        if len(sizes) != 1:
            raise ValueError(f"unpack: member {m} has different sizes across segments: {sorted(sizes)}")
        total = batch * sizes.pop() * len(parts)
        if width <= 0 or total % width:
            raise ValueError(f"unpack: member {m} of width {width} cannot hold {total} elements")
        return total, parts


def _rows_view(member: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`member` as 2-D rows of `dtype` whose elements are contiguous within a row: the copy blocks
    read rows at any stride, so a view with spaced rows (an unpooled lookup's per-position
    gradient, a slice of the stacked positions' gradient) is read in place, not copied first."""
    x = member.reshape(member.shape[0], -1) if member.dim() else member.reshape(1, 1)
    x = x.to(dtype)
    if (x.shape[1] > 1 and x.stride(1) != 1) or x.stride(0) < x.shape[1]:
        x = x.contiguous()
    return x
