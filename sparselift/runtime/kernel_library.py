"""Build-side support of the generated C kernels: the toolchain (compiler, CPU, probed flags) and loading a .so.

`sparselift.runtime.kernels.build_library` compiles a set of `TableSpec`s with these pieces and caches
the result; `_Library` is one loaded library (ctypes signatures from `sparselift.codegen.c_abi`).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import cast

from sparselift import cache as cache_files
from sparselift.codegen import c_abi, ckernels
from sparselift.codegen.ckernels import TableSpec

# -fno-math-errno: sqrtf need not set errno, so an optimizer's per-element loop vectorizes (the
# results are the same: a negative argument never reaches it).
_BASE_FLAGS = (
    "-O3",
    "-march=native",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-shared",
    "-fPIC",
    "-Wno-unknown-pragmas",
)


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


def _structure(struct: c_abi.Struct) -> type[ctypes.Structure]:
    """The ctypes layout of one of the interface's records (same fields, same order)."""
    fields = [(f.name, _ctype(f.ctype)) for f in struct.fields]
    return cast("type[ctypes.Structure]", type(struct.name, (ctypes.Structure,), {"_fields_": fields}))


STRUCTURES = {struct.name: _structure(struct) for struct in c_abi.STRUCTS}
"""`c_abi.STRUCTS` as `ctypes.Structure`s, by C name (`sl_tables`, `sl_bags`)."""


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
