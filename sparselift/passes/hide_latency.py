"""`hide-latency{forward=true backward=true overlap=input max-inflight-bytes=0 dense-grads=true}`.

Splits collectives into `coll.all_to_all_start` / `coll.all_reduce_start` plus `coll.wait`, and
reschedules each region of a `sched.step` so the exchanges run while independent work computes:

- forward, `overlap=input`: input exchanges start as soon as their ids are routed and are waited
  on after the independent dense regions (the bottom MLP) and the local (data-parallel) lookups;
- forward, `overlap=output`: the input exchanges are waited on at once, the lookups and the
  output exchange run first, and the independent dense regions run while the pooled embeddings
  travel (the better choice when `TrainPipeline` already hides the input exchange behind the
  previous step);
- backward: pooled-gradient exchanges and sparse-gradient all-reduces start as soon as their
  gradients exist and are waited on after the rest of the dense backward;
- `dense-grads=true` marks the step (`dense_grad_overlap`) so the runtime starts each bucket of
  the dense gradients' all-reduce as soon as backward has produced it, overlapping the sparse
  backward, instead of one all-reduce after backward (`dense-grads=false`; the planner measures
  both, since the overlap pays only where the exchange can run beside compute).

The new order is a topological order of the region's dependency graph (networkx; def-use edges
plus program-order edges that keep collectives, table updates and dense regions in their
original relative order, so every rank issues its collectives in the same order): starts and
what they need are taken as early as possible, waits as late as their first use allows.

Feasibility checks, each refusal leaving a `#sched.remark` on the collective that names the check:
- world-size: world size 1 or a one-rank group: nothing travels, nothing to hide;
- in-flight-memory: with `max-inflight-bytes` > 0, the bytes of collectives in flight at once
  (SRSV estimates for the step's batch) may not exceed it; the largest exchange in flight at the
  peak stays synchronous until the schedule fits;
- no-overlap: nothing independent to overlap: a collective whose wait would directly follow its start stays
  synchronous; input exchanges are exempt (`TrainPipeline` starts them during the previous step);
- with-dense-grads: an all-reduce that `aggregate-comm` put in the dense gradients' all-reduce
  (`with_dense_grads`) has no start of its own: the runtime runs it with them.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from sparselift.ir.coll import (
    GRAD_ROLES,
    INPUT_ROLES,
    OUTPUT_ROLES,
    AllReduceOp,
    AllReduceStartOp,
    AllToAllOp,
    AllToAllStartOp,
    HandleType,
    Role,
    WaitOp,
)
from sparselift.ir.sched import DenseOp, StepOp, values_used_from_outside
from sparselift.ir.sparse import FusedLookupUpdateOp, LookupUpdateOp
from sparselift.passes.remarks import remark
from sparselift.passes.srsv import build_srsv, peak_inflight, step_batch

BACKWARD_ROLES = GRAD_ROLES | {Role.SPARSE_GRAD, Role.DENSE_GRAD}

_Coll = AllToAllOp | AllReduceOp  # the collectives this pass splits
_Node = Operation | tuple[str, _Coll]  # a node of the schedule: an op, or ("start" | "wait", collective)


def _is_update(op: Operation) -> bool:
    return isinstance(op, LookupUpdateOp | FusedLookupUpdateOp)


@dataclass(frozen=True)
class HideLatency(ModulePass):
    """Overlap exchanges with independent work: async start/wait pairs, rescheduled."""

    name = "hide-latency"

    forward: bool = True
    backward: bool = True
    overlap: str = "input"  # input | output: which forward exchange the dense regions hide
    max_inflight_bytes: int = 0  # 0: no cap
    dense_grads: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.overlap not in ("input", "output"):
            raise PassFailedException(f"hide-latency: overlap must be 'input' or 'output', got '{self.overlap}'")
        if self.max_inflight_bytes < 0:
            raise PassFailedException(f"hide-latency: max-inflight-bytes must be >= 0, got {self.max_inflight_bytes}")
        for step in [s for s in op.walk() if isinstance(s, StepOp)]:
            self._step(step)

    def _step(self, step: StepOp) -> None:
        colls = [o for o in step.walk() if isinstance(o, AllToAllOp | AllReduceOp)]
        if step.world_size.data == 1 or not colls:
            for c in colls:
                remark(c, self.name, "world-size", "world size 1: nothing travels")
            return
        srsv = build_srsv(step, batch=step_batch(step) or 1)  # without a batch: bytes per sample
        sizes = {}
        for c in colls:
            try:
                entry = srsv.collective(c)
                sizes[c] = max(entry.sent_bytes(s) + entry.received_bytes(s) for s in range(entry.size))
            except KeyError:
                sizes[c] = 0
        regions = []
        if self.forward:
            regions.append((step.forward.block, INPUT_ROLES | OUTPUT_ROLES))
        if self.backward:
            regions.append((step.backward.block, BACKWARD_ROLES))
        for block, roles in regions:
            candidates = [
                c for c in block.ops if isinstance(c, AllToAllOp | AllReduceOp) and set(c.role.role_list) <= roles
            ]
            for c in candidates:
                if c.group.size == 1:
                    remark(c, self.name, "world-size", "one-rank group: nothing travels")
                elif isinstance(c, AllReduceOp) and c.with_dense_grads is not None:
                    remark(
                        c,
                        self.name,
                        "with-dense-grads",
                        "rides in the dense gradients' all-reduce: no start of its own",
                    )
            candidates = [
                c
                for c in candidates
                if c.group.size > 1 and not (isinstance(c, AllReduceOp) and c.with_dense_grads is not None)
            ]
            if candidates:
                self._schedule(block, candidates, sizes)
        if self.backward and self.dense_grads:
            step.attributes["dense_grad_overlap"] = UnitAttr()

    # -- scheduling ---------------------------------------------------------------------------
    def _schedule(self, block: Block, candidates: list[_Coll], sizes: dict[_Coll, int]) -> None:
        split = list(candidates)
        while True:
            order = self._order(block, split)
            peak, live = peak_inflight((n[0], n[1], sizes[n[1]]) for n in order if isinstance(n, tuple))
            if not self.max_inflight_bytes or peak <= self.max_inflight_bytes or not live:
                break
            biggest = max(live, key=lambda c: (sizes[c], -list(block.ops).index(c)))
            remark(
                biggest,
                self.name,
                "in-flight-memory",
                f"in-flight bytes {peak} would exceed max-inflight-bytes "
                f"{self.max_inflight_bytes}; this exchange ({sizes[biggest]} bytes) stays synchronous",
            )
            split.remove(biggest)
        # A start directly followed by its wait hides nothing: keep those synchronous. Input
        # exchanges stay asynchronous regardless: `TrainPipeline` starts them during the
        # previous step.
        hidden = []
        for c in split:
            i_start, i_wait = order.index(("start", c)), order.index(("wait", c))
            between = order[i_start + 1 : i_wait]
            if not set(c.role.role_list) <= INPUT_ROLES and all(
                isinstance(n, tuple) and n[0] in ("start", "wait") for n in between
            ):
                remark(c, self.name, "no-overlap", "nothing independent to overlap: the first use follows the exchange")
            else:
                hidden.append(c)
        if set(hidden) != set(split):
            order = self._order(block, hidden)
        _materialize(block, order)

    def _order(self, block: Block, split: list[_Coll]) -> list[_Node]:
        """A new order of the block's ops; a split collective `c` becomes ("start", c), ("wait", c)."""
        ops = list(block.ops)
        terminator = ops[-1]
        ops = ops[:-1]
        index = {op: i for i, op in enumerate(ops)}
        node: dict[Operation, _Node] = {op: op for op in ops}
        for c in split:
            node[c] = ("wait", c)  # its results come out of the wait
        g: nx.DiGraph[_Node] = nx.DiGraph()
        # (`isinstance` first: it tells the type checker what `op in split` implies.)
        for op in ops:
            g.add_node(node[op])
            if isinstance(op, _Coll) and op in split:
                g.add_node(("start", op))
                g.add_edge(("start", op), ("wait", op))
        for op in ops:
            consumer = ("start", op) if isinstance(op, _Coll) and op in split else node[op]
            for v in values_used_from_outside(op):
                producer = v.owner
                if isinstance(producer, Operation) and producer in index:
                    g.add_edge(node[producer], consumer)
        # Program-order chains: collectives (as issued), table updates, dense regions.
        issue: list[_Node] = [
            ("start", op) if op in split else op for op in ops if isinstance(op, AllToAllOp | AllReduceOp)
        ]
        other_colls = [op for op in ops if op.name.startswith("coll.") and not isinstance(op, AllToAllOp | AllReduceOp)]
        for chain in (
            sorted([*issue, *other_colls], key=lambda n: index[n[1] if isinstance(n, tuple) else n]),
            [op for op in ops if _is_update(op)],
            [op for op in ops if isinstance(op, DenseOp)],
        ):
            g.add_edges_from(zip(chain, chain[1:]))
        # Starts go as soon as they can, with what they need (for `overlap=input`, the output
        # exchange does not pull the lookups ahead of the dense regions); waits go last; dense
        # regions run before the input waits (`input`) or after the output exchange starts.
        before_start: set[_Node] = set()
        for c in split:
            before_start.add(("start", c))
            if not (self.overlap == "input" and set(c.role.role_list) <= OUTPUT_ROLES):
                before_start |= nx.ancestors(g, ("start", c))
        input_waits = {("wait", c) for c in split if set(c.role.role_list) <= INPUT_ROLES}

        def key(n) -> tuple:
            op = n[1] if isinstance(n, tuple) else n
            if n in before_start:
                tier = 0
            elif isinstance(n, tuple):  # a wait
                tier = 1 if (self.overlap == "output" and n in input_waits) else 3
            elif isinstance(n, DenseOp) and self.overlap == "output":
                tier = 2
            else:
                tier = 1
            return (tier, index[op], 0 if isinstance(n, tuple) else 1)

        order = list(nx.lexicographical_topological_sort(g, key=key))
        return [*order, terminator]


