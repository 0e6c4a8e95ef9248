"""Generated C kernels for the CPU sparse ops: build, cache, load (ctypes) and call.

`GeneratedKernels` is what `PlanBase.kernels` holds. It exposes `lookup`, `lookup_update`,
`pack` and `unpack` with exactly the signatures of `sparselift.runtime.reference` (so
`plan_ops._kernel_or_ref` can call either), plus the multi-table `fused_lookup` /
`fused_lookup_update` / `fused_lookup_grad` (one C call over all tables of a rank) and
`concat_ids`. The module-level functions of the reference's names use a process-wide instance
that builds specializations on demand. Tensors off the CPU go to the Triton kernels
(`sparselift.codegen.triton_ops`) where they run, else to the reference.

Build and cache: the C source comes from `sparselift.codegen.ckernels.generate_source` for a
set of `TableSpec`s; it is compiled with the system compiler (`$SPARSELIFT_CC`, default `cc`)
as `-O3 -march=native -ffp-contract=off -shared -fPIC` (+ `-fopenmp` when a probe compile
shows it works) and stored as `<cache>/ckernels/sl_<key>.so` (`sparselift.cache.cache_dir`:
the `cache` argument, else `$SPARSELIFT_CACHE_DIR`, else `~/.cache/sparselift`), where `<key>`
hashes the source, the compiler's `--version`, the CPU model and flags and the compile flags.
A later build of the same key loads the stored `.so` (log "reusing cached C kernels ...";
`rebuilt` is False); a miss compiles into a temporary file and renames it into place
atomically (`sparselift.cache.atomic_output`; log "built C kernels ..."). The ctypes
signatures come from `sparselift.codegen.c_abi.ENTRY_POINTS`, the description the C
prototypes are rendered from, and a library whose `sl_abi_version()` differs is refused.

Safety: before any C call the wrappers check shapes, dtypes and slots in Python, and the C
entry points check the bag lengths (non-negative, summing to the number of ids) and every id a
table reads (`0 <= id < rows`) before writing anything; a failure raises `ValueError` naming
the table and leaves tables and states unchanged. ctypes releases the GIL during the calls.

Parts: `kernel_library` (toolchain probe, loading a .so), `kernel_checks` (argument checks),
`kernel_calls` (the multi-table C calls) and `kernel_buffers` (`concat_ids`, `pack`, `unpack`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch

from sparselift import cache as cache_files
from sparselift.codegen import ckernels
from sparselift.codegen.ckernels import TableSpec
from sparselift.optim_rules import rule_for
from sparselift.runtime import reference as ref
from sparselift.runtime.kernel_buffers import BufferOps
from sparselift.runtime.kernel_calls import CCalls
from sparselift.runtime.kernel_checks import (
    _STORAGE,
    ArgumentChecks,
    _is_rows_apart,
    _on_cpu,
    _rows_apart,
    _slot_blocks,
    spec_for,
)
from sparselift.runtime.kernel_library import (
    _BASE_FLAGS,
    KernelBuildError,
    _compiler,
    _Library,
    _toolchain,
    cache_dir,
)
from sparselift.runtime.sparse_optimizer import OptimizerArgs

__all__ = [
    "TableSpec",
    "GeneratedKernels",
    "KernelBuildError",
    "build_library",
    "cache_dir",
    "default_kernels",
    "spec_for",
    "lookup",
    "lookup_update",
    "fused_lookup",
    "fused_lookup_update",
    "pack",
    "unpack",
    "lane_threads",
]

log = logging.getLogger("sparselift.kernels")


_LOADED: dict[str, _Library] = {}
_LOADED_LOCK = threading.Lock()


def build_library(
    specs: Iterable[TableSpec], cache: str | os.PathLike | None = None, codegen_options: Mapping[str, int] | None = None
) -> tuple[_Library, bool, float]:
    """Compile (or reuse from the cache) the C kernels for `specs` and load them.

    `codegen_options` go to `ckernels.generate_source` (tuning knobs such as `forward_prefetch`).
    Returns (library, rebuilt, seconds): `rebuilt` is True only when this call ran the compiler.
    """
    specs = sorted(set(specs), key=lambda s: s.tag)
    root = cache_dir(cache)
    tc = _toolchain(root)
    flags = [*_BASE_FLAGS, *(["-fopenmp"] if tc["openmp"] else [])]
    source = ckernels.generate_source(specs, have_f16=tc["f16"], **dict(codegen_options or {}))
    key = ckernels.source_hash(source, [_compiler(), tc["version"], tc["cpu"], " ".join(flags)])
    so = root / f"sl_{key}.so"
    with _LOADED_LOCK:
        t0 = time.perf_counter()
        lib = _LOADED.get(str(so))
        if lib is not None and so.exists():
            log.info("reusing loaded C kernels %s (%d specs)", so, len(specs))
            return lib, False, 0.0
        rebuilt = False
        if so.exists():
            log.info("reusing cached C kernels %s (%d specs)", so, len(specs))
        else:
            c_path = root / f"sl_{key}.c"
            cache_files.atomic_write(c_path, source)
            with cache_files.atomic_output(so) as tmp_so:  # the compiler writes a temporary, renamed when done
                cmd = [_compiler(), *flags, str(c_path), "-o", str(tmp_so), "-lm"]
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                except (OSError, subprocess.SubprocessError) as e:
                    raise KernelBuildError(f"C kernel build failed to run ({' '.join(cmd)}): {e}") from e
                if r.returncode != 0:
                    raise KernelBuildError(f"C kernel build failed ({' '.join(cmd)}):\n{r.stderr[-4000:]}")
            rebuilt = True
            log.info("built C kernels %s (%d specs) in %.2fs", so, len(specs), time.perf_counter() - t0)
        lib = _Library(specs, so, bool(tc["openmp"]))
        _LOADED[str(so)] = lib
        return lib, rebuilt, time.perf_counter() - t0


def _device_impl(name: str):
    """Non-CPU tensors: the Triton kernels where they run (CUDA), else the reference lowering."""
    from sparselift.codegen import triton_ops

    if triton_ops.AVAILABLE:
        return getattr(triton_ops, name)

    def via_reference(tables, *args, names=None):
        if name == "fused_lookup":
            lengths, indices, weights, slots_per_table, fps, batch, poolings = args
            if isinstance(poolings, str):
                poolings = [poolings] * len(tables)
            return [
                ref.lookup(t, lengths, indices, weights, sl, fps, batch, p)
                for t, sl, p in zip(tables, slots_per_table, poolings)
            ]
        states, lengths, indices, weights, grads, slots_per_table, fps, batch, poolings, optimizer, gs = args
        n = len(tables)
        poolings = [poolings] * n if isinstance(poolings, str) else poolings
        for t, st, g, sl, p in zip(tables, states, grads, slots_per_table, poolings):
            ref.lookup_update(t, st, lengths, indices, weights, g, sl, fps, batch, p, optimizer, gs)

    return via_reference


_LANE = threading.local()


@contextlib.contextmanager
def lane_threads(threads: int):
    """C calls made on this thread use `threads` OpenMP threads (a `sched.parallel` lane's share
    of the cores, so concurrent lanes do not oversubscribe). Thread-local: lanes never race."""
    prev = getattr(_LANE, "threads", None)
    _LANE.threads = max(1, int(threads))
    try:
        yield
    finally:
        _LANE.threads = prev


class GeneratedKernels(ArgumentChecks, CCalls, BufferOps):
    """The C kernels of one plan (what `PlanBase.kernels` holds).

    `specs`: the `TableSpec`s to build up front (a plan knows its tables); a call that needs
    another spec rebuilds (or reuses from the cache) a library covering both. `table_names`
    maps names to table tensors so that errors can name the table; `nthreads` (default: torch's
    intra-op thread count at call time) is the OpenMP thread count of the C calls.
    """

    def __init__(
        self,
        specs: Iterable[TableSpec] = (),
        *,
        cache: str | os.PathLike | None = None,
        nthreads: int | None = None,
        table_names: Mapping[str, torch.Tensor] | None = None,
        codegen_options: Mapping[str, int] | None = None,
    ):
        self._cache = cache
        self._options = dict(codegen_options or {})
        self.nthreads = nthreads
        self._names: dict[int, str] = {}
        self._lock = threading.Lock()
        self._lib: _Library | None = None
        self._prepared: dict = {}
        self._named_kinds: set[tuple[int, str]] = set()
        self.rebuilt = False
        self.build_seconds = 0.0
        if table_names:
            self.name_tables(table_names)
        specs = set(specs)
        if specs:
            self._ensure(specs)

    # -- bookkeeping --

    @property
    def specs(self) -> frozenset[TableSpec]:
        return self._lib.specs if self._lib is not None else frozenset()

    @property
    def library_path(self) -> Path | None:
        return self._lib.path if self._lib is not None else None

    def name_tables(self, tables: Mapping[str, torch.Tensor]) -> None:
        """Name tables for error messages; their (dim, dtype) also guide on-demand builds."""
        for name, t in tables.items():
            self._names[t.data_ptr()] = name
            if t.dim() == 2 and t.dtype in _STORAGE and 1 <= t.shape[1] <= 4096:
                self._named_kinds.add((int(t.shape[1]), _STORAGE[t.dtype]))

    def _name(self, table: torch.Tensor, i: int | None = None) -> str:
        name = self._names.get(table.data_ptr())
        if name is not None:
            return name
        shape = "x".join(str(s) for s in table.shape)
        return f"#{i} [{shape}]" if i is not None else f"[{shape}]"

    def _ensure(self, specs: set[TableSpec]) -> _Library:
        lib = self._lib
        if lib is not None and lib.covers(specs):
            return lib
        with self._lock:
            lib = self._lib
            if lib is not None and lib.covers(specs):
                return lib
            wanted = set(specs) | (set(lib.specs) if lib is not None else set())
            # A miss usually means the plan's other tables need the same variant: build it for
            # every named table's (dim, dtype) at once rather than one rebuild per table.
            for s in specs:
                wanted |= {dataclasses.replace(s, dim=d, dtype=dt) for d, dt in self._named_kinds}
            new, rebuilt, seconds = build_library(wanted, self._cache, self._options)
            self.rebuilt = self.rebuilt or rebuilt
            self.build_seconds += seconds
            self._lib = new
            return new

    def _threads(self) -> int:
        lane = getattr(_LANE, "threads", None)  # inside a sched.parallel lane: its share
        if lane:
            return lane
        return int(self.nthreads) if self.nthreads else max(1, torch.get_num_threads())

    # -- the ops --

    def fused_lookup(
        self,
        tables: Sequence[torch.Tensor],
        lengths: torch.Tensor,
        indices: torch.Tensor,
        weights: torch.Tensor | None,
        slots_per_table: Sequence[Sequence[int]],
        features_per_segment: int,
        batch: int,
        poolings: Sequence[str] | str,
        names: Sequence[str] | None = None,
        out: Sequence[torch.Tensor] | None = None,
    ) -> list[torch.Tensor]:
        """`reference.lookup` of several tables that read the same lengths/indices, in one C call.

        `out`: where to write each table's pooled rows (2-D, the table's dtype, unit column stride,
        e.g. column blocks of one exchange buffer); returned as given."""
        tables = list(tables)
        n = len(tables)
        poolings, names_fn = self._per_table("fused_lookup", "lookup", tables, poolings, names, slots=slots_per_table)
        if not _on_cpu(*tables, lengths, indices, weights):
            return _device_impl("fused_lookup")(
                tables,
                lengths,
                indices,
                weights,
                slots_per_table,
                features_per_segment,
                batch,
                poolings,
                names=names_fn(),
            )
        self._check_index_dtype(indices, names_fn, n, "lookup")
        if not all(t.is_contiguous() for t in tables):
            tables = [t.contiguous() for t in tables]
        lengths, indices, weights, segments = self._check_common(
            names_fn, lengths, indices, weights, slots_per_table, features_per_segment, batch
        )
        prep = (
            self._prepare(
                "fwd", tables, slots_per_table, poolings, None, indices.dtype, weights is not None, features_per_segment
            )
            if n
            else None
        )
        if prep is None:  # no tables, or a dtype the C kernels do not handle: the reference lowering
            self._check_ids_torch(
                names_fn(), tables, lengths, indices, weights, slots_per_table, features_per_segment, batch
            )
            pooled = [
                ref.lookup(t, lengths, indices, weights, sl, features_per_segment, batch, p)
                for t, sl, p in zip(tables, slots_per_table, poolings)
            ]
            if out is None:
                return pooled
            for o, x in zip(out, pooled):
                o.copy_(x)
            return list(out)
        outs = self._lookup_outputs(tables, prep["widths"], segments * int(batch), out, names_fn)
        self._call_forward(prep, outs, lengths, indices, weights, features_per_segment, batch, names_fn)
        return outs

    @staticmethod
    def _lookup_outputs(tables, widths, nrows: int, out, names_fn) -> list[torch.Tensor]:
        """`fused_lookup`'s outputs: new tensors, or the given `out` once each is checked."""
        n = len(tables)
        if out is None:
            return [torch.empty(nrows, w, dtype=t.dtype) for t, w in zip(tables, widths)]
        outs = list(out)
        if len(outs) != n:
            raise ValueError(f"fused_lookup: {len(outs)} outputs for {n} tables")
        for i, (x, t, w) in enumerate(zip(outs, tables, widths)):
            if not _is_rows_apart(x, t.dtype) or tuple(x.shape) != (nrows, w) or not _on_cpu(x):
                raise ValueError(
                    f"lookup of table '{names_fn()[i]}': output of shape {tuple(x.shape)}, dtype "
                    f"{x.dtype}, strides {x.stride()}; expected ({nrows}, {w}) {t.dtype} rows"
                )
        return outs

    def lookup(
        self,
        table: torch.Tensor,
        lengths: torch.Tensor,
        indices: torch.Tensor,
        weights: torch.Tensor | None,
        slots: Sequence[int],
        features_per_segment: int,
        batch: int,
        pooling: str,
    ) -> torch.Tensor:
        """Same signature and result as `reference.lookup`."""
        return self.fused_lookup([table], lengths, indices, weights, [slots], features_per_segment, batch, [pooling])[0]

    def fused_lookup_update(
        self,
        tables: Sequence[torch.Tensor],
        states: Sequence[torch.Tensor | None],
        lengths: torch.Tensor,
        indices: torch.Tensor,
        weights: torch.Tensor | None,
        grads: Sequence[torch.Tensor],
        slots_per_table: Sequence[Sequence[int]],
        features_per_segment: int,
        batch: int,
        poolings: Sequence[str] | str,
        optimizer: OptimizerArgs,
        grad_scale: float = 1.0,
        names: Sequence[str] | None = None,
    ) -> None:
        """`reference.lookup_update` of several tables of one optimizer group in one C call (all
        or nothing on bad input)."""
        tables = list(tables)
        n = len(tables)
        kinds = [str(optimizer.kind)] * n
        states = list(states) if states is not None else [None] * n
        poolings, names_fn = self._per_table(
            "fused_lookup_update",
            "update",
            tables,
            poolings,
            names,
            states=states,
            grads=grads,
            slots=slots_per_table,
            kinds=kinds,
        )
        for i, k in enumerate(kinds):
            if k not in ckernels.OPTIMIZERS:
                raise ValueError(f"update of table '{names_fn()[i]}': unknown optimizer '{k}'")
        if not _on_cpu(*tables, *states, *grads, lengths, indices, weights):
            return _device_impl("fused_lookup_update")(
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
                grad_scale,
                names=names_fn(),
            )
        self._update_on_cpu(
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
            kinds,
            optimizer,
            grad_scale,
            names_fn,
        )

    def _update_on_cpu(
        self,
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
        kinds,
        optimizer,
        grad_scale,
        names_fn,
    ) -> None:
        """`fused_lookup_update` of CPU tensors (per-table lists checked): the C call, else the reference."""
        n = len(tables)
        self._check_index_dtype(indices, names_fn, n, "update")
        for i, t in enumerate(tables):
            if not t.is_contiguous():
                raise ValueError(
                    f"update of table '{names_fn()[i]}': the table must be contiguous to be updated in place"
                )
        lengths, indices, weights, segments = self._check_common(
            names_fn, lengths, indices, weights, slots_per_table, features_per_segment, batch
        )
        prep = (
            self._prepare(
                "upd",
                tables,
                slots_per_table,
                poolings,
                kinds,
                indices.dtype,
                weights is not None,
                features_per_segment,
            )
            if n
            else None
        )
        gs, sp = self._update_grads_states(
            tables, states, grads, slots_per_table, kinds, segments * int(batch), names_fn
        )
        if prep is None:  # no tables, or a dtype the C kernels do not handle: the reference lowering
            self._check_ids_torch(
                names_fn(), tables, lengths, indices, weights, slots_per_table, features_per_segment, batch
            )
            for t, st, g, sl, p in zip(tables, states, grads, slots_per_table, poolings):
                ref.lookup_update(
                    t, st, lengths, indices, weights, g, sl, features_per_segment, batch, p, optimizer, grad_scale
                )
            return
        threads = self._threads()
        if threads > 1 and len({t.data_ptr() for t in tables}) < n:
            threads = 1  # one table listed twice: update in order, never concurrently
        self._call_update(
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
        )

    @staticmethod
    def _update_grads_states(tables, states, grads, slots_per_table, kinds, nrows: int, names_fn):
        """Each table's gradient (checked; in place when it can be) and state pointer, for `sl_update`."""
        gs, sp = [], []
        for i, (t, st, g, sl, k) in enumerate(zip(tables, states, grads, slots_per_table, kinds)):
            want = (nrows, t.shape[1] * len(sl))
            if g.dim() != 2 or g.shape[0] != want[0] or g.shape[1] != want[1]:
                raise ValueError(
                    f"update of table '{names_fn()[i]}': gradient of shape {tuple(g.shape)}, expected {want}"
                )
            gs.append(_rows_apart(g, torch.float32))  # a column block of the received buffer: in place
            width = rule_for(k).state_width(int(t.shape[1]))
            if width:
                if (
                    st is None
                    or st.dtype != torch.float32
                    or st.numel() != t.shape[0] * width
                    or not st.is_contiguous()
                ):
                    raise ValueError(
                        f"update of table '{names_fn()[i]}': {k} needs a contiguous float32 state of "
                        f"{t.shape[0]} x {width} entries"
                    )
                sp.append(st.data_ptr())
            else:
                sp.append(0)
        return gs, sp

    def fused_lookup_grad(
        self,
        buffers: Sequence[torch.Tensor],
        lengths: torch.Tensor,
        indices: torch.Tensor,
        weights: torch.Tensor | None,
        grads: Sequence[torch.Tensor | Sequence[torch.Tensor]],
        slots_per_table: Sequence[Sequence[int]],
        features_per_segment: int,
        batch: int,
        poolings: Sequence[str] | str,
        grad_scale: float = 1.0,
        names: Sequence[str] | None = None,
    ) -> None:
        """Add `reference.lookup_grad` of several tables into `buffers` (zeroed float32, one per
        table, of its shape), in one C call: all or nothing on bad input.

        A table's gradient is one `[rows, dim x slots]` tensor, or a list of one `[rows, dim]`
        tensor per slot (`sparse.fused_lookup_grad`'s per-slot form: the slots' gradients read
        where the dense backward left them, without packing them first)."""
        buffers = list(buffers)
        n = len(buffers)
        poolings, names_fn = self._per_table(
            "fused_lookup_grad", "gradient", buffers, poolings, names, grads=grads, slots=slots_per_table
        )
        for i, b in enumerate(buffers):
            if b.dtype != torch.float32 or b.dim() != 2 or not b.is_contiguous():
                raise ValueError(
                    f"gradient of table '{names_fn()[i]}': the buffer must be a contiguous 2-D float32 "
                    f"tensor, got {b.dtype} of shape {tuple(b.shape)}"
                )

        def reference() -> None:
            for b, g, sl, p in zip(buffers, grads, slots_per_table, poolings):
                g = g if isinstance(g, torch.Tensor) else torch.cat(list(g), dim=1)
                b += ref.lookup_grad(b, lengths, indices, weights, g * grad_scale, sl, features_per_segment, batch, p)

        flat_grads = [x for g in grads for x in ([g] if isinstance(g, torch.Tensor) else g)]
        if not _on_cpu(*buffers, *flat_grads, lengths, indices, weights):
            return reference()
        self._check_index_dtype(indices, names_fn, n, "gradient")
        lengths, indices, weights, segments = self._check_common(
            names_fn, lengths, indices, weights, slots_per_table, features_per_segment, batch
        )
        prep = (
            self._prepare(
                "fwd",
                buffers,
                slots_per_table,
                poolings,
                None,
                indices.dtype,
                weights is not None,
                features_per_segment,
            )
            if n
            else None
        )
        if prep is None:  # no tables, or a shape the C kernels do not handle
            self._check_ids_torch(
                names_fn(), buffers, lengths, indices, weights, slots_per_table, features_per_segment, batch
            )
            return reference()
        nrows = segments * int(batch)
        slot_grads = []
        for i, (b, g, sl) in enumerate(zip(buffers, grads, slots_per_table)):
            slot_grads += _slot_blocks(g, nrows, int(b.shape[1]), len(sl), i, names_fn)
        self._call_grad(prep, slot_grads, lengths, indices, weights, features_per_segment, batch, grad_scale, names_fn)

    def lookup_update(
        self,
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
        optimizer: OptimizerArgs,
        grad_scale: float = 1.0,
    ) -> None:
        """Same signature and effect as `reference.lookup_update`."""
        self.fused_lookup_update(
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


# ---- process-wide instance -------------------------------------------------------------------

_DEFAULT: GeneratedKernels | None = None
_DEFAULT_LOCK = threading.Lock()


def default_kernels() -> GeneratedKernels:
    """A shared `GeneratedKernels` that builds what each call needs (cached on disk)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = GeneratedKernels()
        return _DEFAULT


def lookup(table, lengths, indices, weights, slots, features_per_segment, batch, pooling):
    return default_kernels().lookup(table, lengths, indices, weights, slots, features_per_segment, batch, pooling)


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
    return default_kernels().lookup_update(
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
        grad_scale,
    )


def fused_lookup(tables, lengths, indices, weights, slots_per_table, features_per_segment, batch, poolings):
    return default_kernels().fused_lookup(
        tables, lengths, indices, weights, slots_per_table, features_per_segment, batch, poolings
    )


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
):
    return default_kernels().fused_lookup_update(
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
        grad_scale,
    )


def pack(members, layout, batch, dtype):
    return default_kernels().pack(members, layout, batch, dtype)


def unpack(buffer, layout, batch, member_widths):
    return default_kernels().unpack(buffer, layout, batch, member_widths)
