"""A rank's table storage: taking the model's tables over, materializing meta shards, and
saving and restoring the rows that calibration touches.

`sparselift.compile` makes one `LocalTables` per rank and every plan built for that rank (the
planner's candidates and the final plan) runs on it:

- a table-wise or replicated table's shard *is* the model's parameter storage (no copy); a
  row-wise shard is copied once out of the model's table; a table on the meta device is
  materialized shard by shard (only this rank's rows) with its module's initializer or the
  user's `CompileOptions(table_init=...)`;
- `TouchedRows` saves the rows (and optimizer-state rows) the calibration batches can update and
  puts them back after every measured step, so calibration costs O(touched rows) of memory and
  leaves tables and state bit for bit as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import cast

import attrs
import torch
import torch.distributed as dist

from sparselift.codegen.table_facts import TableFact
from sparselift.optim import TableOptimizers
from sparselift.optim_rules import rule_for
from sparselift.runtime import huge_pages
from sparselift.runtime.sparse_optimizer import state_slots

TableInit = Callable[[str, torch.Tensor, int], object]
"""`table_init(table, shard, row_offset)`: fill `shard` (rows `row_offset ..` of `table`) in place."""

TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}


def torch_dtype(fact: TableFact) -> torch.dtype:
    """The torch dtype of a table's rows."""
    return TORCH_DTYPES[fact.dtype]


Optimizers = str | Mapping[str, str] | TableOptimizers
"""Each table's optimizer: one kind for every table, IR table name -> kind, or the compile's choice."""


def optimizer_of(optimizers: Optimizers, table: str) -> str:
    if isinstance(optimizers, TableOptimizers):
        return str(optimizers.kind(table))
    return optimizers if isinstance(optimizers, str) else optimizers[table]


def state_width(optimizers: Optimizers, info: TableFact) -> int:
    """Floats of optimizer state per row of table `info` (its rule's states side by side)."""
    return rule_for(optimizer_of(optimizers, info.name)).state_width(info.dim)


def local_shard_bytes(tables: Sequence[TableFact], rank: int, optimizers: Optimizers) -> dict[str, int]:
    """Bytes of each table shard (and its optimizer state) that `rank` holds, by IR table name."""
    out = {}
    for info in tables:
        if not info.holds(rank):
            continue
        lo, hi = info.shard_rows(rank)
        row_bytes = info.dim * torch_dtype(info).itemsize + 4 * state_width(optimizers, info)
        out[info.name] = (hi - lo) * row_bytes
    return out


def check_memory_cap(tables: Sequence[TableFact], world: int, optimizers: Optimizers, cap: int | None) -> None:
    """Raise (on every rank alike: each rank checks every rank) if some rank's shards exceed `cap`."""
    if not cap:
        return
    for rank in range(world):
        sizes = local_shard_bytes(tables, rank, optimizers)
        total = sum(sizes.values())
        if total > cap:
            largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
            detail = ", ".join(f"'{name}' {_mb(b)}" for name, b in largest)
            raise MemoryError(
                f"sparselift: rank {rank}'s local table shards need {_mb(total)} ({detail}"
                f"{', ...' if len(sizes) > 3 else ''}), more than CompileOptions(memory_cap_bytes={cap}) "
                f"({_mb(cap)}); nothing was allocated. Shard the tables over more ranks or raise the cap."
            )


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


@attrs.define
class LocalTables:
    """This rank's table shards and optimizer state, by IR table name (the live storage)."""

    tables: dict[str, torch.Tensor]
    states: dict[str, torch.Tensor]
    row_offsets: dict[str, int]
    # What the storage is: "shared" (the model's own parameter), "copied" (a row-wise shard) or
    # "materialized" (a meta table's shard), for `explain()` and the tests.
    origin: dict[str, str] = attrs.field(factory=dict)
    # Bytes of each big shard backed by huge pages after it was set up (runtime/huge_pages.py):
    # tables below `CompileOptions.huge_page_min_bytes` are not listed.
    huge_page_bytes: dict[str, int] = attrs.field(factory=dict)
    # Each table's optimizer kind, which lays its state out (`state_slots`).
    optimizers: dict[str, str] = attrs.field(factory=dict)

    def state_slots(self, name: str) -> dict[str, torch.Tensor]:
        """Table `name`'s optimizer states by name, row-indexed views of its state buffer."""
        shard = self.tables[name]
        return state_slots(self.optimizers.get(name, "sgd"), self.states.get(name), shard.shape[0], shard.shape[1])


