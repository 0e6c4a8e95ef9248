"""A/B of the padded history's rows path on DIN's shapes: copies (before) against strided views.

Forward: the plan's 50 position blocks of the item table (`[B, 64]` slices of one buffer,
position after position, as `expand_rows` leaves them) and of the category table (`[B, 16]`
column slices of one pooled buffer) are stacked into `[B, 50, dim]` and concatenated into the
history `[B, 50, 80]`, as DIN's dense region does. Backward: the history's gradient goes back
through the stack (its `unbind`) and the item table's filled rows are compacted for the
exchange (`compact_rows`: ~60% of the positions hold an id).

    .venv/bin/python bench/padded_views_ab.py [--batch 1024] [--rounds 15] [--reps 20]

Both paths run in one process, interleaved round by round; the medians of the per-round means
are printed, and the results are checked equal first.
"""

from __future__ import annotations

import argparse
import statistics
import time
import types

import torch

from sparselift.runtime.backends import ReferenceKernels
from sparselift.runtime.rows import compact_rows
from sparselift.strided_rows import stack_blocks

POSITIONS, ITEM_DIM, CAT_DIM = 50, 64, 16
TORCH_PLAN = types.SimpleNamespace(kernels=ReferenceKernels())  # the torch (strided views) rows ops


def _old_compact(lengths: torch.Tensor, members: list[torch.Tensor], dim: int, batch: int) -> torch.Tensor:
    filled = lengths.bool().nonzero().squeeze(1)
    padded = torch.cat([m.reshape(batch, dim) for m in members])  # the copy the views avoid
    return padded.index_select(0, filled).reshape(-1)


def _blocks(batch: int, grad: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    item = torch.randn((POSITIONS + 1) * batch, ITEM_DIM, requires_grad=grad)
    cat = torch.randn(batch, (POSITIONS + 1) * CAT_DIM, requires_grad=grad)
    items = [item[p * batch : (p + 1) * batch] for p in range(POSITIONS + 1)]
    cats = [cat[:, p * CAT_DIM : (p + 1) * CAT_DIM] for p in range(POSITIONS + 1)]
    return items, cats


def _step(items, cats, lengths, batch: int, views: bool) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    stack = stack_blocks if views else torch.stack
    start = time.perf_counter()
    hist = torch.cat([stack(items[:POSITIONS], 1), stack(cats[:POSITIONS], 1)], dim=-1)
    forward = time.perf_counter() - start
    grads = torch.autograd.grad(hist, items, torch.ones_like(hist), allow_unused=True, materialize_grads=True)
    start = time.perf_counter()
    if views:
        rows = compact_rows(TORCH_PLAN, lengths, list(grads), _layout(), dim=ITEM_DIM, batch=batch)
    else:
        rows = _old_compact(lengths, list(grads), ITEM_DIM, batch)
    backward = time.perf_counter() - start
    return hist, rows, forward, backward


def _layout() -> tuple[tuple[tuple[int, int], ...], ...]:
    # One segment, every member one `ITEM_DIM` column block, in position order (what the
    # compact-rows pass lays out for one table's features).
    return (tuple((m * ITEM_DIM, ITEM_DIM) for m in range(POSITIONS + 1)),)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    items, cats = _blocks(args.batch, grad=True)
    lengths = (torch.rand((POSITIONS + 1) * args.batch) < 0.6).to(torch.int64)
    old = _step(items, cats, lengths, args.batch, views=False)
    new = _step(items, cats, lengths, args.batch, views=True)
    assert torch.equal(old[0], new[0]) and torch.equal(old[1], new[1]), "the two paths disagree"
    means: dict[str, list[float]] = {"copies fwd": [], "copies bwd": [], "views fwd": [], "views bwd": []}
    for _ in range(args.rounds):
        for views, name in ((False, "copies"), (True, "views")):
            times = [_step(items, cats, lengths, args.batch, views)[2:] for _ in range(args.reps)]
            means[f"{name} fwd"].append(statistics.mean(t[0] for t in times))
            means[f"{name} bwd"].append(statistics.mean(t[1] for t in times))
    print(f"batch {args.batch}, {POSITIONS} positions, {args.rounds} interleaved rounds of {args.reps} reps (ms)")
    for name, values in means.items():
        print(f"  {name:11s} median {statistics.median(values) * 1e3:6.2f}")
    for part in ("fwd", "bwd"):
        saved = statistics.median(means[f"copies {part}"]) - statistics.median(means[f"views {part}"])
        print(f"  saved {part}: {saved * 1e3:.2f} ms per step")


if __name__ == "__main__":
    main()
