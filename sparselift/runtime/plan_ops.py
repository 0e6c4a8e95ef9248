"""What generated plan modules call: collectives over torch.distributed and the sparse ops.

`PlanBase` holds one rank's state (its table shards, optimizer state, process group, dense
regions). Each sparse segment runs as the custom op `sparselift::segment`, registered with
`register_fake` and `register_autograd`, so the dense regions around it train with ordinary
autograd (and trace under torch.compile); the segment's backward applies the fused optimizer
update to the tables. The collectives (and the ids exchange's buffers) live in `collectives.py`;
every one is re-exported here, as the plan module calls them `rt.<name>`.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import types
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import torch

from sparselift.kernel_args import KernelBackend, RoutedBags, TableArgs, UpdateArgs
from sparselift.runtime import reference as ref
from sparselift.runtime import rows as _rows
from sparselift.runtime.backends import ReferenceKernels
from sparselift.runtime.collectives import (
    _back_to_back,  # noqa: F401 - reached as `plan_ops._back_to_back` (tests)
    all_reduce,
    all_to_all,
    all_to_all_dynamic,
    exchange_sizes,
    join_segments,
    pack_ids,
    recv_splits,
    reduce_scatter,
    split_segments,
    static_sizes,
    unpack_ids,
    wait,
)
from sparselift.runtime.reference import RouteFeature
from sparselift.runtime.routing import (
    Agreement,
    BatchSizes,
    LocalCheck,
    RidingAgreement,
    RouteInputs,
    check_batch,
    route,
    saved_batch_sizes,
)
from sparselift.runtime.rows import (  # noqa: F401 - re-exported: a plan module calls them as rt.<name>
    compact_rows,
    expand_rows,
    gather_rows,
    row_splits,
    rows_update,
    sum_rows,
    take_rows,
    unique_ids,
)
from sparselift.runtime.sparse_optimizer import optimizer_args

__all__ = [
    "PlanBase",
    "RouteFeature",
    "BatchSizes",
    "saved_batch_sizes",
    "check_batch",
    "route",
    "all_to_all",
    "all_to_all_dynamic",
    "exchange_sizes",
    "wait",
    "recv_splits",
    "lookup",
    "lookup_update",
    "fused_lookup_grad",
    "lookup_grad",
    "fused_lookup",
    "fused_lookup_update",
    "dense_update",
    "all_reduce_with_dense_grads",
    "pack",
    "unpack",
    "pack_ids",
    "unpack_ids",
    "static_sizes",
    "join_segments",
    "split_segments",
    "reduce_scatter",
    "all_reduce",
    "parallel",
    *_rows.__all__,
]

# The live plans by handle, for the custom ops (which take the handle, an int). Weak: a plan
# nothing else holds (a calibration candidate dropped, a compiled model deleted) goes, with its
# buffers and its started exchanges, instead of living for the rest of the process.
_PLANS: weakref.WeakValueDictionary[int, PlanBase] = weakref.WeakValueDictionary()
_HANDLES = itertools.count(1)


class PlanBase:
    """One rank's executor for a generated plan (subclassed by the plan module's `Plan`)."""

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        regions: dict[str, torch.nn.Module],
        tables: dict[str, torch.Tensor],
        states: dict[str, torch.Tensor],
        process_group: Any = None,
        grad_scale: float = 1.0,
        kernels: KernelBackend | None = None,
    ):
        self.rank = rank
        self.world = world_size
        self.regions = regions
        self.tables = tables
        self.states = states
        self.pg = process_group
        self.grad_scale = grad_scale
        # The kernel backend every table op runs on (runtime/backends.py), chosen once when the
        # plan is built: the reference, the C kernels or the Triton ones.
        self.kernels: KernelBackend = kernels if kernels is not None else ReferenceKernels()
        # The sparse optimizer's groups (runtime/sparse_optimizer.py), set by the compiled model:
        # each update reads its group's arguments for this step from it.
        self.sparse_optimizer: Any = None
        self.shm = None  # the all-to-alls' shared-memory transport (runtime/shm_transport.py); None: the group's
        self.timing: dict[str, float] | None = None  # benchmark mode: seconds per stage this step
        self.grad_anchor = torch.zeros((), requires_grad=True)
        self._prefetched: dict[int, types.GeneratorType] = {}
        self._ahead: dict[int, types.GeneratorType] = {}  # started by `start` for the next batch
        self._stage: dict[int, str | None] = {}  # the stage a started segment has reached
        self._finished: dict[int, object] = {}  # results of segments a prefetch ran to the end
        # (gradients, then): replicated tables' gradients that ride in the dense gradients'
        # all-reduce at the end of backward, and their updates (`all_reduce_with_dense_grads`).
        self.riders: list[tuple[list[torch.Tensor], Any]] = []
        self._routing: Agreement | None = None  # what the ranks agreed on the batch being routed now
        self._agreed_ahead: Agreement | RidingAgreement | None = None  # ... on the batch `start` began
        self._last_sparse_inputs: tuple | None = None  # (inputs, their versions, features): `_sparse_inputs`
        self._inputs_error: Exception | None = None  # a failed `_sparse_inputs`, for the batch check to agree on
        self.handle = next(_HANDLES)
        _PLANS[self.handle] = self

    def close(self) -> None:
        _PLANS.pop(self.handle, None)

    def dense(self, name: str, *args):
        if self.timing is not None:
            start = time.perf_counter()
            out = self._dense(name, *args)
            self.timing["other_fwd"] += time.perf_counter() - start
            return out
        return self._dense(name, *args)

    def _dense(self, name: str, *args):
        if name == "sparse_inputs":
            return self._sparse_inputs(args)
        out = self.regions[name](*args)
        return tuple(out) if isinstance(out, list | tuple) else (out,)

    def _sparse_inputs(self, args: tuple) -> tuple:
        """Per-feature (ids, offsets, weights), flat (weights only where present).

        The batch `start` began comes back to `forward` as the same, unchanged tensors: the
        features computed then are reused, so the ids are split into features once a batch. The
        last call's inputs are held (not just their ids, which a new tensor could reuse). Not
        when the region has trainable parameters (per-sample weights computed from them): `start`
        runs without autograd, and `forward` needs their gradient."""
        region: Any = self.regions["sparse_inputs"]  # frontend.program.SparseInputs
        # Inference tensors (built under `torch.inference_mode`) keep no version counter: a batch
        # of them is split afresh, never matched against the last one.
        reusable = not any(p.requires_grad for p in region.parameters()) and not any(
            isinstance(a, torch.Tensor) and a.is_inference() for a in args
        )
        versions = tuple(a._version if isinstance(a, torch.Tensor) and reusable else None for a in args)
        last = self._last_sparse_inputs
        if reusable and last is not None and last[1] == versions and len(last[0]) == len(args):
            if all(a is b for a, b in zip(last[0], args)):
                return last[2]
        try:
            out = region(*args)
        except Exception as e:  # noqa: BLE001 - raised on every rank by the step's batch check
            # Raising here, on this rank alone, would leave the others in the batch agreement.
            self._inputs_error, self._last_sparse_inputs = e, None
            return tuple(torch.zeros(1, dtype=torch.int64) for _ in range(sum(c.outputs for c in region.calls)))
        triples = cast(Sequence[tuple[torch.Tensor, ...]], out)  # SparseInputs: per feature (ids, offsets, weights)
        flat = tuple(x for triple in triples for x in triple if x is not None)
        self._last_sparse_inputs = (args, versions, flat) if reusable else None
        return flat

    def take_inputs_error(self) -> Exception | None:
        """The error of this batch's `sparse_inputs`, if it failed (and forget it)."""
        error, self._inputs_error = self._inputs_error, None
        return error

    def check_batch(self, routes: Sequence[RouteInputs], ahead: bool = False, ride: bool = False) -> None:
        """Check this batch and agree on every rank's batch size, once per step (`routing`).

        `ahead=True` (from `start`): for the next batch, whose forward then reuses the agreement
        instead of making another. `ride=True` (a plan that starts nothing ahead): the agreement
        rides in this step's dense-gradient all-reduce (`routing.RidingAgreement`)."""
        if not ahead and self._agreed_ahead is not None:
            agreed, self._agreed_ahead = self._agreed_ahead, None
            self._routing = agreed.resolve(self) if isinstance(agreed, RidingAgreement) else agreed
            return
        if ahead and ride and self.world > 1:
            riding = RidingAgreement(LocalCheck(self, routes, self.take_inputs_error()), self.rank, self.world)
            self.riders.append(([riding.slots], riding.receive))
            self._agreed_ahead = riding
            return
        self._routing = check_batch(self, routes, self.take_inputs_error())
        if ahead:
            self._agreed_ahead = self._routing

    def take_riders(self) -> list[tuple[list[torch.Tensor], Any]]:
        """The riders this backward left for the dense gradients' all-reduce (and forget them)."""
        riders, self.riders = self.riders, []
        return riders

    def checked_route(self, route: int) -> tuple:
        """Checked route `route` of the batch being routed: its (lengths, ids, splits, weights)
        as the check routed them, and the agreed `BatchSizes`."""
        if self._routing is None:
            raise RuntimeError("sparselift: a checked route ran before the plan's check_batch")
        return (*self._routing.routed[route], self._routing.route(route))

    def segment(self, index: int, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        n_out = self.SEGMENTS[index][0]  # type: ignore[attr-defined]
        # The anchor is the segment's one differentiable input: without it autograd would never
        # call the segment's backward (ids and offsets carry no gradient).
        anchor = self.grad_anchor if torch.is_grad_enabled() else self.grad_anchor.detach()
        start = time.perf_counter() if self.timing is not None else 0.0
        if torch.compiler.is_compiling() or any(type(t) is not torch.Tensor for t in inputs):
            out = list(torch.ops.sparselift.segment(self.handle, index, [anchor, *inputs])[:n_out])
        else:  # eager: the op's twin without the dispatcher's flattening (see `_EagerSegment`)
            out = list(_EagerSegment.apply(self.handle, index, anchor, *inputs)[:n_out])
        if self.timing is not None:
            self.timing["sparse_fwd"] += time.perf_counter() - start
        return out

    def fake_segment(self, index: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        batch_input, outputs, saved = self.SEGMENT_SHAPES[index]  # type: ignore[attr-defined]
        batch = inputs[1 + batch_input].shape[0] - 1
        ctx = torch.library.get_ctx()
        result = [inputs[0].new_empty(batch, width, dtype=getattr(torch, dt)) for width, dt in outputs]
        result += [inputs[0].new_empty(ctx.new_dynamic_size(), dtype=getattr(torch, dt)) for dt in saved]
        return result

    # Segment generators yield markers (see codegen/plan_module.py): "lengths" once the lengths
    # exchange is in flight, "indices" once every input exchange is, "stage" where the IR puts a
    # dense region between two of the segment's ops.
    def prefetch(self, index: int, inputs: Sequence[torch.Tensor], ahead: bool = False) -> None:
        """Run segment `index`'s first stage (the ops before the first dense region it straddles).

        `ahead=True` (from `start`, for the next batch) stops once the lengths are in flight;
        `advance()` starts the indices later, and that batch's forward takes the running segment
        over instead of starting another.
        """
        start = time.perf_counter() if self.timing is not None else 0.0
        if not ahead and index in self._ahead:
            self._prefetched[index] = self._ahead.pop(index)
            self._run_stage(index, self._prefetched[index])
        else:
            gen = getattr(self, f"_segment_{index}_forward")(*inputs)
            (self._ahead if ahead else self._prefetched)[index] = gen
            if ahead:
                self._step(index, gen)
            else:
                self._run_stage(index, gen)
        if self.timing is not None:
            self.timing["sparse_fwd"] += time.perf_counter() - start

    def resume(self, index: int) -> None:
        """Run segment `index`'s next stage."""
        start = time.perf_counter() if self.timing is not None else 0.0
        if index in self._prefetched:
            self._run_stage(index, self._prefetched[index])
        if self.timing is not None:
            self.timing["sparse_fwd"] += time.perf_counter() - start

    def advance(self) -> None:
        """Start the next batch's indices exchanges (their lengths have had time to arrive)."""
        for index, gen in self._ahead.items():
            if self._stage.get(index) == "lengths":
                self._step(index, gen)

    def _run_stage(self, index: int, gen) -> None:
        while self._step(index, gen) not in (None, "stage"):
            pass

    def _step(self, index: int, gen):
        """Run a segment generator to its next marker; remember where it is (or its result)."""
        if index in self._finished:
            return None
        try:
            self._stage[index] = next(gen)
        except StopIteration as stop:
            self._stage[index] = None
            self._finished[index] = stop.value
        return self._stage[index]

    # Called by the custom op.
    def run_segment_forward(self, index: int, inputs: list[torch.Tensor]):
        self._stage.pop(index, None)
        if index in self._finished:
            self._prefetched.pop(index, None)
            return self._finished.pop(index)
        result = self._prefetched.pop(index, None)
        if result is None:  # a segment `start` began for this batch, or a fresh one
            result = self._ahead.pop(index, None)
        if result is None:
            result = getattr(self, f"_segment_{index}_forward")(*inputs[1:])  # inputs[0] is the anchor
        if not isinstance(result, types.GeneratorType):
            return result
        try:
            while True:
                next(result)
        except StopIteration as stop:
            return stop.value

    def run_segment_backward(self, index: int, grads: list[torch.Tensor | None], saved: list[torch.Tensor]):
        """Run a segment's backward; a generator (one with async exchanges) runs up to its first
        exchange now and finishes when autograd's backward pass ends."""
        start = time.perf_counter() if self.timing is not None else 0.0
        result = getattr(self, f"_segment_{index}_backward")(grads, saved)
        if isinstance(result, types.GeneratorType):
            if next(result, StopIteration) is not StopIteration:
                torch.autograd.Variable._execution_engine.queue_callback(lambda: self._finish_backward(result))
        if self.timing is not None:
            self.timing["sparse_bwd"] += time.perf_counter() - start

    def _finish_backward(self, pending) -> None:
        start = time.perf_counter() if self.timing is not None else 0.0
        for _ in pending:  # each step waits for an exchange started in the previous one
            pass
        if self.timing is not None:
            self.timing["sparse_bwd"] += time.perf_counter() - start


# ---- the custom op --------------------------------------------------------------------------


def _segment_impl(handle: int, index: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    plan = _PLANS[handle]
    outputs, saved = plan.run_segment_forward(index, inputs)
    # Custom ops may not return their inputs or one tensor twice: copy any alias.
    seen: set[int] = {id(t) for t in inputs}
    result = []
    for t in [*outputs, *saved]:
        if id(t) in seen:
            t = t.clone()
        seen.add(id(t))
        result.append(t)
    return result


@torch.library.custom_op("sparselift::segment", mutates_args=())
def _segment(handle: int, index: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return _segment_impl(handle, index, inputs)


@_segment.register_fake
def _segment_fake(handle: int, index: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    # Dynamo makes an int argument symbolic once it has seen two values (two compiled models in
    # one process): `int` specializes it again (a guard per plan).
    handle, index = int(handle), int(index)
    plan = _PLANS[handle]
    return plan.fake_segment(index, inputs)


def _setup_context(ctx, inputs, output) -> None:
    handle, index, tensors = inputs
    handle, index = int(handle), int(index)
    plan = _PLANS[handle]
    n_out = plan.SEGMENTS[index][0]  # type: ignore[attr-defined]  # set by the generated Plan subclass
    ctx.handle, ctx.index, ctx.n_inputs, ctx.n_out = handle, index, len(tensors), n_out
    ctx.save_for_backward(*output[n_out:])


def _backward(ctx, grads):
    plan = _PLANS[ctx.handle]
    plan.run_segment_backward(ctx.index, list(grads[: ctx.n_out]), list(ctx.saved_tensors))
    return None, None, [None] * ctx.n_inputs


_segment.register_autograd(_backward, setup_context=_setup_context)


class _EagerSegment(torch.autograd.Function):
    """The custom op's eager twin: the same forward, saved values and backward, without the op
    dispatcher flattening a segment's few dozen inputs twice per step. Tracing (torch.compile,
    export: fake or functional tensors) keeps using `sparselift::segment`."""

    @staticmethod
    def forward(ctx, handle: int, index: int, *inputs: torch.Tensor):
        output = _segment_impl(handle, index, list(inputs))
        _setup_context(ctx, (handle, index, inputs), output)
        ctx.mark_non_differentiable(*output[ctx.n_out :])
        return tuple(output)

    @staticmethod
    def backward(ctx, *grads):
        return None, None, *_backward(ctx, grads)[2]


# ---- ops ------------------------------------------------------------------------------------


class _Bags:
    """The bags of a lengths buffer: segment `s` lists, feature-major, `features` features' bags
    for its `batches[s]` samples; pooled rows are source-major (row `sum(batches[:s]) + b`).

    Kernels and the reference lowering take one batch for every segment. When the batches
    differ, `lengths` is padded with empty bags up to the largest batch (ids keep their order,
    so updates apply in the same order), and pooled rows and gradients are mapped between the
    real rows and the padded ones (`pooled`, `padded`)."""

    def __init__(self, lengths: torch.Tensor, features: int, batches: Sequence[int]):
        features, batches = int(features), [int(b) for b in batches]
        if lengths.numel() != features * sum(batches):
            raise ValueError(f"{lengths.numel()} bag lengths for {features} features and batch sizes {tuple(batches)}")
        self.lengths, self.batch, self.features = lengths, max(batches, default=0), features
        self.rows = None  # the padded row of each real sample, when the batches differ
        if len(set(batches)) > 1:
            device, b_max = lengths.device, self.batch
            self.rows = torch.cat([s * b_max + torch.arange(b, device=device) for s, b in enumerate(batches)])
            bags = torch.cat(
                [
                    (
                        (s * features + torch.arange(features, device=device))[:, None] * b_max
                        + torch.arange(b, device=device)[None, :]
                    ).reshape(-1)
                    for s, b in enumerate(batches)
                ]
            )
            self.lengths = lengths.new_zeros(len(batches) * features * b_max).index_copy_(0, bags, lengths)
        self.even = self.rows is None
        self.padded_rows = len(batches) * self.batch

    def routed(self, indices: torch.Tensor, weights: torch.Tensor | None) -> RoutedBags:
        """The bags as every kernel backend reads them (the padded geometry)."""
        return RoutedBags(self.lengths, indices, weights, self.features, self.batch)

    def pooled(self, rows: torch.Tensor) -> torch.Tensor:
        """Pooled rows of the padded geometry -> the real ones."""
        return rows if self.rows is None else rows[self.rows]

    def padded(self, grad: torch.Tensor) -> torch.Tensor:
        """Pooled gradients of the real rows -> the padded geometry (zeros in the padding)."""
        if self.rows is None:
            return grad
        return grad.new_zeros(self.padded_rows, grad.shape[1]).index_copy_(0, self.rows, grad)


def _tables(plan: PlanBase, names: Sequence[str], slots, poolings) -> list[TableArgs]:
    """The named tables of `plan` (storage and optimizer state) as the kernels' arguments."""
    return [TableArgs(n, plan.tables[n], sl, p, plan.states.get(n)) for n, sl, p in zip(names, slots, poolings)]


def _update(plan: PlanBase, optimizer: str, group: int) -> UpdateArgs:
    return UpdateArgs(optimizer_args(plan, optimizer, group), plan.grad_scale)


def lookup(
    plan: PlanBase, table: str, lengths, indices, weights, *, slots, features_per_segment, pooling, segment_batches
):
    return fused_lookup(
        plan,
        [table],
        lengths,
        indices,
        weights,
        slots=[slots],
        features_per_segment=features_per_segment,
        poolings=[pooling],
        segment_batches=segment_batches,
    )[0]


def lookup_update(
    plan: PlanBase,
    table: str,
    lengths,
    indices,
    weights,
    *,
    slots,
    features_per_segment,
    pooling,
    segment_batches,
    grad,
    optimizer,
    group,
):
    fused_lookup_update(
        plan,
        [table],
        lengths,
        indices,
        weights,
        slots=[slots],
        features_per_segment=features_per_segment,
        poolings=[pooling],
        segment_batches=segment_batches,
        optimizer=optimizer,
        group=group,
        grads=[grad],
    )


def _column_blocks(buffer: torch.Tensor, layout, batch: int) -> list[torch.Tensor] | None:
    """The members of a packed buffer as views (`reference.unpack` without a copy) when the
    layout gives every member the same columns in every segment; else None. Rows `s * B + b`
    of member `m` are row `b` of segment `s`, as `pack` / `unpack` lay them out."""
    first = [tuple(x) for x in layout[0]] if layout else []
    width = sum(size for _, size in first)
    if (
        not first
        or any([tuple(x) for x in seg] != first for seg in layout)
        or buffer.dim() != 1
        or not buffer.is_contiguous()
        or buffer.numel() != len(layout) * batch * width
        or any(size <= 0 or off < 0 or off + size > width for off, size in first)
    ):
        return None
    rows = buffer.view(len(layout) * batch, width)
    return [rows[:, off : off + size] for off, size in first]


def fused_lookup(
    plan: PlanBase,
    names,
    lengths,
    indices,
    weights,
    *,
    slots,
    features_per_segment,
    poolings,
    segment_batches,
    packed=None,
):
    """Several tables' lookups over the same received buffers: one kernel call.

    `packed=(layout, dtype, batch)`: return the lookups packed for the output exchange
    (`rt.pack` with that `batch`), each table's kernel writing its columns of the buffer in place
    when the layout allows and every segment has as many samples."""
    tables = _tables(plan, names, slots, poolings)
    bags = _Bags(lengths, features_per_segment, segment_batches)
    routed = bags.routed(indices, weights)
    if packed is not None:
        layout, dtype, pack_batch = packed
        b = bags.batch
        if bags.even and layout and b > 0 and all(t.weight.dtype == dtype for t in tables):
            width = sum(size for _, size in layout[0])
            buffer = torch.empty(len(layout) * b * width, dtype=dtype, device=tables[0].weight.device)
            views = _column_blocks(buffer, layout, b)
            if views is not None and len(layout) * b * int(features_per_segment) == lengths.numel():
                plan.kernels.lookup(routed, tables, out=views)
                return buffer
        # Other layouts or uneven batches: look up, then pack.
        members = [bags.pooled(x) for x in plan.kernels.lookup(routed, tables)]
        return pack(plan, members, layout, dtype, batch=pack_batch)
    return [bags.pooled(x) for x in plan.kernels.lookup(routed, tables)]


def fused_lookup_update(
    plan: PlanBase,
    names,
    lengths,
    indices,
    weights,
    *,
    slots,
    features_per_segment,
    poolings,
    segment_batches,
    optimizer,
    group,
    grads=None,
    packed_grads=None,
):
    """Several tables' backward + update. `packed_grads=(buffer, layout, widths, batch)`: the
    gradients are the members of a received buffer (`rt.unpack` with that `batch`), read in place
    when the layout allows and every segment has as many samples."""
    bags = _Bags(lengths, features_per_segment, segment_batches)
    if packed_grads is not None:
        buffer, layout, widths, grad_batch = packed_grads
        grads = _column_blocks(buffer, layout, bags.batch) if bags.even and buffer.dtype == torch.float32 else None
        if grads is None:
            grads = unpack(plan, buffer, layout, widths, batch=grad_batch)
    tables = _tables(plan, names, slots, poolings)
    plan.kernels.lookup_update(
        bags.routed(indices, weights), tables, [bags.padded(g) for g in grads], _update(plan, optimizer, group)
    )


def lookup_grad(
    plan: PlanBase,
    table: str,
    lengths,
    indices,
    weights,
    *,
    slots,
    features_per_segment,
    pooling,
    segment_batches,
    grad,
):
    return fused_lookup_grad(
        plan,
        [table],
        lengths,
        indices,
        weights,
        slots=[slots],
        features_per_segment=features_per_segment,
        poolings=[pooling],
        segment_batches=segment_batches,
        grads=[grad],
    )[0]


def fused_lookup_grad(
    plan: PlanBase, names, lengths, indices, weights, *, slots, features_per_segment, poolings, segment_batches, grads
):
    """Several replicated tables' whole-table gradients, back to back in one zeroed float32
    buffer (returned as views), so the all-reduce that follows needs no copy. A table's gradient
    is one tensor, or a list of one per slot (the op's per-slot form, read where it lies)."""
    bags = _Bags(lengths, features_per_segment, segment_batches)
    grads = [bags.padded(g) if isinstance(g, torch.Tensor) else [bags.padded(x) for x in g] for g in grads]
    tables = _tables(plan, names, slots, poolings)
    sizes = [t.weight.numel() for t in tables]
    flat = torch.zeros(sum(sizes), dtype=torch.float32, device=tables[0].weight.device)
    # Table gradients are read by their all-reduce only (lift-sparse makes them for it), so
    # `all_reduce` may reduce this buffer in place.
    flat._sparselift_grad_buffer = True  # type: ignore[attr-defined]  # a marker all_reduce reads
    views = [v.view(t.weight.shape) for v, t in zip(flat.split(sizes), tables)]
    # Every occurrence added straight into the zeroed buffer, in the reference's order.
    plan.kernels.lookup_grad(bags.routed(indices, weights), tables, grads, views)
    return views


def all_reduce_with_dense_grads(plan: PlanBase, inputs, *, then) -> None:
    """Sum `inputs` over the ranks in the dense gradients' all-reduce at the end of backward,
    then run `then(*sums)` (the replicated tables' updates; `coll.all_reduce` with
    `with_dense_grads`). One rank: nothing to sum, `then` runs now."""
    if plan.world == 1:
        then(*inputs)
    else:
        plan.riders.append((list(inputs), then))


def dense_update(plan: PlanBase, table: str, grad, *, optimizer, group):
    args = TableArgs(table, plan.tables[table], (0,), "sum", plan.states.get(table))
    plan.kernels.dense_update(args, grad, _update(plan, optimizer, group))


def _common_batch(batch: int | Sequence[int]) -> int | None:
    """`batch` as one int when every segment has as many samples (the generated kernels' case)."""
    if isinstance(batch, int):
        return batch
    return batch[0] if len(set(batch)) == 1 else None


def pack(plan: PlanBase, members, layout, dtype, *, batch: int | Sequence[int]):
    """`batch`: this rank's batch in every segment (members hold its samples), or every rank's
    (segment `s` holds rank `s`'s samples: the tables' side of an exchange)."""
    common = _common_batch(batch)
    if common is None:
        return ref.pack(members, layout, batch, dtype)
    return plan.kernels.pack(members, layout, common, dtype)


def unpack(plan: PlanBase, buffer, layout, widths, *, batch: int | Sequence[int]):
    """`batch` as for `pack`. Where every segment lays the members out alike (a replicated
    table's positions packed by its own lookup), the members are the buffer's column blocks, read
    in place: on DIN that copy was 0.7 ms a step (`bench ops`, bench/RESULTS.md)."""
    common = _common_batch(batch)
    if common is None:
        return ref.unpack(buffer, layout, batch, widths)
    views = _column_blocks(buffer, layout, common) if common else None
    if views is not None and [v.shape[1] for v in views] == [int(w) for w in widths]:
        # Column blocks at a regular offset: stacking the positions is still a view (strided_rows).
        return views
    return plan.kernels.unpack(buffer, layout, common, widths)


# ---- concurrent lanes (`sched.parallel`) -----------------------------------------------------

_LANE_POOL: ThreadPoolExecutor | None = None
_LANE_POOL_SIZE = 0
_LANE_POOL_PID = 0  # a forked child gets a pool without threads: it makes its own
_LANE_LOCK = threading.Lock()
_LANE_STREAMS: dict[Any, list] = {}


def parallel(plan: PlanBase, lanes: Sequence) -> tuple:
    """Run the lanes of a `sched.parallel` concurrently; their results, lane by lane.

    CPU: a persistent thread pool (the C kernels and torch ops release the GIL); each lane's C
    calls use its share of the OpenMP threads. CUDA: one stream per lane, ordered after the work
    already queued on the current stream, which waits for every lane before going on. Every lane
    finishes before an exception propagates (no lane keeps updating tables behind it); the first
    failing lane's exception is raised, its message naming the lane.
    """
    if len(lanes) == 1:
        return tuple(_run(lanes[0], 0, 1))
    device = _device(plan)
    if device.type == "cuda":
        return _parallel_cuda(lanes, device)
    total = int(plan.kernels.nthreads or torch.get_num_threads())
    share = max(1, total // len(lanes))
    grad = torch.is_grad_enabled()  # thread-local in torch: carry it into the pool's threads

    def run(k: int):
        from sparselift.runtime.kernels import lane_threads

        with torch.set_grad_enabled(grad), lane_threads(share):
            return lanes[k]()

    futures = [_pool(len(lanes)).submit(run, k) for k in range(len(lanes))]
    results: list = []
    error: BaseException | None = None
    for k, future in enumerate(futures):
        try:
            results += future.result()
        except BaseException as e:  # noqa: BLE001 - re-raised below, after every lane is done
            error = error or _name_lane(e, k, len(lanes))
    if error is not None:
        raise error
    return tuple(results)


def _device(plan: PlanBase) -> torch.device:
    for t in plan.tables.values():
        return t.device
    return torch.device("cpu")


def _pool(lanes: int) -> ThreadPoolExecutor:
    """The process's lane pool, created on first use and grown to the most lanes seen."""
    global _LANE_POOL, _LANE_POOL_SIZE, _LANE_POOL_PID
    with _LANE_LOCK:
        if _LANE_POOL is None or _LANE_POOL_SIZE < lanes or _LANE_POOL_PID != os.getpid():
            old = _LANE_POOL if _LANE_POOL_PID == os.getpid() else None
            _LANE_POOL = ThreadPoolExecutor(
                max_workers=max(lanes, _LANE_POOL_SIZE), thread_name_prefix="sparselift-lane"
            )
            _LANE_POOL_SIZE, _LANE_POOL_PID = max(lanes, _LANE_POOL_SIZE), os.getpid()
            if old is not None:
                old.shutdown(wait=False)  # its running lanes finish; new ones go to the larger pool
        return _LANE_POOL


def _name_lane(e: BaseException, k: int, n: int) -> BaseException:
    """Say which lane failed, keeping the exception's type (callers match on ValueError etc.)."""
    where = f"sched.parallel lane {k} of {n}"
    if len(e.args) == 1 and isinstance(e.args[0], str):
        e.args = (f"{where}: {e.args[0]}",)
    else:
        e.add_note(f"in {where}")
    return e


def _run(lane, k: int, n: int):
    try:
        return lane()
    except BaseException as e:
        raise _name_lane(e, k, n) from None


def _parallel_cuda(lanes: Sequence, device: torch.device) -> tuple:
    current = torch.cuda.current_stream(device)
    with _LANE_LOCK:
        streams = _LANE_STREAMS.setdefault(device, [])
        while len(streams) < len(lanes):
            streams.append(torch.cuda.Stream(device=device))
        streams = streams[: len(lanes)]
    ready = torch.cuda.Event()
    ready.record(current)
    done: list = []
    results: list = []
    try:
        # The host queues the lanes one after another; the GPU runs their streams concurrently.
        for k, (lane, stream) in enumerate(zip(lanes, streams)):
            stream.wait_event(ready)
            with torch.cuda.stream(stream):
                try:
                    results += _run(lane, k, len(lanes))
                finally:
                    event = torch.cuda.Event()
                    event.record(stream)
                    done.append(event)
    finally:
        for event in done:  # also on failure: later work on the current stream follows the lanes
            current.wait_event(event)
    for t in results:
        if isinstance(t, torch.Tensor) and t.is_cuda:
            t.record_stream(current)  # made on a lane stream, used (and freed) on the current one
    return tuple(results)
