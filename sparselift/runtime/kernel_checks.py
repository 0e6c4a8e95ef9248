"""What the C kernels' wrappers check besides `kernel_args.check_bags`: specs, in-place layouts, error codes.

`spec_for` says which kernel specialization a table needs (None: a dtype the C kernels do not
handle, left to the reference backend); `rows_apart` keeps a gradient or output in place when
the kernels can read it there; `raise_c_error` turns an entry point's error code into the
`ValueError` naming the table that the other backends raise from their own checks.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import torch

from sparselift.codegen.ckernels import ERROR_CODES, TableSpec
from sparselift.kernel_args import CheckedBags, TableArgs

_STORAGE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_INDEX = {torch.int32: "i32", torch.int64: "i64"}


def spec_for(
    table: torch.Tensor, index_dtype: torch.dtype, pooling: str, weighted: bool, optimizer: str | None = None
) -> TableSpec | None:
    """The kernel spec for a table, or None when the C kernels do not handle its dtype."""
    if table.dim() != 2 or table.dtype not in _STORAGE or table.shape[1] < 1 or table.shape[1] > 4096:
        return None
    return TableSpec(int(table.shape[1]), _STORAGE[table.dtype], _INDEX[index_dtype], str(pooling), weighted, optimizer)


def _on_cpu(*tensors) -> bool:
    return all(t is None or t.device.type == "cpu" for t in tensors)


def _is_rows_apart(x: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the kernels can read or write `x` in place: 2-D, `dtype`, unit column stride, rows
    at least a row apart (a column block of a wider buffer)."""
    return x.dtype == dtype and x.dim() == 2 and x.stride(1) == 1 and x.stride(0) >= x.shape[1]


def _rows_apart(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x` itself when the kernels can use it in place (`_is_rows_apart`), else a dense copy."""
    return x if _is_rows_apart(x, dtype) else x.to(dtype).contiguous()


def _slot_blocks(grad: torch.Tensor | Sequence[torch.Tensor], table: TableArgs) -> list[torch.Tensor]:
    """A table's pooled gradient (checked: `kernel_args.check_grads`) as one `[rows, dim]`
    float32 block per slot, each read in place where the kernels can (a column slice of a wider
    gradient, as a concatenation's backward gives it), else copied."""
    if isinstance(grad, torch.Tensor):
        grad = _rows_apart(grad, torch.float32)
        return [grad[:, k * table.dim : (k + 1) * table.dim] for k in range(len(table.slots))]
    return [_rows_apart(g, torch.float32) for g in grad]


def _addr_array(ctype, values: Sequence[int]):
    arr = (ctype * max(len(values), 1))(*values)
    return arr, ctypes.addressof(arr)


def raise_c_error(err, tables: Sequence[TableArgs], bags: CheckedBags, op: str) -> None:
    """The `ValueError` (a `RuntimeError` for an internal failure) of a C entry point's error
    record `err`: (code, position, value, table)."""
    code, pos, value, t = int(err[0]), int(err[1]), int(err[2]), int(err[3])
    names = [x.name for x in tables]
    who = f"table '{names[t]}'" if 0 <= t < len(names) else ("table '" + "', '".join(names) + "'")
    if code == 1:
        raise ValueError(f"{op} of {who}: negative bag length {value} at bag {pos}")
    if code == 2:
        raise ValueError(f"{op} of {who}: bag lengths sum to {value} but there are {bags.indices.numel()} ids")
    if code == 3:
        rows = tables[t].rows if 0 <= t < len(tables) else "?"
        raise ValueError(f"{op} of {who}: id {value} at position {pos} is out of range for a table of {rows} rows")
    if code == 7:
        raise ValueError(f"{op} of {who}: slot {value} is outside the features of a segment")
    raise RuntimeError(f"{op} of {who}: C kernel failed: {ERROR_CODES.get(code, f'error {code}')}")
