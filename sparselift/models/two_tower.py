"""A two-tower retrieval model: two separate embedding modules with mixed lookups.

It exercises what DLRM does not: two owners of embedding tables (``user.emb`` and
``item.emb``), mean pooling, a per_sample_weights feature, mixed dims (16 and 32), and a table
that is a raw ``nn.Parameter`` looked up with ``F.embedding_bag`` (``item.tag_weight``: no
EmbeddingBag module owns it, so ``nn_module_stack`` stops at the tower).

``forward(user_indices, user_offsets, user_weights, item_indices, item_offsets)`` takes per
feature 1-D ids and offsets (length B, no ``include_last_offset``), like the DLRM model, and
returns the dot-product logit ``[B]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["ITEM_FEATURES", "USER_FEATURES", "TwoTower", "build_two_tower", "example_inputs"]

# (name, rows, dim, mode, pooling, weighted)
USER_FEATURES: tuple[tuple[str, int, int, str, int, bool], ...] = (
    ("user_id", 100_000, 32, "sum", 1, False),
    ("watch_history", 500_000, 32, "mean", 20, False),
    ("interests", 2_000, 16, "sum", 5, True),  # ids weighted by affinity scores
)
ITEM_FEATURES: tuple[tuple[str, int, int, str, int, bool], ...] = (
    ("item_id", 500_000, 32, "sum", 1, False),
    ("category", 500, 16, "mean", 3, False),
    ("tags", 10_000, 16, "sum", 8, False),  # raw nn.Parameter + F.embedding_bag
)


def _rows(rows: int, rows_cap: int | None) -> int:
    return rows if rows_cap is None else min(rows, rows_cap)


def _emb_bag(rows: int, dim: int, mode: str, g: torch.Generator) -> nn.EmbeddingBag:
    bound = math.sqrt(1.0 / rows)
    w = torch.empty(rows, dim).uniform_(-bound, bound, generator=g)
    return nn.EmbeddingBag(rows, dim, mode=mode, _weight=w)


def _mlp(sizes: Sequence[int], g: torch.Generator) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (n, m) in enumerate(zip(sizes[:-1], sizes[1:])):
        lin = nn.Linear(n, m)
        with torch.no_grad():  # nn.Linear's default bounds, but from our seeded generator
            bound = 1.0 / math.sqrt(n)
            lin.weight.uniform_(-bound, bound, generator=g)
            lin.bias.uniform_(-bound, bound, generator=g)
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class UserTower(nn.Module):
    """EmbeddingBags for user features (the last one weighted) + MLP."""

    def __init__(self, rows_cap: int | None, g: torch.Generator) -> None:
        super().__init__()
        self.emb = nn.ModuleList(
            _emb_bag(_rows(rows, rows_cap), dim, mode, g) for _, rows, dim, mode, _, _ in USER_FEATURES
        )
        self.mlp = _mlp((sum(f[2] for f in USER_FEATURES), 64, 32), g)

    def forward(self, indices: list[Tensor], offsets: list[Tensor], weights: Tensor) -> Tensor:
        pooled = [
            emb(indices[k], offsets[k], per_sample_weights=weights if USER_FEATURES[k][5] else None)
            for k, emb in enumerate(self.emb)
        ]
        return self.mlp(torch.cat(pooled, dim=1))


class ItemTower(nn.Module):
    """EmbeddingBags for item features, one table held as a raw Parameter, + MLP."""

    def __init__(self, rows_cap: int | None, g: torch.Generator) -> None:
        super().__init__()
        *bag_features, (_, tag_rows, tag_dim, _, _, _) = ITEM_FEATURES
        self.emb = nn.ModuleList(
            _emb_bag(_rows(rows, rows_cap), dim, mode, g) for _, rows, dim, mode, _, _ in bag_features
        )
        tag_rows = _rows(tag_rows, rows_cap)
        bound = math.sqrt(1.0 / tag_rows)
        self.tag_weight = nn.Parameter(torch.empty(tag_rows, tag_dim).uniform_(-bound, bound, generator=g))
        self.mlp = _mlp((sum(f[2] for f in ITEM_FEATURES), 64, 32), g)

    def forward(self, indices: list[Tensor], offsets: list[Tensor]) -> Tensor:
        pooled = [emb(indices[k], offsets[k]) for k, emb in enumerate(self.emb)]
        k = len(self.emb)
        pooled.append(F.embedding_bag(indices[k], self.tag_weight, offsets[k], mode="sum"))
        return self.mlp(torch.cat(pooled, dim=1))


class TwoTower(nn.Module):
    """User tower . item tower -> logit ``[B]``."""

    def __init__(self, rows_cap: int | None = None, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.user = UserTower(rows_cap, g)
        self.item = ItemTower(rows_cap, g)

    def forward(
        self,
        user_indices: list[Tensor],
        user_offsets: list[Tensor],
        user_weights: Tensor,
        item_indices: list[Tensor],
        item_offsets: list[Tensor],
    ) -> Tensor:
        u = self.user(user_indices, user_offsets, user_weights)
        v = self.item(item_indices, item_offsets)
        return (u * v).sum(dim=1)


def _features(
    features: Sequence[tuple[str, int, int, str, int, bool]],
    rows_cap: int | None,
    batch_size: int,
    g: torch.Generator,
) -> tuple[list[Tensor], list[Tensor], Tensor | None]:
    indices, offsets, weights = [], [], None
    for _, rows, _, _, pooling, weighted in features:
        rows = _rows(rows, rows_cap)
        lengths = torch.randint(1, pooling + 1, (batch_size,), generator=g)
        total = int(lengths.sum())
        indices.append(torch.randint(0, rows, (total,), generator=g))
        offsets.append(torch.cumsum(lengths, 0) - lengths)
        if weighted:
            weights = torch.rand(total, generator=g)
    return indices, offsets, weights


def example_inputs(
    batch_size: int = 128, rows_cap: int | None = None, seed: int = 0
) -> tuple[list[Tensor], list[Tensor], Tensor, list[Tensor], list[Tensor]]:
    """``(user_indices, user_offsets, user_weights, item_indices, item_offsets)``."""
    g = torch.Generator().manual_seed(seed + 1)
    ui, uo, uw = _features(USER_FEATURES, rows_cap, batch_size, g)
    ii, io, _ = _features(ITEM_FEATURES, rows_cap, batch_size, g)
    assert uw is not None
    return ui, uo, uw, ii, io


def build_two_tower(rows_cap: int | None = None, seed: int = 0, batch_size: int = 128) -> tuple[TwoTower, tuple]:
    """Build a seeded :class:`TwoTower` and example inputs for it."""
    return TwoTower(rows_cap, seed), example_inputs(batch_size, rows_cap, seed)
