"""A/B of DIN's `expand_rows` / `compact_rows` inside real training steps: torch ops against the
generated C pass, on the same inputs, call by call.

`bench ops` at real size cannot see a 1-3 ms change in a step that varies by 10-30% from run to
run. Here both ways run on every call of a `bench ops` DIN run (2 gloo ranks, batch 1,024 per
rank, real sizes, freed host memory retained), in alternating order, on the data the step just
received; the step goes on with the generated pass's result (the two are checked equal on every
call). Prints each rank's median milliseconds per call of each way.

    .venv/bin/python bench/rows_ops_ab.py [--steps 12]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from sparselift.bench.ops import OpsConfig, ops_worker
from sparselift.runtime import plan_ops, rows
from sparselift.runtime.distributed import launch

TIMES: dict[str, list[float]] = {"expand torch": [], "expand C": [], "compact torch": [], "compact C": []}


class _TorchOnly:
    kernels = None  # `rows.*` then take the torch path


def _both_ways(op: Callable, name: str) -> Callable:
    def run(plan, *args, **kwargs):
        ways = [(f"{name} torch", _TorchOnly()), (f"{name} C", plan)]
        if len(TIMES[f"{name} C"]) % 2:
            ways.reverse()
        results = {}
        for label, which in ways:
            start = time.perf_counter()
            results[label] = op(which, *args, **kwargs)
            TIMES[label].append(time.perf_counter() - start)
        got, want = results[f"{name} C"], results[f"{name} torch"]
        same = all(map(torch.equal, got, want)) if isinstance(got, list) else torch.equal(got, want)
        assert same, f"{name}: the two ways disagree"
        return got

    return run


def _worker(rank: int, world: int, cfg: OpsConfig) -> dict[str, float]:
    plan_ops.expand_rows = _both_ways(rows.expand_rows, "expand")
    plan_ops.compact_rows = _both_ways(rows.compact_rows, "compact")
    ops_worker(rank, world, cfg)
    return {label: round(statistics.median(t) * 1e3, 2) for label, t in TIMES.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    cfg = OpsConfig(
        model="din",
        world_size=2,
        passes="generate-kernels",
        steps=args.steps,
        warmup=3,
        batch_size=1024,
        rows_cap=None,
        host_memory="retain",
    )
    for rank, medians in enumerate(launch(_worker, 2, cfg, timeout_s=900)):
        print(f"rank {rank}: " + ", ".join(f"{label} {ms:.2f} ms" for label, ms in medians.items()))


if __name__ == "__main__":
    main()
