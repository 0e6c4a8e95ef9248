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
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import json
import logging
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch

from sparselift import cache as cache_files
from sparselift.codegen import c_abi, ckernels
from sparselift.codegen.ckernels import ERROR_CODES, TableSpec
from sparselift.runtime import reference as ref

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

_STORAGE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_INDEX = {torch.int32: "i32", torch.int64: "i64"}
_BASE_FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-shared", "-fPIC", "-Wno-unknown-pragmas")


class KernelBuildError(RuntimeError):
    """The C compiler failed (the message holds its output)."""


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """Where the C kernels live: the `ckernels` directory of the cache (`sparselift.cache`)."""
    return cache_files.cache_dir(override, "ckernels")


def _compiler() -> str:
    return os.environ.get("SPARSELIFT_CC", "cc")


_TOOLCHAIN: dict[str, dict] = {}
_TOOLCHAIN_LOCK = threading.Lock()


def _cpu_fingerprint() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        import platform

        return platform.machine() + platform.processor()
    keep = []
    for line in text.splitlines():
        key = line.split(":", 1)[0].strip()
        if key in ("model name", "flags", "Features", "CPU part") and line not in keep:
            keep.append(line)
    return "\n".join(keep)


def _toolchain(root: Path) -> dict:
    """Compiler version, CPU fingerprint and the flags that work (probed once, cached on disk)."""
    cc = _compiler()
    with _TOOLCHAIN_LOCK:
        if cc in _TOOLCHAIN:
            return _TOOLCHAIN[cc]
        try:
            version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise KernelBuildError(f"cannot run the C compiler '{cc}': {e}") from e
        version = version.strip().splitlines()[0] if version.strip() else cc
        cpu = hashlib.sha256(_cpu_fingerprint().encode()).hexdigest()[:16]
        probe_key = hashlib.sha256(f"{cc}\0{version}\0{cpu}\0probe-v1".encode()).hexdigest()[:16]
        root.mkdir(parents=True, exist_ok=True)
        probe_file = root / f"toolchain_{probe_key}.json"
        info = None
        if probe_file.exists():
            try:
                info = json.loads(probe_file.read_text())
            except (OSError, ValueError):
                info = None
        if info is None:
            info = {
                "version": version,
                "cpu": cpu,
                "openmp": _probe(
                    cc, root, "#include <omp.h>\nint f(void){return omp_get_max_threads();}\n", ["-fopenmp"]
                ),
                "f16": _probe(
                    cc,
                    root,
                    "typedef _Float16 h8 __attribute__((vector_size(16)));\n"
                    "typedef float f8 __attribute__((vector_size(32)));\n"
                    "f8 f(h8 x){return __builtin_convertvector(x, f8);}\n",
                    [],
                ),
            }
            cache_files.atomic_write(probe_file, json.dumps(info))
        _TOOLCHAIN[cc] = info
        return info


def _probe(cc: str, root: Path, src: str, flags: list[str]) -> bool:
    with tempfile.TemporaryDirectory(dir=root) as d:
        c = Path(d) / "probe.c"
        c.write_text(src)
        try:
            r = subprocess.run(
                [cc, *_BASE_FLAGS, *flags, str(c), "-o", str(Path(d) / "probe.so")],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return r.returncode == 0


# ---- libraries ------------------------------------------------------------------------------

# The ctypes of the C types `c_abi.ENTRY_POINTS` uses; every pointer travels as a void*.
_CTYPES = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "float": ctypes.c_float, "void": None}


def _ctype(c_type: str):
    return ctypes.c_void_p if c_type.endswith("*") else _CTYPES[c_type]


def _bind(lib: ctypes.CDLL) -> None:
    """Every entry point's `argtypes` / `restype`, from the interface's one description."""
    for entry in c_abi.ENTRY_POINTS:
        fn = getattr(lib, entry.name)
        fn.restype = _ctype(entry.restype)
        fn.argtypes = [_ctype(a.ctype) for a in entry.args]


