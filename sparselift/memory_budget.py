"""What a compile will need of each rank's memory, checked against `CompileOptions(memory_cap_bytes=...)`
before anything is allocated.

Per rank (`RankMemory`): its table shards, their optimizer state, the dense parameters (every
rank holds them), and the buffers the default plan declares for one step at the example batch
(`passes.step_buffers`: exchanges, gathered rows, lookup outputs). The cap is the whole
per-rank budget: a compile whose need on some rank is over it is refused on every rank (each
rank checks every rank), naming the largest consumers; the planner's candidates get what the
cap leaves above the largest need (`headroom`) for the workspace and in-flight buffers they add.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
from xdsl.passes import ModulePass

from sparselift.codegen.table_facts import TableFact, describe_tables
from sparselift.passes.step_buffers import StepBuffers, declared_buffers
from sparselift.runtime.tables import Optimizers, state_width, torch_dtype

__all__ = ["RankMemory", "check_memory_need", "dense_bytes", "headroom", "memory_need"]


@attrs.frozen
class RankMemory:
    """Bytes one rank will hold, by consumer."""

    rank: int
    tables: dict[str, int]  # IR table name -> its shard's bytes on this rank
    states: dict[str, int]  # IR table name -> its optimizer state's bytes on this rank
    dense: int  # the dense parameters
    buffers: StepBuffers  # the default plan's, one step at the example batch

    @property
    def total(self) -> int:
        return sum(self.tables.values()) + sum(self.states.values()) + self.dense + self.buffers.total

    def consumers(self) -> list[tuple[str, int]]:
        """Every consumer, largest first: each table shard and state, the dense parameters and
        each kind of step buffer."""
        parts = [(f"table '{t}'", b) for t, b in self.tables.items()]
        parts += [(f"optimizer state of '{t}'", b) for t, b in self.states.items() if b]
        parts += [("dense parameters", self.dense)]
        for f in attrs.fields(StepBuffers):
            parts.append((f"step buffers: {f.name.replace('_', ' ')}", getattr(self.buffers, f.name)))
        return sorted((p for p in parts if p[1]), key=lambda p: -p[1])


def _shard_bytes(facts: Sequence[TableFact], rank: int, optimizers: Optimizers) -> tuple[dict, dict]:
    tables, states = {}, {}
    for info in facts:
        if info.holds(rank):
            lo, hi = info.shard_rows(rank)
            tables[info.name] = (hi - lo) * info.dim * torch_dtype(info).itemsize
            states[info.name] = (hi - lo) * 4 * state_width(optimizers, info)
    return tables, states


def dense_bytes(program) -> int:
    """Bytes of the dense parameters `program`'s regions hold (each counted once)."""
    params = {id(p): p for region in program.regions.values() for p in region.parameters()}
    return sum(p.numel() * p.element_size() for p in params.values())


def memory_need(program, lift: ModulePass, world: int, optimizers: Optimizers) -> list[RankMemory]:
    """Every rank's need for `program` (exported, not lifted) under `lift`: the buffers are
    read from a lifted copy, so nothing of `program` changes."""
    from sparselift.ir import make_context

    lifted = program.module.clone()
    lift.apply(make_context(), lifted)
    facts = describe_tables(program.module, world)
    dense = dense_bytes(program)
    out = []
    for rank in range(world):
        tables, states = _shard_bytes(facts, rank, optimizers)
        out.append(RankMemory(rank, tables, states, dense, declared_buffers(lifted, rank)))
    return out


def check_memory_need(needs: Sequence[RankMemory], cap: int | None) -> None:
    """Raise MemoryError if some rank's need is over `cap` (the same on every rank)."""
    if not cap:
        return
    for need in needs:
        if need.total > cap:
            consumers = need.consumers()
            largest = ", ".join(f"{label} {_mb(b)}" for label, b in consumers[:4])
            more = ", ..." if len(consumers) > 4 else ""
            raise MemoryError(
                f"sparselift: rank {need.rank} needs {_mb(need.total)} ({largest}{more}), "
                f"more than CompileOptions(memory_cap_bytes={cap}) ({_mb(cap)}); nothing was allocated. "
                "Shard the tables over more ranks, use a smaller batch, or raise the cap."
            )


def headroom(needs: Sequence[RankMemory], cap: int | None) -> int:
    """What `cap` leaves above the largest rank's need (at least 1 byte): the planner's cap on
    the workspace and in-flight buffers a candidate adds. 0: no cap."""
    if not cap:
        return 0
    return max(1, cap - max(n.total for n in needs))


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"
