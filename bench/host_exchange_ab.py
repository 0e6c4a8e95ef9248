"""A/B of the rows exchanges through shared memory (`runtime.host_exchange`) against gloo, on DIN.

DIN at real size, 2 gloo ranks, batch 1,024 per rank, `generate-kernels`, glibc's freed memory
retained (as `bench seq --host-memory retain`). One compiled model: rounds alternate between
its `HostExchange` and none (every exchange over gloo), in alternating order, on both ranks
at the same step. A step's time is the slower rank's.

    .venv/bin/python bench/host_exchange_ab.py [--rounds 8] [--steps 6]
"""

from __future__ import annotations

import argparse
import statistics
import time


def _worker(rank: int, world: int, rounds: int, steps: int) -> dict:
    import itertools

    import torch
    import torch.distributed as dist

    from sparselift.bench import seq_systems as systems
    from sparselift.runtime.allocator import retain_freed_memory

    retain_freed_memory()
    torch.set_num_threads(1)
    config = systems.din_config(None, 0)
    source = systems.din_source(config, seed=0)
    batches = [source.local_batch(i, 1024, rank, world) for i in range(4)]
    runner = systems.din_sparselift_runner(
        config, rank, world, 0.1, 0, batches[0], batches=itertools.cycle(batches), passes="generate-kernels"
    )
    plan = runner.compiled.runner
    host = plan.host_exchange
    times: dict[str, list[float]] = {"shared memory": [], "gloo": []}
    for _ in range(5):
        runner.progress()
    for r in range(rounds):
        for mode in ("shared memory", "gloo") if r % 2 == 0 else ("gloo", "shared memory"):
            plan.host_exchange = host if mode == "shared memory" else None
            runner.progress()  # the first step after a switch is not counted
            for _ in range(steps):
                start = time.perf_counter()
                runner.progress()
                took = torch.tensor([time.perf_counter() - start])
                dist.all_reduce(took, op=dist.ReduceOp.MAX)
                times[mode].append(float(took) * 1e3)
    plan.host_exchange = host
    return {"times": times, "enabled": host is not None and host.enabled, "fallbacks": host.fallbacks if host else None}


def main() -> None:
    from sparselift.runtime.distributed import launch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    result = launch(_worker, 2, args.rounds, args.steps, timeout_s=1200)[0]
    print(f"shared memory on: {result['enabled']}, calls that fell back to gloo: {result['fallbacks']}")
    print("DIN step (ms, the slower rank), median [p25, p75]:")
    for mode, values in result["times"].items():
        q = statistics.quantiles(values, n=4)
        print(f"  {mode:14s} {statistics.median(values):7.1f}  [{q[0]:.1f}, {q[2]:.1f}]  ({len(values)} steps)")


if __name__ == "__main__":
    main()