def take_local_shards(
    facts: Sequence[TableFact],
    model_tables: Mapping[str, torch.Tensor],
    *,
    rank: int,
    optimizers: Optimizers,
    inits: Mapping[str, TableInit],
    device: torch.device | str = "cpu",
    huge_page_min_bytes: int | None = None,
) -> LocalTables:
    """This rank's shards of the tables `facts` describes (`describe_tables`, the plan's
    `TABLES`), taken over from `model_tables` (FQN -> parameter).

    `inits` (IR table name -> initializer) must cover every table on the meta device; the
    caller checks that before any rank allocates (`missing_inits`); meta shards are
    materialized on `device`. CPU shards of at least `huge_page_min_bytes` get huge pages:
    new ones are allocated on them, the model's own storage is collapsed onto them in place.
    """
    local = LocalTables({}, {}, {})
    for info in facts:
        if not info.holds(rank):
            continue
        lo, hi = info.shard_rows(rank)
        full = model_tables[info.param].detach()
        shape, dtype = (hi - lo, info.dim), torch_dtype(info)
        target = device if full.device.type == "meta" else full.device
        huge = huge_pages.wanted(shape[0] * shape[1] * dtype.itemsize, huge_page_min_bytes, target)
        if full.device.type == "meta":
            shard = huge_pages.empty_shard(shape, dtype) if huge else torch.empty(shape, dtype=dtype, device=device)
            inits[info.name](info.name, shard, lo)
            local.origin[info.name] = "materialized"
        elif (lo, hi) == (0, info.rows) and full.is_contiguous():
            shard = full  # the model's storage: training updates the model's table in place
            if huge:
                huge_pages.advise_existing(shard)
            local.origin[info.name] = "shared"
        else:
            shard = huge_pages.empty_shard(shape, dtype) if huge else torch.empty(shape, dtype=dtype, device=target)
            shard.copy_(full[lo:hi])
            local.origin[info.name] = "copied"
        local.tables[info.name], local.row_offsets[info.name] = shard, lo
        if huge:
            local.huge_page_bytes[info.name] = huge_pages.huge_page_bytes(shard)
        local.optimizers[info.name] = optimizer_of(optimizers, info.name)
        width = state_width(optimizers, info)
        if width:  # the rule's states whole, one after the other, zeros (`state_slots` views them)
            local.states[info.name] = torch.zeros((hi - lo) * width, dtype=torch.float32, device=shard.device)
    return local


def missing_inits(
    facts: Sequence[TableFact], model_tables: Mapping[str, torch.Tensor], inits: Mapping[str, TableInit]
) -> list[str]:
    """Tables on the meta device with no known initializer."""
    return [info.name for info in facts if model_tables[info.param].device.type == "meta" and info.name not in inits]


def check_storage(facts: Sequence[TableFact], local: LocalTables, rank: int) -> None:
    """Raise if this rank's storage is not what a plan's `TABLES` says it holds (rows, width,
    dtype, first row): the storage and the plan came from two readings of the IR."""
    for info in facts:
        shard = local.tables.get(info.name)
        if not info.holds(rank):
            if shard is not None:
                raise RuntimeError(
                    f"sparselift: rank {rank} holds a shard of table '{info.name}' that the plan does not place on it"
                )
            continue
        lo, hi = info.shard_rows(rank)
        if (
            shard is None
            or tuple(shard.shape) != (hi - lo, info.dim)
            or shard.dtype != torch_dtype(info)
            or local.row_offsets.get(info.name) != lo
        ):
            got = (
                "none"
                if shard is None
                else f"{tuple(shard.shape)} {shard.dtype} from row {local.row_offsets.get(info.name)}"
            )
            raise RuntimeError(
                f"sparselift: rank {rank}'s shard of table '{info.name}' is {got}; the plan "
                f"expects rows [{lo}, {hi}) x {info.dim} {torch_dtype(info)}"
            )


