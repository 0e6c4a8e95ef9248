"""Resident memory of a DIN compile at real size on one process: built on the meta device, its
tables materialized by `table_init`, RSS read from /proc after the compile, after one training
step, and after giving glibc's freed heap back (`malloc_trim`).

Usage: `.venv/bin/python bench/din_memory.py none|replan` (`CompileOptions.plan`; bench/RESULTS.md,
"Issue 18, continued", Memory).
"""

from __future__ import annotations

import gc
import sys

import torch

import sparselift
from sparselift.bench.memory import peak_rss_bytes, reset_peak, rss_bytes
from sparselift.bench.seq_systems import din_config, din_inputs, meta_din
from sparselift.data.din_synthetic import DINSynthetic
from sparselift.runtime.allocator import release_freed_memory


def _mb(nbytes: int) -> int:
    return round(nbytes / 2**20)


def main(plan: str) -> None:
    torch.set_num_threads(1)
    config = din_config(rows_cap=None)
    gc.collect()
    reset_peak()
    start = rss_bytes() or 0
    model = meta_din(config, 0)
    example = din_inputs(DINSynthetic.for_model(config, seed=0).samples(0, 1024))
    options = sparselift.CompileOptions(plan=plan, table_init=model.table_init)
    compiled = sparselift.compile(
        model, example, sharding="auto", sparse_optimizer=sparselift.optim.SGD(lr=0.01), options=options
    )
    gc.collect()
    resident, peak = _mb((rss_bytes() or 0) - start), _mb((peak_rss_bytes() or 0) - start)
    print(f"plan={plan}: after compile {resident} MB resident, peak {peak}")
    compiled(*example).float().mean().backward()
    gc.collect()
    print(f"after a step {_mb((rss_bytes() or 0) - start)} MB")
    release_freed_memory()
    print(f"after malloc_trim {_mb((rss_bytes() or 0) - start)} MB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "replan")
