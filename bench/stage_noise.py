"""A/A noise of a compiled plan's step on 2 local ranks: the paired difference of consecutive
steps of one plan (T0, `generate-kernels`), for the whole step and for the step less its dense
stages (`other_fwd + other_bwd`, the same computation in every plan), each the slowest rank's as
in the planner's rounds. How much of the planner's noise a control variate on the dense stages
would remove (bench/RESULTS.md, "2026-12-06 (evening session)").

    .venv/bin/python bench/stage_noise.py din|dlrm-kaggle|dlrm-bench
"""

from __future__ import annotations

import statistics
import sys

import sparselift.bench.ops as ops
from sparselift.runtime.distributed import launch


def worker(rank: int, world: int, cfg: ops.OpsConfig) -> list[list[float]] | None:
    import torch
    import torch.distributed as dist

    from sparselift.bench.dlrm import apply_host_memory

    torch.set_num_threads(1)
    apply_host_memory(cfg)
    runner = ops.ops_runner(rank, world, cfg)
    for _ in range(cfg.warmup):
        runner.progress()
    runner.enable_stage_timing(True)
    for _ in range(cfg.steps):
        runner.progress()
    rows = [[st.total, st.total - st.other_fwd - st.other_bwd] for st in runner.stage_times]
    t = torch.tensor(rows, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's, as the planner's rounds
    return t.tolist() if rank == 0 else None


def main(model: str) -> None:
    cfg = ops.OpsConfig(
        model=model,
        world_size=2,
        passes="generate-kernels",
        steps=40,
        warmup=5,
        batch_size=1024 if model == "din" else 2048,
        rows_cap=None,
        sharding="auto",
        host_memory="retain",
    )
    rows = launch(worker, 2, cfg, timeout_s=1800)[0]
    whole, less_dense = [r[0] for r in rows], [r[1] for r in rows]
    pairs = [(a - b, c - d) for a, b, c, d in zip(whole[::2], whole[1::2], less_dense[::2], less_dense[1::2])]
    step = statistics.median(whole)
    print(f"{model}: step median {step:.1f} ms, less its dense stages {statistics.median(less_dense):.1f} ms")
    for label, diffs in (("whole step", [p[0] for p in pairs]), ("less dense stages", [p[1] for p in pairs])):
        sd = statistics.stdev(diffs)
        print(f"  sd of paired differences, {label}: {sd:.1f} ms ({100 * sd / step:.1f}% of the step)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "din")