class _Library:
    """One compiled .so and the kernel numbers of its specs."""

    def __init__(self, specs: Sequence[TableSpec], path: Path, openmp: bool):
        self.specs = frozenset(specs)
        self.path = path
        self.openmp = openmp
        self.fwd_numbers, self.upd_numbers = ckernels.kernel_numbers(specs)
        lib = ctypes.CDLL(str(path))
        _bind(lib)
        if lib.sl_abi_version() != c_abi.ABI_VERSION:
            raise KernelBuildError(f"{path}: ABI version mismatch")
        self.lib = lib

    def covers(self, specs: Iterable[TableSpec]) -> bool:
        return all(
            (s.forward_key in self.fwd_numbers) and (s.optimizer is None or s in self.upd_numbers) for s in specs
        )


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


# ---- argument checking ----------------------------------------------------------------------


def spec_for(
    table: torch.Tensor, index_dtype: torch.dtype, pooling: str, weighted: bool, optimizer: str | None = None
) -> TableSpec | None:
    """The kernel spec for a table, or None when the C kernels do not handle its dtype."""
    if table.dim() != 2 or table.dtype not in _STORAGE or table.shape[1] < 1 or table.shape[1] > 4096:
        return None
    return TableSpec(int(table.shape[1]), _STORAGE[table.dtype], _INDEX[index_dtype], pooling, weighted, optimizer)


def _on_cpu(*tensors) -> bool:
    return all(t is None or t.device.type == "cpu" for t in tensors)


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
        states, lengths, indices, weights, grads, slots_per_table, fps, batch, poolings, kinds, lr, eps, gs = args
        n = len(tables)
        poolings = [poolings] * n if isinstance(poolings, str) else poolings
        kinds = [kinds] * n if isinstance(kinds, str) else kinds
        for t, st, g, sl, p, k in zip(tables, states, grads, slots_per_table, poolings, kinds):
            ref.lookup_update(t, st, lengths, indices, weights, g, sl, fps, batch, p, k, lr, eps, gs)

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


