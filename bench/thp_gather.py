"""Huge pages against 4 KiB pages for random row gathers (bench/RESULTS.md, "Issue 17").

Four 1M x 64 f32 tables, 409,600 ids each (Zipf 1.05 as the benchmarks draw them, hot rows
scattered over the table, and uniform), pooled by `F.embedding_bag` in bags of 100, on one
thread. Run: `python bench/thp_gather.py`.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from sparselift.data.synthetic import zipf_ranks
from sparselift.runtime import huge_pages

ROWS, DIM, IDS = 1_000_000, 64, 409_600


def _tables(huge: bool) -> list[torch.Tensor]:
    tables = []
    for _ in range(4):
        t = huge_pages.empty_shard((ROWS, DIM), torch.float32) if huge else torch.empty(ROWS, DIM)
        tables.append(t.normal_())
    return tables


def _median_ms(tables: list[torch.Tensor], ids: torch.Tensor, offsets: torch.Tensor) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for t in tables:
            F.embedding_bag(ids, t, offsets, mode="sum")
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    zipf = rng.permutation(ROWS)[zipf_ranks(rng.random(IDS), ROWS, 1.05)]
    ids = {"zipf": torch.from_numpy(zipf.astype(np.int64)), "uniform": torch.randint(0, ROWS, (IDS,))}
    offsets = torch.arange(0, IDS, 100)
    print(f"THP policy: {huge_pages.thp_mode()}")
    for huge in (False, True):
        tables = _tables(huge)
        backed = sum(huge_pages.huge_page_bytes(t) for t in tables) >> 20
        for name, x in ids.items():
            pages = "huge" if huge else "4 KiB"
            print(f"{pages} pages ({backed} MiB huge), {name} ids: {_median_ms(tables, x, offsets):.1f} ms")
        del tables


if __name__ == "__main__":
    main()
