"""Sharding plans: where each embedding table lives, and the documented "auto" placement.

A `ShardingPlan` is a per-table choice (table-wise on one rank, row-wise over several ranks with
row ranges, or data-parallel), inspectable and serializable to JSON. `auto_shard` is the simple
balanced policy used by `sharding="auto"`:

1. World size 1: every table table-wise on rank 0 (no collectives at all).
2. Tiny tables (at most `dp_max_bytes`, default 64 KiB): data-parallel. Replicating them costs
   nothing and removes them from every exchange.
3. Tables larger than one rank's share of all table bytes (total / world size): row-wise over
   every rank, in equal row ranges (sum-pooled tables only: partial pools of a mean are not
   exact, so mean-pooled tables stay table-wise). Unpooled tables stay whole too. Their
   row-wise form works (each id's row comes back from the rank whose range holds it,
   `compact-rows`), but on DIN at real size it was 1.1 +- 0.4 ms a step slower than the item
   table on one rank, paired over 200 rounds (`bench ablation --sharding`, bench/RESULTS.md):
   bucketing ids by range and the per-segment expand cost more than balancing the gathers
   saves. A user whose unpooled table does not fit one rank places it row-wise in a plan.
4. The rest: table-wise, greedily (largest first) onto the rank with the least load, where a
   table's load is the bytes it gathers per sample, `pooling_factor x dim x dtype bytes`.

The frontend places tables with it when it exports (`sharding=` of `export` / `compile`), the
simulator places them at each projected world size, and the runtime and codegen read the
placements; the planner may choose another policy's plan over "auto". A leaf module (attrs
only, no torch, nothing else of SparseLift), so every stage may import it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum

import attrs


class PlacementKind(StrEnum):
    TABLE_WISE = "table_wise"
    ROW_WISE = "row_wise"
    DATA_PARALLEL = "data_parallel"


@attrs.frozen
class TableStats:
    """What the placement policy needs to know about a table."""

    name: str
    rows: int
    dim: int
    dtype_bytes: int = 4
    pooling_factor: float = 1.0  # ids per sample, summed over the features that read the table
    pooling: str = "sum"  # row-wise partial pools are sums: mean-pooled tables stay whole (unpooled,
    # "none", bags hold one id at most: their partial pools are sums too)

    @property
    def row_wise_ok(self) -> bool:
        return self.pooling != "mean"

    @property
    def bytes(self) -> int:
        return self.rows * self.dim * self.dtype_bytes

    @property
    def load(self) -> float:
        """Bytes gathered per sample."""
        return self.pooling_factor * self.dim * self.dtype_bytes


@attrs.frozen
class TablePlacement:
    kind: PlacementKind = attrs.field(converter=PlacementKind)
    # Converters spelled `tuple[int, ...]`: mypy's attrs plugin cannot type a bare generic `tuple`.
    ranks: tuple[int, ...] = attrs.field(default=(), converter=tuple[int, ...])
    row_bounds: tuple[int, ...] = attrs.field(default=(), converter=tuple[int, ...])

    @staticmethod
    def table_wise(rank: int) -> TablePlacement:
        return TablePlacement(PlacementKind.TABLE_WISE, (rank,))

    @staticmethod
    def data_parallel() -> TablePlacement:
        return TablePlacement(PlacementKind.DATA_PARALLEL)

    @staticmethod
    def row_wise_even(rows: int, ranks: Sequence[int]) -> TablePlacement:
        n = min(len(ranks), rows)
        bounds = [rows * i // n for i in range(n + 1)]
        return TablePlacement(PlacementKind.ROW_WISE, tuple(ranks[:n]), tuple(bounds))

    def owners(self, world_size: int) -> tuple[int, ...]:
        return tuple(range(world_size)) if self.kind == PlacementKind.DATA_PARALLEL else self.ranks

    def check(self, table: str, rows: int, world_size: int) -> None:
        """Raise ValueError naming the table if this placement cannot hold it."""
        bad = [r for r in self.ranks if not 0 <= r < world_size]
        if bad:
            raise ValueError(f"table '{table}': rank {bad[0]} is out of range for world size {world_size}")
        if self.kind == PlacementKind.TABLE_WISE and len(self.ranks) != 1:
            raise ValueError(f"table '{table}': table_wise needs exactly one rank, got {list(self.ranks)}")
        if self.kind == PlacementKind.ROW_WISE:
            b = self.row_bounds
            if len(b) != len(self.ranks) + 1 or b[0] != 0 or b[-1] != rows or any(x >= y for x, y in zip(b, b[1:])):
                raise ValueError(
                    f"table '{table}': row_wise bounds {list(b)} must rise from 0 to its {rows} rows, "
                    f"one range per rank {list(self.ranks)}"
                )

    def to_json(self) -> dict:
        out: dict = {"kind": str(self.kind)}
        if self.ranks:
            out["ranks"] = list(self.ranks)
        if self.row_bounds:
            out["row_bounds"] = list(self.row_bounds)
        return out

    @staticmethod
    def from_json(data: Mapping) -> TablePlacement:
        return TablePlacement(data["kind"], tuple(data.get("ranks", ())), tuple(data.get("row_bounds", ())))


def _own_placements(tables: Mapping[str, TablePlacement]) -> dict[str, TablePlacement]:
    """A plan's own copy of the placements it is given (a typed converter for mypy's attrs plugin)."""
    return dict(tables)


@attrs.frozen
class ShardingPlan:
    """A placement for every table, for one world size."""

    world_size: int
    tables: Mapping[str, TablePlacement] = attrs.field(converter=_own_placements)

    def __getitem__(self, table: str) -> TablePlacement:
        try:
            return self.tables[table]
        except KeyError:
            raise KeyError(f"the sharding plan has no placement for table '{table}'") from None

    def check(self, tables: Iterable[TableStats]) -> None:
        """Every table placed once and validly; no placement for an unknown table."""
        known = {t.name: t for t in tables}
        for name in known:
            if name not in self.tables:
                raise ValueError(f"the sharding plan does not place table '{name}'")
        for name, placement in self.tables.items():
            if name not in known:
                raise ValueError(f"the sharding plan places unknown table '{name}' (known: {', '.join(known)})")
            placement.check(name, known[name].rows, self.world_size)

    def to_json(self) -> str:
        return json.dumps(
            {"world_size": self.world_size, "tables": {k: v.to_json() for k, v in self.tables.items()}}, indent=2
        )

    @staticmethod
    def from_json(text: str) -> ShardingPlan:
        data = json.loads(text)
        return ShardingPlan(
            int(data["world_size"]), {k: TablePlacement.from_json(v) for k, v in data["tables"].items()}
        )

    def describe(self) -> str:
        lines = [f"sharding plan for world size {self.world_size}:"]
        for name, p in self.tables.items():
            detail = {
                PlacementKind.TABLE_WISE: f"rank {p.ranks[0]}" if p.ranks else "",
                PlacementKind.ROW_WISE: f"ranks {list(p.ranks)}, row bounds {list(p.row_bounds)}",
                PlacementKind.DATA_PARALLEL: "every rank",
            }[p.kind]
            lines.append(f"  {name:<24} {p.kind:<14} {detail}")
        return "\n".join(lines)


def uniform_plan(kind: str, tables: Sequence[TableStats], world_size: int) -> ShardingPlan:
    """Every table with the same kind: table_wise balanced by load, row_wise even, or data_parallel.

    With row_wise, mean-pooled tables (and tables with fewer rows than ranks) stay table-wise:
    row-wise partial pools of a mean are not exact.
    """
    kind = PlacementKind(kind)
    if kind == PlacementKind.DATA_PARALLEL:
        return ShardingPlan(world_size, {t.name: TablePlacement.data_parallel() for t in tables})
    if kind == PlacementKind.ROW_WISE:
        ranks = list(range(world_size))
        fixed = {
            t.name: TablePlacement.row_wise_even(t.rows, ranks)
            for t in tables
            if t.row_wise_ok and t.rows >= world_size
        }
        rest = [t for t in tables if t.name not in fixed]
        plan = _balance_table_wise(rest, world_size, fixed)
        return ShardingPlan(world_size, {t.name: plan.tables[t.name] for t in tables})
    return _balance_table_wise(tables, world_size, {})


def _balance_table_wise(
    tables: Sequence[TableStats], world_size: int, fixed: dict[str, TablePlacement], base_load=None
) -> ShardingPlan:
    load = list(base_load) if base_load is not None else [0.0] * world_size
    memory = [0] * world_size
    placements = dict(fixed)
    for t in sorted(tables, key=lambda t: (-t.load, -t.bytes, t.name)):
        rank = min(range(world_size), key=lambda r: (load[r], memory[r], r))
        placements[t.name] = TablePlacement.table_wise(rank)
        load[rank] += t.load
        memory[rank] += t.bytes
    # Keep the caller's table order so plans print and serialize predictably.
    order = [t.name for t in tables] + [n for n in fixed if n not in {t.name for t in tables}]
    return ShardingPlan(world_size, {n: placements[n] for n in order if n in placements})


def auto_shard(tables: Sequence[TableStats], world_size: int, *, dp_max_bytes: int = 64 * 1024) -> ShardingPlan:
    """The documented balanced placement (see the module docstring)."""
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    if world_size == 1:
        return ShardingPlan(1, {t.name: TablePlacement.table_wise(0) for t in tables})
    share = sum(t.bytes for t in tables) / world_size
    fixed: dict[str, TablePlacement] = {}
    base_load = [0.0] * world_size
    rest = []
    for t in tables:
        if t.bytes <= dp_max_bytes:
            fixed[t.name] = TablePlacement.data_parallel()
        elif t.bytes > share and t.rows >= world_size and t.pooling == "sum":
            fixed[t.name] = TablePlacement.row_wise_even(t.rows, list(range(world_size)))
            for r in range(world_size):
                base_load[r] += t.load / world_size
        else:
            rest.append(t)
    plan = _balance_table_wise(rest, world_size, fixed, base_load)
    return ShardingPlan(world_size, {t.name: plan.tables[t.name] for t in tables})