def _materialize(block: Block, order: list[_Node]) -> None:
    """Rebuild the block in `order`, turning ("start", c) / ("wait", c) into async ops."""
    terminator = order[-1]
    assert isinstance(terminator, Operation)  # `_order` ends with the block's terminator
    starts: dict[_Coll, AllToAllStartOp | AllReduceStartOp] = {}
    for n in order[:-1]:
        if isinstance(n, tuple):
            kind, c = n
            if kind == "start":
                starts[c] = _start_op(c)
                Rewriter.insert_op(starts[c], InsertPoint.before(terminator))
            else:
                start = starts.pop(c)
                wait = WaitOp.create(operands=[start.handle], result_types=[r.type for r in c.results])
                Rewriter.insert_op(wait, InsertPoint.before(terminator))
                for old, new in zip(c.results, wait.results):
                    old.replace_all_uses_with(new)
                Rewriter.erase_op(c)
        else:
            n.detach()
            Rewriter.insert_op(n, InsertPoint.before(terminator))


def _start_op(c: _Coll) -> AllToAllStartOp | AllReduceStartOp:
    attributes = {k: v for k, v in c.attributes.items() if k != "remark"}
    types = [r.type for r in c.results]
    if isinstance(c, AllToAllOp):
        return AllToAllStartOp.create(
            operands=[
                *c.inputs,
                *([c.send_splits] if c.send_splits is not None else []),
                *([c.recv_splits] if c.recv_splits is not None else []),
            ],
            result_types=[HandleType(types)],
            properties=dict(c.properties),
            attributes=attributes,
        )
    assert isinstance(c, AllReduceOp)
    return AllReduceStartOp.create(
        operands=list(c.inputs), result_types=[HandleType(types)], properties=dict(c.properties), attributes=attributes
    )
