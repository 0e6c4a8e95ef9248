"""Per-step stage timing with the five columns of the paper's stage table.

Columns (milliseconds per step):

* ``sparse_fwd`` - embedding lookups plus input/output distribution in forward (exposed time:
  an all-to-all that overlaps dense compute only counts for the part spent waiting on it);
* ``other_fwd`` - dense forward (MLPs, interaction, loss);
* ``sparse_bwd`` - embedding backward, gradient exchange and the sparse optimizer update;
* ``other_bwd`` - dense backward, including DDP's gradient all-reduce;
* ``other`` - everything else in the step: dense optimizer step, zero_grad, data movement,
  pipeline bookkeeping.

The timer attributes wall time *exclusively* to the stage on top of a stack: ``push(stage)``
starts a nested stage (the outer one stops accruing), ``pop()`` returns to the outer one. Every
instant between :meth:`StageTimer.begin_step` and :meth:`StageTimer.end_step` is charged to
exactly one column, so the columns add up to the step's wall time. Boundaries are
``time.perf_counter()`` reads; an optional ``sync`` callable (e.g. ``torch.cuda.synchronize``)
is called at each boundary when device work is asynchronous. No timer, no cost: runners keep
``None`` when timing is off.

The backward split between dense and sparse work comes from autograd node hooks:
:func:`hook_backward_subgraph` registers a pre-hook (push) and a post-hook (pop) on every
autograd node reachable from the given tensors (the pooled embeddings), so the time autograd
spends executing those nodes is ``sparse_bwd`` and the rest of ``backward()`` is ``other_bwd``.

This module does not import torch at import time (the timer itself is pure Python).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "STAGES",
    "StageTimer",
    "StageTimes",
    "hook_backward_subgraph",
    "remove_hooks",
]

STAGES: tuple[str, ...] = ("sparse_fwd", "other_fwd", "sparse_bwd", "other_bwd", "other")


@attrs.define
class StageTimes:
    """One step's (or a summary's) five stage columns, in milliseconds."""

    sparse_fwd: float = 0.0
    other_fwd: float = 0.0
    sparse_bwd: float = 0.0
    other_bwd: float = 0.0
    other: float = 0.0

    @property
    def total(self) -> float:
        return self.sparse_fwd + self.other_fwd + self.sparse_bwd + self.other_bwd + self.other

    def as_dict(self, with_total: bool = True) -> dict[str, float]:
        d = {s: getattr(self, s) for s in STAGES}
        if with_total:
            d["total"] = self.total
        return d

    def values(self) -> tuple[float, ...]:
        return tuple(getattr(self, s) for s in STAGES)

    @classmethod
    def from_seconds(cls, seconds: Mapping[str, float]) -> StageTimes:
        """From a ``{stage: seconds}`` mapping (missing stages are 0), e.g. the compiled
        module's ``stage_times`` entries."""
        unknown = set(seconds) - set(STAGES)
        if unknown:
            raise ValueError(f"unknown stages {sorted(unknown)}; expected some of {STAGES}")
        return cls(*(float(seconds.get(s, 0.0)) * 1e3 for s in STAGES))

    @classmethod
    def median(cls, records: Sequence[StageTimes]) -> StageTimes:
        """Column-wise median (the columns of the result need not add up to the median total)."""
        if not records:
            raise ValueError("median of no stage records")
        return cls(*(statistics.median(getattr(r, s) for r in records) for s in STAGES))

    @classmethod
    def mean(cls, records: Sequence[StageTimes]) -> StageTimes:
        if not records:
            raise ValueError("mean of no stage records")
        return cls(*(statistics.fmean(getattr(r, s) for r in records) for s in STAGES))


