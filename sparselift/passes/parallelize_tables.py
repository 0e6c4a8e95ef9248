"""`parallelize-tables{groups=2 max-workspace-bytes=... backend=cpu}`: table-local ops in lanes.

In each region of a `sched.step`, table-local ops (`sparse.lookup`, `sparse.lookup_update`,
`sparse.lookup_grad`, `sparse.fused_lookup`, `sparse.fused_lookup_update`, `sparse.pack`) that
do not depend on each other become one `sched.parallel` of up to `groups` lanes. Each lane holds
its ops in program order and yields their results; users read the `sched.parallel`'s results.
The plan module runs the lanes concurrently (`rt.parallel`: a persistent thread pool on CPU,
where the C kernels and torch ops release the GIL; one stream per lane, with events, on CUDA).
Training is unchanged: lanes touch disjoint tables and read only values defined before them.

Grouping: ops are visited in program order. An op joins the current group when the SRSV
dependency graph says it is independent of every member and it touches none of their tables (a
lookup and an update of one table conflict although no value links them). Other local ops may
sit between members (the `sched.parallel` takes the last member's place, so they stay before it)
unless they depend on a member; dense regions, collectives and nested `sched.parallel`s end the
group, so nothing moves across them.

Partition: ops only run on the ranks that own their tables, so the balance that counts is per
rank: greedy LPT on the SRSV workload (bytes gathered per owner rank; a pack's buffer bytes),
largest op first, each into the lane where the busiest of its ranks ends up least loaded.

Feasibility checks; a refusal leaves the IR as it was plus a `#sched.remark` naming the check:
- lanes: `groups` below 2 leaves nothing to do (remark on the step);
- backend: `cpu` and `cuda` run lanes concurrently, other backends (e.g. `none`) do not (remark
  on the step);
- independence: an op that depends on (or shares a table with) the group before it starts a new
  group, and a group needs one rank that runs at least two of its ops;
- with-dense-grads: a replicated table's update whose gradient rides in the dense gradients'
  all-reduce (`with_dense_grads`) runs after backward, outside any lane (remark on the update);
- workspace: on every rank the lanes' peak outputs together (each lane's largest output, all
  lanes at once, sized from the SRSV for the batch) must fit in `max-workspace-bytes`; fewer
  lanes are tried before the group is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DenseArrayBase, ModuleOp
from xdsl.ir import Attribute, Block, Operation, Region
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from sparselift.ir.coll import AllReduceOp, WaitOp
from sparselift.ir.sched import DenseOp, ParallelOp, StepOp, YieldOp
from sparselift.ir.sparse import (
    FusedLookupOp,
    FusedLookupUpdateOp,
    FusedTableOp,
    LookupGradOp,
    LookupOp,
    LookupUpdateOp,
    PackOp,
    PlacementAttr,
    TableAttr,
)
from sparselift.passes.remarks import remark
from sparselift.passes.srsv import (
    COLLECTIVE_OPS,
    SRSV,
    Sizer,
    _table_entry,
    _table_features,
    build_srsv,
    step_batch,
)

BACKENDS = ("cpu", "cuda")
"""Backends whose runtime runs `sched.parallel` lanes concurrently."""


PASS_NAME = "parallelize-tables"  # whose remarks these are


@dataclass(frozen=True)
class ParallelizeTables(ModulePass):
    """Run independent table-local ops in concurrent lanes (see the module docstring)."""

    name = "parallelize-tables"

    groups: int = 2
    max_workspace_bytes: int = 1 << 30
    backend: str = "cpu"
    batch: int = 0  # local batch for the SRSV sizes; 0: the step's `batch` attribute (else 1)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for step in [s for s in op.walk() if isinstance(s, StepOp)]:
            if self.groups < 2:
                remark(step, PASS_NAME, "lanes", f"nothing to do: groups={self.groups}, at least 2 lanes are needed")
                continue
            if self.backend not in BACKENDS:
                remark(
                    step,
                    PASS_NAME,
                    "backend",
                    f"not parallelized: backend '{self.backend}' cannot run lanes concurrently; "
                    f"supported: {', '.join(BACKENDS)}",
                )
                continue
            view = build_srsv(step, self.batch or step_batch(step) or 1)
            sizes = _Sizes(step, view)
            for region in (step.forward, step.backward):
                _Grouper(region.block, view, sizes, self.groups, self.max_workspace_bytes).run()


# -- what an op costs, per rank ----------------------------------------------------------------


@dataclass(frozen=True)
class _TableView:
    """What `_table_entry` reads of a per-table op, for one table of a fused kernel."""

    table: TableAttr
    placement: PlacementAttr
    slots: DenseArrayBase
    attributes: dict[str, Attribute]


def _tables(op: Operation) -> list[tuple]:
    """(table, placement, slots) of every table `op` touches."""
    if isinstance(op, FusedTableOp):
        return list(zip(op.tables.data, op.placements.data, op.slots.data))
    if isinstance(op, LookupOp | LookupUpdateOp | LookupGradOp):
        return [(op.table, op.placement, op.slots)]
    return []


def is_candidate(op: Operation) -> bool:
    # A fused table gradient stays where generate-kernels put it (before its all-reduce), and so
    # does an update that waits for the dense gradients' all-reduce (it runs after backward).
    if isinstance(op, LookupUpdateOp) and _rides_with_dense_grads(op):
        return False
    return isinstance(op, LookupOp | LookupUpdateOp | LookupGradOp | PackOp | FusedLookupOp | FusedLookupUpdateOp)


def _rides_with_dense_grads(op: LookupUpdateOp) -> bool:
    source = op.grad.owner if op.dense else None
    return isinstance(source, AllReduceOp) and source.with_dense_grads is not None


class _Sizes:
    """Per-rank workload (bytes gathered) and output bytes of the step's table-local ops."""

    def __init__(self, step: StepOp, view: SRSV):
        self.view = view
        self.world = step.world_size.data
        self.sizer = Sizer(self.world, view.batch)
        self.features = _table_features(step)

    def _entry(self, op: Operation, table, placement, slots):
        try:
            return self.view.table(table.name_str)
        except KeyError:  # fused into a kernel before the SRSV was built: size it the same way
            view = _TableView(table, placement, slots, dict(op.attributes))
            return _table_entry(view, self.features.get(table.name_str, []), self.world, self.view.batch)

    def ranks(self, op: Operation) -> list[int]:
        if isinstance(op, PackOp):
            return [op.rank.value.data] if op.rank is not None else list(range(self.world))
        return sorted({r for _, p, _ in _tables(op) for r in p.owner_ranks(self.world)})

    def load(self, op: Operation) -> dict[int, float]:
        """Bytes the op moves on each rank it runs on (the LPT weight)."""
        if isinstance(op, PackOp):
            return dict.fromkeys(self.ranks(op), self.sizer.buffer_bytes(op))
        out = dict.fromkeys(self.ranks(op), 0.0)
        for table, placement, slots in _tables(op):
            entry = self._entry(op, table, placement, slots)
            dense = isinstance(op, LookupUpdateOp) and op.dense
            for i, r in enumerate(entry.owner_ranks):
                out[r] += entry.table_bytes_per_owner[i] if dense else entry.bytes_gathered
        return out

    def output(self, op: Operation) -> dict[int, float]:
        """Bytes of the op's results on each rank it runs on (updates produce none)."""
        if isinstance(op, PackOp):
            return dict.fromkeys(self.ranks(op), self.sizer.buffer_bytes(op))
        out = dict.fromkeys(self.ranks(op), 0.0)
        for table, placement, slots in _tables(op) if op.results else []:
            entry = self._entry(op, table, placement, slots)
            for i, r in enumerate(entry.owner_ranks):
                out[r] += entry.table_bytes_per_owner[i] if isinstance(op, LookupGradOp) else entry.workspace_bytes
        return out


