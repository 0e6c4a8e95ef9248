"""The plan module's sparse segments: which forward and backward ops of a step run together.

Runs of sparse ops between dense regions become *segments* (see `plan_module`): the connected
groups of forward sparse ops, each with the backward ops that read its values, what it reads,
returns and saves, and the gradients of its outputs. No torch here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
from xdsl.ir import Block, Operation, SSAValue

from sparselift.ir.sched import DenseOp, StepOp, YieldOp, values_used_from_outside


class EmitError(ValueError):
    """The IR cannot be turned into a plan module (e.g. it still holds an opaque op)."""


@dataclass
class Segment:
    """One sparse segment: its forward ops (block order), what they read, return and save, its
    backward ops, and the dense regions splitting it into stages."""

    index: int
    ops: list[Operation]
    inputs: list[SSAValue]
    outputs: Sequence[SSAValue]
    saved: list[SSAValue]
    backward_ops: list[Operation]
    grad_of: list[SSAValue | None]  # backward values that are gradients of `outputs` (same order), if any
    stages: list[list[Operation]] = dataclasses.field(default_factory=list)


def _outer(op: Operation, block: Block) -> Operation:
    """The op of `block` that is `op` or holds it (a use inside a lane belongs to the parallel)."""
    while op.parent_block() is not block and (parent := op.parent_op()) is not None:
        op = parent
    return op


def find_segments(step: StepOp) -> tuple[list[Segment], dict[SSAValue, SSAValue]]:
    """Sparse segments: the connected groups of forward sparse ops, and for each backward saved
    argument the forward value it stands for.

    Two sparse ops share a segment when one reads the other's value, or when a backward op
    reads values of both. A segment may straddle dense regions that do not read it (after
    `hide-latency`, e.g. an input exchange started before the bottom MLP and waited on
    after it): those dense regions split it into *stages*.
    """
    fwd = [op for op in step.forward.block.ops if not isinstance(op, YieldOp)]
    position = {op: i for i, op in enumerate(fwd)}
    fwd_yield = step.forward.block.last_op
    assert isinstance(fwd_yield, YieldOp)  # a verified step's forward region ends with its yield
    n_out = step.num_outputs.data
    saved_values = list(fwd_yield.values[n_out:])
    bwd = step.backward.block
    saved_arg: dict[SSAValue, SSAValue] = dict(zip(bwd.args[n_out:], saved_values))
    grad_source = _gradient_sources(step, fwd)
    forward_of, components = _components(step, fwd, position, {**saved_arg, **grad_source})
    segments = [_segment(step, k, ops, position, saved_values) for k, ops in enumerate(components)]
    _add_backward(step, segments, forward_of, grad_source)
    return segments, saved_arg


def _gradient_sources(step: StepOp, fwd: Sequence[Operation]) -> dict[SSAValue, SSAValue]:
    """Backward value -> the forward value it is the gradient of: a backward dense op's result
    k is the gradient of its forward twin's operand k, the backward region's first arguments
    those of the step's outputs."""
    n_out = step.num_outputs.data
    bwd = step.backward.block
    forward_dense = {op.callee.root_reference.data: op for op in fwd if isinstance(op, DenseOp)}
    grad_source: dict[SSAValue, SSAValue] = {}
    for op in bwd.ops:
        if isinstance(op, DenseOp) and op.phase.data == "backward":
            twin = forward_dense[op.callee.root_reference.data]
            grad_source.update(zip(op.res, twin.args))
    fwd_yield = step.forward.block.last_op
    assert isinstance(fwd_yield, YieldOp)  # a verified step's forward region ends with its yield
    grad_source.update(zip(bwd.args[:n_out], fwd_yield.values[:n_out]))
    return grad_source


