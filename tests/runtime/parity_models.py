"""Extra models for parity tests: int32 ids and empty bags (importable by spawned ranks)."""

from __future__ import annotations

import torch
from torch import nn


class SmallModel(nn.Module):
    def __init__(self, rows=(50, 80, 30), dims=(8, 8, 4)):
        super().__init__()
        self.emb = nn.ModuleList(nn.EmbeddingBag(r, d, mode="sum") for r, d in zip(rows, dims))
        self.top = nn.Linear(sum(dims) + 3, 1)

    def forward(self, dense, ids, offsets):
        pooled = [e(i, o) for e, i, o in zip(self.emb, ids, offsets)]
        return self.top(torch.cat([dense, *pooled], dim=1))


def _batch(batch_size: int, seed: int, id_dtype: torch.dtype, empty_first_bag: bool, one_hot: bool = False):
    torch.manual_seed(0)  # same weights whatever the data seed
    model = SmallModel()
    g = torch.Generator().manual_seed(seed)
    ids, offsets = [], []
    for e in model.emb:
        lengths = torch.randint(0, 4, (batch_size,), generator=g)
        if one_hot:
            lengths = torch.ones(batch_size, dtype=torch.int64)
        if empty_first_bag:
            lengths[0] = 0
            lengths[1] = max(int(lengths[1]), 1)
        ids.append(torch.randint(0, e.num_embeddings, (int(lengths.sum()),), generator=g, dtype=id_dtype))
        offsets.append((lengths.cumsum(0) - lengths).to(id_dtype))  # B bag starts (none for an empty batch)
    return model, (torch.randn(batch_size, 3, generator=g), ids, offsets)


def any_batch(rows_cap=None, batch_size=8, seed=0):
    """int64 ids, bags of 0-3 ids, a local batch of any size, empty included."""
    return _batch(batch_size, seed, torch.int64, empty_first_bag=False)


def int32_empty_bags(rows_cap=None, batch_size=8, seed=0):
    """int32 ids and offsets, with some empty bags in every feature."""
    return _batch(batch_size, seed, torch.int32, empty_first_bag=True)


def one_hot_mostly(rows_cap=None, batch_size=8, seed=0):
    """One id per bag, except on rank 0 at odd steps (bags of 0-3 ids). With the parity runs'
    seeds (1000 + 17 * step + rank): at even steps every rank is one-hot (the lengths exchange is
    skipped), at odd steps one rank is not (it is not skipped)."""
    step, rank = divmod(seed - 1000, 17)
    multi = seed >= 1000 and step % 2 == 1 and rank == 0
    return _batch(batch_size, seed, torch.int64, empty_first_bag=False, one_hot=not multi)


def small_kaggle(passes: str, cache: str, **options):
    """Criteo Kaggle's DLRM, rows capped at 5,000 (a table-wise and a replicated group), batch 16,
    compiled with exactly `passes` (no planner); `options`: more `CompileOptions` fields."""
    import sparselift
    from sparselift.models.registry import build

    torch.manual_seed(0)
    model, example = build("dlrm-kaggle", rows_cap=5000, batch_size=16, seed=0)
    options = sparselift.CompileOptions(passes=passes, plan="none", cache_dir=cache, **options)
    return sparselift.compile(model, example, sharding="auto", options=options)


def count_calls(owner, name: str) -> list[int]:
    """Count the calls of `owner.name` from now on (in this process only: a spawned rank)."""
    calls = [0]
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    setattr(owner, name, counted)
    return calls
