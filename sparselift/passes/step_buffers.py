"""The buffers a lifted step declares, per rank: what one step allocates beyond the tables.

An analysis of the step's SRSV (`sparselift.passes.srsv`), at the step's `batch` (the example
batch's) and its features' pooling factors, kept apart from the passes that rewrite the IR:

- `exchanges`: every collective's send and receive buffers on this rank (the bytes it sends to
  the other ranks of the group, and receives from them);
- `gathered_rows`: the rows the unpooled lookups of the tables this rank owns gather (a pooled
  lookup sums rows as it reads them: it holds no gathered rows);
- `outputs`: those lookups' pooled (or unpooled) outputs, one slot per feature served.

The sizes are upper-bound readings of one step's transient buffers (they assume every buffer is
alive at once); they scale with the local batch. The compiler checks them, with the shards and
optimizer state, against `CompileOptions(memory_cap_bytes=...)` before allocating anything;
`compiled.plan.footprint` shows them; the memory test bounds a rank's resident set by them.
"""

from __future__ import annotations

import attrs
from xdsl.dialects.builtin import ModuleOp

from sparselift.passes.srsv import SRSV, build_srsv, steps_of

__all__ = ["StepBuffers", "declared_buffers", "step_buffers"]


@attrs.frozen
class StepBuffers:
    """Bytes of one step's declared buffers on one rank, by kind."""

    exchanges: int = 0
    gathered_rows: int = 0
    outputs: int = 0

    @property
    def total(self) -> int:
        return self.exchanges + self.gathered_rows + self.outputs

    def __add__(self, other: StepBuffers) -> StepBuffers:
        return StepBuffers(
            self.exchanges + other.exchanges,
            self.gathered_rows + other.gathered_rows,
            self.outputs + other.outputs,
        )

    def scaled(self, factor: float) -> StepBuffers:
        """The same buffers at `factor` times the batch (every kind grows with it)."""
        return StepBuffers(*(round(getattr(self, f.name) * factor) for f in attrs.fields(StepBuffers)))


def step_buffers(srsv: SRSV, rank: int) -> StepBuffers:
    """What `srsv`'s step declares on `rank`."""
    exchanges = 0
    for c in srsv.collectives:
        if rank in c.group_ranks:
            position = c.group_ranks.index(rank)
            exchanges += c.sent_bytes(position) + c.received_bytes(position)
    owned = [t for t in srsv.tables if rank in t.owner_ranks]
    return StepBuffers(
        exchanges=exchanges,
        gathered_rows=round(sum(t.bytes_gathered for t in owned if t.pooling == "none")),
        outputs=sum(t.workspace_bytes for t in owned),
    )


def declared_buffers(module: ModuleOp, rank: int, batch: int | None = None) -> StepBuffers:
    """The buffers every step of `module` declares on `rank`, summed, at `batch` (each step's
    own `batch` attribute when None)."""
    total = StepBuffers()
    for step in steps_of(module):
        total = total + step_buffers(build_srsv(step, batch), rank)
    return total
