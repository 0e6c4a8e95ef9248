"""The `plan-module` target: emit a readable Python module that runs a lifted step.

The module has a header (plan hash and summary), constants for every op's static data, and a
`Plan` class whose `forward` runs the step's forward part in IR order. Runs of sparse ops
between dense regions become *segments*: `_segment_K_forward` returns the segment's outputs and
the values saved for backward, `_segment_K_backward` runs the IR's backward ops that belong to
that segment; its exchanges start asynchronously and the segment backward yields there, so
autograd carries on with the dense backward while the gradients travel, and the rest (wait,
unpack, table updates) runs when backward ends. The runtime wraps each segment in an
autograd-aware custom op, so dense regions train with ordinary autograd. Rank-specific ops are
guarded by `self.rank`; collectives go
through `sparselift.runtime.plan_ops` (torch.distributed with async handles). Each fused table
op (`sparse.fused_*`) is one call of the generated multi-table kernel (`rt.fused_*`, specialized
to its tables, placements and slots); a fused lookup whose results only a pack reads returns
the packed buffer (`packed=`), and a fused update whose gradients are exactly an unpack's
members reads the received buffer (`packed_grads=`): the pack or unpack is not
emitted, and the runtime writes or reads the buffer's column blocks in place.

Ranks' local batches may differ (and change step to step), and a batch may be bad on one rank
only. `forward` checks every route's features and agrees on every rank's batch size once, before
the first segment (`self.check_batch`, one small all-to-all; `start` does it for the next batch,
whose forward reuses it; a plan that starts no exchange ahead lets that agreement ride in the
step's dense-gradient all-reduce instead, `ride=True`). Each segment's first route then returns the agreed sizes
(`rt.route(..., checked=K)`, no collective), saves them for its backward, and passes them to
every op that sizes an exchange or a buffer: every rank's batch on the tables' side (a segment
per peer), its own on the samples' side. A route whose ids only exist after a segment checks and
agrees on its own.

No torch here: this file only writes text.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, TypeGuard, cast

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.printer import Printer
from xdsl.utils.target import Target

from sparselift.codegen.plan_joined import SEGMENT_EMITTERS
from sparselift.codegen.plan_rows import ROWS_EMITTERS
from sparselift.codegen.plan_segments import EmitError, Segment, find_segments, split_stages
from sparselift.codegen.table_facts import PLAN_MODULE_IMPORTS, describe_tables, render_tables
from sparselift.ir.coll import (
    GRAD_ROLES,
    INPUT_ROLES,
    OUTPUT_ROLES,
    AllReduceOp,
    AllReduceStartOp,
    AllToAllOp,
    AllToAllStartOp,
    ReduceScatterOp,
    WaitOp,
)
from sparselift.ir.sched import DenseOp, ParallelOp, StepOp, YieldOp
from sparselift.ir.sparse import (
    FusedLookupGradOp,
    FusedLookupOp,
    FusedLookupUpdateOp,
    FusedTableOp,
    JoinSegmentsOp,
    LookupGradOp,
    LookupOp,
    LookupUpdateOp,
    PackIdsOp,
    PackOp,
    PermuteOp,
    RouteOp,
    SplitSegmentsOp,
    UnpackIdsOp,
    UnpackOp,
)
from sparselift.passes.srsv import tables_of

_DTYPES = {"f32": "torch.float32", "f16": "torch.float16", "bf16": "torch.bfloat16", "f64": "torch.float64"}


def assign(targets: Sequence[str], expr: str) -> str:
    """`expr` unpacked into `targets`: `a, = expr`, `a, b = expr`, or `_ = expr` for none (every
    emitted call returns a sequence, so one target still unpacks)."""
    if not targets:
        return f"_ = {expr}"
    return f"{', '.join(targets)}{',' if len(targets) == 1 else ''} = {expr}"


def as_tuple(names: Sequence[str]) -> str:
    """A tuple display of `names`: `(a,)`, `(a, b)`, `()`."""
    return f"({', '.join(names)}{',' if len(names) == 1 else ''})"


def plan_hash(module: ModuleOp) -> str:
    out = io.StringIO()
    Printer(stream=out).print_op(module)
    return hashlib.sha256(out.getvalue().encode()).hexdigest()[:16]


class _Emitter:
    def __init__(self, step: StepOp):
        self.step = step
        self.world = step.world_size.data
        self.names: dict[SSAValue, str] = {}
        self.table_rows = {name: t.rows.data for name, t in tables_of(step.walk()).items()}
        # The first route of each segment: its result names the step's `batches` (every rank's
        # batch size, agreed by the route); the segment's other routes agree too but add nothing.
        self.batch_routes: set[Operation] = set()
        self.checked_routes: list[RouteOp] = []  # what the plan's one `check_batch` covers
        self.deferred_updates: set[Operation] = set()  # run after the dense gradients' all-reduce
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

    def targets(self, values: Sequence[SSAValue]) -> list[str]:
        return [self.name(v) for v in values]

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
    def segments(self) -> list[Segment]:
        """Sparse segments (`plan_segments.find_segments`); remembers which forward value each
        saved backward argument stands for."""
        segments, saved_arg = find_segments(self.step)
        self.saved_arg = {v: arg for arg, v in saved_arg.items()}
        self.saved_value = dict(saved_arg)
        return segments

    # -- emission ----------------------------------------------------------------------------
    def emit(self) -> str:
        segments = self.segments()
        body: list[str] = []
        n_out = self.step.num_outputs.data
        fwd_args = list(self.step.forward.block.args)
        ops = list(self.step.forward.block.ops)
        body.append("    def forward(self, *inputs):")
        body.append("        " + assign(self.targets(fwd_args), "inputs"))
        # Where each segment's stages begin: the first stage starts with `prefetch` (or runs
        # whole with `segment` when the segment has one stage), middle stages `resume`, and the
        # last stage runs inside the autograd-aware `segment` call, which returns the outputs.
        calls: dict[Operation, str] = {}
        ahead: list[Segment] = []  # segments whose input exchanges `start` can run for the next batch
        for seg in segments:
            stages = split_stages(seg.ops, ops)
            seg.stages = stages
            inputs = f"[{self.names_of(seg.inputs)}]"
            final = assign(self.targets(seg.outputs), f"self.segment({seg.index}, {inputs})")
            if self._input_starts(stages[0]):
                ahead.append(seg)
            if len(stages) == 1:
                calls[stages[0][0]] = final
                continue
            calls[stages[0][0]] = f"self.prefetch({seg.index}, {inputs})"
            for stage in stages[1:-1]:
                calls[stage[0]] = f"self.resume({seg.index})"
            calls[stages[-1][0]] = final
        start_body: list[str] = []
        first_call = next((op for op in ops if op in calls), None)
        self.checked_routes = self._checked_routes(segments, ops, first_call)
        check = self._check_batch_call()
        checked_ahead = False  # `start` has its check line
        needed = {v.owner for seg in ahead for v in seg.inputs if isinstance(v.owner, DenseOp)}
        # `start` checks the next batch, so its routes' inputs are computed there too.
        needed |= {v.owner for r in self.checked_routes for v in r.operands if isinstance(v.owner, DenseOp)}
        for op in ops:
            if isinstance(op, DenseOp):
                outs = self.targets(op.res)
                call = f'self.dense("{op.callee.root_reference.data}", {self.names_of(op.args)})'
                line = "        " + (assign(outs, call) if outs else call)
                body.append(line)
                if op in needed:
                    start_body.append(line)
            elif isinstance(op, YieldOp):
                body.append(f"        return {as_tuple(self.targets(op.values[:n_out]))}")
            elif op in calls:
                if op is first_call and check:
                    body.append(f"        {check}")
                body.append("        " + calls[op])
                started = next((s for s in ahead if s.ops[0] is op), None)
                if started is not None:
                    if check and not checked_ahead:
                        start_body.append(f"        {self._check_batch_call(', ahead=True')}")
                        checked_ahead = True
                    start_body.append(
                        f"        self.prefetch({started.index}, [{self.names_of(started.inputs)}], ahead=True)"
                    )
        body += [
            "",
            "    def start(self, *inputs):",
            '        """Start the next batch\'s input exchanges before its forward (pipelining)."""',
            "        " + assign(self.targets(fwd_args), "inputs"),
            *(start_body if ahead else self._riding_start(start_body)),
        ]
        for seg in segments:
            body += self.emit_segment(seg)
        return self.module_text(body, segments)

    def _checked_routes(
        self, segments: Sequence[Segment], ops: Sequence[Operation], first_call: Operation | None
    ) -> list[RouteOp]:
        """The routes `check_batch` covers, in IR order: those whose ids, offsets and weights
        exist before the step's first segment (forward arguments, or results of dense regions
        of forward arguments alone). The others check and agree on their own."""
        args = set(self.step.forward.block.args)
        before = set(ops[: ops.index(first_call)]) if first_call is not None else set()

        def known(value: SSAValue) -> bool:
            owner = value.owner
            return value in args or (owner in before and isinstance(owner, DenseOp) and set(owner.args) <= args)

        routes = [op for seg in segments for op in seg.ops if isinstance(op, RouteOp)]
        return [r for r in routes if all(known(v) for v in r.operands)]

    def _riding_start(self, inputs: list[str]) -> list[str]:
        """`start` of a plan with no input exchange to start ahead: it checks the next batch,
        whose agreement rides in this step's dense-gradient all-reduce (no collective of its own)."""
        if not self.checked_routes:
            return ["        pass"]
        return [*inputs, f"        {self._check_batch_call(', ahead=True, ride=True')}"]

    def _check_batch_call(self, options: str = "") -> str:
        """`self.check_batch(...)`: the step's one batch check and size agreement (runtime/routing.py);
        `options`: the call's keyword arguments after the routes, e.g. `, ahead=True`."""
        if not self.checked_routes:
            return ""
        routes = ", ".join(
            f"({self._route_spec(r)}, [{self.names_of(r.ids)}], [{self.names_of(r.offsets)}], "
            f"[{self.names_of(r.weights)}], torch.{self._index_dtype(r)})"
            for r in self.checked_routes
        )
        return f"self.check_batch([{routes}]{options})"

    def _input_starts(self, ops: Sequence[Operation]) -> list[AllToAllStartOp]:
        return [op for op in ops if isinstance(op, AllToAllStartOp) and set(op.role.role_list) <= INPUT_ROLES]

    def emit_segment(self, seg: Segment) -> list[str]:
        out = [
            "",
            f"    def _segment_{seg.index}_forward(self, {self.names_of(seg.inputs)}):",
        ]
        # Markers the runtime steps through (plan_ops.PlanBase): "stage" where the IR puts a
        # dense region between two of the segment's ops; "lengths" once the lengths exchange is
        # in flight and "indices" once every input exchange is (a prefetch for the next batch,
        # `ahead=True`, stops there: nothing after them may read tables the current step is
        # still updating).
        waited: dict[Operation, str] = {}  # lengths starts waited on early -> their result name
        # A lengths exchange that sizes an indices exchange is waited on there, after the
        # "lengths" marker, wherever the IR put its wait: waited where the IR puts it (right after
        # its start when nothing was scheduled between), a prefetch for the next batch would block
        # on the peers there instead of leaving the lengths in flight behind this step's backward.
        deferred: set[Operation] = {ex for op in seg.ops if (ex := self._sizing_lengths_start(op)) is not None}
        # This step's batch sizes (they may differ across ranks and steps), from the first route
        # (agreed by the plan's `check_batch`): every exchange and buffer after it is sized by them.
        self.batch_routes.add(next(op for op in seg.ops if isinstance(op, RouteOp)))
        for s, stage in enumerate(seg.stages):
            if s:
                out.append('        yield "stage"')
            input_starts = self._input_starts(stage)
            last_input_start = input_starts[-1] if input_starts else None
            for op in stage:
                out += ["        " + line for line in self._forward_op(op, waited, deferred)]
                if op is last_input_start and s == 0:
                    out.append('        yield "indices"')
        saved = "".join(f"{self.name(v)}, " for v in seg.saved)
        out.append(f"        return [{self.names_of(seg.outputs)}], [{saved}batches.saved()]")
        saved_args = [*self.targets([self.saved_arg[v] for v in seg.saved]), "saved_batches"]
        grads = [self.name(g) if g is not None else "_" for g in seg.grad_of]
        out += [
            "",
            f"    def _segment_{seg.index}_backward(self, grads, saved):",
            "        " + assign(grads, "grads"),
            "        " + assign(saved_args, "saved"),
            "        batches = rt.saved_batch_sizes(saved_batches)",
        ]
        bwd_stages = split_stages(seg.backward_ops, list(self.step.backward.block.ops)) if seg.backward_ops else []
        # The first stage runs when autograd reaches the segment; after a dense region the IR
        # put in between (started exchanges in flight), the rest runs when backward ends.
        for s, stage in enumerate(bwd_stages):
            if s:
                out.append('        yield "stage"')
            for op in stage:
                out += ["        " + line for line in self.emit_op(op)]
        if len(bwd_stages) <= 1:
            out.append("        return None")
        return out

    @staticmethod
    def _sized_by_lengths(op: Operation) -> TypeGuard[AllToAllOp | AllToAllStartOp]:
        """An input exchange whose receive sizes come from received lengths (or a sizes exchange)."""
        return (
            isinstance(op, AllToAllOp | AllToAllStartOp)
            and set(op.role.role_list) <= INPUT_ROLES
            and op.send_splits is not None
            and op.recv_splits is None
        )

    def _sizing_lengths_start(self, op: Operation) -> AllToAllStartOp | None:
        """The asynchronous lengths exchange whose received lengths size input exchange `op`."""
        if not self._sized_by_lengths(op) or op.send_splits is None or not isinstance(op.send_splits.owner, RouteOp):
            return None
        lengths_exchange = self._lengths_exchange(op.send_splits.owner)
        return lengths_exchange if isinstance(lengths_exchange, AllToAllStartOp) else None

    def _forward_op(self, op: Operation, waited: dict[Operation, str], deferred: set[Operation]) -> list[str]:
        """One forward op; an input exchange whose receive sizes the received lengths give uses them."""
        if isinstance(op, WaitOp) and op.handle.owner in deferred:
            return []  # waited on before the input exchange the lengths size (see below)
        if not self._sized_by_lengths(op) or op.send_splits is None:
            return self.emit_op(op)
        send_splits = op.send_splits
        lengths_exchange = self._lengths_exchange(send_splits.owner) if isinstance(send_splits.owner, RouteOp) else None
        rs = f"rs_{self.name(send_splits)}"
        if lengths_exchange is None:
            if not isinstance(op, AllToAllStartOp):
                return self.emit_op(op)  # synchronous: the sizes exchange runs inside
            # Asynchronous: the segment sizes travel first, also asynchronously, so a prefetch
            # for the next batch never blocks on a peer.
            send = self.name(send_splits)
            return [
                f"h_{rs} = rt.exchange_sizes(self, {send}, async_op=True)",
                'yield "lengths"',
                f"{rs} = rt.wait(h_{rs})[0]",
                *self.emit_exchange(op, recv_splits=rs),
            ]
        lines = []
        if isinstance(lengths_exchange, AllToAllStartOp):
            wait = next(iter(lengths_exchange.handle.uses)).operation
            lengths = self.name(wait.outputs[0])
            if lengths_exchange not in waited:
                lines += ['yield "lengths"', f"{lengths} = rt.wait({self.name(lengths_exchange.handle)})[0]"]
                waited[lengths_exchange] = lengths
        else:
            lengths = self.name(lengths_exchange.outputs[0])
        lines.append(f"{rs} = rt.recv_splits(self, {lengths}, batches.ranks)")
        return [*lines, *self.emit_exchange(op, recv_splits=rs)]

    @staticmethod
    def _lengths_exchange(route: RouteOp) -> AllToAllOp | AllToAllStartOp | None:
        for use in route.lengths.uses:
            if isinstance(use.operation, AllToAllOp | AllToAllStartOp) and len(use.operation.inputs) == 1:
                return use.operation
        return None

    # -- exchange buffers the kernels read and write in place -----------------------------------
    def _pack_of_lookup(self, op: FusedLookupOp) -> PackOp | None:
        """The pack that is the only reader of every result of a fused lookup, on the same ranks
        and in the same block: the lookup can write into the exchange buffer itself."""
        if not op.pooled or any(not r.has_one_use() for r in op.pooled):
            return None
        pack = op.pooled[0].get_user_of_unique_use()
        if not isinstance(pack, PackOp) or list(pack.members) != list(op.pooled) or pack.parent is not op.parent:
            return None
        return pack if self._ranks(pack) == self._kernel_ranks(op) else None

    def _update_of_unpack(self, op: UnpackOp) -> FusedLookupUpdateOp | None:
        """The fused update that is the only reader of every member of an unpack (its gradients,
        in order), on the same ranks and in the same block: it can read the received buffer."""
        if not op.members or any(not m.has_one_use() for m in op.members):
            return None
        kernel = op.members[0].get_user_of_unique_use()
        if not isinstance(kernel, FusedLookupUpdateOp) or kernel.parent is not op.parent:
            return None
        if list(kernel.grads) != list(op.members):
            return None
        return kernel if self._ranks(op) == self._kernel_ranks(kernel) else None

    def _ranks(self, op: PackOp | UnpackOp) -> tuple[int, ...]:
        return (op.rank.value.data,) if op.rank is not None else tuple(range(self.world))

    def _kernel_ranks(self, op: FusedTableOp) -> tuple[int, ...]:
        return tuple(op.owner_ranks(self.world))

    def _layout(self, op: PackOp | UnpackOp) -> str:
        return self.const("LAYOUT", repr(tuple(tuple(seg) for seg in op.layout.segments)))

    @staticmethod
    def _widths(op: UnpackOp) -> tuple[int, ...]:
        return tuple((m.type.get_shape()[1] if len(m.type.get_shape()) == 2 else 1) for m in op.members)

    def _fused_common(self, op: FusedTableOp) -> str:
        """The arguments every fused call takes: its tables, the shared ids and where the tables'
        features sit in the received segments."""
        n = self.name
        tables = op.table_list
        names = tuple(t.name_str for t in tables)
        slots = tuple(tuple(sl) for sl in op.slot_lists)
        poolings = tuple(str(t.kernel_pooling) for t in tables)
        served, exchanged = self._served(op.lengths)
        fps = self.const("FEATURES_PER_SEGMENT", repr(served))
        return (
            f"{names!r}, {n(op.lengths)}, {n(op.indices)}, {n(op.weights)}, slots={slots!r}, "
            f"features_per_segment={fps}[self.rank], poolings={poolings!r}, "
            f"segment_batches={self._segment_batches(exchanged)}"
        )

    def emit_fused_lookup(self, op: FusedLookupOp) -> list[str]:
        """One call for all the tables on the ranks that hold them; when only a pack reads the
        results, the call writes the packed buffer (`packed=`) and the pack is not emitted."""
        ranks = op.owner_ranks(self.world)
        common = self._fused_common(op)
        pack = self._pack_of_lookup(op)
        if pack is not None:
            dtype = _DTYPES.get(str(pack.buffer.type.element_type), "torch.float32")
            return self._guard(
                ranks,
                f"{self.name(pack.buffer)} = rt.fused_lookup(self, {common}, "
                f"packed=({self._layout(pack)}, {dtype}, {self._pack_batch(pack)}))",
                [pack.buffer],
            )
        return self._guard(ranks, assign(self.targets(op.pooled), f"rt.fused_lookup(self, {common})"), list(op.pooled))

    def emit_fused_lookup_grad(self, op: FusedLookupGradOp) -> list[str]:
        """The replicated tables' gradients in one call (laid out back to back for the all-reduce);
        in the per-slot form each table's gradient is the list of its slots' gradients."""
        if op.per_slot:
            grads = ", ".join(f"[{self.names_of(g)}]" for g in op.grads_per_table())
        else:
            grads = self.names_of(op.grads)
        call = f"rt.fused_lookup_grad(self, {self._fused_common(op)}, grads=[{grads}])"
        return self._guard(op.owner_ranks(self.world), assign(self.targets(op.table_grads), call), list(op.table_grads))

    def emit_fused_lookup_update(self, op: FusedLookupUpdateOp) -> list[str]:
        """The tables' fused update in one call; when its gradients are exactly an unpack's
        members, it reads the received buffer (`packed_grads=`) and the unpack is not emitted.
        The runtime does either without a copy when the layout gives each table the same columns
        in every segment, and packs or unpacks otherwise."""
        common = self._fused_common(op)
        unpack = op.grads[-1].owner if op.grads else None
        if isinstance(unpack, UnpackOp) and self._update_of_unpack(unpack) is op:
            grads = (
                f"packed_grads=({self.name(unpack.buffer)}, {self._layout(unpack)}, {self._widths(unpack)!r}, "
                f"{self._pack_batch(unpack)})"
            )
        else:
            grads = f"grads=[{self.names_of(op.grads)}]"
        opt = op.optimizer
        return self._guard(
            op.owner_ranks(self.world),
            f"rt.fused_lookup_update(self, {common}, {grads}, optimizer={str(opt.kind.data)!r}, "
            f"group={opt.group.data})",
            [],
        )

    def emit_parallel(self, op: ParallelOp) -> list[str]:
        """Lanes as local closures returning what they yield, run concurrently by `rt.parallel`
        (results in lane order). Lanes never read each other's values (the verifier checks)."""
        lines: list[str] = []
        for k, lane in enumerate(op.lanes):
            lines.append(f"def _lane_{k}():")
            for inner in lane.block.ops:
                if isinstance(inner, YieldOp):
                    vals = inner.values
                    lines.append(f"    return {as_tuple(self.targets(vals))}")
                else:
                    lines += ["    " + line for line in self.emit_op(inner)]
        call = f"rt.parallel(self, [{', '.join(f'_lane_{k}' for k in range(len(op.lanes)))}])"
        if not op.res:
            return [*lines, call]
        return [*lines, assign(self.targets(op.res), call)]

    def _fake_spec(self, seg: Segment):
        """Shapes for tracing (register_fake): outputs are [batch, width]; saved values are 1-D
        (the last one the segment's batch sizes, `rt.BatchSizes.saved`)."""
        route = next(op for op in seg.ops if isinstance(op, RouteOp))
        batch_input = seg.inputs.index(route.offsets[0])

        def dtype(t) -> str:
            return {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32", "i64": "int64"}.get(
                str(t.element_type), "float32"
            )

        outs = tuple((cast(TensorType, v.type).get_shape()[1], dtype(v.type)) for v in seg.outputs)  # verified
        return batch_input, outs, (*(dtype(v.type) for v in seg.saved), "int64")

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
        if isinstance(source, WaitOp):
            source = source.handle.owner
        if isinstance(source, UnpackIdsOp):
            return {r: c for r, c in enumerate(source.features.get_values())}, True
        if isinstance(source, AllToAllOp | AllToAllStartOp) and source.splits is not None:
            matrix = source.splits.matrix
            return {r: matrix[0][r] for r in range(self.world)}, True
        if isinstance(source, RouteOp):
            return {r: len(source.features) for r in range(self.world)}, False
        what = source.name if isinstance(source, Operation) else "a block argument"
        raise EmitError(f"lookup reads lengths from {what}; expected sparse.route or coll.all_to_all")

    # -- batch sizes: ranks' local batches may differ, so buffers are sized per step and peer ------
    @staticmethod
    def _segment_batches(exchanged: bool) -> str:
        """The samples of each segment of a lengths buffer: one per source rank when it came
        through an exchange, else this rank's own (routed, one segment)."""
        return "batches.ranks" if exchanged else "(batches.own,)"

    def _pack_batch(self, op: PackOp | UnpackOp) -> str:
        """`batch` of a pack or unpack: every rank's on the tables' side of an exchange (segment `s`
        holds rank `s`'s samples: pooled outputs sent back, pooled gradients received), this
        rank's own on the samples' side and for local regroups."""
        if isinstance(op, PackOp):
            readers = self._readers(op.buffer)
            for reader in readers:  # sent in a merged exchange (joins may nest): what sends the join
                if isinstance(reader, JoinSegmentsOp):
                    readers += self._readers(reader.buffer)
            to_samples = any(
                isinstance(reader, ReduceScatterOp)
                or (isinstance(reader, AllToAllOp | AllToAllStartOp) and OUTPUT_ROLES & set(reader.role.role_list))
                for reader in readers
            )
            return "batches.ranks" if to_samples else "batches.own"
        source = op.buffer.owner
        while isinstance(source, SplitSegmentsOp):  # received in a merged exchange (splits may nest)
            source = source.buffer.owner
        if isinstance(source, WaitOp):
            source = source.handle.owner
        from_samples = isinstance(source, AllToAllOp | AllToAllStartOp) and bool(
            GRAD_ROLES & set(source.role.role_list)
        )
        return "batches.ranks" if from_samples else "batches.own"

    def _readers(self, value: SSAValue) -> list[Operation]:
        """The ops reading `value`, through `sched.parallel` lanes (a lane yields it as a result
        of the parallel op: its readers are that result's)."""
        readers = []
        for use in value.uses:
            parallel = use.operation.parent_op()
            if isinstance(use.operation, YieldOp) and isinstance(parallel, ParallelOp):
                region = use.operation.parent_region()
                assert region is not None  # the yield is in a lane of `parallel`
                lane = list(parallel.lanes).index(region)
                # Every lane ends with its yield (verified).
                first = sum(len(cast(YieldOp, r.block.last_op).operands) for r in list(parallel.lanes)[:lane])
                readers += self._readers(parallel.res[first + use.index])
            else:
                readers.append(use.operation)
        return readers

    def emit_exchange(self, op: AllToAllOp | AllToAllStartOp, recv_splits: str | None = None) -> list[str]:
        """An all-to-all; `recv_splits` names receive sizes known at run time (a dynamic one)."""
        n = self.name
        inputs = f"[{self.names_of(op.inputs)}]"
        role = "+".join(op.role.role_list)
        if op.splits is not None:
            splits = self.const("SPLITS", repr(tuple(tuple(r) for r in op.splits.matrix)))
            call = f"rt.all_to_all(self, {inputs}, splits={splits}, role={role!r}, batches=batches.ranks"
            source = op.inputs[0].owner if len(op.inputs) == 1 else None
            if role == "input_lengths" and isinstance(source, RouteOp) and op.inputs[0] is source.lengths:
                # Every rank's bags all one id (agreed by the batch check): nothing to exchange.
                call += f", lengths_known={self._batches_of(source)}.one_id"
        else:
            recv = recv_splits or n(op.recv_splits)
            call = f"rt.all_to_all_dynamic(self, {inputs}, {n(op.send_splits)}, {recv}, role={role!r}"
        if isinstance(op, AllToAllStartOp):
            return [f"{n(op.handle)} = {call}, async_op=True)"]
        return [assign(self.targets(op.outputs), f"{call})")]

    def emit_op(self, op: Operation) -> list[str]:
        emit = _EMITTERS.get(type(op))
        if emit is None:
            raise EmitError(f"plan-module cannot emit {op.name} yet")
        return emit(self, op)

    def _route_spec(self, op: RouteOp) -> str:
        """The module constant listing a route's features (`rt.RouteFeature`s)."""
        placements = {p.table.data: p for p in op.placements.data}
        feats = []
        for f in op.features.data:
            p = placements[f.table.data]
            feats.append(
                f"rt.RouteFeature({f.feature_name.data!r}, {f.table.data!r}, {self.table_rows[f.table.data]}, "
                f"{str(p.kind.data)!r}, {tuple(p.rank_list)!r}, {tuple(p.bounds)!r}, {bool(f.weighted.data)!r})"
            )
        return self.const("ROUTE", "(\n    " + ",\n    ".join(feats) + ",\n)")

    def emit_route(self, op: RouteOp) -> list[str]:
        spec = self._route_spec(op)
        targets = self.targets([op.lengths, op.indices, op.splits])
        targets += [
            self.name(op.routed_weights[0]) if op.routed_weights else "_",
            self._batches_of(op),
        ]
        index_dtype = self._index_dtype(op)
        checked = f", checked={self.checked_routes.index(op)}" if op in self.checked_routes else ""
        return [
            assign(
                targets,
                f"rt.route(self, {spec}, [{self.names_of(op.ids)}], [{self.names_of(op.offsets)}], "
                f"[{self.names_of(op.weights)}], index_dtype=torch.{index_dtype}{checked})",
            )
        ]

    @staticmethod
    def _index_dtype(route: RouteOp) -> str:
        return "int32" if str(cast(TensorType, route.indices.type).element_type) == "i32" else "int64"

    def _batches_of(self, route: RouteOp) -> str:
        """The name of a route's `BatchSizes`: `batches` for its segment's first route (what the
        segment's exchanges are sized by), else its own (whose `one_id` its lengths exchange reads)."""
        return "batches" if route in self.batch_routes else f"batches_{self.name(route.lengths)}"

    def emit_wait(self, op: WaitOp) -> list[str]:
        return [assign(self.targets(op.outputs), f"rt.wait({self.name(op.handle)})")]

    def _with_dense_grads(self, op: AllReduceOp) -> list[str]:
        """An all-reduce that rides in the dense gradients' (`with_dense_grads`): handed to the
        runtime with the table updates that read its results, which run once it is done."""
        block = op.parent_block()
        assert block is not None  # a step's backward op
        users = sorted({use.operation for r in op.outputs for use in r.uses}, key=block.get_operation_index)
        then = f"_after_{self.name(op.outputs[0])}"
        body = [line for user in users for line in self.emit_update(cast(LookupUpdateOp, user))]
        self.deferred_updates.update(users)
        return [
            f"def {then}({', '.join(self.targets(op.outputs))}):",
            *("    " + line for line in body),
            f"rt.all_reduce_with_dense_grads(self, [{self.names_of(op.inputs)}], then={then})",
        ]

    def emit_update(self, op: LookupUpdateOp) -> list[str]:
        """A table update: from pooled gradients (per-table, like a lookup) or, for replicated
        tables, from the all-reduced dense table gradient."""
        if op in self.deferred_updates:
            return []  # emitted in the all-reduce's `then` (`_with_dense_grads`)
        if not op.dense:
            return self.emit_lookup(op)
        opt = op.optimizer
        return self._guard(
            op.placement.owner_ranks(self.world),
            f"rt.dense_update(self, {op.table.name_str!r}, {self.name(op.grad)}, optimizer={str(opt.kind.data)!r}, "
            f"group={opt.group.data})",
            [],
        )

    def emit_pack_ids(self, op: PackIdsOp) -> list[str]:
        n = self.name
        features = tuple(op.features.get_values())
        return [
            assign(
                self.targets([op.buffer, op.sizes]),
                f"rt.pack_ids(self, {n(op.lengths)}, {n(op.indices)}, {n(op.weights)}, "
                f"features={features!r}, batch=batches.own)",
            )
        ]

    def emit_unpack_ids(self, op: UnpackIdsOp) -> list[str]:
        features = tuple(op.features.get_values())
        index_dtype = "torch.int32" if str(op.indices.type.element_type) == "i32" else "torch.int64"
        outs = [op.lengths, op.indices, *([op.weights] if op.weights is not None else [])]
        return [
            assign(
                self.targets(outs),
                f"rt.unpack_ids(self, {self.name(op.buffer)}, {self.name(op.sizes)}, features={features!r}, "
                f"weighted={op.weights is not None}, index_dtype={index_dtype}, batches=batches.ranks)",
            )
        ]

    def emit_permute(self, op: PermuteOp) -> list[str]:
        """A renaming: result `i` is input `order[i]` (no call)."""
        order = list(op.order.get_values())
        srcs = ", ".join(self.name(op.inputs[j]) for j in order)
        return [assign(self.targets(op.outputs), f"{srcs}{',' if len(order) == 1 else ''}")]

    def emit_reduce_scatter(self, op: ReduceScatterOp) -> list[str]:
        return [
            f"{self.name(op.result)} = rt.reduce_scatter(self, {self.name(op.input)}, "
            f"reduction={str(op.reduction.data)!r}, batches=batches.ranks)"
        ]

    def emit_all_reduce(self, op: AllReduceOp | AllReduceStartOp) -> list[str]:
        if isinstance(op, AllReduceOp) and op.with_dense_grads is not None:
            return self._with_dense_grads(op)
        reduction = str(op.reduction.data)
        if isinstance(op, AllReduceStartOp):
            return [
                f"{self.name(op.handle)} = rt.all_reduce(self, [{self.names_of(op.inputs)}], "
                f"reduction={reduction!r}, async_op=True)"
            ]
        targets = self.targets(op.outputs)
        return [assign(targets, f"rt.all_reduce(self, [{self.names_of(op.inputs)}], reduction={reduction!r})")]

    def emit_lookup(self, op: LookupOp | LookupUpdateOp | LookupGradOp) -> list[str]:
        """A per-table lookup, update (pooled-gradient form) or table gradient, on its table's ranks."""
        n = self.name
        assert op.lengths is not None  # only a dense update reads no ids, and `emit_update` emits it
        served, exchanged = self._served(op.lengths)
        ranks = op.placement.owner_ranks(self.world)
        slots = tuple(op.slots.get_values())
        fps = self.const("FEATURES_PER_SEGMENT", repr(served))
        common = (
            f"{op.table.name_str!r}, {n(op.lengths)}, {n(op.indices)}, {n(op.weights)}, "
            f"slots={slots!r}, features_per_segment={fps}[self.rank], pooling={str(op.table.kernel_pooling)!r}, "
            f"segment_batches={self._segment_batches(exchanged)}"
        )
        if isinstance(op, LookupOp):
            return self._guard(ranks, f"{n(op.pooled)} = rt.lookup(self, {common})", [op.pooled])
        if isinstance(op, LookupGradOp):
            return self._guard(
                ranks, f"{n(op.table_grad)} = rt.lookup_grad(self, {common}, grad={n(op.grad)})", [op.table_grad]
            )
        opt = op.optimizer
        return self._guard(
            ranks,
            f"rt.lookup_update(self, {common}, grad={n(op.grad)}, optimizer={str(opt.kind.data)!r}, "
            f"group={opt.group.data})",
            [],
        )

    def emit_pack(self, op: PackOp | UnpackOp) -> list[str]:
        """A pack or unpack on its ranks; none where a fused kernel writes or reads the buffer."""
        n = self.name
        ranks = self._ranks(op)
        dtype = _DTYPES.get(str(cast(TensorType, op.buffer.type).element_type), "torch.float32")  # verified
        batch = self._pack_batch(op)
        if isinstance(op, PackOp):
            lookup = op.members[0].owner if op.members else None
            if isinstance(lookup, FusedLookupOp) and self._pack_of_lookup(lookup) is op:
                return []  # the fused lookup wrote the buffer (emit_fused_lookup)
            layout = self._layout(op)
            return self._guard(
                ranks,
                f"{n(op.buffer)} = rt.pack(self, [{self.names_of(op.members)}], {layout}, {dtype}, batch={batch})",
                [op.buffer],
            )
        if not op.members or self._update_of_unpack(op) is not None:
            return []  # nothing to unpack, or the fused update reads the buffer (emit_fused_lookup_update)
        outs = self.targets(op.members)
        return self._guard(
            ranks,
            assign(outs, f"rt.unpack(self, {n(op.buffer)}, {self._layout(op)}, {self._widths(op)!r}, batch={batch})"),
            list(op.members),
        )

    def module_text(self, body: list[str], segments: list[Segment]) -> str:
        ops = [op for op in self.step.walk()]
        colls = [op for op in ops if op.name.startswith("coll.") and op.name != "coll.wait"]
        riders = [op for op in colls if isinstance(op, AllReduceOp) and op.with_dense_grads is not None]
        colls = [op for op in colls if op not in riders]
        fwd_colls = [op for op in colls if op.parent_region() is self.step.forward]
        tables = tables_of(self.step.walk())
        module = self.step.parent_op()
        header = [
            '"""SparseLift plan module (generated by `sparselift-opt -t plan-module`; do not edit).',
            "",
            f"plan hash: {plan_hash(module) if isinstance(module, ModuleOp) else 'n/a'}",
            f"step: @{self.step.sym_name.data}, world size {self.world}, {len(tables)} tables, "
            f"{len(segments)} sparse segment(s)",
            f"collectives per step: {len(fwd_colls)} forward, {len(colls) - len(fwd_colls)} backward"
            + (f" ({len(riders)} more in the dense gradients' all-reduce)" if riders else ""),
            '"""',
            "",
            "import torch",
            "",
            *PLAN_MODULE_IMPORTS,
            "from sparselift.runtime import plan_ops as rt",
            "",
            *render_tables(describe_tables(self.step)),
            "",
            f"PLAN_HASH = {plan_hash(module) if isinstance(module, ModuleOp) else ''!r}",
            f"WORLD_SIZE = {self.world}",
            "# hide-latency: start each dense-gradient bucket's all-reduce as soon as backward produced it",
            f"DENSE_GRAD_OVERLAP = {'dense_grad_overlap' in self.step.attributes}",
            "# how the table ops run (the step's `kernels`): generated kernels, or the reference lowering",
            f"KERNELS = {'generated' if self.step.generated_kernels else 'reference'!r}",
            f"NUM_SEGMENTS = {len(segments)}",
            "",
        ]
        seg_info = [f"    {s.index}: ({len(s.outputs)}, {len(s.saved) + 1})," for s in segments]  # + batch sizes
        fake_info = [f"    {s.index}: {self._fake_spec(s)!r}," for s in segments]
        return (
            "\n".join(
                header
                + self.consts
                + [
                    "",
                    "# segment -> (number of outputs, number of saved values)",
                    "SEGMENTS = {",
                    *seg_info,
                    "}",
                    "",
                    "",
                    "# segment -> (index of an offsets input, (width, dtype) per output, dtype per saved value)",
                    "SEGMENT_SHAPES = {",
                    *fake_info,
                    "}",
                    "",
                    "",
                    "class Plan(rt.PlanBase):",
                    f'    """Runs @{self.step.sym_name.data} on one rank."""',
                    "",
                    "    SEGMENTS = SEGMENTS",
                    "    SEGMENT_SHAPES = SEGMENT_SHAPES",
                    "    DENSE_GRAD_OVERLAP = DENSE_GRAD_OVERLAP",
                    "    KERNELS = KERNELS",
                    "    TABLES = TABLES",
                    "",
                ]
                + body
            )
            + "\n"
        )


