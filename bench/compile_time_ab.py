"""A/B of `sparselift.compile`'s wall time on 2 gloo ranks: this checkout against another commit's.

Each side runs in its own Python process (`PYTHONPATH` picks the source tree), and the sides
alternate run by run. A run launches 2 local ranks and compiles DLRM-Kaggle's shape (rows capped,
batch 2,048 per rank, the four optimizations' pipeline, no planning) twice on each: the first
compile of a process pays torch.export's lazy imports, the second is a user's next compile (the
planner and `bench ablation` compile the same model again). Prints the median seconds per side.

    git worktree add /tmp/base <commit>
    .venv/bin/python bench/compile_time_ab.py --other /tmp/base [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PIPELINE = "aggregate-comm,parallelize-tables{groups=2},generate-kernels,hide-latency"


def _compile_twice(rank: int, world: int, rows_cap: int) -> list[float]:
    import sparselift
    from sparselift.models import build

    seconds = []
    for _ in range(2):
        model, inputs = build("dlrm-kaggle", rows_cap=rows_cap, batch_size=2048, seed=0)
        start = time.perf_counter()
        sparselift.compile(model, inputs, options=sparselift.CompileOptions(plan="none", passes=PIPELINE))
        seconds.append(time.perf_counter() - start)
    return seconds


def _one_run(rows_cap: int) -> None:
    import sparselift
    from sparselift.runtime.distributed import launch

    start = time.perf_counter()
    per_rank = launch(_compile_twice, 2, rows_cap, timeout_s=600)
    total = time.perf_counter() - start
    first, second = (max(r[i] for r in per_rank) for i in range(2))
    print(json.dumps({"launch_and_both_s": total, "first_s": first, "second_s": second, "tree": sparselift.__file__}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", required=True, help="the other source tree (a worktree of another commit)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows-cap", type=int, default=100_000)
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)  # one side's run
    args = parser.parse_args()
    if args.run:
        _one_run(args.rows_cap)
        return
    sides = {"this": str(Path(__file__).resolve().parents[1]), "other": str(Path(args.other).resolve())}
    results: dict[str, list[dict[str, float]]] = {s: [] for s in sides}
    for r in range(args.rounds):
        for side in sides if r % 2 == 0 else reversed(list(sides)):
            env = os.environ | {"PYTHONPATH": sides[side]}
            cmd = [sys.executable, __file__, "--run", "--other", args.other, "--rows-cap", str(args.rows_cap)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=sides[side])
            results[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for side, runs in results.items():
        assert all(run["tree"].startswith(sides[side]) for run in runs), runs  # the side's own source
        medians = {k: statistics.median(run[k] for run in runs) for k in runs[0] if k != "tree"}
        print(f"{side} ({sides[side]}): " + ", ".join(f"{k} {v:.2f}" for k, v in medians.items()))


if __name__ == "__main__":
    main()
