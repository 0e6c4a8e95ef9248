"""A DIN-style sequence model (Deep Interest Network, Zhou et al., KDD'18) in plain PyTorch.

The model behind `sparselift bench seq`. A user's history of up to ``max_history`` items (padded
with id 0) and a target item are looked up in one item table (``self.item``, shared by the
history and the target) and one category table (``self.cat``, likewise), both
``nn.Embedding(..., padding_idx=0)``: unpooled lookups. The user's id bag is pooled by
``nn.EmbeddingBag(mode="sum")`` (``self.user``). The dense part (:class:`DINDense`) is DIN's
local activation unit: per history position an MLP scores ``[hist, target, hist - target,
hist * target]``; the scores, masked by ``history_items != 0``, weight the sum of the history
embeddings (DIN's unnormalized attention); the user's interest, the target and the user vector
go through the top MLP to one logit.

``forward(history_items [B, L], history_cats [B, L], target_item [B], target_cat [B],
user_ids [N], user_offsets [B]) -> logits [B]``: ``user_offsets`` are the bags' starts (the DLRM
reference's convention, no ``include_last_offset``).

Tables are drawn by :mod:`sparselift.init` (chunked, seeded by table name), so a model built on
the meta device materializes any shard with the same values as the whole table (``table_init``),
and every benchmarked system starts from the same weights.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import Tensor, nn

from sparselift.init import fill_rows
from sparselift.models.two_tower import _mlp

__all__ = ["DIN", "DINConfig", "DINDense", "build_din"]


@attrs.frozen
class DINConfig:
    """Shape of a DIN model (the real sizes by default; ``rows_cap`` caps every table's rows)."""

    name: str = "din"
    item_rows: int = 1_000_000
    item_dim: int = 64
    cat_rows: int = 1_000
    cat_dim: int = 16
    user_rows: int = 1_000_000
    user_dim: int = 32
    user_bag: float = 4.0  # mean ids per user bag
    max_history: int = 50
    mean_history: float = 30.0
    attention_mlp: tuple[int, ...] = attrs.field(default=(80, 40), converter=tuple)
    top_mlp: tuple[int, ...] = attrs.field(default=(200, 80), converter=tuple)
    rows_cap: int | None = None
    seed: int = 0
    init_bound: float = 0.05  # tables ~ U(-bound, bound), the padding row 0
    sparse: bool = False  # sparse gradients for the tables (the plain baseline's SGD)

    def __attrs_post_init__(self) -> None:
        if min(self.item_rows, self.cat_rows, self.user_rows) < 2:
            raise ValueError(f"{self.name}: every table needs at least 2 rows (row 0 is padding)")
        if self.rows_cap is not None and self.rows_cap < 2:
            raise ValueError(f"{self.name}: rows_cap must be >= 2 or None")
        if not 1 <= self.mean_history <= self.max_history:
            raise ValueError(f"{self.name}: mean_history must lie in [1, max_history={self.max_history}]")
        if self.user_bag < 1:
            raise ValueError(f"{self.name}: user_bag (mean ids per user bag) must be >= 1")

    def _cap(self, rows: int) -> int:
        return rows if self.rows_cap is None else min(rows, self.rows_cap)

    @property
    def num_item_rows(self) -> int:
        return self._cap(self.item_rows)

    @property
    def num_cat_rows(self) -> int:
        return self._cap(self.cat_rows)

    @property
    def num_user_rows(self) -> int:
        return self._cap(self.user_rows)

    @property
    def tables(self) -> dict[str, tuple[int, int]]:
        """Table name (the model's module name) -> (rows after the cap, dim)."""
        return {
            "item": (self.num_item_rows, self.item_dim),
            "cat": (self.num_cat_rows, self.cat_dim),
            "user": (self.num_user_rows, self.user_dim),
        }

    @property
    def embed_dim(self) -> int:
        """Width of one history position (and of the target): item + category."""
        return self.item_dim + self.cat_dim


class DINDense(nn.Module):
    """DIN's dense part with the embeddings given: attention over the history, then the top MLP.

    ``forward(hist [B, L, E], mask [B, L], target [B, E], user [B, U]) -> logits [B]``; every
    system (plain DIN, the baseline, TorchRec, the dense-only floor) runs this same module.
    """

    def __init__(self, config: DINConfig, g: torch.Generator) -> None:
        super().__init__()
        e = config.embed_dim
        self.attention = _mlp((4 * e, *config.attention_mlp, 1), g)
        self.top = _mlp((2 * e + config.user_dim, *config.top_mlp, 1), g)

    def forward(self, hist: Tensor, mask: Tensor, target: Tensor, user: Tensor) -> Tensor:
        t = target.unsqueeze(1).expand_as(hist)
        scores = self.attention(torch.cat([hist, t, hist - t, hist * t], dim=-1)).squeeze(-1)
        weights = scores * mask.to(scores.dtype)
        interest = (weights.unsqueeze(-1) * hist).sum(dim=1)
        return self.top(torch.cat([interest, target, user], dim=1)).squeeze(-1)


class DIN(nn.Module):
    """The DIN model (see the module docstring); ``device="meta"`` puts the tables on the meta
    device (the dense part stays on the CPU) for ``CompileOptions(table_init=model.table_init)``."""

    def __init__(self, config: DINConfig, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.config = config
        rows = config.tables
        w = {name: torch.empty(n, d, device=device) for name, (n, d) in rows.items()}
        for name, t in w.items():
            if t.device.type != "meta":
                self.init_table(name, t, 0)
        sparse = config.sparse
        self.item = nn.Embedding(*rows["item"], padding_idx=0, sparse=sparse, _weight=w["item"])
        self.cat = nn.Embedding(*rows["cat"], padding_idx=0, sparse=sparse, _weight=w["cat"])
        self.user = nn.EmbeddingBag(*rows["user"], mode="sum", sparse=sparse, _weight=w["user"])
        self.dense = DINDense(config, torch.Generator().manual_seed(config.seed))

    def init_table(self, name: str, shard: Tensor, row_offset: int) -> Tensor:
        """Fill rows ``row_offset ..`` of table ``name`` ("item", "cat", "user") with its seeded values."""
        if name not in self.config.tables:
            raise KeyError(f"DIN has no table '{name}' (its tables are {', '.join(self.config.tables)})")
        bound = self.config.init_bound
        fill_rows(shard, row_offset, lambda t: nn.init.uniform_(t, -bound, bound), seed=self.config.seed, table=name)
        if name != "user" and row_offset == 0 and shard.shape[0]:
            with torch.no_grad():
                shard[0].zero_()  # padding_idx=0
        return shard

    def table_init(self, name: str, shard: Tensor, row_offset: int) -> None:
        """``CompileOptions(table_init=...)`` for a meta-device DIN."""
        self.init_table(name, shard, row_offset)

    def forward(
        self,
        history_items: Tensor,
        history_cats: Tensor,
        target_item: Tensor,
        target_cat: Tensor,
        user_ids: Tensor,
        user_offsets: Tensor,
    ) -> Tensor:
        hist = torch.cat([self.item(history_items), self.cat(history_cats)], dim=-1)
        target = torch.cat([self.item(target_item), self.cat(target_cat)], dim=-1)
        user = self.user(user_ids, user_offsets)
        return self.dense(hist, history_items != 0, target, user)


def build_din(
    config: DINConfig | None = None,
    *,
    rows_cap: int | None = None,
    seed: int = 0,
    batch_size: int = 128,
    device: str | torch.device = "cpu",
) -> tuple[DIN, tuple[Tensor, ...]]:
    """A seeded :class:`DIN` (``config`` defaults to the real sizes, capped by ``rows_cap``) and
    an example batch of ``batch_size`` from the synthetic DIN stream (:mod:`sparselift.data.din_synthetic`)."""
    from sparselift.data.din_synthetic import DINSynthetic

    capped: dict[str, Any] = {"rows_cap": rows_cap} if rows_cap else {}
    config = attrs.evolve(config or DINConfig(), seed=seed, **capped)
    model = DIN(config, device=device)
    return model, DINSynthetic.for_model(config, seed=seed).samples(0, batch_size).inputs()
