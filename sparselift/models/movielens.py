"""Two CTR models for MovieLens-100k (`sparselift.data.movielens`), written as a TorchRec user
writes them: TorchRec embedding modules fed by `KeyedJaggedTensor`s, so one definition trains
in one process (plain PyTorch), under TorchRec's `DistributedModelParallel`, and compiled by
SparseLift.

- `MovieLensDLRM`: every feature pooled by an `EmbeddingBagCollection` (the history and the
  genres as mean-pooled bags; the history reads the item table), the pooled vectors and their
  pairwise dot products into an MLP: DLRM's shape.
- `MovieLensDIN`: the history kept unpooled by an `EmbeddingCollection` (one item table read by
  the history and the target) and weighed by target attention, DIN's shape; the other features
  pooled as above.

Both take `(pooled, sequence)` KJTs (`kjt_inputs`) and return logits `[B]`. torchrec is imported
lazily: only building a model or its inputs imports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from torchrec import KeyedJaggedTensor

    from sparselift.data.movielens import MovieLensSplit

__all__ = ["MODELS", "MovieLensConfig", "MovieLensDIN", "MovieLensDLRM", "build", "kjt_inputs", "table_parameters"]

# The features pooled by the EBC, in its key order (`history` reads the item table).
POOLED = ("user", "item", "age", "gender", "occupation", "zip", "genres", "history")
# The DIN model's unpooled features (one item table) and its pooled ones.
SEQUENCE = ("hist", "target")
DIN_POOLED = ("user", "age", "gender", "occupation", "zip", "genres")


@attrs.frozen
class MovieLensConfig:
    """Table sizes (`MovieLens.cardinalities`) and widths."""

    cardinalities: Mapping[str, int]
    dim: int = 16
    max_history: int = 20
    hidden: int = 64


def _bag_configs(features: tuple[str, ...], cfg: MovieLensConfig) -> list[Any]:
    """One table per feature, except `history`, which reads `item`'s; history and genres are
    averaged (a user's taste, a film's genre mix), single ids summed."""
    from torchrec import EmbeddingBagConfig, PoolingType

    tables = []
    for name in features:
        if name == "history":
            continue
        names = [name, "history"] if name == "item" and "history" in features else [name]
        mean = name in ("item", "genres")
        tables.append(
            EmbeddingBagConfig(
                name=name,
                num_embeddings=int(cfg.cardinalities[name]),
                embedding_dim=cfg.dim,
                feature_names=names,
                pooling=PoolingType.MEAN if mean else PoolingType.SUM,
            )
        )
    return tables


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _seed_parameters(module: nn.Module, seed: int) -> None:
    """Every parameter drawn from one seeded generator (TorchRec draws tables from the global
    RNG): tables U(±sqrt(1/rows)), linear layers U(±1/sqrt(fan_in))."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            fan = p.shape[0] if ".embedding" in name else (p.shape[-1] if p.dim() > 1 else p.shape[0])
            bound = math.sqrt(1.0 / fan)
            p.uniform_(-bound, bound, generator=g)


class MovieLensDLRM(nn.Module):
    """Pooled features, their pairwise dot products, an MLP: logits `[B]`."""

    POOLED_KEYS = POOLED  # the pooled KJT's keys (`kjt_inputs`)

    def __init__(self, cfg: MovieLensConfig, seed: int = 0) -> None:
        super().__init__()
        from torchrec import EmbeddingBagCollection

        self.ebc = EmbeddingBagCollection(tables=_bag_configs(POOLED, cfg), device=torch.device("cpu"))
        n = len(POOLED)
        self.top = _mlp([n * cfg.dim + n * (n - 1) // 2, cfg.hidden, cfg.hidden // 2, 1])
        self.dim = cfg.dim
        self.register_buffer("pairs", torch.triu_indices(n, n, offset=1), persistent=False)
        _seed_parameters(self, seed)

    def forward(self, pooled: KeyedJaggedTensor, sequence: KeyedJaggedTensor) -> Tensor:
        kt = self.ebc(pooled)
        x = kt.values().reshape(-1, len(POOLED), self.dim)  # [B, F, D], POOLED's order
        dots = torch.bmm(x, x.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x.flatten(1), dots], dim=1)).squeeze(1)


