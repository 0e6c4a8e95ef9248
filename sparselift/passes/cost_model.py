"""The analytic cost model: every formula that turns bytes, lookups and FLOPs into microseconds.

`annotate-cost` (per IR op), the planner's predictions (`plan_predict.Predictor`, per op and
category) and the large-world projection (`simulate._StepModel`, closed form over a `Workload`)
all price work with the functions here, so the three cannot drift apart. Each returns a
`CostTerms`: microseconds split into the categories the runtime planner fits one scale each
(`CATEGORIES`), plus the `bytes` and `lookups` counters `annotate-cost` writes in `#sched.cost`.

Primitives (functions of a `HardwareProfile`; see its docstring for the profile terms):

- `lookup`: `fixed` (launch + lookup overhead) + the gathered bytes over the gather bandwidth,
  + `reference`: what the reference lowering's per-table torch ops cost besides that work (their
  torch dispatches, `reference_op_us`; their per-id passes: bag geometry, masks, scaling,
  `reference_lookup_ns` per id; and their row passes: scale, scatter, `reference_byte_ns` per
  gathered byte);
- `sparse_update`: the same rows `update_factor` times (read row and gradient, write the row),
  + `reference` (`reference_op_us`, `reference_update_ns` per id, `reference_byte_ns` per byte);
- `dense_grad`: zero-fill a table-sized gradient (`copy / 2`) and scatter the rows into it
  (+ `reference`, as an update);
  `dense_apply`: apply it (read table and gradient, write the table: `1.5 copy`);
- `copy_op`: a pack, unpack or route of `n` bytes: a launch + `copy(n)`; `stream`: `copy(n)` alone;
- `exchange`: `coll_alpha_us + coll_peer_alpha_us x messages + ` the busiest rank's link time,
  with the link time from a bytes matrix (`matrix_link_us`, busiest sender) or from the
  closed form `b[s][p] = u[s] + v[p]` (`uv_exchange`, busiest sender or receiver);
  `ring_all_reduce`: `2 (N - 1)` steps of `S / N` bytes on the ring's slowest link;
- `dense`: FLOPs over `flops_per_s` (plus launches, where the caller counts regions);
  `optimizer_step`: a launch + `1.5 copy` of the parameters;
- `fused_kernel`: one launch + one overhead, plus its tables' gathers, updates or zero-fill +
  updates (a fused kernel saves launches, overheads and the reference lowering's per-id torch
  passes, not the work).

`op_terms` prices one op of a lifted or optimized step; a per-table op's `reference` term applies
only where its step runs the reference lowering (`sched.step`'s `kernels`). A fused op's tables are sized from the
step's SRSV when it has them, else from the optional `tables` mapping, else from the IR itself
(the fused op's table, placement and slots and the step's route features, as `build_srsv`
sizes a per-table op). No torch here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import attrs
from xdsl.dialects.builtin import DenseArrayBase
from xdsl.ir import Attribute, Operation

from sparselift.ir.coll import AllReduceOp, AllReduceStartOp, AllToAllOp, AllToAllStartOp, WaitOp
from sparselift.ir.sched import DenseOp, StepOp
from sparselift.ir.sparse import (
    CompactRowsOp,
    ExpandRowsOp,
    FusedLookupGradOp,
    FusedLookupUpdateOp,
    FusedTableOp,
    GatherRowsOp,
    JoinSegmentsOp,
    LookupGradOp,
    LookupOp,
    LookupUpdateOp,
    PackOp,
    RouteOp,
    RowsUpdateOp,
    SplitSegmentsOp,
    SumRowsOp,
    TakeRowsOp,
    UnpackOp,
)
from sparselift.ir.sparse_attrs import PlacementAttr, TableAttr
from sparselift.passes.profiles import HardwareProfile
from sparselift.passes.srsv import (
    COLLECTIVE_OPS,
    SRSV,
    CollectiveEntry,
    Sizer,
    TableEntry,
    _table_entry,
    _table_features,
    attr_int,
    elem_bytes,
)
from sparselift.passes.srsv_rows import joined_sides

CATEGORIES = ("coll_alpha", "coll_beta", "gather", "update", "copy", "fixed", "dense", "reference")
"""Cost categories; the runtime planner fits one scale per category (`sparselift.cost_fit`)."""

_US_PER_S = 1e6


@attrs.frozen
class CostTerms:
    """Microseconds per category, and the bytes moved and rows looked up (counters, not time)."""

    coll_alpha: float = 0.0
    coll_beta: float = 0.0
    gather: float = 0.0
    update: float = 0.0
    copy: float = 0.0
    fixed: float = 0.0
    dense: float = 0.0
    reference: float = 0.0
    bytes: float = 0.0
    lookups: float = 0.0

    @property
    def total(self) -> float:
        return sum(getattr(self, c) for c in CATEGORIES)

    def plus(self, other: CostTerms) -> CostTerms:
        return CostTerms(*(a + b for a, b in zip(attrs.astuple(self), attrs.astuple(other))))

    def as_dict(self) -> dict[str, float]:
        """Category -> microseconds (every category, zeros included)."""
        return {c: getattr(self, c) for c in CATEGORIES}


def total_of(terms: Iterable[CostTerms]) -> CostTerms:
    out = CostTerms()
    for t in terms:
        out = out.plus(t)
    return out


# --------------------------------------------------------------------------------------
# Primitives
# --------------------------------------------------------------------------------------


def table_fixed_us(p: HardwareProfile) -> float:
    """What one table op costs besides its rows: a launch and the lookup overhead."""
    return p.kernel_launch_us + p.lookup_overhead_us


def reference_us(p: HardwareProfile, kind: str, lookups: float, gathered_bytes: float) -> float:
    """What one per-table op of the reference lowering costs besides the work a generated kernel
    also does (`kind`: lookup | update): its torch dispatches, per-id passes and row passes."""
    per_id_ns = p.reference_lookup_ns if kind == "lookup" else p.reference_update_ns
    return p.reference_op_us + (per_id_ns * lookups + p.reference_byte_ns * gathered_bytes) / 1e3


def lookup(p: HardwareProfile, gathered_bytes: float, lookups: float = 0.0) -> CostTerms:
    """A per-table gather and pool (the reference lowering's; `fused_kernel` prices generated ones)."""
    return CostTerms(
        gather=p.gather_us(gathered_bytes),
        fixed=table_fixed_us(p),
        reference=reference_us(p, "lookup", lookups, gathered_bytes),
        bytes=gathered_bytes,
        lookups=lookups,
    )


def sparse_update(p: HardwareProfile, gathered_bytes: float, lookups: float = 0.0) -> CostTerms:
    """Backward + optimizer on the gathered rows: read the row and its gradient, write the row."""
    return CostTerms(
        update=p.update_factor * p.gather_us(gathered_bytes),
        fixed=table_fixed_us(p),
        reference=reference_us(p, "update", lookups, gathered_bytes),
        bytes=2 * gathered_bytes,
        lookups=lookups,
    )


def dense_grad(p: HardwareProfile, table_bytes: float, gathered_bytes: float, lookups: float = 0.0) -> CostTerms:
    """A replicated table's whole-table gradient: zero-fill it and scatter the rows into it."""
    return CostTerms(
        copy=0.5 * p.copy_us(table_bytes),
        update=p.update_factor * p.gather_us(gathered_bytes),
        fixed=table_fixed_us(p),
        reference=reference_us(p, "update", lookups, gathered_bytes),
        bytes=table_bytes + 2 * gathered_bytes,
        lookups=lookups,
    )


def dense_apply(p: HardwareProfile, table_bytes: float, rows: float = 0.0) -> CostTerms:
    """Apply a whole-table gradient: stream the table, the gradient and the updated table."""
    return CostTerms(copy=1.5 * p.copy_us(table_bytes), fixed=table_fixed_us(p), bytes=3 * table_bytes, lookups=rows)


def stream(p: HardwareProfile, nbytes: float) -> CostTerms:
    """Copy `nbytes` inside another op (no launch of its own)."""
    return CostTerms(copy=p.copy_us(nbytes), bytes=nbytes)


def copy_op(p: HardwareProfile, nbytes: float, counted_bytes: float | None = None) -> CostTerms:
    """A pack, unpack or route that copies `nbytes` (`counted_bytes`: what `#sched.cost` reports)."""
    return CostTerms(
        copy=p.copy_us(nbytes), fixed=p.kernel_launch_us, bytes=nbytes if counted_bytes is None else counted_bytes
    )


def exchange(p: HardwareProfile, messages: int, link_us: float, sent_bytes: float) -> CostTerms:
    """An all-to-all-like collective: alpha, per-peer alpha per message, the busiest link's time."""
    return CostTerms(coll_alpha=p.coll_alpha_us + p.coll_peer_alpha_us * messages, coll_beta=link_us, bytes=sent_bytes)


def matrix_link_us(p: HardwareProfile, bytes_matrix: Sequence[Sequence[float]], ranks: Sequence[int]) -> float:
    """The busiest sender's link time: max over s of sum over p != s of `b[s][p] beta(s, p)`."""
    worst = 0.0
    for s, row in enumerate(bytes_matrix):
        t = 0.0
        for q, nbytes in enumerate(row):
            if q != s:
                t += nbytes * p.beta_us_per_byte(ranks[s], ranks[q])
        worst = max(worst, t)
    return worst


def collective_messages(entry: CollectiveEntry) -> int:
    """Peer messages per rank: `2 (G-1)` ring steps for an all-reduce, `G-1` peers otherwise."""
    g = entry.size
    return 2 * (g - 1) if isinstance(entry.op, AllReduceOp | AllReduceStartOp) else g - 1


def collective(entry: CollectiveEntry, p: HardwareProfile) -> CostTerms:
    """A collective of the step as its SRSV sizes it (busiest sender; `bytes`: most bytes one rank sends).
    One that rides in the dense gradients' all-reduce (`with_dense_grads`) costs only its bytes."""
    link = matrix_link_us(p, entry.bytes_matrix, entry.group_ranks)
    if isinstance(entry.op, AllReduceOp) and entry.op.with_dense_grads is not None:
        return CostTerms(coll_beta=link, bytes=entry.max_sent_bytes)
    return exchange(p, collective_messages(entry), link, entry.max_sent_bytes)


def _node_sums(x: Sequence[float], node_of: Sequence[int], nodes: int) -> list[float]:
    sums = [0.0] * nodes
    for r, value in enumerate(x):
        sums[node_of[r]] += value
    return sums


def uv_exchange(p: HardwareProfile, u: Sequence[float] | None, v: Sequence[float] | None, world: int) -> CostTerms:
    """The exchange where rank s sends rank p `u[s] + v[p]` bytes (s != p), in O(N): the busiest
    sender or receiver (a rank's link serializes its messages) sets the pace."""
    if world == 1:
        return CostTerms()
    n = p.ranks_per_node
    node_of = [r // n for r in range(world)]
    nodes = node_of[-1] + 1
    node_size = [min(n, world - k * n) for k in range(nodes)]
    beta_in = _US_PER_S / (p.net_bw_gbps * 1e9)
    beta_x = _US_PER_S / (p.inter_node_bw_gbps * 1e9)
    uu = list(u) if u is not None else [0.0] * world
    vv = list(v) if v is not None else [0.0] * world
    u_node, v_node = _node_sums(uu, node_of, nodes), _node_sums(vv, node_of, nodes)
    u_all, v_all = sum(uu), sum(vv)
    worst = max_sent = 0.0
    for r in range(world):
        k = node_of[r]
        per_peer = (node_size[k] - 1) * beta_in + (world - node_size[k]) * beta_x
        send = uu[r] * per_peer + beta_in * (v_node[k] - vv[r]) + beta_x * (v_all - v_node[k])
        recv = vv[r] * per_peer + beta_in * (u_node[k] - uu[r]) + beta_x * (u_all - u_node[k])
        worst = max(worst, send, recv)
        max_sent = max(max_sent, uu[r] * (world - 1) + v_all - vv[r])
    return exchange(p, world - 1, worst, max_sent)


def ring_all_reduce(p: HardwareProfile, world: int, nbytes: float) -> CostTerms:
    """`2 (N-1)` ring steps of `S / N` bytes, on the slower link once the ring spans nodes."""
    if world == 1 or nbytes <= 0:
        return CostTerms()
    one_node = world <= p.ranks_per_node
    bw = p.net_bw_gbps if one_node else min(p.net_bw_gbps, p.inter_node_bw_gbps)
    beta = _US_PER_S / (bw * 1e9)
    steps = 2 * (world - 1)
    return exchange(p, steps, steps * (nbytes / world * beta), steps / world * nbytes)


def dense(p: HardwareProfile, flops: float, launches: int = 0) -> CostTerms:
    """Dense compute: FLOPs over the achieved rate, plus `launches` kernel launches."""
    return CostTerms(dense=p.flops_us(flops), fixed=p.kernel_launch_us * launches)


def optimizer_step(p: HardwareProfile, param_bytes: float) -> CostTerms:
    """The dense optimizer: read the parameters and gradients, write the parameters (one launch)."""
    if not param_bytes:
        return CostTerms()
    return CostTerms(copy=1.5 * p.copy_us(param_bytes), fixed=p.kernel_launch_us, bytes=3 * param_bytes)


def fused_kernel(p: HardwareProfile, kind: str, entries: Sequence[TableEntry]) -> CostTerms:
    """One generated call over `entries`' tables (`kind`: lookup | update | grad): one launch and
    one overhead, and the work of every table (their gathers, updates, or zero-fill + updates)."""
    gathered = sum(t.bytes_gathered for t in entries)
    lookups = sum(t.lookups_per_rank for t in entries)
    fixed = p.kernel_launch_us + (p.lookup_overhead_us if entries else 0.0)
    if kind == "update":
        terms = sparse_update(p, gathered, lookups)
    elif kind == "grad":
        terms = dense_grad(p, sum(t.max_table_bytes for t in entries), gathered, lookups)
    else:
        terms = lookup(p, gathered, lookups)
    return attrs.evolve(terms, fixed=fixed, reference=0.0)


# --------------------------------------------------------------------------------------
# IR ops
# --------------------------------------------------------------------------------------


def dense_flops(op: DenseOp) -> int:
    """The FLOPs the frontend wrote on a `sched.dense` (`flops` attribute), 0 when absent."""
    value = attr_int(op.attributes.get("flops"))
    return max(0, value or 0)


@dataclass(frozen=True)
class _FusedTable:
    """What `srsv._table_entry` reads of a per-table op, for one table of a fused op."""

    table: TableAttr
    placement: PlacementAttr
    slots: DenseArrayBase
    attributes: dict[str, Attribute]


def _step_of(op: Operation) -> StepOp | None:
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, StepOp):
        parent = parent.parent_op()
    return parent


def fused_entries(op: FusedTableOp, view: SRSV, tables: Mapping[str, TableEntry] | None = None) -> list[TableEntry]:
    """The `TableEntry` of every table of a fused op: the SRSV's, the caller's, or sized from the IR."""
    known = {t.name: t for t in view.tables}
    out: list[TableEntry] = []
    features = None
    for table, placement, slots in zip(op.tables.data, op.placements.data, op.slots.data):
        name = table.name_str
        if name in known:
            out.append(known[name])
        elif tables is not None and name in tables:
            out.append(tables[name])
        else:
            if features is None:
                step = _step_of(op)
                features = _table_features(step) if step is not None else {}
            entry = _FusedTable(table, placement, slots, dict(op.attributes))
            out.append(_table_entry(entry, features.get(name, []), view.world_size, view.batch))
    return out


def _fused_kind(op: FusedTableOp) -> str:
    if isinstance(op, FusedLookupUpdateOp):
        return "update"
    if isinstance(op, FusedLookupGradOp):
        return "grad"
    return "lookup"


def _table_op_terms(op: LookupOp | LookupUpdateOp | LookupGradOp, t: TableEntry, p: HardwareProfile) -> CostTerms:
    if isinstance(op, LookupOp):
        return lookup(p, t.bytes_gathered, t.lookups_per_rank)
    if isinstance(op, LookupGradOp):
        return dense_grad(p, t.max_table_bytes, t.bytes_gathered, t.lookups_per_rank)
    if op.dense:
        return dense_apply(p, t.max_table_bytes, t.rows)
    return sparse_update(p, t.bytes_gathered, t.lookups_per_rank)


def _rows_terms(op: GatherRowsOp | RowsUpdateOp | ExpandRowsOp | CompactRowsOp, view: SRSV, p: HardwareProfile):
    """The jagged rows ops: a gather or update of one row per id (one torch call, or one kernel),
    and a scatter into (or out of) the padded per-feature values on the samples' side."""
    if isinstance(op, GatherRowsOp):
        t = view.table(op.table.name_str)
        return attrs.evolve(lookup(p, t.bytes_gathered, t.lookups_per_rank), reference=0.0)
    if isinstance(op, RowsUpdateOp):
        t = view.table(op.table.name_str)
        return attrs.evolve(sparse_update(p, t.bytes_gathered, t.lookups_per_rank), reference=0.0)
    width = op.dim.value.data * len(op.members) * view.batch
    return copy_op(p, 2 * width * elem_bytes(op.rows.type))  # the padded values written (read) and the rows


def _segments_copy_bytes(op: JoinSegmentsOp | SplitSegmentsOp, sizer: Sizer) -> float:
    """Bytes a join (split) of a merged dynamic exchange copies on its busiest rank: nothing
    where a rank sends one side only (receives each side from one source only)."""
    join: object = op
    if isinstance(op, SplitSegmentsOp):
        exchange = op.buffer.owner
        if isinstance(exchange, WaitOp):
            exchange = exchange.handle.owner
        join = exchange.inputs[0].owner if isinstance(exchange, AllToAllOp | AllToAllStartOp) else None
    if not isinstance(join, JoinSegmentsOp) or (sides := joined_sides(join, sizer.elems)) is None:
        return 0.0
    ranks = range(len(sides[0]))
    a, b = sides
    if isinstance(op, JoinSegmentsOp):  # a rank sending both sides copies both
        per_rank = [sum(a[s]) + sum(b[s]) if sum(a[s]) and sum(b[s]) else 0.0 for s in ranks]
    else:  # a side received with the other's data between its sources' is concatenated
        per_rank = [_split_copy([(a[s][r], b[s][r]) for s in ranks]) for r in ranks]
    return max(per_rank) * sizer.batch * elem_bytes(join.buffer.type)


def _split_copy(received: list[tuple[float, float]]) -> float:
    """Elements a split copies, given each source's (first, second) elements: a side whose
    sources' data are interleaved with the other side's is concatenated."""
    flat = [n for pair in received for n in pair]
    copied = 0.0
    for side in (0, 1):
        filled = [i for i in range(side, len(flat), 2) if flat[i]]
        if filled and any(flat[i] for i in range(filled[0], filled[-1] + 1) if i % 2 != side):
            copied += sum(flat[side::2])
    return copied


def op_terms(
    op: Operation,
    view: SRSV,
    profile: HardwareProfile,
    sizer: Sizer,
    tables: Mapping[str, TableEntry] | None = None,
) -> CostTerms:
    """The cost of one op of the step `view` describes, on its busiest rank, by category.

    Ops that do no work (`sparse.permute`, `sched.yield`, `sched.parallel`, `coll.wait`: its
    start carries the time) cost nothing.
    """
    p = profile
    if isinstance(op, LookupOp | LookupUpdateOp | LookupGradOp):
        terms = _table_op_terms(op, view.table(op.table.name_str), p)
        step = _step_of(op)
        # Per-table ops of a step with generated kernels are one kernel call each: no torch passes.
        return attrs.evolve(terms, reference=0.0) if step is not None and step.generated_kernels else terms
    if isinstance(op, GatherRowsOp | RowsUpdateOp | ExpandRowsOp | CompactRowsOp):
        return _rows_terms(op, view, p)
    if isinstance(op, JoinSegmentsOp | SplitSegmentsOp):
        return copy_op(p, _segments_copy_bytes(op, sizer))
    if isinstance(op, TakeRowsOp | SumRowsOp):  # one pass over the rows (the sort of unique_ids: free)
        return copy_op(p, 2 * (sizer.value_bytes(op.rows) or 0.0))
    if isinstance(op, COLLECTIVE_OPS):
        return collective(view.collective(op), p)
    if isinstance(op, PackOp | UnpackOp):
        return copy_op(p, sizer.buffer_bytes(op))
    if isinstance(op, RouteOp):
        nbytes = sizer.route_bytes(op)
        # `nbytes` counts reads and writes, as the copy bandwidth does.
        return copy_op(p, nbytes / 2, counted_bytes=nbytes)
    if isinstance(op, DenseOp):
        return dense(p, dense_flops(op))
    if isinstance(op, FusedTableOp):
        return fused_kernel(p, _fused_kind(op), fused_entries(op, view, tables))
    return CostTerms()


__all__ = [
    "CATEGORIES",
    "CostTerms",
    "collective",
    "collective_messages",
    "copy_op",
    "dense",
    "dense_apply",
    "dense_flops",
    "dense_grad",
    "exchange",
    "fused_entries",
    "fused_kernel",
    "lookup",
    "matrix_link_us",
    "op_terms",
    "optimizer_step",
    "reference_us",
    "ring_all_reduce",
    "sparse_update",
    "stream",
    "table_fixed_us",
    "total_of",
    "uv_exchange",
]
