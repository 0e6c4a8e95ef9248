"""Where one step of a compiled plan goes, call by call, on 2 local ranks: `bench ops`' wrapped
plan-runtime calls (exchanges by role, kernels, dense regions, the dense-gradient buckets), each
with its start (ms into the window), duration and nesting, for the last `--window-ms` of the run
on every rank. `bench ops` sums these per step; this shows their order, so a wait that absorbs
the other rank's skew shows as a long exchange after a short one on the other side
(bench/RESULTS.md, "2026-12-06 (evening session)", "Where a DIN step goes").

    .venv/bin/python bench/step_timeline.py [--model din] [--passes generate-kernels] [--window-ms 500]
"""

from __future__ import annotations

import argparse
import time

import sparselift.bench.ops as ops
from sparselift.runtime.distributed import launch

_EVENTS: list[tuple[float, float, int, str]] = []  # (start s, end s, depth, label), this rank's
_DEPTH = [0]


def _recording(summing):
    """`bench ops`' call wrapper (`summing`, which adds each call to the per-step sums), with each
    call's start, end and nesting recorded as well."""

    def wrap(fn, name: str, acc):
        timed = summing(fn, name, acc)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            _DEPTH[0] += 1
            try:
                return timed(*args, **kwargs)
            finally:
                _DEPTH[0] -= 1
                _EVENTS.append((start, time.perf_counter(), _DEPTH[0], ops.call_label(name, args, kwargs)))

        return wrapper

    return wrap


def worker(rank: int, world: int, cfg: ops.OpsConfig, window_s: float) -> dict:
    ops._timed = _recording(ops._timed)  # this rank's process only
    result = ops.ops_worker(rank, world, cfg)
    end = max(e for _, e, _, _ in _EVENTS)
    shown = [ev for ev in sorted(_EVENTS) if ev[0] >= end - window_s]
    return {"rank": rank, "step_ms": result["step_ms_median"], "events": shown, "origin": end - window_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="din", choices=("din", "dlrm-kaggle", "dlrm-bench"))
    p.add_argument("--passes", default="generate-kernels")
    p.add_argument("--window-ms", type=float, default=500.0)
    p.add_argument("--min-ms", type=float, default=0.3, help="calls shorter than this are left out")
    a = p.parse_args()
    cfg = ops.OpsConfig(
        model=a.model,
        world_size=2,
        passes=a.passes,
        steps=6,
        warmup=5,
        batch_size=1024 if a.model == "din" else 2048,
        rows_cap=None,
        sharding="auto",
        host_memory="retain",
    )
    for r in launch(worker, 2, cfg, a.window_ms / 1e3, timeout_s=1800):
        print(f"== rank {r['rank']}: step median {r['step_ms']:.1f} ms; start ms, duration ms, call")
        for start, end, depth, label in r["events"]:
            if (end - start) * 1e3 >= a.min_ms:
                print(f"{(start - r['origin']) * 1e3:8.2f} {(end - start) * 1e3:7.2f} {'  ' * depth}{label}")


if __name__ == "__main__":
    main()