def _is_rows_apart(x: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the kernels can read or write `x` in place: 2-D, `dtype`, unit column stride, rows
    at least a row apart (a column block of a wider buffer)."""
    return x.dtype == dtype and x.dim() == 2 and x.stride(1) == 1 and x.stride(0) >= x.shape[1]


def _rows_apart(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x` itself when the kernels can use it in place (`_is_rows_apart`), else a dense copy."""
    return x if _is_rows_apart(x, dtype) else x.to(dtype).contiguous()


def _addr_array(ctype, values: Sequence[int]):
    arr = (ctype * max(len(values), 1))(*values)
    return arr, ctypes.addressof(arr)


class GeneratedKernels:
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

    @classmethod
    def for_tables(
        cls,
        tables: Mapping[str, torch.Tensor],
        *,
        pooling: str | Mapping[str, str] = "sum",
        weighted: bool | Mapping[str, bool] = False,
        optimizer: str | None | Mapping[str, str | None] = None,
        index_dtype: torch.dtype = torch.int64,
        **kwargs,
    ) -> GeneratedKernels:
        """Build the forward (and, with an optimizer, update) kernels of named tables."""
        specs = set()
        for name, t in tables.items():
            p = pooling[name] if isinstance(pooling, Mapping) else pooling
            w = weighted[name] if isinstance(weighted, Mapping) else weighted
            o = optimizer.get(name) if isinstance(optimizer, Mapping) else optimizer
            spec = spec_for(t, index_dtype, p, bool(w), o)
            if spec is not None:
                specs.add(spec)
        return cls(specs, table_names=tables, **kwargs)

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

    # -- shared input checks --

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

    # -- the ops --

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
        specs = [
            spec_for(t, index_dtype, p, weighted, k) for t, p, k in zip(tables, poolings, kinds or [None] * len(tables))
        ]
        if any(s is None for s in specs):
            return None
        lib = self._ensure(set(specs))
        numbers = [lib.fwd_numbers[s.forward_key] if kind == "fwd" else lib.upd_numbers[s] for s in specs]
        slot_off, flat = [0], []
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
        nrows = segments * int(batch)
        if out is None:
            outs = [torch.empty(nrows, w, dtype=t.dtype) for t, w in zip(tables, prep["widths"])]
        else:
            outs = list(out)
            if len(outs) != n:
                raise ValueError(f"fused_lookup: {len(outs)} outputs for {n} tables")
            for i, (x, t, w) in enumerate(zip(outs, tables, prep["widths"])):
                if not _is_rows_apart(x, t.dtype) or tuple(x.shape) != (nrows, w) or not _on_cpu(x):
                    raise ValueError(
                        f"lookup of table '{names_fn()[i]}': output of shape {tuple(x.shape)}, dtype "
                        f"{x.dtype}, strides {x.stride()}; expected ({nrows}, {w}) {t.dtype} rows"
                    )
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
        kinds: Sequence[str] | str,
        lr: float,
        eps: float,
        grad_scale: float = 1.0,
        names: Sequence[str] | None = None,
    ) -> None:
        """`reference.lookup_update` of several tables in one C call (all or nothing on bad input)."""
        tables = list(tables)
        n = len(tables)
        kinds = [kinds] * n if isinstance(kinds, str) else list(kinds)
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
                kinds,
                lr,
                eps,
                grad_scale,
                names=names_fn(),
            )
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
        nrows = segments * int(batch)
        gs, sp = [], []
        for i, (t, st, g, sl, k) in enumerate(zip(tables, states, grads, slots_per_table, kinds)):
            want = (nrows, t.shape[1] * len(sl))
            if g.dim() != 2 or g.shape[0] != want[0] or g.shape[1] != want[1]:
                raise ValueError(
                    f"update of table '{names_fn()[i]}': gradient of shape {tuple(g.shape)}, expected {want}"
                )
            gs.append(_rows_apart(g, torch.float32))  # a column block of the received buffer: in place
            if k == "rowwise_adagrad":
                if st is None or st.dtype != torch.float32 or st.numel() != t.shape[0] or not st.is_contiguous():
                    raise ValueError(
                        f"update of table '{names_fn()[i]}': row-wise Adagrad needs a contiguous float32 "
                        f"state of {t.shape[0]} entries"
                    )
                sp.append(st.data_ptr())
            else:
                sp.append(0)
        if prep is None:  # no tables, or a dtype the C kernels do not handle: the reference lowering
            self._check_ids_torch(
                names_fn(), tables, lengths, indices, weights, slots_per_table, features_per_segment, batch
            )
            for t, st, g, sl, p, k in zip(tables, states, grads, slots_per_table, poolings, kinds):
                ref.lookup_update(
                    t, st, lengths, indices, weights, g, sl, features_per_segment, batch, p, k, lr, eps, grad_scale
                )
            return
        threads = self._threads()
        if threads > 1 and len({t.data_ptr() for t in tables}) < n:
            threads = 1  # one table listed twice: update in order, never concurrently
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
            float(lr),
            float(eps),
            float(grad_scale),
            threads,
            ctypes.addressof(err),
        )
        if rc:
            self._raise(err, names_fn(), lengths, indices, prep["rows"], "update")

    def fused_lookup_grad(
        self,
        buffers: Sequence[torch.Tensor],
        lengths: torch.Tensor,
        indices: torch.Tensor,
        weights: torch.Tensor | None,
        grads: Sequence[torch.Tensor],
        slots_per_table: Sequence[Sequence[int]],
        features_per_segment: int,
        batch: int,
        poolings: Sequence[str] | str,
        grad_scale: float = 1.0,
        names: Sequence[str] | None = None,
    ) -> None:
        """Add `reference.lookup_grad` of several tables into `buffers` (zeroed float32, one per
        table, of its shape), in one C call: all or nothing on bad input."""
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
                b += ref.lookup_grad(b, lengths, indices, weights, g * grad_scale, sl, features_per_segment, batch, p)

        if not _on_cpu(*buffers, *grads, lengths, indices, weights):
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
        gs = []
        for i, (b, g, sl) in enumerate(zip(buffers, grads, slots_per_table)):
            want = (nrows, b.shape[1] * len(sl))
            if g.dim() != 2 or tuple(g.shape) != want:
                raise ValueError(
                    f"gradient of table '{names_fn()[i]}': pooled gradient of shape {tuple(g.shape)}, expected {want}"
                )
            gs.append(_rows_apart(g, torch.float32))  # a column slice of the interaction's gradient: in place
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
        kind: str,
        lr: float,
        eps: float,
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
            [kind],
            lr,
            eps,
            grad_scale,
        )

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

    def _copy(self, descs: list[int]) -> None:
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
                    x = members[m]
                    x = x.reshape(x.shape[0], -1) if x.dim() else x.reshape(1, 1)
                    x = x.to(dtype).contiguous()
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
                    x.data_ptr() + row0 * size * esz,
                    size * esz,
                    size * esz,
                    batch,
                ]
            start += batch * widths[s]
        self._copy(descs)
        return buf

    def unpack(
        self,
        buffer: torch.Tensor,
        layout: Sequence[Sequence[tuple[int, int]]],
        batch: int,
        member_widths: Sequence[int],
    ) -> list[torch.Tensor]:
        """Same signature and result as `reference.unpack` (jagged layouts use the reference)."""
        if any(off < 0 or size < 0 for seg in layout for off, size in seg) or not _on_cpu(buffer):
            return ref.unpack(buffer, layout, batch, member_widths)
        batch = int(batch)
        widths = [sum(size for off, size in seg) for seg in layout]
        starts = [0]
        for w in widths:
            starts.append(starts[-1] + w * batch)
        if buffer.dim() != 1 or buffer.numel() < starts[-1]:
            raise ValueError(f"unpack: buffer of shape {tuple(buffer.shape)}, the layout needs {starts[-1]} elements")
        buffer = buffer.contiguous()
        esz = buffer.element_size()
        out, descs = [], []
        for m, width in enumerate(member_widths):
            parts = [(s, seg[m]) for s, seg in enumerate(layout) if seg[m][1] > 0]
            if not parts:
                out.append(torch.empty(0, width, dtype=buffer.dtype))
                continue
            sizes = {size for _, (_, size) in parts}
            if len(sizes) != 1:
                raise ValueError(f"unpack: member {m} has different sizes across segments: {sorted(sizes)}")
            size = sizes.pop()
            total = batch * size * len(parts)
            if width <= 0 or total % width:
                raise ValueError(f"unpack: member {m} of width {width} cannot hold {total} elements")
            o = torch.empty(total, dtype=buffer.dtype)
            pos = 0
            for s, (off, sz) in parts:
                if batch:
                    descs += [
                        o.data_ptr() + pos * esz,
                        sz * esz,
                        buffer.data_ptr() + (starts[s] + off) * esz,
                        widths[s] * esz,
                        sz * esz,
                        batch,
                    ]
                pos += batch * sz
            out.append(o.reshape(-1, width))
        self._copy(descs)
        return out


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
    kind,
    lr,
    eps,
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
        kind,
        lr,
        eps,
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
    kinds,
    lr,
    eps,
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
        kinds,
        lr,
        eps,
        grad_scale,
    )


def pack(members, layout, batch, dtype):
    return default_kernels().pack(members, layout, batch, dtype)


def unpack(buffer, layout, batch, member_widths):
    return default_kernels().unpack(buffer, layout, batch, member_widths)
