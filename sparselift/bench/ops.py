"""`sparselift bench ops`: where a compiled plan's step goes, op by op, on local ranks.

Trains SparseLift's DLRM (or `din`, `bench seq`'s model) through `TrainPipeline` with an explicit
pipeline (no planner, so runs are comparable) and times every plan-runtime call
(`sparselift.runtime.plan_ops`: routing, the exchanges and their waits, the fused kernels,
pack / unpack, the dense regions, the dense-gradient buckets) with a wall-clock wrapper.
Prints, per rank, the median step and each op's milliseconds per step; exchanges are split by
role (`all_to_all[grad_pooled]`) and dense regions by name (`PlanBase.dense[dense_post]`). The wrappers add a few
microseconds a call: compare runs of this command with each other, never with `bench dlrm`.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import statistics
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from sparselift.frontend.export import SHARDING_CHOICES
from sparselift.runtime import rows
from sparselift.tools.arguments import add_host_memory_argument, rows_cap_arg, sharding_arg

if TYPE_CHECKING:
    from sparselift.placement import ShardingPlan

# Module-level runtime functions the emitted plans call (`rt.<name>`), and methods of the plan
# and of the dense-gradient buckets.
PLAN_OPS = (
    "route",
    "all_to_all",
    "all_to_all_dynamic",
    "recv_splits",
    "wait",
    "fused_lookup",
    "pack",
    "unpack",
    "fused_lookup_update",
    "fused_lookup_grad",
    "all_reduce",
    "dense_update",
    "lookup",
    "lookup_update",
    "lookup_grad",
    "pack_ids",
    "unpack_ids",
    "static_sizes",  # a merged dynamic exchange's buffers
    "join_segments",
    "split_segments",
    *rows.__all__,  # the jagged rows ops
)
METHODS = (
    ("PlanBase", "dense"),
    ("PlanBase", "check_batch"),  # the step's batch check and batch-size agreement (waits included)
    ("PlanBase", "run_segment_forward"),
    ("PlanBase", "run_segment_backward"),
    ("_GradBuckets", "_start"),
    ("_GradBuckets", "finish"),
)


DEFAULT_PASSES = "generate-kernels,hide-latency{forward=true backward=true}"


@attrs.frozen
class OpsConfig:
    model: str = "dlrm-kaggle"
    world_size: int = 2
    passes: str = DEFAULT_PASSES
    steps: int = 30
    warmup: int = 5
    batch_size: int = 2048
    rows_cap: int | None = 100_000
    seed: int = 0
    sharding: str | ShardingPlan = "auto"  # a policy name or a plan (`--sharding PLAN.json`)
    host_memory: str = "default"  # as `bench seq`'s --host-memory: "retain" keeps freed heap memory


def call_label(name: str, args: tuple, kwargs: dict) -> str:
    """A wrapped call's label: exchanges are told apart by their role (`all_to_all[grad_pooled]`),
    dense regions by their name (`PlanBase.dense[dense_post]`: args are the plan and the region's name)."""
    if "role" in kwargs:
        return f"{name}[{kwargs['role']}]"
    if name == "PlanBase.dense" and len(args) > 1:
        return f"{name}[{args[1]}]"
    return name


def _timed(fn, name: str, acc: dict[str, float]):
    def wrapper(*args, **kwargs):
        label = call_label(name, args, kwargs)
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[label] += time.perf_counter() - start

    return wrapper


def ops_runner(rank: int, world: int, cfg: OpsConfig) -> Any:
    """SparseLift on the model, compiled with exactly `cfg.passes`, cycling over 4 local batches."""
    if cfg.model == "din":
        from sparselift.bench.seq_systems import din_config, din_source, din_sparselift_runner

        config: Any = din_config(cfg.rows_cap, cfg.seed)
        source = din_source(config, seed=cfg.seed)
        batches = [source.local_batch(i, cfg.batch_size, rank, world) for i in range(4)]
        make: Any = din_sparselift_runner
    else:
        from sparselift.bench.baselines import synthetic_source
        from sparselift.bench.dlrm import BenchConfig, dlrm_config
        from sparselift.bench.systems import SparseLiftRunner

        config = dlrm_config(BenchConfig(model=cfg.model, rows_cap=cfg.rows_cap))
        stream = synthetic_source(config, seed=cfg.seed)
        batches = [
            next(iter(stream.batches(cfg.batch_size, 1, rank=rank, world_size=world, start_step=i))) for i in range(4)
        ]
        make = SparseLiftRunner
    return make(
        config,
        rank,
        world,
        0.1,
        cfg.seed,
        batches[0],
        batches=itertools.cycle(batches),
        passes=cfg.passes,
        sharding=cfg.sharding,
    )


def ops_worker(rank: int, world: int, cfg: OpsConfig) -> dict[str, Any]:
    import torch

    from sparselift.bench.dlrm import apply_host_memory
    from sparselift.runtime import compiled, plan_ops

    torch.set_num_threads(1)
    apply_host_memory(cfg)  # before the runner exists, as `bench seq` does
    acc: dict[str, float] = collections.defaultdict(float)
    owners = {"PlanBase": plan_ops.PlanBase, "_GradBuckets": compiled._GradBuckets}
    saved = [(plan_ops, n, getattr(plan_ops, n)) for n in PLAN_OPS] + [
        (owners[o], m, getattr(owners[o], m)) for o, m in METHODS
    ]
    try:
        for owner, name, fn in saved:
            label = name if owner is plan_ops else f"{owner.__name__}.{name}"
            setattr(owner, name, _timed(fn, label, acc))
        runner = ops_runner(rank, world, cfg)
        for _ in range(cfg.warmup):
            runner.progress()
        acc.clear()
        steps = []
        for _ in range(cfg.steps):
            start = time.perf_counter()
            runner.progress()
            steps.append((time.perf_counter() - start) * 1e3)
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
    per_step = {k: v * 1e3 / cfg.steps for k, v in sorted(acc.items(), key=lambda kv: -kv[1])}
    return {"rank": rank, "step_ms_median": statistics.median(steps), "ops_ms_per_step": per_step}


def format_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"Per-op time: {cfg['model']}, {cfg['world_size']} ranks, batch {cfg['batch_size']} per rank, "
        f"pipeline lift-sparse,{cfg['passes']}, {cfg['steps']} steps after {cfg['warmup']} warmup"
        + (", freed host memory retained" if cfg.get("host_memory") == "retain" else ""),
        "",
    ]
    ranks = result["ranks"]
    names = list(dict.fromkeys(k for r in ranks for k in r["ops_ms_per_step"]))
    lines.append(f"{'op (ms per step)':<34}" + "".join(f"{'rank ' + str(r['rank']):>10}" for r in ranks))
    lines.append(f"{'step (median)':<34}" + "".join(f"{r['step_ms_median']:>10.2f}" for r in ranks))
    for name in names:
        lines.append(f"{name:<34}" + "".join(f"{r['ops_ms_per_step'].get(name, 0.0):>10.2f}" for r in ranks))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sparselift bench ops", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="dlrm-kaggle", choices=("dlrm-kaggle", "dlrm-bench", "dlrm-terabyte", "din"))
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--passes", default=DEFAULT_PASSES, help="the pipeline after lift-sparse (no planner)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--rows-cap", type=rows_cap_arg, default=100_000)
    p.add_argument("--sharding", default="auto", type=sharding_arg, help=f"{' | '.join(SHARDING_CHOICES)} | PLAN.json")
    add_host_memory_argument(p)
    p.add_argument("--json", help="write the results as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    cfg = OpsConfig(
        model=a.model,
        world_size=a.world_size,
        passes=a.passes,
        steps=a.steps,
        warmup=a.warmup,
        batch_size=a.batch_size,
        rows_cap=a.rows_cap,
        sharding=a.sharding,
        host_memory=a.host_memory,
    )
    from sparselift.bench.dlrm import report
    from sparselift.runtime.distributed import launch

    result = {"config": attrs.asdict(cfg), "ranks": launch(ops_worker, cfg.world_size, cfg, timeout_s=1800)}
    report(result, "ops", argv, format_table, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
