"""The generated kernels' multi-table C calls (`sl_forward`, `sl_update`, `sl_grad`) and their per-call constants.

`CCalls` is a base of `sparselift.runtime.kernels.CKernels` (which provides `_lib`,
`_ensure`, `_prepared` and `_threads`); the wrappers check every input before these run.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import torch

from sparselift.kernel_args import CheckedBags, TableArgs, UpdateArgs
from sparselift.runtime.kernel_checks import _addr_array, raise_c_error, spec_for
from sparselift.runtime.kernel_library import STRUCTURES

if TYPE_CHECKING:
    from sparselift.codegen.ckernels import TableSpec
    from sparselift.runtime.kernel_library import _Library


class CCalls:
    """`_prepare` and the multi-table C calls of `CKernels`."""

    if TYPE_CHECKING:  # what CKernels provides
        _lib: _Library | None
        _prepared: dict

        def _ensure(self, specs: set[TableSpec]) -> _Library: ...

        def _threads(self) -> int: ...

    def _prepare(self, kind: str, tables: Sequence[TableArgs], optimizer: str | None, bags: CheckedBags):
        """The per-call constants of a multi-table call (kernel numbers, pointers, slots), cached;
        None when a table's dtype has no C kernel (the reference backend then runs the call)."""
        index_dtype, weighted = bags.indices.dtype, bags.weights is not None
        key = (
            kind,
            tuple((t.weight.data_ptr(), t.weight.shape, t.weight.dtype, t.slots, t.pooling) for t in tables),
            optimizer,
            index_dtype,
            weighted,
            bags.features,
        )
        prep = self._prepared.get(key)
        if prep is not None and prep[0] is self._lib:
            return prep[1]
        found = [spec_for(t.weight, index_dtype, t.pooling, weighted, optimizer) for t in tables]
        if any(s is None for s in found):
            return None
        specs = cast("list[TableSpec]", found)  # none is None (checked above)
        lib = self._ensure(set(specs))
        numbers = [lib.fwd_numbers[s.forward_key] if kind == "fwd" else lib.upd_numbers[s] for s in specs]
        slot_off: list[int] = [0]
        flat: list[int] = []
        for t in tables:
            flat.extend(t.slots)
            slot_off.append(len(flat))
        arrays = [
            _addr_array(ctypes.c_int32, numbers),
            _addr_array(ctypes.c_void_p, [t.weight.data_ptr() for t in tables]),
            _addr_array(ctypes.c_int64, [t.rows for t in tables]),
            _addr_array(ctypes.c_int32, slot_off),
            _addr_array(ctypes.c_int32, flat),
        ]
        record = STRUCTURES["sl_tables"](len(tables), *(address for _, address in arrays))
        # The arrays stay referenced beside the record that points into them.
        prep = {"lib": lib, "arrays": arrays, "tables": record, "tables_p": ctypes.addressof(record)}
        if len(self._prepared) > 256:
            self._prepared.clear()
        self._prepared[key] = (lib, prep)
        return prep

    @staticmethod
    def _bags(bags: CheckedBags) -> ctypes.Structure:
        """The bags as the C `sl_bags` record (pass its `ctypes.addressof`)."""
        return STRUCTURES["sl_bags"](
            bags.lengths.data_ptr(),
            bags.lengths.numel(),
            bags.indices.data_ptr(),
            int(bags.indices.dtype == torch.int64),
            bags.indices.numel(),
            bags.weights.data_ptr() if bags.weights is not None else None,
            bags.features,
            bags.batch,
        )

    def _call_forward(self, prep, outs, bags: CheckedBags, tables: Sequence[TableArgs]) -> None:
        """The `sl_forward` call of `lookup` (checked inputs, prepared constants)."""
        o, o_p = _addr_array(ctypes.c_void_p, [x.data_ptr() for x in outs])
        lo, lo_p = _addr_array(ctypes.c_int64, [x.stride(0) for x in outs])
        err = (ctypes.c_int64 * 4)()
        routed = self._bags(bags)
        rc = prep["lib"].lib.sl_forward(
            prep["tables_p"], o_p, lo_p, ctypes.addressof(routed), self._threads(), ctypes.addressof(err)
        )
        if rc:
            raise_c_error(err, tables, bags, "lookup")

    def _call_update(
        self, prep, gs, states, bags: CheckedBags, tables: Sequence[TableArgs], update: UpdateArgs, threads: int
    ) -> None:
        """The `sl_update` call of `lookup_update` (checked inputs, prepared constants); the
        optimizer's arguments go as the C `sl_hyper`, `states` are the tables' state pointers."""
        hyper = update.optimizer.c_struct()
        stt, st_p = _addr_array(ctypes.c_void_p, states)
        ga, g_p = _addr_array(ctypes.c_void_p, [g.data_ptr() for g in gs])
        la, l_p = _addr_array(ctypes.c_int64, [g.stride(0) for g in gs])
        err = (ctypes.c_int64 * 4)()
        routed = self._bags(bags)
        rc = prep["lib"].lib.sl_update(
            prep["tables_p"],
            st_p,
            g_p,
            l_p,
            ctypes.addressof(routed),
            ctypes.addressof(hyper),
            float(update.grad_scale),
            threads,
            ctypes.addressof(err),
        )
        if rc:
            raise_c_error(err, tables, bags, "update")

    def _call_grad(self, prep, gs, bags: CheckedBags, tables: Sequence[TableArgs], grad_scale: float) -> None:
        """The `sl_grad` call of `lookup_grad` (checked inputs, prepared constants); `gs`: one
        `[rows, dim]` gradient block per slot, table after table."""
        ga, g_p = _addr_array(ctypes.c_void_p, [g.data_ptr() for g in gs])
        la, l_p = _addr_array(ctypes.c_int64, [g.stride(0) for g in gs])
        err = (ctypes.c_int64 * 4)()
        routed = self._bags(bags)
        rc = prep["lib"].lib.sl_grad(
            prep["tables_p"], g_p, l_p, ctypes.addressof(routed), float(grad_scale), ctypes.addressof(err)
        )
        if rc:
            raise_c_error(err, tables, bags, "gradient")
