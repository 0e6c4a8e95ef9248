"""Resident memory of this process, for the memory a benchmarked system adds to a rank.

The readings and the nested peak windows are `sparselift.runtime.footprint`'s (a compile
measures its own phases inside a benchmark's window: the window keeps the peak those phases
reset). `AddedMemory` records, for one system, the peak above the resident memory before it
was built and what it still holds after, in MiB.

Caveat (recorded with the results): memory freed by an earlier phase into the allocator's heap
and reused by a later one does not show as growth; large tensors (tables) are mapped and
unmapped by the allocator, so they show in full.
"""

from __future__ import annotations

import attrs

from sparselift.runtime.footprint import PeakWindow, peak_rss_bytes, reset_peak, rss_bytes


@attrs.define
class AddedMemory:
    """The memory one phase adds: `start()` before it, `stop()` after it (MiB; None if unknown)."""

    window: PeakWindow = attrs.Factory(PeakWindow)
    peak_mb: float | None = None
    resident_mb: float | None = None

    @property
    def before(self) -> int | None:
        return self.window.before

    @property
    def peak_is_phase_local(self) -> bool:
        """False: the peak since process start (the kernel refused to reset it)."""
        return self.window.phase_local

    def start(self) -> AddedMemory:
        self.window.start()
        return self

    def stop(self) -> AddedMemory:
        self.window.stop()
        peak, held = self.window.peak_added, self.window.held
        self.peak_mb = None if peak is None else round(peak / 2**20, 1)
        self.resident_mb = None if held is None else round(held / 2**20, 1)
        return self


__all__ = ["AddedMemory", "peak_rss_bytes", "reset_peak", "rss_bytes"]
