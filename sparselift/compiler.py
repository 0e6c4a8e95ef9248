"""`sparselift.compile`: export the model, lift and emit a plan, and build this rank's module.

The one place that runs the whole pipeline (model -> IR -> passes -> plan -> runtime), so it may
import every stage; the stages themselves only import downstream (docs/architecture.md).
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import torch
import torch.distributed as dist
from torch import nn

from sparselift import cache as cache_files
from sparselift.codegen.plan_module import emit_plan_module, plan_hash
from sparselift.codegen.table_facts import describe_features, describe_tables, distinct_shares, sharding_plan
from sparselift.frontend.errors import ExportError
from sparselift.frontend.export import export, input_device, trace
from sparselift.frontend.meta import has_meta_parameters, table_initializers
from sparselift.frontend.modes import eval_skeleton, export_eval_regions
from sparselift.memory_budget import check_memory_need, memory_need
from sparselift.optim import (
    SparseOptimizerConfig,
    TableOptimizers,
    UnsupportedOptimizer,
    choose,
    in_backward_optimizers,
)
from sparselift.passes import get_all_passes
from sparselift.passes.generate_kernels import GenerateKernels
from sparselift.passes.lift_sparse import LiftSparse
from sparselift.passes.pipeline import Pipeline, find_pass, parse_pipeline, pass_spec, run_pipeline
from sparselift.placement import ShardingPlan
from sparselift.planner import resolve_plan
from sparselift.runtime import shm_transport
from sparselift.runtime.agree import register_error_type, same_outcome
from sparselift.runtime.allocator import release_freed_memory
from sparselift.runtime.compiled import CompiledModel, CompileOptions, Plan, cache_dir
from sparselift.runtime.footprint import MemoryPhases
from sparselift.runtime.tables import LocalTables, check_memory_cap, missing_inits, take_local_shards

log = logging.getLogger("sparselift")
register_error_type(ExportError)  # a model refused on one rank is an ExportError on every rank
register_error_type(UnsupportedOptimizer)


def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _export_same_on_every_rank(model, example_inputs, world, sharding, pg, init_seed: int = 0, max_lengths=None):
    """Rank 0 decides (workload statistics, the shares of distinct ids, placement and the
    longest jagged bags from its example inputs) and broadcasts; the other ranks export with
    those decisions, so every rank builds the same plan.

    Every rank traces its model at once first (torch.export, most of the time), since the trace
    needs none of the decisions.

    A refusal on any rank (rank 0's export, or another rank's) is raised on every rank: the
    others would otherwise wait for the broadcast, or the next collective, until the timeout."""
    payload = [None]
    program = None
    with same_outcome(pg, world):
        traced = trace(model, example_inputs)
        if world == 1 or dist.get_rank(pg) == 0:
            program = export(
                model,
                example_inputs,
                world_size=world,
                sharding=sharding,
                init_seed=init_seed,
                max_lengths=max_lengths,
                traced=traced,
            )
            payload = [
                (
                    sharding_plan(program.module).to_json(),
                    {f.name: f.pooling_factor for f in describe_features(program.module)},
                    program.max_lengths,
                    distinct_shares(program.module),
                )
            ]
    if world > 1:
        dist.broadcast_object_list(payload, src=dist.get_global_rank(pg, 0) if pg is not None else 0, group=pg)
    with same_outcome(pg, world):  # rank 0 takes part too: it must hear of the others' refusals
        if program is None:
            plan_json, stats, chosen_lengths, shares = payload[0]
            program = export(
                model,
                example_inputs,
                world_size=world,
                sharding=ShardingPlan.from_json(plan_json),
                stats=stats,
                init_seed=init_seed,
                max_lengths=chosen_lengths,
                distinct=shares,
                traced=traced,
            )
    return program


def _build_on_every_rank(*args, **kwargs) -> CompiledModel:
    """`build_compiled`, with a failure on any rank (IR passes, plan module, kernels) raised on
    every rank. Its work is local to the rank, so the ranks only meet at the end."""
    with same_outcome(kwargs["process_group"], kwargs["world"]):
        return build_compiled(*args, **kwargs)


def lift_pass(optimizers: TableOptimizers | SparseOptimizerConfig, options: CompileOptions | None = None) -> LiftSparse:
    """The `lift-sparse` pass for the tables' `optimizers` (the fused updates it lowers to: each
    table's kind and group), lowering as `options` ask (`rows`, `replicated_grads`,
    `narrow_ids`; None: the defaults)."""
    options = options or CompileOptions()
    default, per_table = TableOptimizers.of(optimizers).lift_options()
    return LiftSparse(
        optimizer=default,
        table_optimizers=per_table,
        rows=options.rows,
        replicated_grads=options.replicated_grads,
        narrow_ids=options.narrow_ids,
    )


def build_compiled(
    program,
    local: LocalTables,
    pipeline: Pipeline,
    *,
    rank: int,
    world: int,
    process_group,
    optimizer: TableOptimizers,
    options: CompileOptions,
    scratch: bool = False,
) -> CompiledModel:
    """This rank's CompiledModel for `program` (exported, not yet lifted) after the passes of
    `pipeline` (lift-sparse first); `options.kernels` selects the runtime kernels.

    The exported module is cloned, so one program serves many pipelines (the planner builds a
    candidate per pipeline). Every plan of a rank runs on the same table storage, `local` (see
    `sparselift.runtime.tables`); with `scratch=True` the dense regions are deep-copied, so
    running the result (calibration) never touches the model's dense parameters.
    """
    module = program.module.clone()
    run_pipeline(module, pipeline, _ctx())
    regions = copy.deepcopy(program.regions) if scratch else program.regions
    lifted = attrs.evolve(program, module=module, regions=regions)
    ir_text = lifted.text
    source = emit_plan_module(module)
    # One name for the plan: the optimized IR's hash, the "plan hash" of the module's header and
    # of explain(). A cached file of another emitter version (same IR) is rewritten below.
    digest = plan_hash(module)
    path = cache_dir(options) / f"plan_{digest}.py"
    if path.exists() and path.read_text() == source:
        log.info("sparselift: plan %s found in the cache (%s); nothing rebuilt", digest, path)
    else:
        cache_files.atomic_write(path, source)  # ranks sharing the cache may write it at once
        log.info("sparselift: plan %s written to %s", digest, path)
    loaded = _load_module(path, f"sparselift_plan_{digest}")
    lift = find_pass(pipeline, LiftSparse.name)
    plan = Plan(ir_text, source, path, digest, lifted, lowering=pass_spec(lift) if lift else "")
    return CompiledModel(lifted, plan, loaded.Plan, rank, world, process_group, optimizer, options, local)


@attrs.frozen
class CompilerCandidateBuilder:
    """The planner's `CandidateBuilder` for one compile: candidates are built as `compile` builds
    its result (`build_compiled`, on scratch dense copies), alternatives re-exported as it exports."""

    model: nn.Module
    example_inputs: tuple
    rank: int
    world: int
    process_group: Any
    optimizer: TableOptimizers
    take: Callable[[Any], LocalTables] | None  # program -> this rank's shards of its placement
    max_lengths: dict[str, int] | None = None  # the longest jagged bags the first export chose

    def take_shards(self, program) -> LocalTables:
        if self.take is None:
            raise RuntimeError("this builder was given no way to place another program's tables")
        return self.take(program)

    def build(self, program, local: LocalTables, pipeline: Pipeline, options: CompileOptions) -> CompiledModel:
        return build_compiled(
            program,
            local,
            pipeline,
            rank=self.rank,
            world=self.world,
            process_group=self.process_group,
            optimizer=self.optimizer,
            options=options,
            scratch=True,
        )

    def export(self, sharding):
        return _export_same_on_every_rank(
            self.model, self.example_inputs, self.world, sharding, self.process_group, max_lengths=self.max_lengths
        )


def compile(  # noqa: A001 - the public API mirrors torch.compile
    model: nn.Module,
    example_inputs: tuple,
    *,
    sharding: str | ShardingPlan = "auto",
    sparse_optimizer: Any = None,
    process_group=None,
    options: CompileOptions | None = None,
) -> CompiledModel:
    """Compile `model`'s sparse path for the current process group (world size 1 without one).

    By default (`options.plan="auto"`) the planner chooses the optimizations by measured
    lookahead, or reuses the plan it chose before for the same model, shapes, sharding, world
    size, device and versions (see `sparselift.planner`). `options.passes` (or `plan="none"`)
    skips planning: the pipeline is lift-sparse, generate-kernels when `kernels="generated"`,
    then those passes.

    `sparse_optimizer`: a `sparselift.optim` record or `(torch optimizer class, kwargs)`; or
    none, and the model's tables carry TorchRec's `apply_optimizer_in_backward` choices (one
    table's may differ from another's); or neither, and the tables train with
    `sparselift.optim.SGD(lr=0.01)`. Anything SparseLift does not implement is refused on every
    rank, before a table is taken. `compiled.sparse_optimizer` holds the run-time
    hyperparameters (`param_groups`, for learning-rate schedules).
    """
    options = options or CompileOptions()
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    distributed = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size(process_group) if distributed else 1
    rank = dist.get_rank(process_group) if distributed else 0
    options = _resolve_transport(process_group, rank, world, options)
    seed = _init_seed(model, options, world, process_group)
    memory = MemoryPhases()  # the compile's memory by phase (`compiled.plan.memory_phases`)
    with memory.phase("export"):
        program = _export_same_on_every_rank(
            model, example_inputs, world, sharding, process_group, seed, dict(options.max_lengths or {})
        )
        # Tracing's temporaries (fake tensors, graphs, guards) back to the OS: glibc would keep
        # them resident for the rest of the run (33 MiB on a 26-table DLRM).
        release_freed_memory()
    model_tables = dict(model.named_parameters(remove_duplicate=False))
    facts = describe_tables(program.module)
    optimizer = _choose_optimizers(sparse_optimizer, model_tables, facts, process_group, world)
    inits = table_initializers(model, facts, options.table_init, seed)
    _check_inits(facts, model_tables, inits)
    lift = lift_pass(optimizer, options)
    needs = None
    with same_outcome(process_group, world):  # the whole need against the cap, before any allocation
        if options.memory_cap_bytes:
            needs = memory_need(program, lift, world, optimizer)
            check_memory_need(needs, options.memory_cap_bytes)
    take = functools.partial(
        _take_shards,
        model_tables,
        rank=rank,
        world=world,
        optimizer=optimizer,
        options=options,
        inits=inits,
        device=input_device(example_inputs),
    )
    # A user's table_init or an allocation failing on one rank fails every rank.
    with memory.phase("shards"), same_outcome(process_group, world):
        local = take(program)
    # The compiled model keeps its options: not the hook, which may be a bound method of the
    # model (`model.table_init`) and would keep the whole model alive after the user drops it.
    options = attrs.evolve(options, table_init=None)

    common = dict(rank=rank, world=world, process_group=process_group, optimizer=optimizer, options=options)
    if options.passes or options.plan == "none":
        with memory.phase("build"):
            compiled = _build_on_every_rank(program, local, _explicit_pipeline(options, lift), **common)
    else:
        compiled = _compile_planned(
            model,
            example_inputs,
            program,
            local,
            take,
            sharding=sharding,
            lift=lift,
            memory=memory,
            needs=needs,
            **common,
        )
    compiled.plan.memory_phases = memory
    if world > 1:
        _start_from_rank_0s_weights(compiled, process_group)
    _prepare_eval_regions(compiled, model, example_inputs, program)
    return compiled


def _prepare_eval_regions(compiled: CompiledModel, model: nn.Module, example_inputs: tuple, program) -> None:
    """Arrange `model`'s dense regions in eval mode for `compiled`: exported at the first eval()
    from the model's eval skeleton (`frontend.modes.eval_skeleton`), which keeps the model's
    modules and dense tensors but not its tables, so the user may delete the model after
    compiling; or, for a model that cannot be copied, exported now."""
    tables = {f.param for f in describe_tables(program.module)}
    read_by_regions = [t for region in program.regions.values() for t in (*region.parameters(), *region.buffers())]
    skeleton = eval_skeleton(model, tables, keep=read_by_regions)
    if skeleton is not None:
        compiled.defer_eval_regions(lambda program: export_eval_regions(skeleton, example_inputs, program))
        return
    with same_outcome(compiled.pg, compiled.world):
        regions = export_eval_regions(model, example_inputs, program)
    compiled.set_eval_regions(regions)


def _start_from_rank_0s_weights(compiled: CompiledModel, process_group) -> None:
    """Every rank starts from rank 0's dense parameters, buffers and replicated tables, as under
    DDP and TorchRec's DistributedModelParallel (ranks that built the model from different seeds
    would otherwise train different copies of what should be one). Sharded tables keep each
    owner's rows."""
    replicated = {f.name for f in compiled.table_facts if f.placement == "data_parallel"}
    tensors = {id(t): t for region in compiled.regions.values() for t in (*region.parameters(), *region.buffers())}
    states = [t.detach() for t in tensors.values() if t.device.type != "meta"]
    states += [compiled.tables[name] for name in sorted(replicated) if name in compiled.tables]
    if states:
        src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
        dist._broadcast_coalesced(process_group or dist.group.WORLD, states, 64 << 20, src)


