"""The cost model's collective numbers for each transport (docs/profiles.md, `cpu-gloo` and `cpu-shm`).

Two local gloo ranks, one thread each. Per transport: the latency of an 8-byte all-to-all (both
ranks send; 50 back to back, so a barrier's skew does not count), and the time rank 0's message
of 1-16 MiB takes to reach rank 1 (one way, no self part); a least-squares line through the
one-way times gives the bandwidth. Medians of `--reps` timed repeats after a barrier,
transports alternated.

    .venv/bin/python bench/shm_profile.py [--reps 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from sparselift.runtime import shm_transport
from sparselift.runtime.distributed import launch

SIZES_MIB = (1, 4, 16)
ROUND_TRIPS = 50


def _exchange(shm, kind: str, out, x, recv, send) -> None:
    if kind == "gloo":
        dist.all_to_all_single(out, x, recv, send)
    else:
        shm.all_to_all_single(out, x, recv, send).wait()


def _measure(rank: int, world: int, reps: int) -> dict[str, dict[str, float]]:
    torch.set_num_threads(1)
    shm, why = shm_transport.setup(None, rank, world)
    if shm is None:
        raise SystemExit(f"no shared-memory transport here: {why}")
    times: dict[str, list[float]] = {}
    small = torch.zeros(world, dtype=torch.int64)
    big = torch.ones(max(SIZES_MIB) << 18)  # f32: 4 bytes each
    for _ in range(reps):
        for kind in ("gloo", "shm"):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(ROUND_TRIPS):  # back to back: the barrier's skew spreads over them
                _exchange(shm, kind, torch.empty_like(small), small, [1] * world, [1] * world)
            times.setdefault(f"{kind} alpha", []).append((time.perf_counter() - start) / ROUND_TRIPS)
            for mib in SIZES_MIB:
                n = mib << 18
                send = [0, n] if rank == 0 else [0, 0]
                recv = [n, 0] if rank == 1 else [0, 0]
                out = torch.empty(sum(recv))
                dist.barrier()
                start = time.perf_counter()
                _exchange(shm, kind, out, big[: sum(send)], recv, send)
                times.setdefault(f"{kind} {mib}", []).append(time.perf_counter() - start)
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    reps = parser.parse_args().reps
    receiver = launch(_measure, 2, reps, timeout_s=300)[1]
    for kind in ("gloo", "shm"):
        xs = [mib * 2**20 for mib in SIZES_MIB]
        ys = [receiver[f"{kind} {mib}"] for mib in SIZES_MIB]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        one_way = ", ".join(f"{mib} MiB {y / 1e3:.2f} ms" for mib, y in zip(SIZES_MIB, ys))
        print(
            f"{kind}: 8-byte all-to-all {receiver[f'{kind} alpha']:.0f} us; one way {one_way}; "
            f"bandwidth {1e-3 / slope:.2f} GB/s"
        )


if __name__ == "__main__":
    main()