def _components(
    step: StepOp,
    fwd: Sequence[Operation],
    position: dict[Operation, int],
    backward_args: dict[SSAValue, SSAValue],
) -> tuple[dict[SSAValue, Operation], list[list[Operation]]]:
    """The forward sparse ops grouped into segments (in block order), and for each backward
    value the forward op whose segment it belongs to (`backward_args`: saved values and
    gradients -> the forward values they stand for)."""
    sparse = [op for op in fwd if not isinstance(op, DenseOp)]
    groups = nx.utils.UnionFind(sparse)
    for op in sparse:
        for v in values_used_from_outside(op):
            if v.owner in position and not isinstance(v.owner, DenseOp):
                groups.union(op, v.owner)
    # Backward ops tie together the forward ops whose values they read.
    forward_of: dict[SSAValue, Operation] = {}
    for arg, value in backward_args.items():
        if isinstance(value.owner, Operation) and value.owner in position and not isinstance(value.owner, DenseOp):
            forward_of[arg] = value.owner
    for op in step.backward.block.ops:
        if isinstance(op, DenseOp | YieldOp):
            continue
        owners = [forward_of[v] for v in values_used_from_outside(op) if v in forward_of]
        for result in op.results:
            if owners:
                forward_of[result] = owners[0]
        if owners:
            groups.union(*owners)
    components = sorted((sorted(c, key=position.__getitem__) for c in groups.to_sets()), key=lambda c: position[c[0]])
    return forward_of, components


def _segment(
    step: StepOp, k: int, ops: list[Operation], position: dict[Operation, int], saved_values: Sequence[SSAValue]
) -> Segment:
    """Segment `k` of forward ops `ops`: what it reads, what it returns and what it saves."""
    n_out = step.num_outputs.data
    defined = {r for op in ops for r in op.results}
    inputs: list[SSAValue] = []
    for op in ops:
        for v in values_used_from_outside(op):
            if v not in defined and v not in inputs:
                inputs.append(v)
    for v in inputs:
        if isinstance(v.owner, Operation) and position[v.owner] > position[ops[0]]:
            raise EmitError(
                f"sparse segment {k} ({ops[0].name} ...) reads a value of {v.owner.name} computed after it "
                "starts; plan-module needs a segment's inputs to exist when it starts"
            )
    outputs = [
        r
        for r in defined
        if any(
            not isinstance(u.operation, YieldOp) or u.index < n_out
            for u in r.uses
            if u.operation.parent_block() is not None and _outer(u.operation, step.forward.block) not in ops
        )
    ]
    outputs.sort(key=lambda r: (position[r.owner], r.index))
    last = position[ops[-1]]
    for r in outputs:
        for u in r.uses:
            if u.operation in position and position[u.operation] < last:
                raise EmitError(
                    f"{u.operation.name} reads a result of sparse segment {k} before the segment's last op; "
                    "plan-module runs a segment's outputs out at its end"
                )
    saved = [v for v in saved_values if v in defined]
    return Segment(k, ops, inputs, outputs, saved, [], [])


def _add_backward(
    step: StepOp,
    segments: list[Segment],
    forward_of: dict[SSAValue, Operation],
    grad_source: dict[SSAValue, SSAValue],
) -> None:
    """Each backward op into the one segment whose values it reads, and each segment's
    gradients of its outputs."""
    owner = {op: seg for seg in segments for op in seg.ops}
    block = step.backward.block
    ops = [op for op in block.ops if not isinstance(op, DenseOp | YieldOp)]
    index: dict[Operation, int] = {}
    for op in ops:
        if not op.operands and not op.regions:
            continue  # reads nothing (`sparse.static_sizes`): its readers' segment, below
        segs = {owner[forward_of[v]].index for v in values_used_from_outside(op) if v in forward_of}
        if len(segs) != 1:
            raise EmitError(f"{op.name} in backward reads values of {len(segs)} sparse segments; expected one")
        index[op] = segs.pop()
    for op in ops:
        if op not in index:
            segs = {index.get(_outer(u.operation, block), -1) for r in op.results for u in r.uses}
            if len(segs) != 1 or -1 in segs:
                raise EmitError(f"{op.name} in backward feeds ops of {len(segs)} sparse segments; expected one")
            index[op] = segs.pop()
        segments[index[op]].backward_ops.append(op)
    for seg in segments:
        used = {v for op in seg.backward_ops for v in values_used_from_outside(op)}
        seg.grad_of = [None] * len(seg.outputs)
        for grad, value in grad_source.items():
            if grad in used and value in seg.outputs:
                seg.grad_of[seg.outputs.index(value)] = grad


def split_stages(ops: Sequence[Operation], block_ops: Sequence[Operation]) -> list[list[Operation]]:
    """`ops` (in block order) split wherever a dense op of the block lies between two of them."""
    position = {op: i for i, op in enumerate(block_ops)}
    dense = [position[op] for op in block_ops if isinstance(op, DenseOp)]
    out = [[ops[0]]]
    for prev, op in zip(ops, ops[1:]):
        if any(position[prev] < d < position[op] for d in dense):
            out.append([])
        out[-1].append(op)
    return out
