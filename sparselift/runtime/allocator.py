"""Giving freed memory back to the OS after calibration.

The planner's calibration builds several candidate plans and runs steps of each; their buffers
are freed when it ends (`PlanTiming.release`), but glibc's allocator keeps freed heap memory for
reuse instead of returning it, so the rank's resident memory stays at calibration's high-water
mark. On DIN at real size on one rank that was 250 MB over the tables
(`sparselift compile` with the planner: 847 MB resident after build, 597 MB after
`malloc_trim`). `release_freed_memory` asks glibc to return it; elsewhere (another libc, another
OS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def release_freed_memory() -> bool:
    """Return the allocator's free heap memory to the OS; whether the allocator could."""
    trim = _malloc_trim()
    return bool(trim is not None and trim(0))


__all__ = ["release_freed_memory"]
