"""`sparselift.compile`: export the model, lift and emit a plan, and build this rank's module.

The one place that runs the whole pipeline (model -> IR -> passes -> plan -> runtime), so it may
import every stage; the stages themselves only import downstream (docs/architecture.md).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import torch
import torch.distributed as dist
from torch import nn

from sparselift.codegen.plan_module import emit_plan_module
from sparselift.frontend.export import export
from sparselift.optim import SGD, RowWiseAdagrad
from sparselift.passes.sharding import ShardingPlan
from sparselift.runtime.compiled import CompiledModel, CompileOptions, Plan, cache_dir

log = logging.getLogger("sparselift")


def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _export_same_on_every_rank(model, example_inputs, world, sharding, pg):
    """Rank 0 decides (workload statistics and placement from its example inputs) and broadcasts;
    the other ranks export with those decisions, so every rank builds the same plan."""
    payload = [None]
    program = None
    if world == 1 or dist.get_rank(pg) == 0:
        program = export(model, example_inputs, world_size=world, sharding=sharding)
        payload = [(program.sharding.to_json(), {k: v["pooling_factor"] for k, v in program.stats.items()})]
    if world > 1:
        dist.broadcast_object_list(payload, src=dist.get_global_rank(pg, 0) if pg is not None else 0, group=pg)
    if program is None:
        plan_json, stats = payload[0]
        program = export(model, example_inputs, world_size=world, sharding=ShardingPlan.from_json(plan_json),
                         stats=stats)
    return program


def lift_spec(optimizer: SGD | RowWiseAdagrad) -> str:
    """The `lift-sparse` spec for `optimizer` (the fused update it lowers to)."""
    from sparselift.ir._syntax import format_float

    return (
        f"lift-sparse{{optimizer={optimizer.kind} lr={format_float(optimizer.lr)} eps={format_float(optimizer.eps)}}}"
    )


def build_compiled(
    program,
    model_tables: Mapping[str, torch.Tensor],
    pipeline: Sequence[str],
    *,
    rank: int,
    world: int,
    process_group,
    optimizer: SGD | RowWiseAdagrad,
    options: CompileOptions,
    scratch: bool = False,
) -> CompiledModel:
    """This rank's CompiledModel for `program` (exported, not yet lifted) after the pass specs
    `pipeline` (lift-sparse first); `options.kernels` selects the runtime kernels.

    The exported module is cloned, so one program serves many pipelines (the planner builds a
    candidate per pipeline). The model's tables are always copied into the plan; with
    `scratch=True` the dense regions are deep-copied too, so running the result (calibration)
    never touches the model's parameters.
    """
    from sparselift.passes.plan_sparse import run_pipeline

    module = program.module.clone()
    run_pipeline(module, list(pipeline), _ctx())
    regions = copy.deepcopy(program.regions) if scratch else program.regions
    lifted = attrs.evolve(program, module=module, regions=regions)
    ir_text = lifted.text
    source = emit_plan_module(module)
    digest = hashlib.sha256((ir_text + source + torch.__version__).encode()).hexdigest()[:16]
    path = cache_dir(options) / f"plan_{digest}.py"
    if path.exists() and path.read_text() == source:
        log.info("sparselift: plan %s found in the cache (%s); nothing rebuilt", digest, path)
    else:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        tmp.replace(path)
        log.info("sparselift: plan %s written to %s", digest, path)
    loaded = _load_module(path, f"sparselift_plan_{digest}")
    plan = Plan(ir_text, source, path, digest, lifted)
    return CompiledModel(lifted, plan, loaded.Plan, rank, world, process_group, optimizer, options, model_tables)


def compile(  # noqa: A001 - the public API mirrors torch.compile
    model: nn.Module,
    example_inputs: tuple,
    *,
    sharding: str | ShardingPlan = "auto",
    sparse_optimizer: SGD | RowWiseAdagrad | None = None,
    process_group=None,
    options: CompileOptions | None = None,
) -> CompiledModel:
    """Compile `model`'s sparse path for the current process group (world size 1 without one).

    By default (`options.plan="auto"`) the planner chooses the optimizations by measured
    lookahead, or reuses the plan it chose before for the same model, shapes, sharding, world
    size, device and versions (see `sparselift.planner`). `options.passes` (or `plan="none"`)
    skips planning: the pipeline is lift-sparse, generate-kernels when `kernels="generated"`,
    then those passes.
    """
    options = options or CompileOptions()
    optimizer = sparse_optimizer or SGD()
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    distributed = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size(process_group) if distributed else 1
    rank = dist.get_rank(process_group) if distributed else 0
    program = _export_same_on_every_rank(model, example_inputs, world, sharding, process_group)
    tables = {name: p for name, p in model.named_parameters()}
    lift = lift_spec(optimizer)

    if options.passes or options.plan == "none":
        from sparselift.passes.plan_sparse import split_pipeline

        extra = split_pipeline(options.passes)
        # Generated kernels fuse right after lifting unless the pipeline places generate-kernels
        # itself (after parallelize-tables, it fuses per lane).
        fuse = options.kernels == "generated" and not any(s.split("{")[0] == "generate-kernels" for s in extra)
        specs = [lift, *(["generate-kernels"] if fuse else []), *extra]
        return build_compiled(program, tables, specs, rank=rank, world=world, process_group=process_group,
                              optimizer=optimizer, options=options)

    from sparselift.planner import resolve_plan

    outcome = resolve_plan(program, tables, example_inputs, model=model, sharding=sharding, lift=lift, rank=rank,
                           world=world, process_group=process_group, optimizer=optimizer, options=options)
    record = outcome.record
    compiled = build_compiled(outcome.program, tables, [lift, *record.pipeline], rank=rank, world=world,
                              process_group=process_group, optimizer=optimizer,
                              options=attrs.evolve(options, kernels=record.kernels))
    compiled.plan.record = record
    compiled.plan.reused = outcome.reused
    compiled.plan.calibration_s = outcome.calibration_s
    compiled.plan.planning = outcome.reason
    return compiled


def _ctx():
    from sparselift.ir import make_context

    return make_context()
