"""Where SparseLift keeps its cache files (plans, plan records, C kernels) and how it writes them.

Torch-free and stdlib-only, so `sparselift.codegen` and `sparselift.runtime` share it.

- `cache_dir(override, *parts)`: the cache root is `override` (e.g. `CompileOptions.cache_dir`),
  else `$SPARSELIFT_CACHE_DIR`, else `~/.cache/sparselift`; `parts` name a subdirectory
  (the C kernels live in `ckernels/`). The directory is created.
- `atomic_write(path, data)` / `atomic_output(path)`: a file appears under its final name only
  complete. Several ranks (processes) may build or write the same cache entry at once: each
  writes its own temporary file in the target's directory and renames it into place
  (`os.replace`, atomic on POSIX), so a reader sees either no file or a whole one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_dir", "atomic_output", "atomic_write"]

CACHE_ENV = "SPARSELIFT_CACHE_DIR"


def cache_dir(override: str | os.PathLike | None = None, *parts: str) -> Path:
    """The cache directory (created): `override`, else `$SPARSELIFT_CACHE_DIR`, else
    `~/.cache/sparselift`, then the subdirectory `parts`."""
    root = override or os.environ.get(CACHE_ENV) or (Path.home() / ".cache" / "sparselift")
    path = Path(root).joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """A fresh temporary path next to `path` for the caller (or a compiler it runs) to write;
    renamed to `path` when the block exits normally, removed when it raises."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) to `path` so that readers never see a partial file."""
    with atomic_output(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        tmp.chmod(0o644)  # mkstemp's 0600 would hide a shared cache's files from other users