class TouchedRows:
    """The rows of this rank's shards that a set of batches can update, saved to be put back.

    Ids come from every rank (an all-gather of each table's unique ids), since a rank's shard is
    updated by the other ranks' batches too. The saved copy is O(touched rows), not O(table).

    `tables_frozen`: the steps leave the tables themselves unchanged (the planner's candidates
    run with a learning rate of 0: `w - 0 * update` is `w`), so only the optimizer states'
    touched rows are saved. With SGD, which keeps no state, nothing is saved and no ids are
    gathered: at real size the tables' touched rows were the planner's largest allocation
    (about 330 MiB a rank on dlrm-bench, 1.6M ids a step).
    """

    def __init__(
        self,
        local: LocalTables,
        ids_by_table: Mapping[str, torch.Tensor],
        process_group=None,
        world: int = 1,
        *,
        tables_frozen: bool = False,
    ):
        self.local = local
        self.tables_frozen = tables_frozen
        # (table, its touched rows, their copies: the table's rows unless frozen, then each state's)
        self.saved: list[tuple[str, torch.Tensor, list[torch.Tensor]]] = []
        saving = [n for n in local.tables if self._parts(n)]
        if tables_frozen and not _on_any_rank(bool(saving), process_group, world):
            return  # no rank has rows to save: no ids to gather
        everywhere = _gather_ids(ids_by_table, process_group, world)
        for name in saving:
            ids = everywhere.get(name)
            if ids is None or ids.numel() == 0:
                continue
            shard = local.tables[name]
            lo = local.row_offsets[name]
            keep = ids[(ids >= lo) & (ids < lo + shard.shape[0])] - lo
            idx = keep.to(device=shard.device)
            self.saved.append((name, idx, [t.index_select(0, idx) for t in self._parts(name)]))

    def _parts(self, name: str) -> list[torch.Tensor]:
        """What is saved of table `name`: the table (unless frozen) and each of its optimizer
        states, row-indexed (views of the live storage)."""
        states = list(self.local.state_slots(name).values())
        return states if self.tables_frozen else [self.local.tables[name], *states]

    @property
    def nbytes(self) -> int:
        return sum(i.numel() * 8 + sum(r.numel() * r.element_size() for r in rows) for _, i, rows in self.saved)

    @torch.no_grad()
    def restore(self) -> None:
        for name, idx, rows in self.saved:
            for part, saved in zip(self._parts(name), rows):
                part.index_copy_(0, idx, saved)


def _on_any_rank(flag: bool, pg, world: int) -> bool:
    """Whether `flag` holds on some rank of the group (every rank gets the same answer)."""
    if world == 1 or not (dist.is_available() and dist.is_initialized()):
        return flag
    flags: list[bool | None] = [None] * world
    dist.all_gather_object(flags, flag, group=pg)
    return any(flags)


def _gather_ids(ids_by_table: Mapping[str, torch.Tensor], pg, world: int) -> dict[str, torch.Tensor]:
    """Each table's unique ids over all ranks (every rank passes the same table names)."""
    names = sorted(ids_by_table)
    local = [torch.unique(ids_by_table[n].reshape(-1).long().cpu()) for n in names]
    if world == 1 or not (dist.is_available() and dist.is_initialized()):
        return dict(zip(names, local))
    gathered: list[Sequence[torch.Tensor] | None] = [None] * world
    dist.all_gather_object(gathered, local, group=pg)
    every = cast("list[Sequence[torch.Tensor]]", gathered)  # each rank's `local`, none left None
    return {n: torch.unique(torch.cat([g[i] for g in every])) for i, n in enumerate(names)}


__all__ = [
    "LocalTables",
    "TableInit",
    "TouchedRows",
    "check_memory_cap",
    "check_storage",
    "local_shard_bytes",
    "missing_inits",
    "take_local_shards",
    "torch_dtype",
]
