"""Argument checks of the generated C kernels' wrappers: specs, geometry, ids, C error codes.

`ArgumentChecks` is a base of `sparselift.runtime.kernels.GeneratedKernels`: the checks it runs in
Python before a C call, the torch version of the C entry points' id checks (for the reference
fallback), and the `ValueError`s a C error code becomes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from sparselift.codegen.ckernels import ERROR_CODES, TableSpec

_STORAGE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_INDEX = {torch.int32: "i32", torch.int64: "i64"}


def spec_for(
    table: torch.Tensor, index_dtype: torch.dtype, pooling: str, weighted: bool, optimizer: str | None = None
) -> TableSpec | None:
    """The kernel spec for a table, or None when the C kernels do not handle its dtype."""
    if table.dim() != 2 or table.dtype not in _STORAGE or table.shape[1] < 1 or table.shape[1] > 4096:
        return None
    return TableSpec(int(table.shape[1]), _STORAGE[table.dtype], _INDEX[index_dtype], pooling, weighted, optimizer)


def _on_cpu(*tensors) -> bool:
    return all(t is None or t.device.type == "cpu" for t in tensors)


def _is_rows_apart(x: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the kernels can read or write `x` in place: 2-D, `dtype`, unit column stride, rows
    at least a row apart (a column block of a wider buffer)."""
    return x.dtype == dtype and x.dim() == 2 and x.stride(1) == 1 and x.stride(0) >= x.shape[1]


