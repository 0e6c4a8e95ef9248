"""The host allocator: freed memory back to the OS after calibration, or kept for every step.

The planner's calibration builds several candidate plans and runs steps of each; their buffers
are freed when it ends (`PlanTiming.release`), but glibc's allocator keeps freed heap memory for
reuse instead of returning it, so the rank's resident memory stays at calibration's high-water
mark. On DIN at real size on one rank that was 250 MB over the tables
(`sparselift compile` with the planner: 847 MB resident after build, 597 MB after
`malloc_trim`). `release_freed_memory` asks glibc to return it; elsewhere (another libc, another
OS) it does nothing.

The opposite is what a steady training step wants. With glibc's defaults every block over
32 MB is a fresh mapping and freed heap memory above 128 KB at the heap's top goes back to the
OS, so each step faults its big temporaries in again, page by page: on DIN at real size
(`bench seq`) 30k-55k page faults a rank a step, and a different number on each rank, which
the step's collectives then wait for. `retain_freed_memory` keeps freed memory for reuse
(process-wide, from then on: glibc `mallopt`); `release_freed_memory` still trims on request.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc(function: str):
    """glibc's `function` (`malloc_trim`, `mallopt`), or None under another libc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), function)
    except (OSError, AttributeError):  # not glibc
        return None


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def retain_freed_memory() -> bool:
    """Keep freed heap memory for reuse instead of giving it back after each step; whether the
    allocator could. Process-wide and for the rest of the process: every block comes from the
    heap (no per-block mappings) and a free never trims it. Resident memory then stays at the
    process's high-water mark until `release_freed_memory`."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def release_freed_memory() -> bool:
    """Return the allocator's free heap memory to the OS; whether the allocator could."""
    trim = _libc("malloc_trim")
    return bool(trim is not None and trim(0))


__all__ = ["release_freed_memory", "retain_freed_memory"]