def _choose_optimizers(sparse_optimizer, model_tables, facts, process_group, world: int) -> TableOptimizers:
    """Each table's optimizer (`optim.choose`): the model's in-backward ones, `sparse_optimizer`,
    or SGD; a refusal is raised on every rank, before a table is taken."""
    with same_outcome(process_group, world):
        tables = [(f.name, f.param) for f in facts]
        return choose(sparse_optimizer, in_backward_optimizers({p: model_tables[p] for _, p in tables}), tables)


def _resolve_transport(process_group, rank: int, world: int, options: CompileOptions) -> CompileOptions:
    """`options` with the all-to-alls' transport decided: "shm" (set up for the group, where
    `options.transport` allows it and the ranks can share memory) or "gloo". Collective: every
    rank reaches the same answer. The plan cache keys the planner's profile by it."""
    if options.transport == "gloo" or world == 1:
        return attrs.evolve(options, transport="gloo")
    transport, why_not = shm_transport.setup(process_group, rank, world)
    if transport is None and options.transport == "shm":
        raise RuntimeError(f"CompileOptions(transport='shm'): the ranks cannot share memory: {why_not}")
    if transport is None:
        log.info("sparselift: all-to-alls over the process group's backend: %s", why_not)
    return attrs.evolve(options, transport="shm" if transport is not None else "gloo")


