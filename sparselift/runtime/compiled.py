"""The compiled model: one rank's plan as an `nn.Module` (built by `sparselift.compile`).

The compiled module takes the same inputs as the model (one local batch per rank, of any size:
ranks' batches may differ from each other and from the example's, step to step) and returns the
same outputs. Every argument position is bound, even where the example inputs shared a tensor.
Dense regions keep their parameters and train with ordinary autograd; dense gradients are
averaged across ranks at the end of backward (unless `dense_sync=False`). Embedding tables live
in the plan, sharded as planned, and are updated in backward by the fused optimizer.
`grad_reduction="mean"` is DDP's convention: with each rank's loss a mean over its own batch,
the tables and the dense parameters take the gradient of `sum_r loss_r / world`, exactly
single-process training on the global batch when the local batches have equal sizes; `"sum"` is
TorchRec's semantics (embedding gradients summed over ranks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import attrs
import torch
import torch.distributed as dist
import torch.utils._pytree as pytree
from torch import nn

from sparselift import cache as cache_files
from sparselift.codegen.table_facts import TableFact, group_names, sharding_plan
from sparselift.kernel_args import KernelBackend
from sparselift.optim import TableOptimizers
from sparselift.optim_rules import StateScope, rule_for
from sparselift.passes.lift_sparse import REPLICATED_GRADS
from sparselift.passes.step_buffers import declared_buffers
from sparselift.runtime import collectives, huge_pages, shm_transport
from sparselift.runtime.agree import same_outcome
from sparselift.runtime.backends import ReferenceKernels, TritonKernels
from sparselift.runtime.footprint import footprint_by_category
from sparselift.runtime.sharded import sharded_rows
from sparselift.runtime.sparse_optimizer import SparseOptimizer, state_slots
from sparselift.runtime.tables import LocalTables, TableInit, check_storage, torch_dtype

log = logging.getLogger("sparselift")

# The paper's stage columns measured inside the compiled module; "other" (optimizer step, data)
# is the rest of the step and is measured by the caller.
STAGES = ("sparse_fwd", "other_fwd", "sparse_bwd", "other_bwd")


@attrs.frozen
class CompileOptions:
    grad_reduction: str = attrs.field(default="mean", validator=attrs.validators.in_(("mean", "sum")))
    dense_sync: bool = True
    # "generated": C kernels on CPU (Triton on CUDA), built and cached per plan; "reference":
    # per-table torch ops (the correctness oracle and the "without code generation" ablation).
    # With the planner, "generated" lets it choose (measured ref vs gen); "reference" rules it out.
    kernels: str = attrs.field(default="generated", validator=attrs.validators.in_(("reference", "generated")))
    cache_dir: str | None = None  # default: $SPARSELIFT_CACHE_DIR or ~/.cache/sparselift
    benchmark: bool = False  # record per-stage times (sparse/other x fwd/bwd); off: no timing at all
    # Unpooled tables' rows (nn.Embedding): "jagged" exchanges a row per id, sized at run time,
    # where compact-rows applies and a tenth or more of the id positions are empty (padding);
    # "padded", a row per id position (the rows exchange of fixed size).
    rows: str = attrs.field(default="jagged", validator=attrs.validators.in_(("jagged", "padded")))
    # Replicated tables' gradients: "with-dense" sums them in the dense gradients' all-reduce at
    # the end of backward, as DDP does TorchRec's data-parallel tables (one collective less a
    # step; bench/RESULTS.md: 1-2% of the step at real size); "own", an all-reduce of their own.
    replicated_grads: str = attrs.field(default="with-dense", validator=attrs.validators.in_(REPLICATED_GRADS))
    # Routed ids as int32 wherever every table of a group has fewer than 2^31 rows, whatever the
    # model's id dtype: half the bytes in the ids exchange and the kernels' index reads (each id is
    # checked against its table's rows before it is narrowed). False: int32 only where the model's
    # ids are.
    narrow_ids: bool = True
    # Extra passes after lift-sparse, e.g. "aggregate-comm" (sparselift-opt syntax): an explicit
    # pipeline, so no planning.
    passes: str = ""
    # The planner (sparselift.planner): "auto" reuses the cached plan for this key or plans;
    # "reuse-only" fails without one; "replan" always calibrates; "refine" calibrates again, going
    # on with the cached plan's undecided paired tests (sparselift.planner); "none" skips planning (lifted
    # plan, plus generate-kernels when kernels="generated"); anything else is a plan record JSON.
    plan: str = attrs.field(default="auto", validator=attrs.validators.min_len(1))
    # The calibration budget, in steps of the plan the planner would return now (50: 5% of a
    # 1000-step run; more lets it try more families on fast models), at least 5 s, at most
    # `calibration_budget_s` (0: no calibration).
    calibration_steps: int = attrs.field(default=50, validator=attrs.validators.ge(1))
    calibration_budget_s: float = attrs.field(default=30.0, validator=attrs.validators.ge(0))
    # Per rank: table shards and optimizer state (checked before allocating), then workspace and
    # in-flight buffers (the planner's constraint gets what the shards leave); None: no cap.
    memory_cap_bytes: int | None = None
    max_lanes: int | None = None  # concurrent lanes per rank; None: torch's intra-op threads (CPU), 4 (CUDA)
    # Optimization families the planner may choose (None: all): aggregation, parallelism,
    # codegen, latency-hiding, sharding.
    optimizations: tuple[str, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    # The cost-model profile: "auto" (cpu-gloo or cpu-shm by transport, h100/h200-nccl by device),
    # a name or a JSON path.
    profile: str = "auto"
    # Tables on the meta device: `table_init(table, shard, row_offset)` fills this rank's shard
    # (rows row_offset..) of IR table `table` in place; None: the module's own initializer
    # (nn.EmbeddingBag's normal_, TorchRec's EmbeddingBagConfig.init_fn), drawn per chunk of rows
    # from `init_seed` (None: rank 0's torch.initial_seed()) so every placement gets the same values.
    table_init: TableInit | None = None
    init_seed: int | None = None
    # Per KeyedJaggedTensor key an EmbeddingCollection looks up (unpooled): the longest bag the
    # model is compiled for; None (or a key left out): the example inputs' longest. A batch with
    # a longer bag is refused, on every rank.
    max_lengths: dict[str, int] | None = None
    # CPU table shards of at least this many bytes live on transparent huge pages (fewer TLB
    # misses for random rows; runtime/huge_pages.py); None: plain pages.
    huge_page_min_bytes: int | None = attrs.field(
        # cast: the plugin takes the field's type from the default's (int), not the annotation's
        default=cast("int | None", huge_pages.DEFAULT_MIN_BYTES),
        validator=attrs.validators.optional(attrs.validators.ge(0)),
    )
    # How the plan's all-to-alls and the dense gradients' sum travel between ranks: "shm", through
    # shared memory, where every rank is on this host (runtime/shm_transport.py: one copy in, one
    # out, no socket); "gloo", the process group's backend; "auto": shm where it can (a gloo group
    # on one Linux x86-64 host, 256 MiB a rank free in /dev/shm, SPARSELIFT_SHM_DISABLE unset),
    # else gloo. "shm" where it cannot is an error, on every rank. `compile` resolves it.
    transport: str = attrs.field(default="auto", validator=attrs.validators.in_(shm_transport.TRANSPORTS))


def cache_dir(options: CompileOptions) -> Path:
    """The plans' cache directory (created): `options.cache_dir`, else `sparselift.cache`'s default."""
    return cache_files.cache_dir(options.cache_dir)


TRANSPORT_TEXT = {"shm": "shared memory (every rank on this host)", "gloo": "the process group's backend"}


@attrs.define
class Plan:
    """What `compiled.plan` shows: the IR, the generated module and where it lives."""

    ir_text: str
    source: str
    path: Path
    hash: str  # the optimized IR's hash: the "plan hash" of the module's header and of the file name
    program: Any  # sparselift.frontend.program.SparseProgram
    record: Any = None  # sparselift.plan_record.PlanRecord; None when not planned
    reused: bool = False  # the record came from the plan cache (or a file): no calibration
    calibration_s: float = 0.0  # calibration this compile spent (0 when reused)
    planning: str = ""  # why the planner planned, or where the reused plan came from
    huge_page_bytes: dict[str, int] = attrs.field(factory=dict)  # this rank's big shards on huge pages
    # The lift-sparse spec the plan was lowered with (its options that differ from the pass's defaults).
    lowering: str = ""
    transport: str = ""  # how its all-to-alls travel: "shm" or "gloo" (CompileOptions.transport, resolved)
    shm: Any = None  # the shared-memory transport it exchanges through (runtime/shm_transport.py), if any
    # This rank's steady-state footprint by category, MiB (`footprint.footprint_by_category`),
    # the exchange buffers read live from `shm`; and the compile's phases (`MemoryPhases`).
    footprint: dict[str, float] = attrs.field(factory=dict)
    memory_phases: Any = None

    def footprint_now(self) -> dict[str, float]:
        """`footprint` with the shared-memory arena as reserved now (it grows to the largest
        exchanges in flight), MiB by category."""
        if not self.footprint:
            return {}
        return {**self.footprint, "exchange_buffers": round((getattr(self.shm, "reserved", 0) or 0) / 2**20, 1)}

    def _memory_lines(self) -> list[str]:
        lines = []
        if self.footprint:
            held = self.footprint_now()
            parts = ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in held.items())
            lines.append(f"memory (this rank, MiB): {parts}; total {sum(held.values()):.1f}")
        if self.memory_phases is not None and self.memory_phases.phases:
            parts = ", ".join(
                f"{p.phase} +{p.peak_added_mb} peak / +{p.held_mb} held" for p in self.memory_phases.phases
            )
            lines.append(f"compile memory by phase (this rank, MiB above the phase's start): {parts}")
        return lines

    def _huge_pages_line(self) -> list[str]:
        if not self.huge_page_bytes:
            return []
        total = sum(self.huge_page_bytes.values())
        return [f"huge pages (this rank): {total / 2**20:.0f} MiB of {len(self.huge_page_bytes)} big table shard(s)"]

    def explain(self) -> str:
        lines = [f"plan hash: {self.hash} ({self.path})", sharding_plan(self.program.module).describe()]
        lines += [f"groups: {', '.join(group_names(self.program.module))}", *self._huge_pages_line()]
        lines += self._memory_lines()
        if self.lowering:
            lines.append(f"lowering: {self.lowering}")
        if self.transport:
            line = f"all-to-alls: {TRANSPORT_TEXT.get(self.transport, self.transport)}"
            if self.shm is not None:  # what its arena has reserved so far, shared by the group's plans
                line += f"; {self.shm.reserved / 2**20:.1f} MiB of exchange buffers on this rank"
            lines.append(line)
        if self.record is not None:
            lines.append(f"planner: {self.planning}" if self.planning else "planner:")
            lines.append(
                f"calibration this compile: {self.calibration_s:.2f} s" + (" (plan reused)" if self.reused else "")
            )
            lines.append(self.record.explain())
        return "\n".join(lines)


class _GradBuckets:
    """DDP-style dense gradient averaging that overlaps backward.

    Parameters are bucketed in reverse registration order (roughly the order backward produces
    their gradients); when every gradient of a bucket has been accumulated, the bucket's flat
    all-reduce starts asynchronously, so the exchange overlaps the rest of backward (the sparse
    backward included). Autograd runs in the same order on every rank, so buckets start in the
    same order everywhere. `finish()` waits and writes the averages back. Without `overlap`
    (a plan that `hide-latency` did not mark `dense_grad_overlap`) all dense gradients form one
    bucket, one all-reduce after backward: where the exchange cannot run beside compute (gloo on
    fully used cores) each extra collective costs its latency and overlapping ones slow backward
    down (the measured A/B is in bench/RESULTS.md, "Dense gradients in one all-reduce").
    """

    def __init__(
        self,
        params: list[nn.Parameter],
        pg,
        world: int,
        bucket_bytes: int = 1 << 20,
        overlap: bool = True,
        shm: shm_transport.ShmTransport | None = None,
    ):
        self.pg, self.world, self.overlap, self.shm = pg, world, overlap, shm
        self.buckets: list[list[nn.Parameter]] = [[]]
        size = 0
        for p in reversed(params):
            if overlap and size and size + p.numel() * p.element_size() > bucket_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self.bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self.pending = [0] * len(self.buckets)
        self.works: dict[int, tuple] = {}
        self.reset()
        for p in params:
            p.register_post_accumulate_grad_hook(self._ready)

    def reset(self) -> None:
        self.pending = [len(b) for b in self.buckets]
        self.works = {}

    def _ready(self, p: nn.Parameter) -> None:
        if not self.overlap:
            return
        i = self.bucket_of[id(p)]
        self.pending[i] -= 1
        if self.pending[i] == 0:
            self._start(i)

    def _start(self, i: int, riders: Sequence[Rider] = ()) -> None:
        grads = []
        for p in self.buckets[i]:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        extra = [t.reshape(-1) for inputs, _ in riders for t in inputs]
        flat = torch.cat([g.reshape(-1) for g in grads] + extra)
        self.works[i] = (collectives.all_reduce_sum_start(self.shm, self.pg, flat), flat, grads, riders)

    def finish(self, riders: Sequence[Rider] = ()) -> None:
        """Wait for every bucket and write the averages back; then hand each rider its summed
        tensors. Without `overlap` the riders travel in the one dense bucket (no collective of
        their own); with it the buckets are already under way, so they get one all-reduce."""
        alone = list(riders)
        for i in range(len(self.buckets)):
            if i not in self.works:  # a bucket with gradients that never arrived: zeros, same on every rank
                bucket = self.buckets[i]
                with_riders = (
                    not self.overlap
                    and i == len(self.buckets) - 1
                    and bool(bucket)
                    and all(t.dtype == bucket[0].dtype for inputs, _ in alone for t in inputs)
                )
                self._start(i, alone if with_riders else ())
                alone = [] if with_riders else alone
        pending = reduce_riders(alone, self.pg, async_op=True, shm=self.shm) if alone else None
        for work, flat, grads, carried in self.works.values():
            work.wait()
            n = sum(g.numel() for g in grads)
            flat[:n] /= self.world
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
            _hand_over(carried, flat[n:])
        if pending is not None:
            pending()
        self.reset()


Rider = tuple[Sequence[torch.Tensor], Callable[..., None]]
"""Tensors to sum over the ranks with the dense gradients, and what to run with the sums
(`rt.all_reduce_with_dense_grads`: replicated tables' gradients and their updates)."""


def _hand_over(riders: Sequence[Rider], summed: torch.Tensor) -> None:
    offset = 0
    for inputs, then in riders:
        views = []
        for t in inputs:
            views.append(summed[offset : offset + t.numel()].view_as(t).to(t.dtype))
            offset += t.numel()
        then(*views)


def reduce_riders(riders: Sequence[Rider], pg, async_op: bool = False, shm=None):
    """The riders' own all-reduce (a sum), when no dense bucket carries them; `async_op`:
    returns a function that waits and hands them over."""
    flat = torch.cat([t.reshape(-1).to(torch.float32) for inputs, _ in riders for t in inputs])
    work = collectives.all_reduce_sum_start(shm, pg, flat)

    def done() -> None:
        work.wait()
        _hand_over(riders, flat)

    if async_op:
        return done
    done()
    return None


class CompiledModel(nn.Module):
    """One rank's view of a compiled model."""

    def __init__(
        self,
        program,
        plan: Plan,
        plan_cls,
        rank: int,
        world: int,
        pg,
        optimizer: TableOptimizers,
        options: CompileOptions,
        local: LocalTables,
    ):
        super().__init__()
        self.program = program
        self.plan = plan
        self.rank, self.world, self.pg = rank, world, pg
        self.options = options
        self.regions = nn.ModuleDict(program.regions)
        # The same regions exported in eval mode (`set_eval_regions`), run while `not self.training`;
        # until the first eval(), what exports them (`defer_eval_regions`).
        self.eval_regions: nn.ModuleDict | None = None
        self._eval_source: Callable[[Any], Mapping[str, nn.Module]] | None = None
        self.optimizer = optimizer = TableOptimizers.of(optimizer)  # each table's optimizer and group
        # The run-time hyperparameters and step counts (param_groups, for LR schedules).
        self.sparse_optimizer = SparseOptimizer(optimizer, local.tables)
        # The rank's live table storage, shared by every plan built on it (sparselift.runtime.tables).
        self.local = local
        plan.huge_page_bytes = dict(local.huge_page_bytes)
        tables, states = local.tables, local.states
        self.tables, self.states = tables, states
        # Every table fact (shards, checkpoint keys, kernel specs) is the plan's, read from its IR.
        self.table_facts: tuple[TableFact, ...] = tuple(plan_cls.TABLES)
        check_storage(self.table_facts, local, rank)
        self.kernels = self._build_kernels(plan_cls, tables, options)
        self.runner = plan_cls(
            rank=rank,
            world_size=world,
            regions=dict(self.regions),
            tables=tables,
            states=states,
            process_group=pg,
            grad_scale=(1.0 / world if options.grad_reduction == "mean" else 1.0),
            kernels=self.kernels,
        )
        self.runner.sparse_optimizer = self.sparse_optimizer
        self.runner.shm = shm_transport.attached(pg) if options.transport == "shm" else None
        plan.transport = "shm" if self.runner.shm is not None else "gloo" if world > 1 else ""
        plan.shm = self.runner.shm
        self._dense_params = [p for p in self.regions.parameters() if p.requires_grad]
        plan.footprint = footprint_by_category(
            tables, states, list(self.regions.parameters()), step_buffers=declared_buffers(program.module, rank)
        )
        self._buckets = (
            _GradBuckets(self._dense_params, pg, world, overlap=plan_cls.DENSE_GRAD_OVERLAP, shm=self.runner.shm)
            if world > 1 and options.dense_sync
            else None
        )
        self._sync_queued = False
        self._backward_start = 0.0
        self.stage_times: list[dict[str, float]] = []  # benchmark mode: seconds per stage, per step

    @staticmethod
    def _build_kernels(plan_cls, tables: Mapping[str, torch.Tensor], options: CompileOptions) -> KernelBackend:
        """The plan's kernel backend, chosen once from its IR (`KERNELS`, the step's `kernels`)
        and where its tables live: the reference lowering; or generated kernels, C for tables on
        the CPU (built for the plan's kernel specs), Triton on CUDA."""
        if plan_cls.KERNELS != "generated" or not tables:
            return ReferenceKernels()
        if any(t.device.type != "cpu" for t in tables.values()):
            return TritonKernels()
        from sparselift.runtime.kernels import CKernels

        specs = {f.kernel_spec for f in plan_cls.TABLES if f.name in tables and f.kernel_spec is not None}
        return CKernels(specs, table_kinds=tables.values(), cache=options.cache_dir)

    # -- modes -----------------------------------------------------------------------------
    def set_eval_regions(self, regions: Mapping[str, nn.Module]) -> None:
        """The dense regions exported in eval mode (`frontend.export.export_eval_regions`): they
        share this model's parameters and buffers and run whenever it is in `eval()`."""
        self.eval_regions = nn.ModuleDict(dict(regions))
        self.eval_regions.train(False)
        self._select_regions()

    def defer_eval_regions(self, export: Callable[[Any], Mapping[str, nn.Module]]) -> None:
        """Export the eval-mode regions at the first `eval()`, by `export(self.program)` (the
        compiler's, from the model's eval skeleton: a compile that is never evaluated pays
        nothing, and the model's tables are not kept alive)."""
        self._eval_source = export

    def prepare_eval(self) -> None:
        """Export the eval-mode regions now, if they are not yet (`eval()` does it otherwise).
        Collective, like eval(): an export that fails on one rank raises on every rank."""
        if self.eval_regions is None and self._eval_source is not None:
            with same_outcome(self.pg, self.world):
                regions = self._eval_source(self.program)
            self.set_eval_regions(regions)
            self._eval_source = None

    def train(self, mode: bool = True):
        """`train()` / `eval()`: each mode runs the dense regions exported in it (dropout off and
        batch norm on its running statistics in eval), with the same tables and parameters."""
        if not mode:
            self.prepare_eval()
        super().train(mode)
        if self.eval_regions is not None:
            self.eval_regions.train(False)  # exported in eval mode, whatever the flag says
        self._select_regions()
        return self

    def _select_regions(self) -> None:
        regions = self.regions if self.training or self.eval_regions is None else self.eval_regions
        if self.runner.regions is not regions:
            self.runner.regions = dict(regions)
            self.runner._last_sparse_inputs = None  # split again by this mode's sparse_inputs

    # -- forward ---------------------------------------------------------------------------
    def forward(self, *inputs):
        flat = pytree.tree_leaves((inputs, {}))
        tensors = [flat[i] for i in self.program.tensor_inputs]
        if self.options.benchmark:
            self.runner.timing = dict.fromkeys(STAGES, 0.0)
            self.stage_times.append(self.runner.timing)
        self.runner.take_riders()  # left by a backward that did not finish: never applied late
        outputs = self.runner.forward(*tensors)
        if torch.is_grad_enabled():  # a backward is a training step: the optimizer's step starts with it
            for out in outputs:
                if isinstance(out, torch.Tensor) and out.requires_grad:
                    out.register_hook(self._on_backward_start)
        if self.program.out_spec is not None:
            return pytree.tree_unflatten(self.program.model_outputs(outputs), self.program.out_spec)
        return outputs[0] if len(outputs) == 1 else outputs

    def start(self, *inputs) -> None:
        """Start the input distribution of a batch whose forward comes next (see TrainPipeline)."""
        flat = pytree.tree_leaves((inputs, {}))
        with torch.no_grad():
            self.runner.start(*[flat[i] for i in self.program.tensor_inputs])

    def advance(self) -> None:
        """Move the next batch's input distribution along (see TrainPipeline)."""
        self.runner.advance()

    def _on_backward_start(self, grad):
        if not self._sync_queued:
            self.sparse_optimizer.begin_step()  # raises (a bad learning rate) before any update
            self._sync_queued = True
            self._backward_start = time.perf_counter()
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)
        return grad

    def _on_backward_end(self) -> None:
        self._sync_queued = False
        riders = self.runner.take_riders()
        if self.world > 1 and self.options.dense_sync:
            assert self._buckets is not None  # built in __init__ under the same condition
            self._buckets.finish(riders)
        elif riders:
            reduce_riders(riders, self.pg, shm=self.runner.shm)
        timing = self.runner.timing
        if timing is not None:
            timing["other_bwd"] = time.perf_counter() - self._backward_start - timing["sparse_bwd"]

    # -- checkpoints -----------------------------------------------------------------------
    def dense_named_parameters(self):
        """Dense parameters under the original model's names (a wrapped region's, `SparseInputs` or
        `UnpooledViews`, are those of the extracted graph it wraps)."""
        return self._dense_named("named_parameters")

    def dense_named_buffers(self):
        """Buffers of the dense regions (batch norm's running statistics, ...) under the original
        model's names: each rank's own, updated by its training forwards (as under DDP without
        SyncBatchNorm), read by its eval forwards."""
        return self._dense_named("named_buffers")

    def _dense_named(self, method: str):
        seen = set()
        for region in self.regions.values():
            for name, t in getattr(getattr(region, "region", region), method)():
                if id(t) not in seen:
                    seen.add(id(t))
                    yield name, t

    # Ignored [override]: torch types Module.state_dict as overloads on `destination=`; this one
    # gathers the shards (`gather_to=`) instead.
    def state_dict(  # type: ignore[override]  # noqa: D401
        self, *args, gather_to: str = "all", **kwargs
    ) -> dict[str, torch.Tensor]:
        """The original model's keys (collective): dense parameters, whole tables gathered from
        their shards, and each table's optimizer state as `<table param>.<state>` (its rule's
        states: `momentum` for row-wise Adagrad, one value per row; `exp_avg` and `exp_avg_sq`
        for Adam; ...) with, for the optimizers that count steps, `<table param>.step`.

        Tables are gathered one at a time, straight into the result (a broadcast per shard from its
        owner), so no rank holds more than the result plus nothing. `gather_to="rank0"`: only rank 0
        receives tables and states; the other ranks' dicts hold the dense parameters only (and the
        step counts). For models that do not fit one process use `sharded_state_dict()` with
        `torch.distributed.checkpoint`. The hyperparameters are `sparse_optimizer.state_dict()`.
        """
        if gather_to not in ("all", "rank0"):
            raise ValueError(f"state_dict(gather_to={gather_to!r}): use 'all' or 'rank0'")
        out = {name: p.detach().clone() for name, p in self.dense_named_parameters()}
        out.update({name: b.detach().clone() for name, b in self.dense_named_buffers()})
        for info in self.table_facts:
            table = self._gather_table(info, self.tables, (info.dim,), torch_dtype(info), gather_to)
            if table is not None:
                out[info.param] = table
            for state, row_shape, view in self._state_views(info):
                gathered = self._gather_table(
                    info, {info.name: view} if view is not None else {}, row_shape, torch.float32, gather_to
                )
                if gathered is not None:
                    out[f"{info.param}.{state}"] = gathered
            out.update({k: v.clone() for k, v in self._step_entries(info).items()})
        return out

    def _state_views(self, info: TableFact) -> list[tuple[str, tuple[int, ...], torch.Tensor | None]]:
        """(state name, shape of a row of it, this rank's shard of it as a contiguous view of the
        live storage, or None where the rank holds none) for each state of `info`'s optimizer."""
        kind = self.optimizer.kind(info.name)
        held = self.states.get(info.name)
        rows = self.tables[info.name].shape[0] if info.name in self.tables else 0
        views = state_slots(kind, held, rows, info.dim)
        return [
            (slot.name, (info.dim,) if slot.scope == StateScope.ELEMENT else (), views.get(slot.name))
            for slot in rule_for(kind).states
        ]

    def _step_entries(self, info: TableFact) -> dict[str, torch.Tensor]:
        """`<table param>.step` (the step count of the table's group) where its rule counts steps."""
        if not rule_for(self.optimizer.kind(info.name)).counts_steps:
            return {}
        return {f"{info.param}.step": self.sparse_optimizer.steps[self.optimizer.group_of(info.name)]}

    def sharded_state_dict(self) -> dict[str, Any]:
        """This rank's part of the checkpoint, for `torch.distributed.checkpoint` (no gathering),
        under the same keys as `state_dict()`.

        A sharded table, and each per-row optimizer state of it, is a `ShardedTensor` of the
        rank's live shard with every shard's global row offset (`runtime/sharded.py`), so DCP
        saves each row once and loads it into any world size and placement, or into the plain
        model in one process (`dcp.load(model.state_dict(), ..., no_dist=True)`); replicated
        tables, dense parameters, buffers and step counts are plain tensors. Loading restores
        in place: `dcp.load(compiled.sharded_state_dict(), checkpoint_id=...)`.
        """
        out: dict[str, Any] = {name: p.detach() for name, p in self.dense_named_parameters()}
        out.update({name: b for name, b in self.dense_named_buffers()})
        for info in self.table_facts:
            out[info.param] = self._checkpoint_tensor(info, self.tables.get(info.name), (info.dim,), torch_dtype(info))
            for state, row_shape, view in self._state_views(info):
                out[f"{info.param}.{state}"] = self._checkpoint_tensor(info, view, row_shape, torch.float32)
            out.update(self._step_entries(info))
        return out

    def _checkpoint_tensor(self, info: TableFact, local, row_shape, dtype):
        if self.world == 1 or info.placement == "data_parallel":
            return local.detach() if local is not None else None
        device = local.device if local is not None else self._device()
        return sharded_rows(local, info.shards, self.rank, row_shape, dtype, device, self.pg)

    def state_keys(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Every key `state_dict()` returns, with its full shape and dtype."""
        keys = {name: (tuple(p.shape), p.dtype) for name, p in self.dense_named_parameters()}
        keys.update({name: (tuple(b.shape), b.dtype) for name, b in self.dense_named_buffers()})
        for info in self.table_facts:
            keys[info.param] = ((info.rows, info.dim), torch_dtype(info))
            for state, row_shape, _ in self._state_views(info):
                keys[f"{info.param}.{state}"] = ((info.rows, *row_shape), torch.float32)
            keys.update({k: ((), torch.int64) for k in self._step_entries(info)})
        return keys

    # Ignored [override]: no `assign=` (each rank copies its own rows into its live shards).
    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True):  # type: ignore[override]
        """Load what `state_dict()` wrote (each rank keeps its own rows); `strict` raises on missing
        or unexpected keys, and a wrong shape or dtype always raises, naming the key. Optimizer
        state of another optimizer (Adam's `exp_avg` into SGD, a missing `exp_avg_sq`) is such a
        key: the error names the tables' optimizers."""
        expected = self.state_keys()
        missing = [k for k in expected if k not in state_dict]
        unexpected = [k for k in state_dict if k not in expected]
        if strict and (missing or unexpected):
            raise KeyError(
                f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}" + self._state_hint()
            )
        for key, (shape, dtype) in expected.items():
            got = state_dict.get(key)
            if got is not None and (tuple(got.shape) != shape or got.dtype != dtype):
                raise ValueError(
                    f"load_state_dict: '{key}' has shape {tuple(got.shape)} and dtype {got.dtype}; "
                    f"the compiled model's is {shape}, {dtype}"
                )
        steps = self._loaded_steps(state_dict)
        with torch.no_grad():
            for name, p in [*self.dense_named_parameters(), *self.dense_named_buffers()]:
                if name in state_dict:
                    p.copy_(state_dict[name])
            for info in self.table_facts:
                if info.name not in self.tables:
                    continue
                lo, hi = info.shard_rows(self.rank)
                if info.param in state_dict:
                    self.tables[info.name].copy_(state_dict[info.param][lo:hi])
                for state, _, view in self._state_views(info):
                    saved = state_dict.get(f"{info.param}.{state}")
                    if saved is not None and view is not None:
                        view.copy_(saved[lo:hi])
        counts = self.sparse_optimizer.step_counts()
        for group, step in steps.items():
            counts[group] = step
        self.sparse_optimizer.set_step_counts(counts)
        return nn.modules.module._IncompatibleKeys(missing, unexpected)

    def _loaded_steps(self, state_dict: Mapping[str, torch.Tensor]) -> dict[int, int]:
        """Each optimizer group's step count from its tables' `.step` entries (which must agree)."""
        steps: dict[int, tuple[int, str]] = {}
        for info in self.table_facts:
            key = f"{info.param}.step"
            if key not in state_dict:
                continue
            group, step = self.optimizer.group_of(info.name), int(state_dict[key])
            if group in steps and steps[group][0] != step:
                raise ValueError(
                    f"load_state_dict: '{key}' is {step} but '{steps[group][1]}' is {steps[group][0]}; "
                    "tables of one optimizer group share one step count"
                )
            steps[group] = (step, key)
        return {g: s for g, (s, _) in steps.items()}

    def _state_hint(self) -> str:
        kinds = sorted({f"{self.optimizer.kind(f.name)}" for f in self.table_facts})
        states = sorted({s.name for k in kinds for s in rule_for(k).states})
        return (
            f" (the tables train with {', '.join(kinds)}, whose optimizer state is "
            f"{', '.join(repr(f'<table>.{s}') for s in states) or 'none'}; a checkpoint of another optimizer's "
            "state does not fit)"
        )

    def _gather_table(
        self,
        info: TableFact,
        shards: Mapping[str, torch.Tensor],
        row_shape: tuple[int, ...],
        dtype: torch.dtype,
        gather_to: str = "all",
    ) -> torch.Tensor | None:
        """Table `info` (or its optimizer state, from `shards`) whole, on every rank ("all") or on
        rank 0 only ("rank0"; None elsewhere): one broadcast (or send) per shard, from its owner."""
        receives = gather_to == "all" or self.rank == 0
        local = shards.get(info.name)  # None where this rank holds no shard
        if self.world == 1 or info.placement == "data_parallel":
            assert local is not None  # every rank holds the whole table
            return local.detach().clone() if receives else None
        device = local.device if local is not None else self._device()
        full = torch.empty((info.rows, *row_shape), dtype=dtype, device=device) if receives else None
        for owner, lo, hi in info.shards:
            if self.rank == owner and full is not None:
                assert local is not None  # an owner holds its shard
                full[lo:hi].copy_(local)
            if gather_to == "all":
                assert full is not None  # every rank receives
                buffer = full[lo:hi]
                dist.broadcast(buffer, src=self._global(owner), group=self.pg)
            elif owner != 0 and self.rank == owner:
                assert local is not None  # an owner holds its shard
                dist.send(local.contiguous(), dst=self._global(0), group=self.pg)
            elif owner != 0 and self.rank == 0:
                assert full is not None  # rank 0 receives
                dist.recv(full[lo:hi], src=self._global(owner), group=self.pg)
        return full

    def _global(self, rank: int) -> int:
        return dist.get_global_rank(self.pg, rank) if self.pg is not None else rank

    def _device(self) -> torch.device:
        return next(
            (t.device for t in self.tables.values()),
            next((p.device for _, p in self.dense_named_parameters()), torch.device("cpu")),
        )

    def table(self, name: str) -> torch.Tensor:
        """The whole table `name` (IR name or parameter FQN), gathered from its shards (collective)."""
        for info in self.table_facts:
            if name in (info.name, info.param):
                table = self._gather_table(info, self.tables, (info.dim,), torch_dtype(info))
                assert table is not None  # gather_to="all": every rank receives it
                return table
        raise KeyError(f"no table '{name}'")
