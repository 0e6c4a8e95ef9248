"""The `plan-module` target: emit a readable Python module that runs a lifted step.

The module has a header (plan hash and summary), constants for every op's static data, and a
`Plan` class whose `forward` runs the step's forward part in IR order. Runs of sparse ops
between dense regions become *segments*: `_segment_K_forward` returns the segment's outputs and
the values saved for backward, `_segment_K_backward` runs the IR's backward ops that belong to
that segment; its exchanges start asynchronously and the segment backward yields there, so
autograd carries on with the dense backward while the gradients travel, and the rest (wait,
unpack, table updates) runs when backward ends. The runtime wraps each segment in an
autograd-aware custom op, so dense regions train with ordinary autograd. Rank-specific ops are guarded by `self.rank`; collectives go
through `sparselift.runtime.plan_ops` (torch.distributed with async handles). Generated fused
kernels are referenced by name from `sched.kernel` ops.

No torch here: this file only writes text.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.printer import Printer
from xdsl.utils.target import Target

from sparselift.ir.coll import AllReduceOp, AllToAllOp, AllToAllStartOp, ReduceScatterOp, WaitOp
from sparselift.ir.sched import DenseOp, KernelOp, StepOp, YieldOp
from sparselift.ir.sparse import (
    LookupGradOp,
    LookupOp,
    LookupUpdateOp,
    PackOp,
    PermuteOp,
    RouteOp,
    UnpackOp,
)

INPUT_ROLES = {"input_splits", "input_lengths", "input_indices", "input_weights"}
_DTYPES = {"f32": "torch.float32", "f16": "torch.float16", "bf16": "torch.bfloat16", "f64": "torch.float64"}


def _tables_read(step: StepOp) -> list:
    """Every table the step looks up, from per-table lookups and fused lookup kernels."""
    tables = []
    for op in step.walk():
        if isinstance(op, LookupOp):
            tables.append(op.table)
        elif isinstance(op, KernelOp) and op.kind.data == "lookup":
            tables += list(op.attributes["tables"].data)
    return tables


def plan_hash(module: ModuleOp) -> str:
    out = io.StringIO()
    Printer(stream=out).print_op(module)
    return hashlib.sha256(out.getvalue().encode()).hexdigest()[:16]


class EmitError(ValueError):
    """The IR cannot be turned into a plan module (e.g. it still holds an opaque op)."""


@dataclass
class _Segment:
    index: int
    ops: list[Operation]
    inputs: list[SSAValue]
    outputs: list[SSAValue]
    saved: list[SSAValue]
    backward_ops: list[Operation]
    grad_of: list[SSAValue]  # backward values that are gradients of `outputs` (same order)


class _Emitter:
    def __init__(self, step: StepOp):
        self.step = step
        self.world = step.world_size.data
        self.names: dict[SSAValue, str] = {}
        self.table_rows = {t.name_str: t.rows.data for t in _tables_read(step)}
        self.consts: list[str] = []
        self._const_names: dict[tuple[str, str], str] = {}
        self.lines: list[str] = []

    # -- naming ------------------------------------------------------------------------------
    def name(self, value: SSAValue | None) -> str:
        if value is None:
            return "None"
        if value not in self.names:
            self.names[value] = f"v{len(self.names)}"
        return self.names[value]

    def names_of(self, values: Sequence[SSAValue]) -> str:
        return ", ".join(self.name(v) for v in values)

    def const(self, prefix: str, text: str) -> str:
        """A module-level constant; identical values share one name."""
        key = (prefix, text)
        if key not in self._const_names:
            self._const_names[key] = f"{prefix}_{len(self.consts)}"
            self.consts.append(f"{self._const_names[key]} = {text}")
        return self._const_names[key]

    # -- structure ---------------------------------------------------------------------------
    def segments(self) -> list[_Segment]:
        fwd = list(self.step.forward.block.ops)
        runs: list[list[Operation]] = []
        for op in fwd:
            if isinstance(op, DenseOp | YieldOp):
                runs.append([])
            else:
                if not runs:
                    runs.append([])
                runs[-1].append(op)
        runs = [r for r in runs if r]
        fwd_yield = self.step.forward.block.last_op
        n_out = self.step.num_outputs.data
        saved_values = list(fwd_yield.values[n_out:])
        bwd = self.step.backward.block
        saved_arg = dict(zip(bwd.args[n_out:], saved_values))
        # Gradients: a backward dense op's result k is the gradient of its forward twin's operand k.
        forward_dense = {op.callee.root_reference.data: op for op in fwd if isinstance(op, DenseOp)}
        grad_source: dict[SSAValue, SSAValue] = {}
        for op in bwd.ops:
            if isinstance(op, DenseOp) and op.phase.data == "backward":
                twin = forward_dense[op.callee.root_reference.data]
                grad_source.update(zip(op.res, twin.args))
        grad_source.update(zip(bwd.args[:n_out], fwd_yield.values[:n_out]))

        segments = []
        for k, ops in enumerate(runs):
            defined = {r for op in ops for r in op.results}
            inputs = []
            for op in ops:
                for v in op.operands:
                    if v not in defined and v not in inputs:
                        inputs.append(v)
            outputs = [
                r for r in defined
                if any(not isinstance(u.operation, YieldOp) or u.index < n_out for u in r.uses
                       if u.operation.parent_block() is not None and u.operation not in ops)
            ]
            outputs.sort(key=lambda r: (fwd.index(r.owner), r.index))
            saved = [v for v in saved_values if v in defined]
            segments.append(_Segment(k, ops, inputs, outputs, saved, [], []))
        owner = {r: seg for seg in segments for op in seg.ops for r in op.results}
        # Backward non-dense ops belong to the segment whose values they read.
        bwd_owner: dict[SSAValue, _Segment] = {}
        for arg, value in saved_arg.items():
            bwd_owner[arg] = owner[value]
        for grad, value in grad_source.items():
            if value in owner:
                bwd_owner[grad] = owner[value]
        for op in bwd.ops:
            if isinstance(op, DenseOp | YieldOp):
                continue
            segs = {bwd_owner[v].index for v in op.operands if v in bwd_owner}
            if len(segs) != 1:
                raise EmitError(f"{op.name} in backward reads values of {len(segs)} sparse segments; expected one")
            seg = segments[segs.pop()]
            seg.backward_ops.append(op)
            for r in op.results:
                bwd_owner[r] = seg
        for seg in segments:
            used = {v for op in seg.backward_ops for v in op.operands}
            seg.grad_of = [None] * len(seg.outputs)
            for grad, value in grad_source.items():
                if grad in used and value in seg.outputs:
                    seg.grad_of[seg.outputs.index(value)] = grad
        self.saved_arg = {v: arg for arg, v in saved_arg.items()}
        self.saved_value = dict(saved_arg)
        return segments

    # -- emission ----------------------------------------------------------------------------
    def emit(self) -> str:
        segments = self.segments()
        body: list[str] = []
        n_out = self.step.num_outputs.data
        fwd_args = list(self.step.forward.block.args)
        body.append("    def forward(self, *inputs):")
        body.append(f"        ({self.names_of(fwd_args)}{',' if len(fwd_args) == 1 else ''}) = inputs")
        seg_of_op = {op: seg for seg in segments for op in seg.ops}
        done: set[int] = set()
        ops = list(self.step.forward.block.ops)
        # Each segment's input exchanges start right after its inputs exist (a prefetch), so the
        # dense regions in between overlap them; `start` runs the same prefix ahead of time for
        # the next batch (cross-step pipelining, see runtime/pipeline.py).
        prefetch_after: dict[Operation, list[_Segment]] = {}
        for seg in segments:
            producers = [v.owner for v in seg.inputs if isinstance(v.owner, Operation)]
            if producers:
                prefetch_after.setdefault(max(producers, key=ops.index), []).append(seg)
        start_body: list[str] = []
        for op in ops:
            if isinstance(op, DenseOp):
                outs = self.names_of(op.res)
                call = f'self.dense("{op.callee.root_reference.data}", {self.names_of(op.args)})'
                line = f"        ({outs},) = {call}" if op.res else f"        {call}"
                body.append(line)
                prefetches = [
                    f"        self.prefetch({seg.index}, [{self.names_of(seg.inputs)}])"
                    for seg in prefetch_after.get(op, [])
                ]
                body += prefetches
                if prefetches or any(op in prefetch_after for op in ops[ops.index(op) + 1 :]):
                    start_body += [line, *(p.replace("])", "], ahead=True)") for p in prefetches)]
            elif isinstance(op, YieldOp):
                outs = op.values[:n_out]
                body.append(f"        return ({self.names_of(outs)}{',' if len(outs) == 1 else ''})")
            else:
                seg = seg_of_op[op]
                if seg.index in done:
                    continue
                done.add(seg.index)
                outs = self.names_of(seg.outputs)
                body.append(
                    f"        ({outs}{',' if len(seg.outputs) == 1 else ''}) = "
                    f"self.segment({seg.index}, [{self.names_of(seg.inputs)}])"
                )
        body += [
            "",
            "    def start(self, *inputs):",
            '        """Start the next batch\'s input exchanges before its forward (pipelining)."""',
            f"        ({self.names_of(fwd_args)}{',' if len(fwd_args) == 1 else ''}) = inputs",
            *(start_body or ["        pass"]),
        ]
        for seg in segments:
            body += self.emit_segment(seg)
        return self.module_text(body, segments)

    def emit_segment(self, seg: _Segment) -> list[str]:
        out = [
            "",
            f"    def _segment_{seg.index}_forward(self, {self.names_of(seg.inputs)}):",
        ]
        # Input exchanges start asynchronously in two stages: the lengths first (`yield
        # "lengths"`), then, once they have arrived, the indices and weights, whose receive sizes
        # the lengths give (no separate sizes exchange; `yield "indices"`). A prefetch (see
        # `forward`) runs these stages early so dense regions or the previous step overlap them.
        pending: list[tuple[Operation, str]] = []
        lengths_exchange: dict[SSAValue, Operation] = {}  # route lengths -> their exchange
        recv_splits: dict[SSAValue, str] = {}  # route splits -> receive sizes variable

        def flush(stage: str) -> None:
            out.append(f"        yield {stage!r}")
            for _, line in pending:
                out.append("        " + line)
            pending.clear()

        for op in seg.ops:
            if pending and any(v.owner in {p for p, _ in pending} for v in op.operands):
                flush("indices" if any(p.send_splits is not None for p, _ in pending) else "lengths")
            is_input = isinstance(op, AllToAllOp) and self.world > 1 and set(op.role.role_list) <= INPUT_ROLES
            if is_input and op.send_splits is not None and op.recv_splits is None and isinstance(op.send_splits.owner, RouteOp):
                route = op.send_splits.owner
                exchange = lengths_exchange.get(route.lengths)
                if exchange is not None and op.send_splits not in recv_splits:
                    if any(p is exchange for p, _ in pending):
                        flush("lengths")
                    recv_splits[op.send_splits] = f"rs_{self.name(op.send_splits)}"
                    out.append(f"        {recv_splits[op.send_splits]} = rt.recv_splits(self, {self.name(exchange.outputs[0])})")
                if op.send_splits in recv_splits:
                    start, wait = self.emit_async(op)[::2]
                    start = start.replace(f"{self.name(op.send_splits)}, None,",
                                          f"{self.name(op.send_splits)}, {recv_splits[op.send_splits]},")
                    out.append("        " + start)
                    pending.append((op, wait))
                    continue
            if is_input:
                start, wait = self.emit_async(op)[::2]
                out.append("        " + start)
                pending.append((op, wait))
                if isinstance(op.inputs[0].owner, RouteOp) and op.inputs[0] is op.inputs[0].owner.lengths:
                    lengths_exchange[op.inputs[0]] = op
            else:
                out += ["        " + line for line in self.emit_op(op)]
        if pending:
            flush("indices" if any(p.send_splits is not None for p, _ in pending) else "lengths")
        out.append(f"        return [{self.names_of(seg.outputs)}], [{self.names_of(seg.saved)}]")
        saved_args = [self.saved_arg[v] for v in seg.saved]
        grads = ", ".join(self.name(g) if g is not None else "_" for g in seg.grad_of)
        out += [
            "",
            f"    def _segment_{seg.index}_backward(self, grads, saved):",
            f"        ({grads}{',' if len(seg.grad_of) == 1 else ''}) = grads",
            f"        ({self.names_of(saved_args)}{',' if len(saved_args) == 1 else ''}) = saved",
        ]
        deferred = False
        for op in seg.backward_ops:
            if isinstance(op, AllToAllOp | AllReduceOp) and self.world > 1:
                # Start the exchange, let autograd run the rest of the dense backward, and finish
                # (wait, unpack, update the tables) when backward is done.
                out += ["        " + line for line in self.emit_async(op)]
                deferred = True
            else:
                out += ["        " + line for line in self.emit_op(op)]
        if not deferred:
            out.append("        return None")
        return out

    def emit_async(self, op: Operation) -> list[str]:
        """An exchange in backward: start it, yield to autograd, then wait for its results."""
        lines = self.emit_op(op)
        assert len(lines) == 1
        outs, call = lines[0].split(" = ", 1)
        handle = f"h_{self.name(op.results[0])}"
        return [f"{handle} = {call[:-1]}, async_op=True)", "yield", f"{outs} = {handle}.wait()"]

    def emit_kernel(self, op: KernelOp) -> list[str]:
        """A fused table kernel: one call for all its tables on the ranks that hold them."""
        n = self.name
        tables = op.attributes["tables"].data
        placements = op.attributes["placements"].data
        names = tuple(t.name_str for t in tables)
        slots = tuple(tuple(sl.get_values()) for sl in op.attributes["slots"].data)
        poolings = tuple(str(t.pooling.data) for t in tables)
        lengths, indices = op.args[0], op.args[1]
        n_shared = 2 + (1 if (op.kind.data == "lookup" and len(op.args) == 3)
                        or (op.kind.data == "lookup_update" and len(op.args) - len(tables) == 3) else 0)
        weights = op.args[2] if n_shared == 3 else None
        served, _ = self._served(lengths)
        fps = self.const("FEATURES_PER_SEGMENT", repr(served))
        ranks = placements[0].owner_ranks(self.world)
        common = (
            f"{names!r}, {n(lengths)}, {n(indices)}, {n(weights)}, slots={slots!r}, "
            f"features_per_segment={fps}[self.rank], poolings={poolings!r}"
        )
        if op.kind.data == "lookup":
            outs = self.names_of(op.res)
            return self._guard(ranks, f"{outs}{',' if len(op.res) == 1 else ''} = rt.fused_lookup(self, {common})",
                               list(op.res))
        opt = op.attributes["optimizer"]
        grads = self.names_of(op.args[n_shared:])
        return self._guard(
            ranks,
            f"rt.fused_lookup_update(self, {common}, grads=[{grads}], optimizer={str(opt.kind.data)!r}, "
            f"lr={opt.lr.data!r}, eps={opt.eps.data!r})",
            [],
        )

    def _fake_spec(self, seg: _Segment):
        """Shapes for tracing (register_fake): outputs are [batch, width]; saved values are 1-D."""
        route = next(op for op in seg.ops if isinstance(op, RouteOp))
        batch_input = seg.inputs.index(route.offsets[0])

        def dtype(t) -> str:
            return {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32", "i64": "int64"}.get(
                str(t.element_type), "float32"
            )

        outs = tuple((v.type.get_shape()[1], dtype(v.type)) for v in seg.outputs)
        return batch_input, outs, tuple(dtype(v.type) for v in seg.saved)

    def _guard(self, ranks: Sequence[int], line: str, results: Sequence[SSAValue]) -> list[str]:
        if len(ranks) == self.world:
            return [line]
        lines = [f"if self.rank in {tuple(ranks)!r}:", "    " + line]
        if results:
            lines += ["else:", f"    {self.names_of(results)} = {', '.join('None' for _ in results)}"]
        return lines

    def _served(self, lengths: SSAValue) -> tuple[dict[int, int], bool]:
        """Features per segment on each rank, and whether the buffer came through an exchange."""
        source = self.saved_value.get(lengths, lengths).owner
        exchanged = isinstance(source, AllToAllOp)
        if exchanged:
            matrix = source.splits.matrix
            return {r: matrix[0][r] for r in range(self.world)}, True
        if isinstance(source, RouteOp):
            return {r: len(source.features) for r in range(self.world)}, False
        raise EmitError(f"lookup reads lengths from {source.name}; expected sparse.route or coll.all_to_all")

    def emit_op(self, op: Operation) -> list[str]:
        n = self.name
        if isinstance(op, RouteOp):
            placements = {p.table.data: p for p in op.placements.data}
            feats = []
            for f in op.features.data:
                p = placements[f.table.data]
                feats.append(
                    f"rt.RouteFeature({f.feature_name.data!r}, {f.table.data!r}, {self.table_rows[f.table.data]}, {str(p.kind.data)!r}, "
                    f"{tuple(p.rank_list)!r}, {tuple(p.bounds)!r}, {bool(f.weighted.data)!r})"
                )
            spec = self.const("ROUTE", "(\n    " + ",\n    ".join(feats) + ",\n)")
            outs = [op.lengths, op.indices, op.splits, op.routed_weights[0] if op.routed_weights else None]
            weights = "[" + self.names_of(op.weights) + "]"
            return [
                f"{n(outs[0])}, {n(outs[1])}, {n(outs[2])}, {n(outs[3]) if outs[3] is not None else '_'} = "
                f"rt.route(self, {spec}, [{self.names_of(op.ids)}], [{self.names_of(op.offsets)}], {weights}, "
                f"index_dtype=torch.{'int32' if str(op.indices.type.element_type) == 'i32' else 'int64'})"
            ]
        if isinstance(op, AllToAllOp | AllToAllStartOp):
            inputs = f"[{self.names_of(op.inputs)}]"
            role = "+".join(op.role.role_list)
            if op.splits is not None:
                splits = self.const("SPLITS", repr(tuple(tuple(r) for r in op.splits.matrix)))
                call = f"rt.all_to_all(self, {inputs}, splits={splits}, role={role!r}"
            else:
                call = f"rt.all_to_all_dynamic(self, {inputs}, {n(op.send_splits)}, {n(op.recv_splits)}, role={role!r}"
            if isinstance(op, AllToAllStartOp):
                return [f"{n(op.handle)} = {call}, async_op=True)"]
            outs = self.names_of(op.outputs)
            return [f"{outs}{',' if len(op.outputs) == 1 else ''} = {call})"]
        if isinstance(op, WaitOp):
            outs = self.names_of(op.outputs)
            return [f"{outs}{',' if len(op.outputs) == 1 else ''} = rt.wait({n(op.handle)})"]
        if isinstance(op, LookupOp | LookupUpdateOp | LookupGradOp) and not (
            isinstance(op, LookupUpdateOp) and op.dense
        ):
            served, exchanged = self._served(op.lengths)
            ranks = op.placement.owner_ranks(self.world)
            slots = tuple(op.slots.get_values())
            fps = self.const("FEATURES_PER_SEGMENT", repr(served))
            common = (
                f"{op.table.name_str!r}, {n(op.lengths)}, {n(op.indices)}, {n(op.weights)}, "
                f"slots={slots!r}, features_per_segment={fps}[self.rank], pooling={str(op.table.pooling.data)!r}"
            )
            if isinstance(op, LookupOp):
                return self._guard(ranks, f"{n(op.pooled)} = rt.lookup(self, {common})", [op.pooled])
            if isinstance(op, LookupGradOp):
                return self._guard(ranks, f"{n(op.table_grad)} = rt.lookup_grad(self, {common}, grad={n(op.grad)})",
                                   [op.table_grad])
            opt = op.optimizer
            return self._guard(
                ranks,
                f"rt.lookup_update(self, {common}, grad={n(op.grad)}, optimizer={str(opt.kind.data)!r}, "
                f"lr={opt.lr.data!r}, eps={opt.eps.data!r})",
                [],
            )
        if isinstance(op, LookupUpdateOp):  # dense-gradient form
            opt = op.optimizer
            return self._guard(
                op.placement.owner_ranks(self.world),
                f"rt.dense_update(self, {op.table.name_str!r}, {n(op.grad)}, optimizer={str(opt.kind.data)!r}, "
                f"lr={opt.lr.data!r}, eps={opt.eps.data!r})",
                [],
            )
        if isinstance(op, KernelOp):
            return self.emit_kernel(op)
        if isinstance(op, PackOp | UnpackOp):
            layout = self.const("LAYOUT", repr(tuple(tuple(seg) for seg in op.layout.segments)))
            ranks = [op.rank.value.data] if op.rank is not None else list(range(self.world))
            dtype = _DTYPES.get(str(op.buffer.type.element_type), "torch.float32")
            if isinstance(op, PackOp):
                return self._guard(ranks, f"{n(op.buffer)} = rt.pack(self, [{self.names_of(op.members)}], {layout}, {dtype})",
                                   [op.buffer])
            widths = tuple(
                (m.type.get_shape()[1] if len(m.type.get_shape()) == 2 else 1) for m in op.members
            )
            if not op.members:
                return []
            outs = self.names_of(op.members)
            return self._guard(ranks, f"{outs}{',' if len(op.members) == 1 else ''} = rt.unpack(self, {n(op.buffer)}, {layout}, {widths!r})",
                               list(op.members))
        if isinstance(op, PermuteOp):
            order = list(op.order.get_values())
            srcs = ", ".join(n(op.inputs[j]) for j in order)
            return [f"{self.names_of(op.outputs)}{',' if len(order) == 1 else ''} = {srcs}{',' if len(order) == 1 else ''}"]
        if isinstance(op, ReduceScatterOp):
            return [f"{n(op.result)} = rt.reduce_scatter(self, {n(op.input)}, reduction={str(op.reduction.data)!r})"]
        if isinstance(op, AllReduceOp):
            outs = self.names_of(op.outputs)
            return [f"{outs}{',' if len(op.outputs) == 1 else ''} = rt.all_reduce(self, [{self.names_of(op.inputs)}], "
                    f"reduction={str(op.reduction.data)!r})"]
        raise EmitError(f"plan-module cannot emit {op.name} yet")

    def module_text(self, body: list[str], segments: list[_Segment]) -> str:
        ops = [op for op in self.step.walk()]
        colls = [op for op in ops if op.name.startswith("coll.") and op.name != "coll.wait"]
        fwd_colls = [op for op in colls if op.parent_region() is self.step.forward]
        tables = {t.name_str for t in _tables_read(self.step)}
        module = self.step.parent_op()
        header = [
            '"""SparseLift plan module (generated by `sparselift-opt -t plan-module`; do not edit).',
            "",
            f"plan hash: {plan_hash(module) if isinstance(module, ModuleOp) else 'n/a'}",
            f"step: @{self.step.sym_name.data}, world size {self.world}, {len(tables)} tables, "
            f"{len(segments)} sparse segment(s)",
            f"collectives per step: {len(fwd_colls)} forward, {len(colls) - len(fwd_colls)} backward",
            '"""',
            "",
            "import torch",
            "",
            "from sparselift.runtime import plan_ops as rt",
            "",
            f"PLAN_HASH = {plan_hash(module) if isinstance(module, ModuleOp) else ''!r}",
            f"WORLD_SIZE = {self.world}",
            f"NUM_SEGMENTS = {len(segments)}",
            "",
        ]
        seg_info = [f"    {s.index}: ({len(s.outputs)}, {len(s.saved)})," for s in segments]
        fake_info = [f"    {s.index}: {self._fake_spec(s)!r}," for s in segments]
        return "\n".join(
            header
            + self.consts
            + ["", "# segment -> (number of outputs, number of saved values)", "SEGMENTS = {", *seg_info, "}", "", "",
               "# segment -> (index of an offsets input, (width, dtype) per output, dtype per saved value)",
               "SEGMENT_SHAPES = {", *fake_info, "}", "", "",
               "class Plan(rt.PlanBase):", f'    """Runs @{self.step.sym_name.data} on one rank."""', "",
               "    SEGMENTS = SEGMENTS", "    SEGMENT_SHAPES = SEGMENT_SHAPES", ""]
            + body
        ) + "\n"


def emit_plan_module(module: ModuleOp) -> str:
    steps = [op for op in module.walk() if isinstance(op, StepOp)]
    if len(steps) != 1:
        raise EmitError(f"plan-module expects exactly one sched.step, found {len(steps)}")
    step = steps[0]
    for op in step.walk():
        if op.name == "sparse.embedding_bag_collection":
            raise EmitError("plan-module needs lifted IR: run -p lift-sparse first (an opaque collection is left)")
    return _Emitter(step).emit()


@dataclass(frozen=True)
class PlanModuleTarget(Target):
    """`-t plan-module`: print the Python plan module for a lifted step."""

    name = "plan-module"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        output.write(emit_plan_module(module))