def _check_inits(facts, model_tables, inits) -> None:
    """Every meta-device table must have an initializer (raised before allocating)."""
    missing = missing_inits(facts, model_tables, inits)
    if missing:  # every rank exported the same program, so every rank raises this, before allocating
        raise ExportError(
            f"table '{missing[0]}' is on the meta device and SparseLift does not know how to initialize it "
            f"(not an nn.EmbeddingBag/nn.Embedding or a TorchRec EmbeddingBagCollection table"
            f"{'; also ' + ', '.join(repr(m) for m in missing[1:]) if missing[1:] else ''}): pass "
            "CompileOptions(table_init=fn), fn(table, shard, row_offset) filling the shard in place"
        )


def _explicit_pipeline(options: CompileOptions, lift: LiftSparse) -> Pipeline:
    """The passes of an explicit pipeline (`options.passes` or `plan="none"`): no planning."""
    try:
        extra = parse_pipeline(options.passes, get_all_passes())
    except ValueError as e:
        raise ValueError(f"CompileOptions.passes: {e}") from None
    # Generated kernels fuse right after lifting unless the pipeline places generate-kernels
    # itself (after parallelize-tables, it fuses per lane).
    fuse = options.kernels == "generated" and find_pass(extra, "generate-kernels") is None
    return (lift, *((GenerateKernels(),) if fuse else ()), *extra)


