"""The C kernel backend (`CKernels`) for the CPU sparse ops: build, cache, load (ctypes) and call.

`CKernels` is the `kernel_args.KernelBackend` a plan with generated kernels holds when its
tables are on the CPU: `lookup`, `lookup_update` and `lookup_grad` over several tables in one
C call each, `pack` / `unpack`, the rows ops, and `concat_ids`. It extends the reference backend
(`runtime.backends.ReferenceKernels`), which runs what the C kernels do not cover (a dtype,
tensors off the CPU).

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

Safety: before any C call the inputs pass the checks every backend shares
(`kernel_args.check_bags`, `check_grads`, `check_states`), and the C entry points check the
bag lengths (non-negative, summing to the number of ids) and every id a table reads
(`0 <= id < rows`) before writing anything; a failure raises `ValueError` naming the table and
leaves tables and states unchanged. ctypes releases the GIL during the calls.

Parts: `kernel_library` (toolchain probe, loading a .so), `kernel_checks` (specs, error codes),
`kernel_calls` (the multi-table C calls) and `kernel_buffers` (`concat_ids`, `pack`, `unpack`,
the rows ops).
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
from sparselift.kernel_args import (
    RoutedBags,
    TableArgs,
    UpdateArgs,
    check_bags,
    check_grads,
    check_ids,
    check_outputs,
    check_states,
)
from sparselift.optim_rules import rule_for
from sparselift.runtime import reference as ref
from sparselift.runtime.backends import with_weight
from sparselift.runtime.kernel_buffers import BufferOps
from sparselift.runtime.kernel_calls import CCalls
from sparselift.runtime.kernel_checks import (
    _STORAGE,
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

__all__ = [
    "TableSpec",
    "CKernels",
    "KernelBuildError",
    "build_library",
    "cache_dir",
    "default_kernels",
    "spec_for",
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


class CKernels(CCalls, BufferOps):
    """The C kernel backend of one plan.

    `specs`: the `TableSpec`s to build up front (a plan knows its tables); a call that needs
    another spec rebuilds (or reuses from the cache) a library covering both. `table_kinds`:
    tables whose (dim, dtype) an on-demand build also covers; `nthreads` (default: torch's
    intra-op thread count at call time) is the OpenMP thread count of the C calls.
    """

    name = "c"

    def __init__(
        self,
        specs: Iterable[TableSpec] = (),
        *,
        cache: str | os.PathLike | None = None,
        nthreads: int | None = None,
        table_kinds: Iterable[torch.Tensor] = (),
        codegen_options: Mapping[str, int] | None = None,
    ):
        self._cache = cache
        self._options = dict(codegen_options or {})
        self.nthreads = nthreads
        self._lock = threading.Lock()
        self._lib: _Library | None = None
        self._prepared: dict = {}
        self._named_kinds = {
            (int(t.shape[1]), _STORAGE[t.dtype])
            for t in table_kinds
            if t.dim() == 2 and t.dtype in _STORAGE and 1 <= t.shape[1] <= 4096
        }
        self.rebuilt = False
        self.build_seconds = 0.0
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

    # -- the table ops --

    def lookup(
        self, bags: RoutedBags, tables: Sequence[TableArgs], out: Sequence[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """Every table's pooled bags in one C call; `out`: where to write them (2-D, the table's
        dtype, unit column stride, e.g. column blocks of one exchange buffer), returned as given."""
        if not _on_cpu(bags.lengths, bags.indices, bags.weights, *(t.weight for t in tables)):
            return super().lookup(bags, tables, out)
        check_outputs(tables, out, "lookup")
        checked = check_bags(bags, tables, "lookup")
        if not all(t.weight.is_contiguous() for t in tables):
            tables = [with_weight(t, t.weight.contiguous()) for t in tables]
        prep = self._prepare("fwd", tables, None, checked) if tables else None
        if prep is None:  # no tables, or a dtype the C kernels do not handle
            check_ids(checked, tables, "lookup")
            return self._reference_lookup(checked, tables, out)
        outs = _lookup_outputs(tables, checked.rows, out)
        self._call_forward(prep, outs, checked, tables)
        return outs

    def lookup_update(
        self, bags: RoutedBags, tables: Sequence[TableArgs], grads: Sequence[torch.Tensor], update: UpdateArgs
    ) -> None:
        """Every table's update by one optimizer group in one C call (all or nothing on bad input)."""
        states = [t.state for t in tables]
        if not _on_cpu(bags.lengths, bags.indices, bags.weights, *(t.weight for t in tables), *states, *grads):
            return super().lookup_update(bags, tables, grads, update)
        checked = check_bags(bags, tables, "update")
        check_grads(tables, grads, checked.rows, "update")
        kind = update.optimizer.kind
        check_states(tables, kind, "update")
        for t in tables:
            if not t.weight.is_contiguous():
                raise ValueError(f"update of table '{t.name}': the table must be contiguous to be updated in place")
        prep = self._prepare("upd", tables, str(kind), checked) if tables else None
        if prep is None:  # no tables, or a dtype the C kernels do not handle
            check_ids(checked, tables, "update")
            for t, g in zip(tables, grads):
                ref.lookup_update(checked, t, g, update)
            return
        gs = [_rows_apart(g, torch.float32) for g in grads]  # a column block of the received buffer: in place
        stateful = rule_for(kind).states
        pointers = [t.state.data_ptr() if stateful and t.state is not None else 0 for t in tables]
        threads = self._threads()
        if threads > 1 and len({t.weight.data_ptr() for t in tables}) < len(tables):
            threads = 1  # one table listed twice: update in order, never concurrently
        self._call_update(prep, gs, pointers, checked, tables, update, threads)

    def lookup_grad(
        self,
        bags: RoutedBags,
        tables: Sequence[TableArgs],
        grads: Sequence[torch.Tensor | Sequence[torch.Tensor]],
        out: Sequence[torch.Tensor],
        grad_scale: float = 1.0,
    ) -> None:
        """Add every table's whole-table gradient into `out` (zeroed float32, one per table, of
        its shape) in one C call: all or nothing on bad input. A table's gradient is one
        `[rows, dim x slots]` tensor, or one `[rows, dim]` tensor per slot (read where the
        dense backward left them, without packing them first)."""
        check_outputs(tables, out, "gradient")
        flat_grads = [x for g in grads for x in ([g] if isinstance(g, torch.Tensor) else g)]
        on_cpu = _on_cpu(bags.lengths, bags.indices, bags.weights, *out, *flat_grads)
        if not on_cpu or any(t.weight.dtype != torch.float32 for t in tables):
            return super().lookup_grad(bags, tables, grads, out, grad_scale)
        for t, o in zip(tables, out):
            if o.dtype != torch.float32 or tuple(o.shape) != tuple(t.weight.shape) or not o.is_contiguous():
                raise ValueError(
                    f"gradient of table '{t.name}': the buffer must be a contiguous float32 tensor of shape "
                    f"{tuple(t.weight.shape)}, got {o.dtype} of shape {tuple(o.shape)}"
                )
        checked = check_bags(bags, tables, "gradient")
        check_grads(tables, grads, checked.rows, "gradient", per_slot_form=True)
        buffers = [with_weight(t, o) for t, o in zip(tables, out)]  # the kernels add into them
        prep = self._prepare("fwd", buffers, None, checked) if tables else None
        if prep is None:
            return super().lookup_grad(bags, tables, grads, out, grad_scale)
        blocks = [b for t, g in zip(tables, grads) for b in _slot_blocks(g, t)]
        self._call_grad(prep, blocks, checked, buffers, grad_scale)

    def gather_rows(self, table: TableArgs, indices: torch.Tensor) -> torch.Tensor:
        """The generated lookup over one-id bags: the same rows as `index_select`, read with
        software prefetch (the ids are random rows of a big table: `index_select` waits on
        every miss)."""
        if not _on_cpu(table.weight, indices):
            return super().gather_rows(table, indices)
        one = TableArgs(table.name, table.weight, (0,), "sum")
        return self.lookup(RoutedBags.one_id_each(indices), [one])[0]


def _lookup_outputs(tables: Sequence[TableArgs], nrows: int, out) -> list[torch.Tensor]:
    """`lookup`'s outputs: new tensors, or the given `out` once each is checked."""
    if out is None:
        return [torch.empty(nrows, t.width, dtype=t.weight.dtype) for t in tables]
    outs = list(out)
    for x, t in zip(outs, tables):
        if not _is_rows_apart(x, t.weight.dtype) or tuple(x.shape) != (nrows, t.width) or not _on_cpu(x):
            raise ValueError(
                f"lookup of table '{t.name}': output of shape {tuple(x.shape)}, dtype {x.dtype}, strides "
                f"{x.stride()}; expected ({nrows}, {t.width}) {t.weight.dtype} rows"
            )
    return outs


_DEFAULT: CKernels | None = None
_DEFAULT_LOCK = threading.Lock()


def default_kernels() -> CKernels:
    """A shared `CKernels` that builds what each call needs (cached on disk)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = CKernels()
        return _DEFAULT