def _describe(op: Operation) -> str:
    tables = [t.name_str for t, _, _ in _tables(op)]
    if not tables:
        return op.name
    shown = ", ".join(f"'{t}'" for t in tables[:3]) + (f", ... ({len(tables)} tables)" if len(tables) > 3 else "")
    return f"{op.name} of table{'s' if len(tables) > 1 else ''} {shown}"


def _ends_group(op: Operation) -> bool:
    """Ops nothing is moved across: dense regions, collectives, nested lanes, the terminator."""
    return isinstance(op, (DenseOp, YieldOp, ParallelOp, WaitOp, *COLLECTIVE_OPS))


def _partition(ops: Sequence[Operation], loads: dict, lanes: int) -> list[list[Operation]]:
    """Greedy LPT per rank: the largest op first, into the lane whose load on the op's busiest
    rank grows least (then the lane with the fewest ops there, then the lowest index)."""
    lane_load: list[dict[int, float]] = [{} for _ in range(lanes)]
    lane_ops: list[dict[int, int]] = [{} for _ in range(lanes)]
    assigned: list[list[Operation]] = [[] for _ in range(lanes)]
    order = sorted(range(len(ops)), key=lambda i: (-max(loads[ops[i]].values(), default=0.0), i))
    for i in order:
        w = loads[ops[i]]
        k = min(
            range(lanes),
            key=lambda k: (
                max((lane_load[k].get(r, 0.0) + b for r, b in w.items()), default=0.0),
                max((lane_ops[k].get(r, 0) for r in w), default=0),
                k,
            ),
        )
        for r, b in w.items():
            lane_load[k][r] = lane_load[k].get(r, 0.0) + b
            lane_ops[k][r] = lane_ops[k].get(r, 0) + 1
        assigned[k].append(ops[i])
    position = {op: i for i, op in enumerate(ops)}
    return [sorted(lane, key=position.__getitem__) for lane in assigned if lane]


