"""Equally strided blocks of one storage seen as one tensor, without a copy.

A plan hands an unpooled call's position features to the dense region as `[B, dim]` blocks of
one buffer (`runtime/rows.expand_rows` puts them position after position), and autograd hands
their gradients back as blocks of one gradient (the stack's backward is an `unbind`). Stacking
the blocks (`torch.stack`, `torch.cat`) would copy every row once more; when they lie at a
regular stride in one storage, a strided view is the same tensor for free.

- `block_run`: `torch.stack(blocks)` as a view, where it is one;
- `block_runs`: consecutive blocks split into such runs;
- `stack_blocks`: `torch.stack(blocks, dim)` under autograd, a view where `block_run` applies
  (`frontend/program.UnpooledViews` stacks a call's positions with it);
- `take_run_rows`: rows of a run picked by `(block, row)` into a buffer, in one `index_select`
  over the run's storage (`runtime/rows.compact_rows` gathers the gradients' rows with it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def _plain(block: torch.Tensor) -> bool:
    # Fake and functional tensors (tracing) have no storage to view; they take the copying path.
    return type(block) is torch.Tensor and block.layout == torch.strided


def _follows(block: torch.Tensor, first: torch.Tensor, k: int, step: int | torch.SymInt) -> bool:
    """Block `k` of a run that starts with `first` and steps `step` elements per block."""
    return (
        _plain(block)
        and block.dtype == first.dtype
        and block.shape == first.shape
        and block.stride() == first.stride()
        and block.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
        and block.storage_offset() == first.storage_offset() + k * step
    )


def _run_length(blocks: Sequence[torch.Tensor], first: int) -> int:
    """How many blocks from `first` on form one run (at least 1)."""
    head = blocks[first]
    if first + 1 >= len(blocks) or not _plain(head):
        return 1
    step = blocks[first + 1].storage_offset() - head.storage_offset()
    if step < 0:
        return 1
    n = 1
    while first + n < len(blocks) and _follows(blocks[first + n], head, n, step):
        n += 1
    return n


def _stack_view(blocks: Sequence[torch.Tensor]) -> torch.Tensor:
    first = blocks[0]
    step = blocks[1].storage_offset() - first.storage_offset() if len(blocks) > 1 else 0
    return first.as_strided((len(blocks), *first.shape), (step, *first.stride()), first.storage_offset())


def block_run(blocks: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """`torch.stack(blocks)` as a view of the blocks' storage, or None when it is not one.

    It is one when every block is a plain strided tensor of the same storage, dtype, shape and
    strides, at storage offsets `o, o + s, o + 2s, ...` (`s >= 0`): element `(k, *i)` of the
    view is element `i` of block `k`, read from the very same memory. Never while tracing."""
    if not blocks or torch.compiler.is_compiling() or _run_length(blocks, 0) != len(blocks):
        return None
    return _stack_view(blocks) if _plain(blocks[0]) else None


def block_runs(blocks: Sequence[torch.Tensor]) -> list[tuple[int, torch.Tensor]]:
    """`blocks` cut into maximal runs of consecutive blocks that `block_run` stacks: per run, its
    first block's index and its stack `[n, *shape]` (a view; a lone block's is `unsqueeze(0)`)."""
    runs: list[tuple[int, torch.Tensor]] = []
    first = 0
    tracing = torch.compiler.is_compiling()
    while first < len(blocks):
        n = 1 if tracing else _run_length(blocks, first)
        runs.append((first, _stack_view(blocks[first : first + n]) if n > 1 else blocks[first].unsqueeze(0)))
        first += n
    return runs


class _StackedBlocks(torch.autograd.Function):
    """`torch.stack` whose result is a view of the blocks (`stack_blocks` calls it only on a run
    that `block_run` accepts); its backward hands each block its slice of the gradient, as
    `torch.stack`'s does."""

    @staticmethod
    def forward(ctx, dim: int, *blocks: torch.Tensor) -> torch.Tensor:
        ctx.dim = dim
        return _stack_view(blocks).movedim(0, dim)  # `stack_blocks` checked the run

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, *grad.unbind(ctx.dim)


def stack_blocks(blocks: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """`torch.stack(blocks, dim)`: a view of the blocks where they form one run (`block_run`),
    else the copy. The view aliases the blocks: nothing may write either in place."""
    if len(blocks) < 2 or block_run(blocks) is None:
        return torch.stack(list(blocks), dim)
    return _StackedBlocks.apply(dim, *blocks)


def take_run_rows(run: torch.Tensor, picks: torch.Tensor, out: torch.Tensor) -> None:
    """`out[i] = run[picks[i] // n_rows, picks[i] % n_rows]` for a run `[blocks, n_rows, dim]`.

    When the rows are contiguous (`run.stride(-1) == 1`), every row of the run starts at a
    multiple of `g = gcd` of the run's two outer strides past its first, so the storage seen as
    rows `g` apart holds them all, and one `index_select` reads the picked ones straight into
    `out`; otherwise the run is copied into rows first."""
    blocks, n_rows, dim = run.shape
    picks = picks.to(torch.int64)
    if run.stride(-1) != 1:
        torch.index_select(run.reshape(blocks * n_rows, dim), 0, picks, out=out)
        return
    block_stride, row_stride = run.stride(0), run.stride(1)
    g = math.gcd(block_stride if blocks > 1 else 0, row_stride if n_rows > 1 else 0) or 1
    last = ((blocks - 1) * block_stride + (n_rows - 1) * row_stride) // g
    rows = run.as_strided((last + 1, dim), (g, 1), run.storage_offset())
    where = (picks // n_rows) * (block_stride // g) + (picks % n_rows) * (row_stride // g)
    torch.index_select(rows, 0, where, out=out)


__all__ = ["block_run", "block_runs", "stack_blocks", "take_run_rows"]
