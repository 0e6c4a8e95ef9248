"""Resident memory of this process, for the memory a benchmarked system adds to a rank.

Linux's `/proc/self/status` gives the resident set (VmRSS) and its peak (VmHWM); writing "5"
to `/proc/self/clear_refs` resets the peak to the current resident set, so the peak of one
phase (building a system: its tables, optimizer state, compile and calibration) is measured
on its own even though every system lives in the same process. `AddedMemory` records, for one
system, the peak above the resident memory before it was built and what it still holds after.

Caveat (recorded with the results): memory freed by an earlier phase into the allocator's heap
and reused by a later one does not show as growth; large tensors (tables) are mapped and
unmapped by the allocator, so they show in full.
"""

from __future__ import annotations

import gc
import re
from pathlib import Path

import attrs

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int | None:
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def rss_bytes() -> int | None:
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def peak_rss_bytes() -> int | None:
    kib = _status_kib("VmHWM")
    return None if kib is None else kib * 1024


def reset_peak() -> bool:
    """Start a new peak at the current resident set; False where the kernel does not allow it."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


@attrs.define
class AddedMemory:
    """The memory one phase adds: `start()` before it, `stop()` after it (MiB; None if unknown)."""

    before: int | None = None
    peak_mb: float | None = None
    resident_mb: float | None = None
    peak_is_phase_local: bool = False  # False: the peak since process start (clear_refs refused)

    def start(self) -> AddedMemory:
        gc.collect()
        self.peak_is_phase_local = reset_peak()
        self.before = rss_bytes()
        return self

    def stop(self) -> AddedMemory:
        gc.collect()
        peak, now = peak_rss_bytes(), rss_bytes()
        if self.before is not None and peak is not None and now is not None:
            self.peak_mb = round(max(0, peak - self.before) / 2**20, 1)
            self.resident_mb = round(max(0, now - self.before) / 2**20, 1)
        return self


__all__ = ["AddedMemory", "peak_rss_bytes", "reset_peak", "rss_bytes"]