class _Grouper:
    def __init__(self, block: Block, view: SRSV, sizes: _Sizes, groups: int, max_workspace: int):
        self.block, self.view, self.sizes = block, view, sizes
        self.groups, self.max_workspace = groups, max_workspace
        self.blocked: dict[Operation, str] = {}  # op -> why it could not join the group before it

    def run(self) -> None:
        group: list[Operation] = []
        for op in list(self.block.ops):
            if _ends_group(op):
                self.flush(group)
                group = []
            elif isinstance(op, LookupUpdateOp) and _rides_with_dense_grads(op):
                remark(
                    op, PASS_NAME, "with-dense-grads", "not in a lane: it runs after the dense gradients' all-reduce"
                )
                if any(not self.view.independent(m, op) for m in group):
                    self.flush(group)
                    group = []
            elif is_candidate(op):
                reason = self.conflict(group, op)
                if reason is not None:
                    self.flush(group)
                    self.blocked[op] = reason
                    group = []
                group.append(op)
            elif any(not self.view.independent(m, op) for m in group):
                # A local op that reads the group: the group cannot move past it.
                self.flush(group)
                group = []
        self.flush(group)

    def conflict(self, group: list[Operation], op: Operation) -> str | None:
        mine = {t.name_str for t, _, _ in _tables(op)}
        for m in group:
            if not self.view.independent(m, op):
                return f"not parallelized with the ops before it: it depends on {_describe(m)}"
            shared = mine & {t.name_str for t, _, _ in _tables(m)}
            if shared:
                return (
                    f"not parallelized with the ops before it: {_describe(m)} also touches table '{sorted(shared)[0]}'"
                )
        return None

    def flush(self, group: list[Operation]) -> None:
        if len(group) < 2:
            for op in group:
                if op in self.blocked:
                    remark(op, PASS_NAME, "independence", self.blocked[op])
            return
        per_rank: dict[int, int] = {}
        for op in group:
            for r in self.sizes.ranks(op):
                per_rank[r] = per_rank.get(r, 0) + 1
        busiest = max(per_rank.values(), default=0)
        if busiest < 2:
            remark(
                group[0],
                PASS_NAME,
                "independence",
                f"not parallelized: {len(group)} independent ops, but no rank runs more than one of them",
            )
            return
        loads = {op: self.sizes.load(op) for op in group}
        outputs = {op: self.sizes.output(op) for op in group}
        wanted = min(self.groups, busiest)
        tried: list[tuple[int, int, int]] = []  # (lanes, rank, bytes) of the partitions over the cap
        for lanes in range(wanted, 1, -1):
            partition = _partition(group, loads, lanes)
            rank, held = _workspace(partition, outputs)
            if held <= self.max_workspace:
                par = _wrap(group, partition)
                if tried:
                    _, r0, b0 = tried[0]
                    remark(
                        par,
                        PASS_NAME,
                        "workspace",
                        f"{lanes} lanes instead of {wanted}: {wanted} would hold {b0} bytes of "
                        f"outputs at once on rank {r0}, over max-workspace-bytes {self.max_workspace}",
                    )
                return
            tried.append((lanes, rank, held))
        _, rank, held = tried[-1]
        remark(
            group[0],
            PASS_NAME,
            "workspace",
            f"not parallelized: 2 concurrent lanes would hold {held} bytes of outputs at "
            f"once on rank {rank}, over max-workspace-bytes {self.max_workspace}",
        )


def _workspace(partition: list[list[Operation]], outputs: dict) -> tuple[int, int]:
    """(rank, bytes) of the rank whose lanes hold the most at once: per lane its largest output."""
    per_rank: dict[int, float] = {}
    for lane in partition:
        peak: dict[int, float] = {}
        for op in lane:
            for r, b in outputs[op].items():
                peak[r] = max(peak.get(r, 0.0), b)
        for r, b in peak.items():
            per_rank[r] = per_rank.get(r, 0.0) + b
    if not per_rank:
        return 0, 0
    rank = max(sorted(per_rank), key=per_rank.__getitem__)
    return rank, round(per_rank[rank])


def _wrap(group: list[Operation], partition: list[list[Operation]]) -> ParallelOp:
    """Move the lanes' ops into one `sched.parallel` at the place of the group's last op (in
    program order); its users read the parallel's results."""
    last = group[-1]
    results = [r for lane in partition for op in lane for r in op.results]
    par = ParallelOp([Region(Block()) for _ in partition], [r.type for r in results])
    Rewriter.insert_op(par, InsertPoint.after(last))
    for lane, region in zip(partition, par.lanes):
        for op in lane:
            op.detach()
            region.block.add_op(op)
    for old, new in zip(results, par.res):
        old.replace_all_uses_with(new)
    for lane, region in zip(partition, par.lanes):
        region.block.add_op(YieldOp(*[r for op in lane for r in op.results]))
    return par


__all__ = ["ParallelizeTables", "BACKENDS", "is_candidate"]
