"""Where a rank's memory goes: resident-set readings, peaks per phase, and the steady-state footprint by category.

Linux's `/proc/self/status` gives the resident set (VmRSS) and its peak (VmHWM); writing "5" to
`/proc/self/clear_refs` resets the peak to the current resident set, so one phase's peak is
measured on its own. Phases nest (the benchmark measures a whole compile while the compile
measures its export, shard taking, planning and build): a reset first folds the peak so far into
every open window (`PeakWindow`), so an outer window's peak is never lost to an inner reset.

`MemoryPhases` records a sequence of phases (`PhaseMemory`: the peak a phase added above the
resident set at its start, and what it still holds at its end); `CompiledModel.memory_phases`
holds the compile's. `footprint_by_category` says what a compiled rank holds in steady state,
as far as its own records know it (tables, optimizer state, dense parameters, exchange
buffers); the rest of the resident set (activations, autograd, kernels, the allocator's slack)
is what a reading adds on top.

Caveat: memory freed by an earlier phase into the allocator's heap and reused by a later one does
not show as growth; large tensors (tables) are mapped and unmapped by the allocator, so they show
in full.
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_MIB = 2**20


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


_OPEN: list[PeakWindow] = []  # the windows being measured now, outermost first


def reset_peak() -> bool:
    """Start a new peak at the current resident set, first folding the peak so far into every
    open window; False where the kernel does not allow it."""
    peak = peak_rss_bytes()
    if peak is not None:
        for window in _OPEN:
            window.folded = max(window.folded, peak)
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


@attrs.define
class PeakWindow:
    """The memory one stretch of work adds: `start()` before it, `stop()` after it (bytes;
    None if unknown). Windows nest."""

    # Collect garbage at the start and the end (a benchmark's windows: what a system leaves as
    # garbage is not what it holds). A compile's phases do not: a collection costs 0.1-0.2 s
    # with torch loaded, and it must not decide when the user's model is freed.
    collect: bool = True
    before: int | None = None
    peak: int | None = None  # the highest resident set during the window
    after: int | None = None
    folded: int = 0  # peaks inner resets cleared, folded in (`reset_peak`)
    phase_local: bool = False  # False: the peak since process start (clear_refs refused)

    def start(self) -> PeakWindow:
        if self.collect:
            gc.collect()
        self.phase_local = reset_peak()
        self.before = rss_bytes()
        _OPEN.append(self)
        return self

    def stop(self) -> PeakWindow:
        if self.collect:
            gc.collect()
        if self in _OPEN:
            _OPEN.remove(self)
        peak, self.after = peak_rss_bytes(), rss_bytes()
        self.peak = None if peak is None else max(peak, self.folded)
        return self

    @property
    def peak_added(self) -> int | None:
        if self.before is None or self.peak is None:
            return None
        return max(0, self.peak - self.before)

    @property
    def held(self) -> int | None:
        if self.before is None or self.after is None:
            return None
        return max(0, self.after - self.before)


@attrs.frozen
class PhaseMemory:
    """One phase of a rank's life: the peak it added above the resident set at its start, and
    what it still held at its end (MiB; None where `/proc` gives no reading)."""

    phase: str
    peak_added_mb: float | None
    held_mb: float | None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _mb(n: int | None) -> float | None:
    return None if n is None else round(n / _MIB, 1)


@attrs.define
class MemoryPhases:
    """A rank's phases in order (`phase(name)` measures one)."""

    phases: list[PhaseMemory] = attrs.Factory(list)
    collect: bool = False  # garbage collected around each phase (`PeakWindow.collect`)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        window = PeakWindow(collect=self.collect).start()
        try:
            yield
        finally:
            window.stop()
            self.phases.append(PhaseMemory(name, _mb(window.peak_added), _mb(window.held)))

    def to_list(self) -> list[dict[str, Any]]:
        return [p.to_dict() for p in self.phases]


def footprint_by_category(
    tables: Any, states: Any, dense: Any = (), shm: Any = None, step_buffers: Any = None
) -> dict[str, float]:
    """A compiled rank's steady-state footprint, MiB by category, from its own records: its table
    shards, its optimizer states, its dense parameters, the shared-memory arena it has reserved
    for exchanges so far (it grows to the largest exchanges in flight), and the buffers its plan
    declares for one step at the example batch (`passes.step_buffers.StepBuffers`)."""

    def size(tensors: Any) -> float:
        return sum(t.numel() * t.element_size() for t in tensors if t is not None) / _MIB

    out = {
        "tables": size(tables.values()),
        "optimizer_state": size(states.values()),
        "dense_parameters": size(dense),
        "exchange_buffers": (getattr(shm, "reserved", 0) or 0) / _MIB,
        "step_buffers": (step_buffers.total if step_buffers is not None else 0) / _MIB,
    }
    return {k: round(v, 1) for k, v in out.items()}


__all__ = [
    "MemoryPhases",
    "PeakWindow",
    "PhaseMemory",
    "footprint_by_category",
    "peak_rss_bytes",
    "reset_peak",
    "rss_bytes",
]
