"""A/B of `gather_rows` on DIN's item table: `torch.index_select` against the generated lookup.

The owner of DIN's item table (1M x 64 f32) gathers one row per received history id (two ranks'
batches of 1,024 samples: about 63k ids, Zipf-skewed, from `DINSynthetic`). Both ways run in one
process, interleaved round by round, after checking they give the same rows.

    .venv/bin/python bench/gather_rows_ab.py [--rounds 15] [--reps 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sparselift.data.din_synthetic import DINSynthetic
from sparselift.kernel_args import RoutedBags, TableArgs
from sparselift.models.din import DINConfig
from sparselift.runtime.kernels import CKernels, TableSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = DINConfig()
    table = torch.empty(config.item_rows, config.item_dim).uniform_(-0.05, 0.05)
    history, _, target, *_ = DINSynthetic.for_model(config, seed=0).samples(0, 2048).inputs()
    ids = torch.cat([history.reshape(-1), target])
    ids = ids[ids != 0]
    kernels = CKernels([TableSpec(config.item_dim, "f32", "i64", "sum", False, "sgd")], nthreads=1)
    bags = RoutedBags.one_id_each(ids)  # one feature, one sample per id, one id per bag
    item = [TableArgs("item", table, (0,), "sum")]
    ways = {
        "index_select": lambda: torch.index_select(table, 0, ids),
        "generated lookup": lambda: kernels.lookup(bags, item)[0],
    }
    assert torch.equal(ways["index_select"](), ways["generated lookup"]()), "the two ways disagree"
    means: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            start = time.perf_counter()
            for _ in range(args.reps):
                way()
            means[name].append((time.perf_counter() - start) / args.reps)
    print(f"{ids.numel()} ids ({ids.unique().numel()} distinct) from a {tuple(table.shape)} table, ms per gather:")
    for name, values in means.items():
        print(f"  {name:17s} median {statistics.median(values) * 1e3:.2f}")


if __name__ == "__main__":
    main()
