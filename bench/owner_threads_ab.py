"""A/B of a table owner's row gather and row update at DIN's item-table size, one OpenMP thread
against two: what a rank that does a table-wise table's work alone could gain from the cores of
the ranks that wait for it.

The generated kernels (`CKernels.lookup` / `lookup_update` over one-id bags, what
`rt.gather_rows` / `rt.rows_update` call) on a 1M x 64 f32 table with row-wise Adagrad, 63,000
uniformly random ids (DIN's received ids per step at batch 1,024 on 2 ranks); the two thread
counts alternate call by call. Prints the median milliseconds per call.

    .venv/bin/python bench/owner_threads_ab.py [--rounds 12]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from sparselift.codegen.ckernels import TableSpec
from sparselift.kernel_args import OptimizerArgs, RoutedBags, TableArgs, UpdateArgs
from sparselift.optim_rules import OptimizerKind
from sparselift.runtime.kernels import CKernels

ROWS, DIM, IDS = 1_000_000, 64, 63_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    torch.manual_seed(0)
    table, state = torch.randn(ROWS, DIM), torch.zeros(ROWS)
    ids = torch.randint(1, ROWS, (IDS,))
    grad = torch.randn(IDS, DIM)
    bags = RoutedBags.one_id_each(ids)  # one feature, one sample per id, one id per bag
    item = TableArgs("item", table, (0,), "sum", state)
    adagrad = UpdateArgs(OptimizerArgs(OptimizerKind.ROWWISE_ADAGRAD, lr=0.01, eps=1e-8), grad_scale=1.0)
    cache = tempfile.mkdtemp()
    spec = [TableSpec(DIM, "f32", "i64", "sum", False, "rowwise_adagrad")]
    kernels = {t: CKernels(spec, cache=cache, nthreads=t) for t in (1, 2)}
    times: dict[tuple[int, str], list[float]] = {(t, op): [] for t in (1, 2) for op in ("gather", "update")}
    for r in range(args.rounds + 2):  # the first two rounds warm up
        for t in (1, 2) if r % 2 else (2, 1):
            k = kernels[t]
            start = time.perf_counter()
            k.lookup(bags, [item])
            mid = time.perf_counter()
            k.lookup_update(bags, [item], [grad], adagrad)
            end = time.perf_counter()
            if r >= 2:
                times[(t, "gather")].append((mid - start) * 1e3)
                times[(t, "update")].append((end - mid) * 1e3)
    for (threads, op), ms in times.items():
        print(f"{op} with {threads} thread{'s' if threads > 1 else ''}: {statistics.median(ms):.2f} ms per call")


if __name__ == "__main__":
    main()
