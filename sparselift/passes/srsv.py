"""The Sparse Resource Semantic View (SRSV) of a lifted `sched.step`.

`build_srsv(step)` reads the IR that `lift-sparse` produces and says, per step:

- per table (`TableEntry`): where it lives, which features it serves, how many ids each owner
  rank gathers per step, the bytes gathered, the table bytes per owner and the pooled workspace;
- per collective (`CollectiveEntry`): its roles, group, dtype, phase, the bytes every rank sends
  to every peer (a `G x G` matrix over the group's ranks) and, when its input comes from a
  `sparse.pack`, where every member lives in the buffer;
- the dependency graph of the step (`SRSV.graph`, a networkx `DiGraph` whose nodes are the
  step's ops), with `independent(a, b)` and `critical_path(weight)` queries.

Sizes follow docs/ir-semantics.md: `B` is the local batch (the step's `batch` attribute), `W`
the world size. Static all-to-all splits are elements per sample (`x B`). Dynamic splits (ids and
weights from `sparse.route`) are estimated from the features' pooling factors: rank `s` sends
rank `p` about `B x sum(pooling_factor)` ids over the features `p` serves, a row-wise shard
receiving `1 / shards` of a feature's ids (ids assumed uniform over rows). Those entries are
marked `sizing = "estimated"`.

Graph edges (attribute `kind`):
- `ssa`: def-use, including into and out of `sched.parallel` lanes (every lane op precedes its
  `sched.parallel`, whose results its users read);
- `saved`: a value the forward yields for backward, from its producer to the users of the
  matching backward block argument;
- `grad`: the gradient of forward output `i` exists once output `i` is computed: from the
  producer of output `i` to the users of backward argument `i`;
- `adjoint`: a forward `sched.dense @X` precedes the backward `sched.dense @X` (its adjoint
  reads the forward activations, which the IR does not show);
- `order`: collectives in program order (every rank must issue them in the same order).
Step terminators (`sched.yield`) are not nodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast

import attrs
import networkx as nx
from xdsl.context import Context
from xdsl.dialects.builtin import (
    AnyFloat,
    DenseArrayBase,
    IntAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass

from sparselift.ir._syntax import DYNAMIC
from sparselift.ir.coll import (
    AllReduceOp,
    AllReduceStartOp,
    AllToAllOp,
    AllToAllStartOp,
    ReduceScatterOp,
    WaitOp,
)
from sparselift.ir.sched import CostAttr, DenseOp, ParallelOp, StepOp, YieldOp
from sparselift.ir.sparse import (
    FeatureAttr,
    FusedTableOp,
    GatherRowsOp,
    JoinSegmentsOp,
    LookupGradOp,
    LookupOp,
    LookupUpdateOp,
    PackIdsOp,
    PackOp,
    PlacementAttr,
    PlacementKind,
    RouteOp,
    RowsUpdateOp,
    TableAttr,
    UnpackOp,
)
from sparselift.passes.srsv_rows import joined_sides, rows_elems

COLLECTIVE_OPS = (AllToAllOp, AllToAllStartOp, AllReduceOp, AllReduceStartOp, ReduceScatterOp)
"""Ops that every rank of their group must issue, in the same order."""

TABLE_OPS = (LookupOp, LookupUpdateOp, LookupGradOp, GatherRowsOp, RowsUpdateOp)

# The same two sets as types, for annotations.
CollectiveOp = AllToAllOp | AllToAllStartOp | AllReduceOp | AllReduceStartOp | ReduceScatterOp
TableOp = LookupOp | LookupUpdateOp | LookupGradOp | GatherRowsOp | RowsUpdateOp


# --------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------


@attrs.frozen
class TableEntry:
    """One embedding table of the step. Per-rank figures are per owner rank and step."""

    name: str
    group: str  # the lifted ops' `group` attribute (module/placement kind)
    rows: int
    dim: int
    dtype: str
    dtype_bytes: int
    pooling: str  # sum | mean
    placement: str  # table_wise | row_wise | data_parallel
    owner_ranks: tuple[int, ...]
    features: tuple[str, ...]  # features served, in group order
    pooling_factor: float  # sum over the features served
    lookups_per_rank: float  # ids one owner rank gathers per step
    bytes_gathered: float  # lookups_per_rank x dim x dtype_bytes
    table_bytes_per_owner: tuple[int, ...]  # aligned with owner_ranks (row ranges for row-wise)
    workspace_bytes: int  # the pooled output: rows x dim * slots x dtype_bytes

    @property
    def max_table_bytes(self) -> int:
        return max(self.table_bytes_per_owner, default=0)


@attrs.frozen
class LayoutSlot:
    """Where a member of a packed collective input lives: `offset`/`size` in elements per sample
    (`None` for a jagged member, whose length is known at run time)."""

    member: str
    rank: int | None  # the packing rank (`on_rank`), None when every rank packs it
    segment: int
    offset: int | None
    size: int | None


@attrs.frozen
class CollectiveEntry:
    """One collective of the step. `bytes_matrix[s][p]` is what group rank `group_ranks[s]`
    sends to group rank `group_ranks[p]` per step (the diagonal stays on the rank)."""

    index: int  # position among the step's collectives, in program order
    op_name: str
    roles: tuple[str, ...]
    group: str  # the op's `group` attribute (sharding group), "" if none
    group_ranks: tuple[int, ...]
    dtype: str
    elem_bytes: int
    phase: str  # forward | backward
    bytes_matrix: tuple[tuple[int, ...], ...]
    sizing: str  # static | estimated (from pooling factors) | unknown
    layout: tuple[LayoutSlot, ...] = ()
    op: Operation | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def size(self) -> int:
        return len(self.group_ranks)

    def sent_bytes(self, src: int) -> int:
        """Bytes group position `src` sends to other ranks."""
        return sum(b for p, b in enumerate(self.bytes_matrix[src]) if p != src)

    def received_bytes(self, dst: int) -> int:
        return sum(row[dst] for s, row in enumerate(self.bytes_matrix) if s != dst)

    @property
    def total_bytes(self) -> int:
        """Bytes crossing the network (off-diagonal), summed over all ranks."""
        return sum(self.sent_bytes(s) for s in range(self.size))

    @property
    def max_sent_bytes(self) -> int:
        return max((self.sent_bytes(s) for s in range(self.size)), default=0)

    @property
    def layout_map(self) -> dict[str, tuple[tuple[int, int | None, int | None], ...]]:
        """member -> ((segment, offset, size), ...); members packed per rank are keyed
        `"member@rank"`."""
        out: dict[str, list[tuple[int, int | None, int | None]]] = {}
        for slot in self.layout:
            key = slot.member if slot.rank is None else f"{slot.member}@{slot.rank}"
            out.setdefault(key, []).append((slot.segment, slot.offset, slot.size))
        return {k: tuple(v) for k, v in out.items()}


def _default_cost(op: Operation) -> float:
    cost = op.attributes.get("cost")
    return cost.est_us.data if isinstance(cost, CostAttr) else 0.0


@attrs.frozen
class SRSV:
    """The Sparse Resource Semantic View of one step."""

    step_name: str
    world_size: int
    batch: int
    tables: tuple[TableEntry, ...]
    collectives: tuple[CollectiveEntry, ...]
    graph: nx.DiGraph = attrs.field(eq=False, repr=False)
    # op -> the ops it reaches in `graph`, filled as `reaches` asks (the graph is not changed).
    _reached: dict[Operation, set[Operation]] = attrs.field(factory=dict, init=False, eq=False, repr=False)

    def table(self, name: str) -> TableEntry:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(f"no table '{name}' in the SRSV of @{self.step_name}")

    def collective(self, op: Operation) -> CollectiveEntry:
        for c in self.collectives:
            if c.op is op:
                return c
        raise KeyError(f"{op.name} is not a collective of @{self.step_name}")

    # -- graph queries ------------------------------------------------------------------------
    def independent(self, a: Operation, b: Operation) -> bool:
        """Neither op reaches the other: they may run in either order or concurrently."""
        for op in (a, b):
            if op not in self.graph:
                raise KeyError(f"{op.name} is not a node of the SRSV graph of @{self.step_name}")
        if a is b:
            return False
        return not self.reaches(a, b) and not self.reaches(b, a)

    def reaches(self, a: Operation, b: Operation) -> bool:
        """A path of dependencies leads from `a` to `b`."""
        # Cached descendant sets: passes ask about many pairs, and nx.has_path's "no path"
        # exception prints both ops, whole, every time it answers no.
        if a not in self._reached:
            self._reached[a] = nx.descendants(self.graph, a)
        return b in self._reached[a]

    def critical_path(
        self,
        weight: Callable[[Operation], float] | Mapping[Operation, float] | None = None,
        *,
        serial: bool = False,
    ) -> tuple[float, list[Operation]]:
        """The longest chain of dependent ops, by per-op cost.

        `weight` gives each op's cost: a callable, a mapping (missing ops cost 0) or `None` for
        the `est_us` of the op's `#sched.cost` attribute (0 without one). By default independent
        ops are assumed to overlap, so this is a lower bound of the step time on any schedule.
        With `serial=True` each rank has one compute stream: ops run one after another in program
        order, except async collectives in flight and the lanes of a `sched.parallel`, which is
        how a step executes on a CPU rank.
        """
        cost: Callable[[Operation], float]
        if weight is None:
            cost = _default_cost
        elif callable(weight):
            cost = weight
        else:
            table = weight
            cost = lambda op: table.get(op, 0.0)  # noqa: E731
        costs = {op: float(cost(op)) for op in self.graph.nodes}
        # Node costs as edge weights: every edge weighs its source's cost, and a virtual sink
        # charges the last op of the path.
        source, sink = _Terminal("source"), _Terminal("sink")
        h: nx.DiGraph[Operation | _Terminal] = nx.DiGraph()
        h.add_edges_from((u, v, {"w": costs[u]}) for u, v in self.graph.edges)
        if serial:
            stream = [
                op
                for op in sorted(self.graph.nodes, key=lambda n: self.graph.nodes[n]["index"])
                if not isinstance(op, AllToAllStartOp | AllReduceStartOp) and not isinstance(op.parent_op(), ParallelOp)
            ]
            h.add_edges_from((u, v, {"w": costs[u]}) for u, v in zip(stream, stream[1:]) if not h.has_edge(u, v))
        h.add_edges_from((source, n, {"w": 0.0}) for n in self.graph.nodes)
        h.add_edges_from((n, sink, {"w": costs[n]}) for n in self.graph.nodes)
        if not self.graph.nodes:
            return 0.0, []
        path = [n for n in nx.dag_longest_path(h, weight="w", default_weight=0) if not isinstance(n, _Terminal)]
        return sum(costs[n] for n in path), path

    # -- printing -----------------------------------------------------------------------------
    def to_table(self) -> str:
        lines = [f"SRSV @{self.step_name}: world_size = {self.world_size}, batch = {self.batch}"]
        lines.append(f"tables ({len(self.tables)}; per owner rank and step)")
        rows = [
            [
                t.name,
                t.group,
                t.placement,
                ",".join(map(str, t.owner_ranks)),
                str(t.rows),
                str(t.dim),
                t.dtype,
                t.pooling,
                ",".join(t.features),
                f"{t.pooling_factor:.4g}",
                f"{t.lookups_per_rank:.0f}",
                f"{t.bytes_gathered:.0f}",
                "/".join(map(str, t.table_bytes_per_owner)) if t.placement == "row_wise" else str(t.max_table_bytes),
                str(t.workspace_bytes),
            ]
            for t in self.tables
        ]
        lines += _columns(
            [
                "table",
                "group",
                "placement",
                "owners",
                "rows",
                "dim",
                "dtype",
                "pool",
                "features",
                "pf",
                "lookups",
                "gathered_B",
                "table_B",
                "workspace_B",
            ],
            rows,
            right={4, 5, 9, 10, 11, 12, 13},
        )
        lines.append(
            f"collectives ({len(self.collectives)}; bytes per step; 'sN->[..]' = what group rank N sends to each "
            "group rank; total_B = off-diagonal sum)"
        )
        rows = [
            [
                str(c.index),
                c.phase,
                c.op_name,
                ",".join(c.roles),
                c.group,
                ",".join(map(str, c.group_ranks)),
                c.dtype,
                c.sizing,
                str(c.total_bytes),
                " ".join(f"s{c.group_ranks[s]}->[{', '.join(map(str, row))}]" for s, row in enumerate(c.bytes_matrix)),
            ]
            for c in self.collectives
        ]
        lines += _columns(
            ["#", "phase", "op", "role", "group", "ranks", "dtype", "sizing", "total_B", "bytes_per_peer"],
            rows,
            right={0, 8},
        )
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class _Terminal:
    """Virtual source/sink of the critical-path graph."""

    name: str


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: Sequence[str]) -> str:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  " + "  ".join(cells).rstrip()

    return [fmt(header), *(fmt(r) for r in rows)]


# --------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------


def elem_bytes(type_: Attribute) -> int:
    """Bytes of one element of a tensor type (or of an element type)."""
    elt = type_.element_type if isinstance(type_, TensorType) else type_
    if isinstance(elt, IntegerType):
        return max(1, elt.width.data // 8)
    if isinstance(elt, AnyFloat):
        return max(1, elt.bitwidth // 8)
    raise ValueError(f"no element size for {elt}")


def attr_int(value: Attribute | None) -> int | None:
    """An integer from an `IntAttr`, `IntegerAttr` or integer `StringAttr` (None otherwise)."""
    if isinstance(value, StringAttr):
        try:
            return int(value.data)
        except ValueError:
            return None
    if isinstance(value, IntAttr):
        return value.data
    if isinstance(value, IntegerAttr):
        return value.value.data
    return None


def step_batch(step: StepOp) -> int | None:
    """The local batch `B` the frontend wrote on the step (`batch = "128"`), if any.

    Passes that size buffers without one use `step_batch(step) or 1` (bytes per sample)."""
    return step.batch_size


def tables_of(ops: Iterable[Operation]) -> dict[str, TableAttr]:
    """The tables `ops` look up, update or take gradients of, by name, in the order first met:
    per-table lookups, updates and gradients, and fused table ops (all their tables)."""
    tables: dict[str, TableAttr] = {}
    for op in ops:
        if isinstance(op, TABLE_OPS):
            tables.setdefault(op.table.name_str, op.table)
        elif isinstance(op, FusedTableOp):
            for t in op.tables.data:
                tables.setdefault(t.name_str, t)
    return tables


def table_names(ops: Iterable[Operation]) -> set[str]:
    """The names of the tables `ops` read or write (`tables_of`)."""
    return set(tables_of(ops))


_Key = TypeVar("_Key", bound=Hashable)  # what identifies an exchange in flight


def peak_inflight(events: Iterable[tuple[str, _Key, float]]) -> tuple[float, list[_Key]]:
    """Most bytes outstanding at once over `("start", key, bytes)` / `("wait", key, _)` events in
    issue order, and the keys outstanding at that peak (a key started again replaces its bytes).

    What async collectives hold between their start and their wait: `hide-latency` caps it,
    the planner checks it against the memory cap."""
    outstanding: dict[_Key, float] = {}
    peak: float = 0  # stays an int when the sizes are (hide-latency prints it)
    at_peak: list[_Key] = []
    for kind, key, nbytes in events:
        if kind == "start":
            outstanding[key] = nbytes
            total = sum(outstanding.values())
            if total > peak:
                peak, at_peak = total, list(outstanding)
        else:
            outstanding.pop(key, None)
    return peak, at_peak


def _group_name(op: Operation | TableOpView) -> str:
    g = op.attributes.get("group")
    return g.data if isinstance(g, StringAttr) else ""


def _served(placement: PlacementAttr, world: int) -> list[tuple[int, float]]:
    """(rank, share of the feature's ids) for every rank that serves a feature of this table."""
    kind = placement.kind.data
    if kind == PlacementKind.ROW_WISE:
        ranks = placement.rank_list
        return [(r, 1.0 / len(ranks)) for r in ranks]
    if kind == PlacementKind.DATA_PARALLEL:
        return [(r, 1.0) for r in range(world)]
    return [(placement.rank_list[0], 1.0)]


class Sizer:
    """Per-sample element counts and per-rank byte sizes of a step's values."""

    def __init__(self, world: int, batch: int):
        self.world = world
        self.batch = batch

    def elems(self, value: SSAValue) -> list[list[float]] | None:
        """`m[s][p]`: elements per sample that rank `s` puts in segment `p` of `value`."""
        op = value.owner
        W = self.world
        if isinstance(op, RouteOp):
            placements = {p.table.data: p for p in op.placements.data}
            route_world = op.world_size.value.data
            counts = [[0.0] * route_world for _ in range(W)]
            ids = [[0.0] * route_world for _ in range(W)]
            for f in op.features.data:
                placement = placements[f.table.data]
                for s in range(W):
                    for rank, share in _served(placement, route_world):
                        if placement.kind.data == PlacementKind.DATA_PARALLEL and rank != s % route_world:
                            continue
                        counts[s][rank] += 1
                        ids[s][rank] += f.pooling_factor.data * share
            if value is op.lengths:
                return counts
            if value is op.indices or value in op.routed_weights:
                return ids
            return None  # the splits themselves
        if (rows := rows_elems(value, self.elems)) is not None:  # the jagged rows ops (srsv_rows.py)
            return rows
        if isinstance(op, JoinSegmentsOp) and value is op.buffer:  # a merged dynamic exchange's
            sides = joined_sides(op, self.elems)
            return None if sides is None else [[x + y for x, y in zip(*per_rank)] for per_rank in zip(*sides)]
        if isinstance(op, PackIdsOp) and value is op.buffer:
            length_elems, id_elems = self.elems(op.lengths), self.elems(op.indices)
            if length_elems is None or id_elems is None:
                return None
            per_id = 2 if op.weights is not None else 1
            return [[a + b * per_id for a, b in zip(ra, rb)] for ra, rb in zip(length_elems, id_elems)]
        if isinstance(op, PackOp):
            layout = op.layout
            rows = []
            member_elems = {m: self.elems(op.members[m]) for m in range(len(op.members)) if layout.member_is_dynamic(m)}
            jagged = {m: v for m, v in member_elems.items() if v is not None}
            if len(jagged) < len(member_elems):
                return None
            for s in range(W):
                row = []
                for p, seg in enumerate(layout.segments):
                    width = float(layout.static_width(p))
                    for m, mat in jagged.items():
                        if seg[m][0] == DYNAMIC and p < len(mat[s]):
                            width += mat[s][p]
                    row.append(width)
                rows.append(row)
            return rows
        return None

    def a2a_elems(self, op: AllToAllOp | AllToAllStartOp) -> tuple[list[list[float]] | None, str]:
        if op.splits is not None:
            return [[float(v) for v in row] for row in op.splits.matrix], "static"
        per_input = [m for m in (self.elems(v) for v in op.inputs) if m is not None]
        if len(per_input) < len(op.inputs):
            return None, "unknown"
        g = op.group.size

        def row(m: list[list[float]], s: int) -> list[float]:
            r = m[s % len(m)][:g]
            return r + [0.0] * (g - len(r))

        if len(per_input) == 1:
            return [row(per_input[0], s) for s in range(g)], "estimated"
        return [row(per_input[s], s) for s in range(g)], "estimated"

    def value_bytes(self, value: SSAValue, rank: int | None = None) -> float | None:
        """Bytes `value` holds on `rank` (on its largest rank when `rank` is None), if the IR
        tells."""
        t = value.type
        if not isinstance(t, TensorType):
            return None
        eb = elem_bytes(t)
        shape = t.get_shape()
        if shape and all(d >= 0 for d in shape):
            return float(math.prod(shape) * eb)
        op = value.owner
        B = self.batch

        def pick(per_rank: list[float]) -> float:
            return per_rank[rank] if rank is not None and rank < len(per_rank) else max(per_rank)

        if isinstance(op, RouteOp | PackOp):
            m = self.elems(value)
            return None if m is None else pick([sum(row) for row in m]) * B * eb
        if isinstance(op, WaitOp) and value is op.outputs[0] and isinstance(op.handle.owner, AllToAllStartOp):
            op = op.handle.owner
            m, _ = self.a2a_elems(op)
            if m is None:
                return None
            return pick([sum(row[p] for row in m) for p in range(len(m))]) * B * eb
        if isinstance(op, AllToAllOp) and value is op.outputs[0]:
            m, _ = self.a2a_elems(op)
            if m is None:
                return None
            return pick([sum(row[p] for row in m) for p in range(len(m))]) * B * eb
        if isinstance(op, ReduceScatterOp):
            m = self.elems(op.input)
            if m is None:
                return None
            return pick([max(row[p] for row in m) for p in range(len(m[0]))]) * B * eb
        if isinstance(op, AllReduceOp):
            sizes = [b for b in (self.value_bytes(v, rank) for v in op.inputs) if b is not None]
            return None if len(sizes) < len(op.inputs) else sum(sizes)
        return None

    def buffer_bytes(self, op: PackOp | UnpackOp) -> float:
        """Bytes a pack writes (or an unpack reads) on one rank: its `on_rank`, or the busiest."""
        rank = op.rank.value.data if op.rank is not None else None
        buffer = op.buffer
        known = self.value_bytes(buffer, rank)
        if known is not None:
            return known
        layout = op.layout
        return float(
            sum(layout.static_width(p) for p in range(layout.num_segments)) * self.batch * elem_bytes(buffer.type)
        )

    def route_bytes(self, op: RouteOp) -> float:
        """Bytes a route reads (ids, offsets, weights) and writes (lengths, indices, weights)."""
        B = self.batch
        idx_out = elem_bytes(op.indices.type)
        len_out = elem_bytes(op.lengths.type)
        w_out = elem_bytes(op.routed_weights[0].type) if op.routed_weights else 0
        total = 0.0
        for f, ids, offs in zip(op.features.data, op.ids, op.offsets):
            n = B * f.pooling_factor.data
            total += n * (elem_bytes(ids.type) + idx_out + w_out) + B * (elem_bytes(offs.type) + len_out)
        weighted = [f for f in op.features.data if f.is_weighted]
        for f, w in zip(weighted, op.weights):
            total += B * f.pooling_factor.data * elem_bytes(w.type)
        return total


def _is_estimate(value: SSAValue) -> bool:
    """Whether the size of `value` comes from pooling factors rather than from static splits."""
    op = value.owner
    if isinstance(op, RouteOp):
        return value is not op.lengths
    if isinstance(op, PackOp):
        return any(op.layout.member_is_dynamic(m) for m in range(len(op.members)))
    return False


# --------------------------------------------------------------------------------------
# Building the view
# --------------------------------------------------------------------------------------


def step_ops(step: StepOp) -> Iterator[tuple[Operation, str]]:
    """(op, phase) for every op of the step, nested ones included, in program order."""
    for region, phase in ((step.forward, "forward"), (step.backward, "backward")):
        for op in region.walk():
            yield op, phase


def _is_node(op: Operation, step: StepOp) -> bool:
    return not (isinstance(op, YieldOp) and op.parent_op() is step)


def _table_features(step: StepOp) -> dict[str, list[FeatureAttr]]:
    features: dict[str, list[FeatureAttr]] = {}
    for op, _ in step_ops(step):
        if isinstance(op, RouteOp):
            for f in op.features.data:
                features.setdefault(f.table.data, []).append(f)
    return features


class TableOpView(Protocol):
    """What `_table_entry` reads of a table op: a lookup, update or gradient, or one table of a
    fused kernel (`parallelize_tables._TableView`)."""

    @property
    def table(self) -> TableAttr: ...
    @property
    def placement(self) -> PlacementAttr: ...
    @property
    def slots(self) -> DenseArrayBase: ...
    @property
    def attributes(self) -> dict[str, Attribute]: ...


def _table_entry(
    op: TableOpView,
    features: Sequence[FeatureAttr],
    world: int,
    batch: int,
) -> TableEntry:
    table: TableAttr = op.table
    placement: PlacementAttr = op.placement
    kind = placement.kind.data
    rows, dim = table.rows.data, table.dim.data
    eb = elem_bytes(table.dtype)
    owners = tuple(placement.owner_ranks(world))
    pf = sum(f.pooling_factor.data for f in features)
    if kind == PlacementKind.DATA_PARALLEL:
        lookups = batch * pf
        bags = batch
        table_bytes = tuple(rows * dim * eb for _ in owners)
    elif kind == PlacementKind.ROW_WISE:
        lookups = batch * world * pf / len(owners)
        bags = world * batch
        bounds = placement.bounds
        table_bytes = tuple((e - b) * dim * eb for b, e in zip(bounds, bounds[1:]))
    else:
        lookups = batch * world * pf
        bags = world * batch
        table_bytes = (rows * dim * eb,)
    slots = len(op.slots) if len(op.slots) else max(1, len(features))
    return TableEntry(
        name=table.name_str,
        group=_group_name(op),
        rows=rows,
        dim=dim,
        dtype=str(table.dtype),
        dtype_bytes=eb,
        pooling=table.pooling.data,
        placement=kind,
        owner_ranks=owners,
        features=tuple(f.feature_name.data for f in features),
        pooling_factor=pf,
        lookups_per_rank=lookups,
        bytes_gathered=lookups * dim * eb,
        table_bytes_per_owner=table_bytes,
        workspace_bytes=bags * dim * slots * eb,
    )


def value_label(value: SSAValue) -> str:
    """A short readable name of a value: what produced it."""
    op = value.owner
    if isinstance(value, BlockArgument):
        return f"arg{value.index}"
    assert isinstance(value, OpResult) and isinstance(op, Operation)
    if isinstance(op, TABLE_OPS):
        return f"{op.name.split('.')[-1]}:{op.table.name_str}"
    if isinstance(op, DenseOp):
        return f"@{op.callee.root_reference.data}[{value.index}]"
    if isinstance(op, RouteOp):
        names = {id(op.lengths): "lengths", id(op.indices): "indices", id(op.splits): "splits"}
        return f"route:{names.get(id(value), 'weights')}"
    return f"{op.name}[{value.index}]"


def _layout_slots(op: CollectiveOp) -> tuple[LayoutSlot, ...]:
    inputs = op.inputs if isinstance(op, AllToAllOp | AllToAllStartOp | AllReduceOp | AllReduceStartOp) else [op.input]
    slots: list[LayoutSlot] = []
    for value in inputs:
        pack = value.owner
        if not isinstance(pack, PackOp):
            continue
        rank = pack.rank.value.data if pack.rank is not None else None
        for s, seg in enumerate(pack.layout.segments):
            for m, (off, size) in enumerate(seg):
                if off == DYNAMIC:
                    slots.append(LayoutSlot(value_label(pack.members[m]), rank, s, None, None))
                elif size:
                    slots.append(LayoutSlot(value_label(pack.members[m]), rank, s, off, size))
    return tuple(slots)


def _collective_entry(op: CollectiveOp, index: int, phase: str, sizer: Sizer) -> CollectiveEntry:
    group = op.group.rank_list
    g = len(group)
    B = sizer.batch
    if isinstance(op, AllToAllOp | AllToAllStartOp):
        data_type = op.output_types()[0]
        elems, sizing = sizer.a2a_elems(op)
        eb = elem_bytes(data_type)
        if elems is None:
            matrix = [[0] * g for _ in range(g)]
        else:
            matrix = [[round(elems[s][p] * B * eb) for p in range(g)] for s in range(g)]
    else:
        inputs = list(op.inputs) if isinstance(op, AllReduceOp | AllReduceStartOp) else [op.input]
        data_type = inputs[0].type
        eb = elem_bytes(data_type)
        matrix = [[0] * g for _ in range(g)]
        elems = sizer.elems(inputs[0]) if len(inputs) == 1 else None
        sizes = [b for b in (sizer.value_bytes(v) for v in inputs) if b is not None]
        total = None if len(sizes) < len(inputs) else sum(sizes)
        static_shape = all(d >= 0 for v in inputs for d in cast(TensorType, v.type).get_shape())  # verified
        sizing = (
            "static"
            if static_shape or (total is not None and not any(_is_estimate(v) for v in inputs))
            else "estimated"
        )
        if total is None:
            sizing = "unknown"
        if isinstance(op, ReduceScatterOp):
            # Direct reduce-scatter: rank s sends segment p of its input to rank p.
            if elems is not None and all(len(row) == g for row in elems):
                matrix = [[round(elems[s][p] * B * eb) for p in range(g)] for s in range(g)]
            elif total is not None:
                matrix = [[round(total / g)] * g for _ in range(g)]
        elif total is not None and g > 1:
            # Ring all-reduce: every rank sends 2 (G-1)/G of the buffer to its successor.
            for s in range(g):
                matrix[s][(s + 1) % g] = round(2 * (g - 1) / g * total)
    roles = tuple(op.role.role_list)
    return CollectiveEntry(
        index=index,
        op_name=op.name,
        roles=roles,
        group=_group_name(op),
        group_ranks=tuple(group),
        dtype=str(cast(TensorType, data_type).element_type),  # collectives exchange tensors (verified)
        elem_bytes=eb,
        phase=phase,
        bytes_matrix=tuple(tuple(row) for row in matrix),
        sizing=sizing,
        layout=_layout_slots(op),
        op=op,
    )


def _producer(value: SSAValue, step: StepOp) -> tuple[Operation | None, str]:
    """The graph node that produces `value`, and the edge kind from it."""
    if isinstance(value, OpResult):
        return value.owner, "ssa"
    if isinstance(value, BlockArgument) and value.block is step.backward.block:
        fwd_yield = step.forward.block.last_op
        n_out = step.num_outputs.data
        if isinstance(fwd_yield, YieldOp) and value.index < len(fwd_yield.values):
            src = fwd_yield.values[value.index]
            owner = src.owner if isinstance(src, OpResult) else None
            return owner, ("grad" if value.index < n_out else "saved")
    return None, ""


def _build_graph(step: StepOp, phases: dict[Operation, str]) -> nx.DiGraph[Operation]:
    graph: nx.DiGraph[Operation] = nx.DiGraph()
    nodes = [op for op in phases if _is_node(op, step)]
    for i, op in enumerate(nodes):
        label = op.name
        if isinstance(op, TABLE_OPS):
            label += f":{op.table.name_str}"
        elif isinstance(op, DenseOp):
            label += f" @{op.callee.root_reference.data}"
        graph.add_node(op, kind=op.name, phase=phases[op], index=i, label=label)

    def add(u: Operation, v: Operation, kind: str) -> None:
        if u is not v and u in graph and v in graph and not graph.has_edge(u, v):
            graph.add_edge(u, v, kind=kind)

    for op in nodes:
        for operand in op.operands:
            src, kind = _producer(operand, step)
            if src is not None:
                add(src, op, kind)
        parent = op.parent_op()
        if isinstance(parent, ParallelOp):
            add(op, parent, "ssa")
    forward_dense = {
        op.callee.root_reference.data: op for op in nodes if isinstance(op, DenseOp) and phases[op] == "forward"
    }
    for op in nodes:
        if isinstance(op, DenseOp) and phases[op] == "backward":
            fwd = forward_dense.get(op.callee.root_reference.data)
            if fwd is not None:
                add(fwd, op, "adjoint")
    collectives = [op for op in nodes if isinstance(op, COLLECTIVE_OPS)]
    for a, b in zip(collectives, collectives[1:]):
        add(a, b, "order")
    if not nx.is_directed_acyclic_graph(graph):  # pragma: no cover - the IR is in SSA order
        raise ValueError(f"the dependency graph of @{step.sym_name.data} has a cycle")
    return graph


def build_srsv(step: StepOp, batch: int | None = None) -> SRSV:
    """The SRSV of a lifted step. `batch` defaults to the step's `batch` attribute."""
    if batch is None:
        batch = step_batch(step)
        if batch is None:
            raise ValueError(
                f"sched.step @{step.sym_name.data} has no integer 'batch' attribute: pass the local batch explicitly"
            )
    if batch < 1:
        raise ValueError(f"the local batch must be positive, got {batch}")
    world = step.world_size.data
    sizer = Sizer(world, batch)
    phases = dict(step_ops(step))
    features = _table_features(step)

    # One entry per table, from its lookup (whose slots say how many features it serves), or
    # from its update or gradient op when a later pass fused the lookup away.
    first: dict[str, TableOp] = {}
    for op in phases:
        if isinstance(op, TABLE_OPS):
            name = op.table.name_str
            if name not in first or (isinstance(op, LookupOp) and not isinstance(first[name], LookupOp)):
                first[name] = op
    tables = [_table_entry(op, features.get(name, []), world, batch) for name, op in first.items()]
    collectives: list[CollectiveEntry] = []
    for op, phase in phases.items():
        if isinstance(op, COLLECTIVE_OPS):
            collectives.append(_collective_entry(op, len(collectives), phase, sizer))
    return SRSV(
        step_name=step.sym_name.data,
        world_size=world,
        batch=batch,
        tables=tuple(tables),
        collectives=tuple(collectives),
        graph=_build_graph(step, phases),
    )


def steps_of(module: ModuleOp) -> list[StepOp]:
    return [op for op in module.walk() if isinstance(op, StepOp)]


@dataclass(frozen=True)
class PrintSRSV(ModulePass):
    """Print the SRSV table of every `sched.step` to stdout; the IR is left as it is."""

    name = "print-srsv"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from xdsl.utils.exceptions import PassFailedException

        for step in steps_of(op):
            try:
                view = build_srsv(step)
            except ValueError as e:
                raise PassFailedException(f"print-srsv: {e}") from None
            print(view.to_table(), end="", flush=True)


__all__ = [
    "TableEntry",
    "LayoutSlot",
    "CollectiveEntry",
    "SRSV",
    "build_srsv",
    "step_batch",
    "table_names",
    "peak_inflight",
    "step_ops",
    "steps_of",
    "value_label",
    "elem_bytes",
    "attr_int",
    "PrintSRSV",
    "Sizer",
    "COLLECTIVE_OPS",
    "TABLE_OPS",
]