class StageTimer:
    """Stack-based exclusive stage timer; one :class:`StageTimes` record per step.

    Usage::

        timer = StageTimer()
        timer.begin_step()                 # charges "other" until something else is pushed
        with timer.stage("sparse_fwd"):
            ...
        timer.start("other_fwd"); ...; timer.stop()
        record = timer.end_step()
        timer.summary(skip=1)              # column-wise median over the recorded steps

    Calls outside a step (between ``end_step`` and the next ``begin_step``) are ignored, so code
    instrumented with a timer can also run untimed (e.g. during warmup or tracing).
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        sync: Callable[[], Any] | None = None,
    ) -> None:
        self._clock = clock
        self._sync = sync
        self.steps: list[StageTimes] = []
        self._stack: list[str] = []
        self._acc: dict[str, float] = {}
        self._t = 0.0

    # -- step boundaries -------------------------------------------------------------------------

    @property
    def in_step(self) -> bool:
        return bool(self._stack)

    def begin_step(self, stage: str = "other") -> None:
        _check(stage)
        if self._stack:
            raise RuntimeError("begin_step inside a step (missing end_step)")
        self._acc = dict.fromkeys(STAGES, 0.0)
        self._stack = [stage]
        self._t = self._now()

    def end_step(self) -> StageTimes:
        if not self._stack:
            raise RuntimeError("end_step without begin_step")
        self._charge()
        self._stack = []
        rec = StageTimes(*(self._acc[s] * 1e3 for s in STAGES))
        self.steps.append(rec)
        return rec

    def abort_step(self) -> None:
        """Drop the step in progress (e.g. when the step raised)."""
        self._stack = []

    # -- stages ----------------------------------------------------------------------------------

    def push(self, stage: str) -> None:
        if not self._stack:
            return
        _check(stage)
        self._charge()
        self._stack.append(stage)

    def pop(self) -> None:
        if len(self._stack) <= 1:  # outside a step, or an unmatched pop: never drop the base stage
            return
        self._charge()
        self._stack.pop()

    start = push
    stop = pop

    def switch(self, stage: str) -> None:
        """Replace the current stage (top of stack) with ``stage``."""
        if not self._stack:
            return
        _check(stage)
        self._charge()
        self._stack[-1] = stage

    @contextmanager
    def stage(self, stage: str) -> Iterator[None]:
        self.push(stage)
        try:
            yield
        finally:
            self.pop()

    @property
    def current(self) -> str | None:
        return self._stack[-1] if self._stack else None

    # -- summaries -------------------------------------------------------------------------------

    def summary(self, skip: int = 0) -> StageTimes:
        """Column-wise median over the recorded steps, skipping the first ``skip`` (warmup)."""
        return StageTimes.median(self.steps[skip:])

    def reset(self) -> None:
        self.steps.clear()
        self._stack = []

    # -- internals -------------------------------------------------------------------------------

    def _now(self) -> float:
        if self._sync is not None:
            self._sync()
        return self._clock()

    def _charge(self) -> None:
        t = self._now()
        self._acc[self._stack[-1]] += t - self._t
        self._t = t


def _check(stage: str) -> None:
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; expected one of {STAGES}")


def hook_backward_subgraph(timer: StageTimer, roots: Iterable[Tensor], stage: str = "sparse_bwd") -> list[Any]:
    """Charge autograd's execution of every node reachable from ``roots`` to ``stage``.

    ``roots`` are forward tensors whose producing subgraph is all sparse (e.g. the pooled
    embeddings after the output all-to-all): each node of that subgraph (all-to-all backward,
    embedding-bag backward, gradient accumulation, fused-optimizer kernels) gets a pre-hook that
    pushes ``stage`` and a post-hook that pops it. Returns the hook handles; pass them to
    :func:`remove_hooks` after ``backward()``.
    """
    _check(stage)
    seen: set[Any] = set()
    todo = [t.grad_fn for t in roots if getattr(t, "grad_fn", None) is not None]
    handles: list[Any] = []

    def pre(*_: Any) -> None:
        timer.push(stage)

    def post(*_: Any) -> None:
        timer.pop()

    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        handles.append(node.register_prehook(pre))
        handles.append(node.register_hook(post))
        todo.extend(n for n, _ in node.next_functions if n is not None)
    return handles


def remove_hooks(handles: Iterable[Any]) -> None:
    for h in handles:
        h.remove()
