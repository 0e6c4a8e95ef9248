"""A TorchRec example: unsharded ``EmbeddingBagCollection`` fed by a ``KeyedJaggedTensor``.

Tables (``ebc``): ``t_shared`` is one table looked up by two features (``f_a``, ``f_b``), so it
yields two embedding-bag lookups on one weight; ``t_c`` uses mean pooling; ``t_d`` has a
smaller dim. A second, weighted collection (``weighted_ebc``, ``is_weighted=True``) holds
``t_w`` for feature ``f_w``. Both collections read the same KJT, which carries weights for
every value (ones for the unweighted features; an unweighted EBC ignores them).

``forward(dense [B, 8], kjt) -> logits [B, 1]``.

torchrec is imported lazily (``import torchrec`` costs seconds): only building the model or its
inputs imports it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from torchrec import KeyedJaggedTensor

__all__ = [
    "DENSE_IN",
    "KEYS",
    "TABLES",
    "WEIGHTED_TABLES",
    "TorchRecEBCModel",
    "build_torchrec_ebc",
    "example_inputs",
]

DENSE_IN = 8
# (table name, rows, dim, pooling "SUM"|"MEAN", feature names, ids per bag)
TABLES: tuple[tuple[str, int, int, str, tuple[str, ...], int], ...] = (
    ("t_shared", 1000, 16, "SUM", ("f_a", "f_b"), 4),
    ("t_c", 500, 16, "MEAN", ("f_c",), 3),
    ("t_d", 200, 8, "SUM", ("f_d",), 2),
)
WEIGHTED_TABLES: tuple[tuple[str, int, int, str, tuple[str, ...], int], ...] = (("t_w", 300, 8, "SUM", ("f_w",), 5),)
KEYS: tuple[str, ...] = tuple(f for t in TABLES + WEIGHTED_TABLES for f in t[4])
_POOLING = {f: t[5] for t in TABLES + WEIGHTED_TABLES for f in t[4]}
_ROWS = {f: t[1] for t in TABLES + WEIGHTED_TABLES for f in t[4]}
_WEIGHTED_KEYS = {f for t in WEIGHTED_TABLES for f in t[4]}


def _configs(tables: tuple[tuple[str, int, int, str, tuple[str, ...], int], ...]) -> list[Any]:
    from torchrec import EmbeddingBagConfig, PoolingType

    return [
        EmbeddingBagConfig(
            name=name,
            num_embeddings=rows,
            embedding_dim=dim,
            feature_names=list(features),
            pooling=PoolingType[pooling],
        )
        for name, rows, dim, pooling, features, _ in tables
    ]


class TorchRecEBCModel(nn.Module):
    """Dense arch + two EBCs (plain and weighted) + over arch."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        from torchrec import EmbeddingBagCollection

        g = torch.Generator().manual_seed(seed)
        cpu = torch.device("cpu")
        self.ebc = EmbeddingBagCollection(tables=_configs(TABLES), device=cpu)
        self.weighted_ebc = EmbeddingBagCollection(tables=_configs(WEIGHTED_TABLES), is_weighted=True, device=cpu)
        self.dense_arch = nn.Sequential(nn.Linear(DENSE_IN, 32), nn.ReLU(), nn.Linear(32, 16))
        # One pooled vector per feature (f_a and f_b each get one from t_shared).
        sparse_out = sum(dim * len(features) for _, _, dim, _, features, _ in TABLES + WEIGHTED_TABLES)
        self.over_arch = nn.Sequential(nn.Linear(16 + sparse_out, 32), nn.ReLU(), nn.Linear(32, 1))
        # TorchRec initialises tables from the global RNG; re-init from our generator instead.
        with torch.no_grad():
            for name, p in self.named_parameters():
                if ".embedding_bags." in name:
                    bound = math.sqrt(1.0 / p.shape[0])
                    p.uniform_(-bound, bound, generator=g)
                else:
                    fan_in = p.shape[-1] if p.dim() > 1 else p.shape[0]
                    bound = 1.0 / math.sqrt(fan_in)
                    p.uniform_(-bound, bound, generator=g)

    def forward(self, dense: Tensor, kjt: KeyedJaggedTensor) -> Tensor:
        kt = self.ebc(kjt)
        wkt = self.weighted_ebc(kjt)
        return self.over_arch(torch.cat([self.dense_arch(dense), kt.values(), wkt.values()], dim=1))


def example_inputs(batch_size: int = 128, seed: int = 0) -> tuple[Tensor, KeyedJaggedTensor]:
    """``(dense [B, 8], kjt)``: every bag has 1..pooling ids (never empty, so the values
    length is >= 2 and can be marked dynamic without 0/1 specialization)."""
    from torchrec import KeyedJaggedTensor

    g = torch.Generator().manual_seed(seed + 1)
    dense = torch.rand(batch_size, DENSE_IN, generator=g)
    lengths, values, weights = [], [], []
    for key in KEYS:  # KJT layout: key-major, then batch
        lens = torch.randint(1, _POOLING[key] + 1, (batch_size,), generator=g)
        n = int(lens.sum())
        lengths.append(lens)
        values.append(torch.randint(0, _ROWS[key], (n,), generator=g))
        weights.append(torch.rand(n, generator=g) if key in _WEIGHTED_KEYS else torch.ones(n))
    kjt = KeyedJaggedTensor(
        keys=list(KEYS),
        values=torch.cat(values),
        lengths=torch.cat(lengths),
        weights=torch.cat(weights),
    )
    return dense, kjt


def build_torchrec_ebc(seed: int = 0, batch_size: int = 128) -> tuple[TorchRecEBCModel, tuple]:
    """Build a seeded :class:`TorchRecEBCModel` and example ``(dense, kjt)`` inputs."""
    return TorchRecEBCModel(seed), example_inputs(batch_size, seed)
