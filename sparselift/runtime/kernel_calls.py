"""The generated kernels' multi-table C calls (`sl_forward`, `sl_update`, `sl_grad`) and their per-call constants.

`CCalls` is a base of `sparselift.runtime.kernels.GeneratedKernels` (which provides `_lib`,
`_ensure`, `_prepared` and `_threads`); the wrappers check every input before these run.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, cast

import torch

from sparselift.runtime.kernel_checks import _addr_array, spec_for

if TYPE_CHECKING:
    from sparselift.codegen.ckernels import TableSpec
    from sparselift.runtime.kernel_library import _Library


class CCalls:
    """`_prepare` and the multi-table C calls of `GeneratedKernels`."""

    if TYPE_CHECKING:  # what GeneratedKernels provides (`_raise`: ArgumentChecks)
        _lib: _Library | None
        _prepared: dict

        def _ensure(self, specs: set[TableSpec]) -> _Library: ...

        def _threads(self) -> int: ...

        def _raise(self, err, names, lengths, indices, rows, op: str) -> None: ...

    def _prepare(
        self,
        kind: str,
        tables,
        slots_per_table,
        poolings,
        kinds,
        index_dtype,
        weighted: bool,
        features_per_segment: int,
    ):
        """The per-call constants of a multi-table call (kernel numbers, pointers, slots), cached."""
        key = (
            kind,
            tuple((t.data_ptr(), t.shape[0], t.shape[1] if t.dim() == 2 else -1, t.dtype, t.dim()) for t in tables),
            tuple(tuple(int(x) for x in sl) for sl in slots_per_table),
            tuple(poolings),
            tuple(kinds or ()),
            index_dtype,
            weighted,
            int(features_per_segment),
        )
        prep = self._prepared.get(key)
        if prep is not None and prep[0] is self._lib:
            return prep[1]
        found = [
            spec_for(t, index_dtype, p, weighted, k) for t, p, k in zip(tables, poolings, kinds or [None] * len(tables))
        ]
        if any(s is None for s in found):
            return None
        specs = cast("list[TableSpec]", found)  # none is None (checked above)
        lib = self._ensure(set(specs))
        numbers = [lib.fwd_numbers[s.forward_key] if kind == "fwd" else lib.upd_numbers[s] for s in specs]
        slot_off: list[int] = [0]
        flat: list[int] = []
        for sl in slots_per_table:
            flat.extend(int(x) for x in sl)
            slot_off.append(len(flat))
        rows = [int(t.shape[0]) for t in tables]
        arrays = [
            _addr_array(ctypes.c_int32, numbers),
            _addr_array(ctypes.c_void_p, [t.data_ptr() for t in tables]),
            _addr_array(ctypes.c_int64, rows),
            _addr_array(ctypes.c_int32, slot_off),
            _addr_array(ctypes.c_int32, flat),
        ]
        prep = {
            "lib": lib,
            "rows": rows,
            "arrays": arrays,
            "ptrs": [a[1] for a in arrays],
            "widths": [int(t.shape[1]) * len(sl) for t, sl in zip(tables, slots_per_table)],
        }
        if len(self._prepared) > 256:
            self._prepared.clear()
        self._prepared[key] = (lib, prep)
        return prep

    def _call_forward(self, prep, outs, lengths, indices, weights, features_per_segment, batch, names_fn) -> None:
        """The `sl_forward` call of `fused_lookup` (checked inputs, prepared constants)."""
        n = len(outs)
        o, o_p = _addr_array(ctypes.c_void_p, [x.data_ptr() for x in outs])
        lo, lo_p = _addr_array(ctypes.c_int64, [x.stride(0) for x in outs])
        err = (ctypes.c_int64 * 4)()
        fn_p, w_p, r_p, so_p, sf_p = prep["ptrs"]
        rc = prep["lib"].lib.sl_forward(
            n,
            fn_p,
            w_p,
            r_p,
            so_p,
            sf_p,
            o_p,
            lo_p,
            lengths.data_ptr(),
            lengths.numel(),
            indices.data_ptr(),
            int(indices.dtype == torch.int64),
            indices.numel(),
            weights.data_ptr() if weights is not None else None,
            int(features_per_segment),
            int(batch),
            self._threads(),
            ctypes.addressof(err),
        )
        if rc:
            self._raise(err, names_fn(), lengths, indices, prep["rows"], "lookup")

    def _call_update(
        self,
        prep,
        gs,
        sp,
        lengths,
        indices,
        weights,
        features_per_segment,
        batch,
        optimizer,
        grad_scale,
        threads,
        names_fn,
    ) -> None:
        """The `sl_update` call of `fused_lookup_update` (checked inputs, prepared constants);
        `optimizer`: the group's `OptimizerArgs`, passed as the C `sl_hyper`."""
        n = len(gs)
        hyper = optimizer.c_struct()
        stt, st_p = _addr_array(ctypes.c_void_p, sp)
        ga, g_p = _addr_array(ctypes.c_void_p, [g.data_ptr() for g in gs])
        la, l_p = _addr_array(ctypes.c_int64, [g.stride(0) for g in gs])
        err = (ctypes.c_int64 * 4)()
        fn_p, w_p, r_p, so_p, sf_p = prep["ptrs"]
        rc = prep["lib"].lib.sl_update(
            n,
            fn_p,
            w_p,
            st_p,
            r_p,
            so_p,
            sf_p,
            g_p,
            l_p,
            lengths.data_ptr(),
            lengths.numel(),
            indices.data_ptr(),
            int(indices.dtype == torch.int64),
            indices.numel(),
            weights.data_ptr() if weights is not None else None,
            int(features_per_segment),
            int(batch),
            ctypes.addressof(hyper),
            float(grad_scale),
            threads,
            ctypes.addressof(err),
        )
        if rc:
            self._raise(err, names_fn(), lengths, indices, prep["rows"], "update")

    def _call_grad(
        self, prep, gs, lengths, indices, weights, features_per_segment, batch, grad_scale, names_fn
    ) -> None:
        """The `sl_grad` call of `fused_lookup_grad` (checked inputs, prepared constants); `gs`: one
        `[rows, dim]` gradient block per slot, table after table."""
        n = len(prep["widths"])  # tables
        ga, g_p = _addr_array(ctypes.c_void_p, [g.data_ptr() for g in gs])
        la, l_p = _addr_array(ctypes.c_int64, [g.stride(0) for g in gs])
        err = (ctypes.c_int64 * 4)()
        fn_p, w_p, r_p, so_p, sf_p = prep["ptrs"]
        rc = prep["lib"].lib.sl_grad(
            n,
            fn_p,
            w_p,
            r_p,
            so_p,
            sf_p,
            g_p,
            l_p,
            lengths.data_ptr(),
            lengths.numel(),
            indices.data_ptr(),
            int(indices.dtype == torch.int64),
            indices.numel(),
            weights.data_ptr() if weights is not None else None,
            int(features_per_segment),
            int(batch),
            float(grad_scale),
            ctypes.addressof(err),
        )
        if rc:
            self._raise(err, names_fn(), lengths, indices, prep["rows"], "gradient")