def _compile_planned(
    model,
    example_inputs: tuple,
    program,
    local: LocalTables,
    take: Callable[[Any], LocalTables],
    *,
    sharding,
    lift: LiftSparse,
    rank: int,
    world: int,
    process_group,
    optimizer,
    options: CompileOptions,
    memory: MemoryPhases,
    needs=None,
) -> CompiledModel:
    """The planner's plan (reused or planned now, `resolve_plan`), built on every rank; `memory`
    records the planning (calibration included) and the build as two phases."""
    builder = CompilerCandidateBuilder(
        model,
        example_inputs,
        rank=rank,
        world=world,
        process_group=process_group,
        optimizer=optimizer,
        take=take,
        max_lengths=program.max_lengths,
    )
    with memory.phase("plan"):
        outcome = resolve_plan(
            program,
            local,
            example_inputs,
            builder=builder,
            sharding=sharding,
            lift=lift,
            rank=rank,
            world=world,
            process_group=process_group,
            optimizer=optimizer,
            options=options,
            needs=needs,
        )
    record = outcome.record
    if sharding_plan(outcome.program.module) != sharding_plan(program.module):
        with same_outcome(process_group, world):  # the plan chose another placement: this rank's shards of it
            local = take(outcome.program)
    with memory.phase("build"):
        compiled = _build_on_every_rank(
            outcome.program,
            local,
            (lift, *record.pipeline),
            rank=rank,
            world=world,
            process_group=process_group,
            optimizer=optimizer,
            options=attrs.evolve(options, kernels=record.kernels),
        )
    compiled.plan.record = record
    compiled.plan.reused = outcome.reused
    compiled.plan.calibration_s = outcome.calibration_s
    compiled.plan.planning = outcome.reason
    return compiled


def _take_shards(model_tables, program, *, rank, world, optimizer, options, inits, device) -> LocalTables:
    """This rank's table storage for `program`'s placement, after checking every rank's shards
    against `memory_cap_bytes` (so an oversized placement fails on every rank, before allocating)."""
    facts = describe_tables(program.module, world)
    check_memory_cap(facts, world, optimizer, options.memory_cap_bytes)
    return take_local_shards(
        facts,
        model_tables,
        rank=rank,
        optimizers=optimizer,
        inits=inits,
        device=device,
        huge_page_min_bytes=options.huge_page_min_bytes,
    )


def _init_seed(model: nn.Module, options: CompileOptions, world: int, pg) -> int:
    """The seed meta-device parameters are drawn from, the same on every rank."""
    if options.init_seed is not None:
        return int(options.init_seed)
    if not has_meta_parameters(model):
        return 0
    seed = [torch.initial_seed()]
    if world > 1:
        dist.broadcast_object_list(seed, src=dist.get_global_rank(pg, 0) if pg is not None else 0, group=pg)
    return int(seed[0])


def _ctx():
    from sparselift.ir import make_context

    return make_context()
