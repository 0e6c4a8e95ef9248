"""Deterministic table initialization that does not depend on how a table is sharded.

A table's rows are drawn in fixed chunks of `CHUNK_ROWS` rows, each chunk from its own RNG seed
(a hash of the seed, the table's name and the chunk's index). Any row range can then be filled
without drawing the rest of the table: a rank materializes only its shard of a model built on the
meta device, and a table-wise shard, a row-wise shard and the whole table built on the CPU hold
the same values row for row. `sparselift.compile` uses it for meta-device tables; the DLRM models
and the benchmark's peers use it so that every system trains the same weights.

Torch only (no other SparseLift package): models, the runtime and the benchmarks all import it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import torch

CHUNK_ROWS = 1 << 16

InitFn = Callable[[torch.Tensor], object]
"""An in-place, element-wise i.i.d. initializer such as `torch.nn.init.normal_`."""


def chunk_seed(seed: int, table: str, chunk: int) -> int:
    digest = hashlib.blake2b(f"{seed}/{table}/{chunk}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


@torch.no_grad()
def fill_rows(shard: torch.Tensor, row_offset: int, init_fn: InitFn, *, seed: int, table: str) -> torch.Tensor:
    """Fill `shard` (rows `row_offset ..` of table `table`) as the whole table would be filled.

    `init_fn` runs under a forked global RNG seeded per chunk, so initializers that draw from the
    global generator (TorchRec's `init_fn`, `nn.init.*`) are deterministic too and the caller's RNG
    stream does not move.
    """
    rows = shard.shape[0]
    first, last = row_offset // CHUNK_ROWS, (row_offset + rows - 1) // CHUNK_ROWS if rows else -1
    with torch.random.fork_rng(devices=[]):
        for chunk in range(first, last + 1):
            lo, hi = chunk * CHUNK_ROWS, (chunk + 1) * CHUNK_ROWS
            a, b = max(lo, row_offset), min(hi, row_offset + rows)
            torch.manual_seed(chunk_seed(seed, table, chunk))
            if a == lo and b == hi:  # the shard holds the whole chunk: fill it in place
                init_fn(shard[a - row_offset : b - row_offset])
            else:  # a partial chunk: draw all of it, keep the overlap
                full = torch.empty((hi - lo, *shard.shape[1:]), dtype=shard.dtype, device=shard.device)
                init_fn(full)
                shard[a - row_offset : b - row_offset] = full[a - lo : b - lo]
    return shard


def uniform_init(rows: int) -> InitFn:
    """The DLRM reference's (and TorchRec's default) U(-sqrt(1/n), sqrt(1/n))."""
    bound = math.sqrt(1.0 / rows)
    return lambda t: torch.nn.init.uniform_(t, -bound, bound)


__all__ = ["CHUNK_ROWS", "InitFn", "chunk_seed", "fill_rows", "uniform_init"]