def _rows_apart(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x` itself when the kernels can use it in place (`_is_rows_apart`), else a dense copy."""
    return x if _is_rows_apart(x, dtype) else x.to(dtype).contiguous()


def _slot_blocks(grad, nrows: int, dim: int, nslots: int, table: int, names_fn) -> list[torch.Tensor]:
    """Table `table`'s pooled gradient as one `[nrows, dim]` float32 block per slot, each read in
    place where the kernels can (a column slice of a wider gradient, as a concatenation's
    backward gives it), else copied. `grad`: `[nrows, dim x nslots]`, or one tensor per slot."""
    if isinstance(grad, torch.Tensor):
        if grad.dim() != 2 or tuple(grad.shape) != (nrows, dim * nslots):
            raise ValueError(
                f"gradient of table '{names_fn()[table]}': pooled gradient of shape {tuple(grad.shape)}, "
                f"expected {(nrows, dim * nslots)}"
            )
        grad = _rows_apart(grad, torch.float32)
        return [grad[:, k * dim : (k + 1) * dim] for k in range(nslots)]
    blocks = list(grad)
    if len(blocks) != nslots:
        raise ValueError(
            f"gradient of table '{names_fn()[table]}': {len(blocks)} per-slot gradients for its {nslots} slots"
        )
    for k, g in enumerate(blocks):
        if g.dim() != 2 or tuple(g.shape) != (nrows, dim):
            raise ValueError(
                f"gradient of table '{names_fn()[table]}', slot {k}: pooled gradient of shape "
                f"{tuple(g.shape)}, expected {(nrows, dim)}"
            )
    return [_rows_apart(g, torch.float32) for g in blocks]


def _addr_array(ctype, values: Sequence[int]):
    arr = (ctype * max(len(values), 1))(*values)
    return arr, ctypes.addressof(arr)


class ArgumentChecks:
    """The shared input checks of `GeneratedKernels` (it provides `_name`)."""

    if TYPE_CHECKING:  # what GeneratedKernels provides

        def _name(self, table: torch.Tensor, i: int | None = None) -> str: ...

    def _geometry(self, names, lengths, indices, weights, slots_per_table, features_per_segment, batch):
        who = ", ".join(f"'{n}'" for n in names)
        where = f"lookup of table {who}" if len(names) == 1 else f"lookup of tables {who}"
        if lengths.dim() != 1 or lengths.dtype not in (torch.int32, torch.int64):
            raise ValueError(
                f"{where}: lengths must be a 1-D int32 tensor, got {lengths.dtype} of shape {tuple(lengths.shape)}"
            )
        if lengths.dtype != torch.int32:
            if lengths.numel() and int(lengths.max()) > 2**31 - 1:
                raise ValueError(f"{where}: bag length {int(lengths.max())} does not fit in int32")
            lengths = lengths.to(torch.int32)
        lengths = lengths.contiguous()
        if indices.dim() != 1 or indices.dtype not in _INDEX:
            raise ValueError(
                f"{where}: indices must be a 1-D int32/int64 tensor, got {indices.dtype} of shape "
                f"{tuple(indices.shape)}"
            )
        indices = indices.contiguous()
        if weights is not None:
            if weights.dim() != 1 or weights.numel() != indices.numel():
                raise ValueError(
                    f"{where}: one weight per id expected ({indices.numel()} ids, weights of shape "
                    f"{tuple(weights.shape)})"
                )
            weights = weights.to(torch.float32).contiguous()
        f, b = int(features_per_segment), int(batch)
        if f < 0 or b < 0:
            raise ValueError(f"{where}: features_per_segment and batch must be non-negative, got {f} and {b}")
        nbags = lengths.numel()
        if f * b == 0:
            if nbags:
                raise ValueError(f"{where}: {nbags} bag lengths for {f} features x batch {b}")
            segments = 0
        else:
            if nbags % (f * b):
                raise ValueError(
                    f"{where}: {nbags} bag lengths is not a whole number of segments of {f} features x batch {b}"
                )
            segments = nbags // (f * b)
        for name, slots in zip(names, slots_per_table):
            for s in slots:
                if not 0 <= int(s) < f:
                    raise ValueError(f"table '{name}': slot {int(s)} is outside the {f} features of a segment")
        return lengths, indices, weights, segments

    def _check_ids_torch(self, names, tables, lengths, indices, weights, slots_per_table, features_per_segment, batch):
        """The C entry points' checks, in torch, for inputs the reference lowering handles."""
        lengths, indices, weights, segments = self._geometry(
            names, lengths, indices, weights, slots_per_table, features_per_segment, batch
        )
        where = "lookup of table " + ", ".join(f"'{n}'" for n in names)
        if lengths.numel() and int(lengths.min()) < 0:
            bad = int(torch.nonzero(lengths < 0)[0])
            raise ValueError(f"{where}: negative bag length {int(lengths[bad])} at bag {bad}")
        total = int(lengths.sum()) if lengths.numel() else 0
        if total != indices.numel():
            raise ValueError(f"{where}: bag lengths sum to {total} but there are {indices.numel()} ids")
        if not indices.numel() or not segments:
            return
        f, b = int(features_per_segment), int(batch)
        feature = (torch.repeat_interleave(torch.arange(lengths.numel()), lengths.long()) % (f * b)) // b
        for name, t, slots in zip(names, tables, slots_per_table):
            ids = indices[torch.isin(feature, torch.tensor([int(x) for x in slots], dtype=torch.int64))]
            bad = (ids < 0) | (ids >= t.shape[0])
            if ids.numel() and bool(bad.any()):
                v = int(ids[torch.nonzero(bad)[0]])
                raise ValueError(f"lookup of table '{name}': id {v} is out of range for a table of {t.shape[0]} rows")

    def _raise(self, err, names, lengths, indices, rows, op: str) -> None:
        code, pos, value, t = int(err[0]), int(err[1]), int(err[2]), int(err[3])
        who = f"table '{names[t]}'" if 0 <= t < len(names) else ("table '" + "', '".join(names) + "'")
        if code == 1:
            raise ValueError(f"{op} of {who}: negative bag length {value} at bag {pos}")
        if code == 2:
            raise ValueError(f"{op} of {who}: bag lengths sum to {value} but there are {indices.numel()} ids")
        if code == 3:
            raise ValueError(
                f"{op} of {who}: id {value} at position {pos} is out of range for a table of {rows[t]} rows"
            )
        if code == 7:
            raise ValueError(f"{op} of {who}: slot {value} is outside the features of a segment")
        raise RuntimeError(f"{op} of {who}: C kernel failed: {ERROR_CODES.get(code, f'error {code}')}")

    def _per_table(self, wrapper: str, role: str, tables, poolings, names, **lists):
        """The fused wrappers' shared prologue: `poolings` as a list, a lazy `names_fn` (table
        names only when an error needs them), every per-table list as long as `tables`, and each
        pooling known; errors name the wrapper, or the table and its `role` ("lookup of table")."""
        n = len(tables)
        poolings = [poolings] * n if isinstance(poolings, str) else list(poolings)

        def names_fn():
            return list(names) if names is not None else [self._name(t, i) for i, t in enumerate(tables)]

        if any(len(v) != n for v in [poolings, *lists.values()]) or (names is not None and len(names) != n):
            raise ValueError(f"{wrapper}: per-table arguments must have the same length")
        for i, p in enumerate(poolings):
            if p not in ("sum", "mean"):
                raise ValueError(f"{role} of table '{names_fn()[i]}': unknown pooling '{p}'")
        return poolings, names_fn

    @staticmethod
    def _check_index_dtype(indices, names_fn, n: int, role: str) -> None:
        if indices.dtype not in _INDEX:
            raise ValueError(
                f"{role} of table '{names_fn()[0] if n else '?'}': indices must be int32 or int64, got {indices.dtype}"
            )

    def _check_common(self, names_fn, lengths, indices, weights, slots_per_table, features_per_segment, batch):
        """Fast path of `_geometry`: the usual dtypes and shapes pass with attribute checks only."""
        f, b = int(features_per_segment), int(batch)
        if (
            lengths.dtype == torch.int32
            and lengths.dim() == 1
            and lengths.is_contiguous()
            and indices.dim() == 1
            and indices.dtype in _INDEX
            and indices.is_contiguous()
            and f > 0
            and b > 0
            and lengths.numel() % (f * b) == 0
            and (
                weights is None
                or (
                    weights.dtype == torch.float32
                    and weights.dim() == 1
                    and weights.numel() == indices.numel()
                    and weights.is_contiguous()
                )
            )
            and all(0 <= int(x) < f for sl in slots_per_table for x in sl)
        ):
            return lengths, indices, weights, lengths.numel() // (f * b)
        return self._geometry(names_fn(), lengths, indices, weights, slots_per_table, features_per_segment, batch)
