"""Unpooled lookups (`nn.Embedding`, `F.embedding`) and `padding_idx`: how they export, what the
regions compute against PyTorch, and the models refused with a clear error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sparselift.codegen.table_facts import describe_features, describe_tables, group_names
from sparselift.frontend.errors import ExportError
from sparselift.frontend.export import export
from sparselift.frontend.program import drop_padding, position_features

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from parity_models import sequence_model  # noqa: E402
from test_export import run_regions  # noqa: E402


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_dropping_padding_ids_pools_as_pytorch_does(mode):
    g = torch.Generator().manual_seed(0)
    table = torch.randn(10, 3, generator=g)
    ids = torch.tensor([2, 2, 5, 2, 2, 7, 2, 1])  # bag 1 all padding, bag 2 empty
    offsets = torch.tensor([0, 3, 5, 5, 8])
    weights = torch.rand(8, generator=g) if mode == "sum" else None
    expected = F.embedding_bag(
        ids, table, offsets, mode=mode, per_sample_weights=weights, include_last_offset=True, padding_idx=2
    )
    kept_ids, kept_offsets, kept_weights = drop_padding(ids, offsets, weights, 2)
    assert kept_offsets.tolist() == [0, 1, 1, 1, 3]
    got = F.embedding_bag(
        kept_ids, table, kept_offsets, mode=mode, per_sample_weights=kept_weights, include_last_offset=True
    )
    torch.testing.assert_close(got, expected)


def test_position_features_hold_one_id_per_bag_and_none_for_padding():
    hist = torch.tensor([[4, 0, 6], [0, 0, 0], [1, 2, 3]])
    features = position_features(hist, 3, padding_idx=0)
    assert [f[0].tolist() for f in features] == [[4, 1], [2], [6, 3]]
    assert [f[1].tolist() for f in features] == [[0, 1, 1, 2], [0, 0, 0, 1], [0, 1, 1, 2]]
    plain = position_features(hist, 3, padding_idx=None)
    assert [f[0].tolist() for f in plain] == [[4, 0, 1], [0, 0, 2], [6, 0, 3]]
    assert all(f[1].tolist() == [0, 1, 2, 3] for f in plain)


def test_sequence_model_exports_one_feature_per_position_in_its_own_groups():
    model, inputs = sequence_model(batch_size=8, seed=3)
    program = export(model, inputs, world_size=2, sharding="table_wise")
    tables = {t.name: t for t in describe_tables(program.module)}
    assert {n: t.pooling for n, t in tables.items()} == {"item": "none", "cat": "none", "user": "sum", "tags": "mean"}
    features = [f.name for f in describe_features(program.module) if f.table == "item"]
    assert features == ["hist[0]", "hist[1]", "hist[2]", "hist[3]", "target"]  # one table, two lookups
    assert len(group_names(program.module)) == 4
    # The regions and one-id bags recompute the model exactly (padding positions: zero rows).
    expected = model(*inputs)
    (got,) = run_regions(program, model, inputs)
    torch.testing.assert_close(got, expected)


class _Shapes(nn.Module):
    """`F.embedding` on ids of shape [B, 2, 3] and on [B] ids of the same table."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(20, 4))

    def forward(self, grid, single):
        a = F.embedding(grid, self.table)  # [B, 2, 3, 4]
        b = F.embedding(single, self.table)  # [B, 4]
        return (a.sum((1, 2)) * b).sum(1) + a[:, 1, 2, 0]


def test_functional_lookup_on_a_grid_of_ids_keeps_its_shape():
    model = _Shapes()
    inputs = (torch.randint(0, 20, (5, 2, 3)), torch.randint(0, 20, (5,)))
    program = export(model, inputs, world_size=1)
    assert len(describe_features(program.module)) == 7
    (got,) = run_regions(program, model, inputs)
    torch.testing.assert_close(got, model(*inputs))


class _Jagged(nn.Module):
    def __init__(self):
        super().__init__()
        self.item = nn.Embedding(10, 4)
        self.user = nn.EmbeddingBag(10, 4)

    def forward(self, values, user, offsets):
        return self.item(values).sum() + self.user(user, offsets).sum()


class _UnevenPooled(nn.Module):
    """Two pooled features of different batches, and an unpooled one agreeing with the first."""

    def __init__(self):
        super().__init__()
        self.item = nn.Embedding(10, 4)
        self.a = nn.EmbeddingBag(10, 4)
        self.b = nn.EmbeddingBag(10, 4)

    def forward(self, items, ids_a, offs_a, ids_b, offs_b):
        return self.item(items).sum() + self.a(ids_a, offs_a).sum() + self.b(ids_b, offs_b).sum()


class _MixedTable(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(10, 4))

    def forward(self, ids, offsets):
        return F.embedding(ids, self.table).sum(1) + F.embedding_bag(ids.reshape(-1), self.table, offsets)


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4, scale_grad_by_freq=True)

    def forward(self, ids):
        return self.emb(ids).sum(1)


class _NoIds(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.bag = nn.EmbeddingBag(10, 4)

    def forward(self, ids, bag_ids, offsets):
        return self.emb(ids).sum(1) + self.bag(bag_ids, offsets)


def _nonzero_padding_row():
    emb = nn.Embedding(10, 4, padding_idx=3)
    with torch.no_grad():
        emb.weight[3] = 1.0
    return emb


@pytest.mark.parametrize(
    "model, inputs, message",
    [
        (
            _Jagged(),
            (torch.arange(7) % 10, torch.arange(3), torch.arange(3)),
            "table 'item': its unpooled lookup reads 7 ids against a batch of 3 samples; jagged ids without pooling",
        ),
        (
            _UnevenPooled(),
            (
                torch.arange(3),
                torch.arange(6) % 10,
                torch.tensor([0, 2, 4]),
                torch.arange(6) % 10,
                torch.tensor([0, 3]),
            ),
            "the batch is not consistent across features",
        ),
        (
            _MixedTable(),
            (torch.arange(6).reshape(3, 2), torch.tensor([0, 2, 4])),
            "table 'table' is read with both unpooled lookups (nn.Embedding) and mean pooling",
        ),
        (_Scaled(), (torch.arange(6).reshape(3, 2),), "table 'emb.weight': scale_grad_by_freq is not supported"),
        (
            _nonzero_padding_row(),
            (torch.arange(6).reshape(3, 2),),
            "table 'weight': its padding row 3 is not zero",
        ),
        (
            _NoIds(),
            (torch.zeros(3, 0, dtype=torch.int64), torch.arange(3), torch.arange(3)),
            "0), with no id per sample",
        ),
    ],
    ids=["jagged-ids", "uneven-pooled", "pooled-and-unpooled", "scale-grad-by-freq", "nonzero-padding-row", "no-ids"],
)
def test_unsupported_unpooled_models_fail_clearly(model, inputs, message):
    with pytest.raises(ExportError, match=message.replace("(", r"\(").replace(")", r"\)")):
        export(model, inputs, world_size=2)