class MovieLensDIN(nn.Module):
    """The history unpooled, weighed by attention to the target item; pooled user and item
    features beside it: logits `[B]`."""

    POOLED_KEYS = DIN_POOLED

    def __init__(self, cfg: MovieLensConfig, seed: int = 0) -> None:
        super().__init__()
        from torchrec import EmbeddingBagCollection, EmbeddingCollection, EmbeddingConfig

        rows = int(cfg.cardinalities["item"])
        item = EmbeddingConfig(name="item", embedding_dim=cfg.dim, num_embeddings=rows, feature_names=list(SEQUENCE))
        self.ec = EmbeddingCollection(tables=[item], device=torch.device("cpu"))
        self.ebc = EmbeddingBagCollection(tables=_bag_configs(DIN_POOLED, cfg), device=torch.device("cpu"))
        d = cfg.dim
        self.attention = _mlp([4 * d, 32, 1])
        self.top = _mlp([(2 + len(DIN_POOLED)) * d, cfg.hidden, cfg.hidden // 2, 1])
        self.max_history = cfg.max_history
        _seed_parameters(self, seed)

    def forward(self, pooled: KeyedJaggedTensor, sequence: KeyedJaggedTensor) -> Tensor:
        out = self.ec(sequence)
        hist = out["hist"]
        h = hist.to_padded_dense(self.max_history)  # [B, L, D], zeros past each history
        target = out["target"].values()  # one id per sample: [B, D]
        t = target.unsqueeze(1).expand_as(h)
        weights = self.attention(torch.cat([h, t, h - t, h * t], dim=-1))  # [B, L, 1]
        mask = (torch.arange(self.max_history) < hist.lengths().unsqueeze(1)).unsqueeze(-1).to(h.dtype)
        interest = (torch.sigmoid(weights) * mask * h).sum(1)
        return self.top(torch.cat([interest, target, self.ebc(pooled).values()], dim=1)).squeeze(1)


MODELS = {"dlrm": MovieLensDLRM, "din": MovieLensDIN}


def build(name: str, cfg: MovieLensConfig, seed: int = 0) -> nn.Module:
    """The model `name` ("dlrm" or "din") over `cfg`'s tables, its parameters drawn from `seed`."""
    if name not in MODELS:
        raise ValueError(f"unknown MovieLens model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name](cfg, seed)


def kjt_inputs(
    split: MovieLensSplit, rows: Tensor | None = None, keys: tuple[str, ...] = POOLED
) -> tuple[KeyedJaggedTensor, KeyedJaggedTensor]:
    """The two KJTs of `split`'s rows `rows` (all when None): the pooled features `keys` (a
    model's `POOLED_KEYS`: one id each, genres and history as bags), and the sequence features
    (`hist`: the history, `target`: the item)."""
    from torchrec import KeyedJaggedTensor

    s = split if rows is None else split.select(rows)
    n = len(s)
    one = torch.ones(n, dtype=torch.int64)
    single = {k: getattr(s, k) for k in ("user", "item", "age", "gender", "occupation", "zip")}
    jagged = {"genres": (s.genres_lengths, s.genres), "history": (s.history_lengths, s.history)}
    lengths, values = [], []
    for key in keys:
        lens, vals = jagged[key] if key in jagged else (one, single[key])
        lengths.append(lens)
        values.append(vals)
    pooled = KeyedJaggedTensor(keys=list(keys), values=torch.cat(values), lengths=torch.cat(lengths))
    sequence = KeyedJaggedTensor(
        keys=list(SEQUENCE),
        values=torch.cat([s.history, s.item]),
        lengths=torch.cat([s.history_lengths, one]),
    )
    return pooled, sequence


def table_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The model's embedding tables by parameter name."""
    return {name: p for name, p in model.named_parameters() if ".embedding" in name}