# What `_Emitter.emit_op` writes for each op (by exact type); dense ops and yields are emitted
# by the structure (`emit`, `emit_segment`, `emit_parallel`).
# Each emitter takes an op of its key's type: a mapping the type checker cannot relate, hence `...`.
_EMITTERS: dict[type[Operation], Callable[..., list[str]]] = {
    RouteOp: _Emitter.emit_route,
    AllToAllOp: _Emitter.emit_exchange,
    AllToAllStartOp: _Emitter.emit_exchange,
    WaitOp: _Emitter.emit_wait,
    LookupOp: _Emitter.emit_lookup,
    LookupGradOp: _Emitter.emit_lookup,
    LookupUpdateOp: _Emitter.emit_update,
    FusedLookupOp: _Emitter.emit_fused_lookup,
    FusedLookupUpdateOp: _Emitter.emit_fused_lookup_update,
    FusedLookupGradOp: _Emitter.emit_fused_lookup_grad,
    ParallelOp: _Emitter.emit_parallel,
    PackOp: _Emitter.emit_pack,
    UnpackOp: _Emitter.emit_pack,
    PackIdsOp: _Emitter.emit_pack_ids,
    UnpackIdsOp: _Emitter.emit_unpack_ids,
    PermuteOp: _Emitter.emit_permute,
    ReduceScatterOp: _Emitter.emit_reduce_scatter,
    AllReduceOp: _Emitter.emit_all_reduce,
    AllReduceStartOp: _Emitter.emit_all_reduce,
    **ROWS_EMITTERS,
    **SEGMENT_EMITTERS,
}


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
