"""Tests for the synthetic Criteo-shaped generator and the Batch record."""

import time

import numpy as np
import pytest
import torch

from sparselift.data import (
    DLRM_V2_POOLING,
    KAGGLE_CARDINALITIES,
    TERABYTE_CARDINALITIES,
    Batch,
    SyntheticConfig,
    SyntheticCriteo,
    zipf_ranks,
)


def roc_auc(scores, labels) -> float:
    """Rank-based (Mann-Whitney) AUC with average ranks for ties."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels) > 0.5
    order = np.argsort(s, kind="mergesort")
    _, inv, counts = np.unique(s[order], return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    avg_rank = (ends - counts + 1 + ends) / 2.0  # 1-based average rank of each tie group
    ranks = np.empty(len(s))
    ranks[order] = avg_rank[inv]
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def test_roc_auc_helper():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([1, 1, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.5)
    assert roc_auc([3, 2, 1], [0, 1, 1]) == pytest.approx(0.0)


def test_constants():
    assert len(KAGGLE_CARDINALITIES) == len(TERABYTE_CARDINALITIES) == len(DLRM_V2_POOLING) == 26
    assert KAGGLE_CARDINALITIES[2] == 10131227 and TERABYTE_CARDINALITIES[19] == 48937457
    assert sum(DLRM_V2_POOLING) == 214


def test_shapes_dtypes_and_ranges():
    g = SyntheticCriteo(SyntheticConfig(seed=1))
    b = g.global_batch(0, 512)
    assert b.batch_size == 512 and b.num_sparse == 26 and b.num_dense == 13
    assert b.dense.shape == (512, 13) and b.dense.dtype == torch.float32
    assert b.labels.shape == (512,) and b.labels.dtype == torch.float32
    assert set(b.labels.unique().tolist()) <= {0.0, 1.0}
    assert bool((b.dense >= 0).all()) and bool(torch.isfinite(b.dense).all())
    assert bool((b.dense == 0).any())  # Criteo-like: plenty of zero counts
    b.validate(KAGGLE_CARDINALITIES)
    for ids, offsets in b.sparse:
        assert ids.dtype == offsets.dtype == torch.int64
        assert torch.equal(offsets, torch.arange(513))  # one-hot
    assert b.keys == tuple(f"cat_{i}" for i in range(26))


@pytest.mark.parametrize(
    "cfg",
    [
        SyntheticConfig(cardinalities=TERABYTE_CARDINALITIES, seed=2),
        SyntheticConfig(rows_cap=777, seed=3),
        SyntheticConfig(rows_cap=5000, zipf_alpha=0.0, pooling=DLRM_V2_POOLING, seed=4),
        SyntheticConfig(rows_cap=1, seed=5),
    ],
)
def test_ids_within_table(cfg):
    g = SyntheticCriteo(cfg)
    b = g.global_batch(3, 1024)
    b.validate(cfg.table_rows)
    for f, (ids, _) in enumerate(b.sparse):
        assert 0 <= int(ids.min()) and int(ids.max()) < cfg.table_rows[f]
    if cfg.rows_cap is not None:
        assert max(cfg.table_rows) <= cfg.rows_cap


def test_small_tables_fully_covered():
    # The affine permutation is a bijection: every row of a tiny table gets used.
    g = SyntheticCriteo(SyntheticConfig(zipf_alpha=0.0, seed=6))
    b = g.global_batch(0, 4096)
    for f in (8, 19, 16):  # cardinalities 3, 4, 10
        assert b.sparse[f][0].unique().numel() == KAGGLE_CARDINALITIES[f]


def test_determinism_and_seed():
    a = SyntheticCriteo(SyntheticConfig(seed=7)).global_batch(2, 256)
    b = SyntheticCriteo(SyntheticConfig(seed=7)).global_batch(2, 256)
    c = SyntheticCriteo(SyntheticConfig(seed=8)).global_batch(2, 256)
    assert a.equal(b)
    assert not a.equal(c)
    assert not torch.equal(a.dense, c.dense) and not torch.equal(a.sparse[2][0], c.sparse[2][0])


def test_train_and_eval_streams_differ():
    g = SyntheticCriteo(SyntheticConfig(seed=9))
    tr = g.global_batch(0, 256, split="train")
    ev = g.global_batch(0, 256, split="eval")
    assert not torch.equal(tr.dense, ev.dense)
    assert not torch.equal(tr.sparse[2][0], ev.sparse[2][0])
    with pytest.raises(ValueError):
        g.global_batch(0, 8, split="test")


@pytest.mark.parametrize("pooling", ["one-hot", DLRM_V2_POOLING])
@pytest.mark.parametrize("world_size", [2, 3])
def test_rank_slices_union_is_global_batch(pooling, world_size):
    g = SyntheticCriteo(SyntheticConfig(pooling=pooling, seed=10, rows_cap=100_000))
    local, steps = 64, 3
    per_rank = [list(g.batches(local, steps, rank=r, world_size=world_size)) for r in range(world_size)]
    for step in range(steps):
        union = Batch.concat([per_rank[r][step] for r in range(world_size)])
        ref = g.global_batch(step, local * world_size)
        assert union.equal(ref)
        # Ranks hold disjoint samples (dense rows differ pairwise).
        assert not torch.equal(per_rank[0][step].dense, per_rank[1][step].dense)


def test_random_access_and_start_step():
    g = SyntheticCriteo(SyntheticConfig(seed=11, pooling=DLRM_V2_POOLING, rows_cap=1000))
    stream = list(g.batches(32, 6))
    assert stream[5].equal(g.global_batch(5, 32))
    assert next(g.batches(32, 1, start_step=4)).equal(stream[4])
    # Samples do not depend on how the stream is cut: two batches of 32 == one of 64.
    assert Batch.concat(stream[2:4]).equal(g.global_batch(1, 64))


def test_zipf_skew():
    n = 10_000
    counts_skew = np.bincount(zipf_ranks(np.random.default_rng(0).random(200_000), n, 1.05), minlength=n)
    counts_flat = np.bincount(zipf_ranks(np.random.default_rng(0).random(200_000), n, 0.0), minlength=n)
    top = n // 100

    def top_share(c):
        return np.sort(c)[::-1][:top].sum() / c.sum()

    assert top_share(counts_skew) > 0.45
    assert top_share(counts_flat) < 0.02
    assert counts_skew[0] > counts_skew[10] > counts_skew[1000]

    # Generated ids of a 10M-row table: skewed, and the hot ids are not the first rows.
    g = SyntheticCriteo(SyntheticConfig(seed=12))
    ids = torch.cat([g.global_batch(i, 4096).sparse[2][0] for i in range(4)]).numpy()
    _, c = np.unique(ids, return_counts=True)
    assert c.max() / len(ids) > 0.03  # the hottest row alone gets ~6% of lookups
    assert len(c) < 0.5 * len(ids)  # heavy reuse although the table has 10M rows
    # Top 1% of a 10M table (the 101k hottest ranks) carry ~79% of the mass.
    u = np.random.default_rng(1).random(100_000)
    assert np.mean(zipf_ranks(u, KAGGLE_CARDINALITIES[2], 1.05) < KAGGLE_CARDINALITIES[2] // 100) > 0.7

    # alpha = 0 is uniform over the table.
    g0 = SyntheticCriteo(SyntheticConfig(seed=12, zipf_alpha=0.0, rows_cap=1000))
    ids0 = torch.cat([g0.global_batch(i, 4096).sparse[0][0] for i in range(5)]).numpy()
    c0 = np.bincount(ids0, minlength=1000)
    assert c0.min() > 0 and c0.max() < 2.5 * c0.mean()


@pytest.mark.parametrize("allow_empty", [False, True])
def test_multi_hot_pooling(allow_empty):
    cfg = SyntheticConfig(pooling=DLRM_V2_POOLING, rows_cap=100_000, allow_empty_bags=allow_empty, seed=13)
    b = SyntheticCriteo(cfg).global_batch(0, 4096)
    b.validate(cfg.table_rows)
    saw_empty = False
    for f, mean in enumerate(DLRM_V2_POOLING):
        lengths = b.lengths(f).double()
        assert lengths.mean().item() == pytest.approx(mean, rel=0.08, abs=0.05)
        saw_empty |= bool((lengths == 0).any())
        if not allow_empty:
            assert lengths.min().item() >= 1
        if mean == 1 and not allow_empty:
            assert bool((lengths == 1).all())
    assert saw_empty == allow_empty
    assert b.lengths(20).double().std().item() > 5  # Poisson spread around 100

    fixed = SyntheticConfig(pooling=[4] * 26, pooling_dist="fixed", rows_cap=50, seed=13)
    bf = SyntheticCriteo(fixed).global_batch(0, 64)
    assert all(bool((bf.lengths(f) == 4).all()) for f in range(26))


def test_config_validation():
    with pytest.raises(ValueError):
        SyntheticConfig(pooling=[1, 2])  # wrong length
    with pytest.raises(ValueError):
        SyntheticConfig(pooling=[0.5] * 26)  # zero-length bags not enabled
    SyntheticConfig(pooling=[0.5] * 26, allow_empty_bags=True)
    with pytest.raises(ValueError):
        SyntheticConfig(pooling="two-hot")
    with pytest.raises(ValueError):
        SyntheticConfig(rows_cap=0)
    with pytest.raises(ValueError):
        SyntheticConfig(zipf_alpha=-1.0)
    assert SyntheticConfig(pooling=list(DLRM_V2_POOLING)) == SyntheticConfig(pooling=DLRM_V2_POOLING)


def test_kjt_parts_and_batch_helpers():
    g = SyntheticCriteo(SyntheticConfig(pooling=DLRM_V2_POOLING, rows_cap=1000, seed=14))
    b = g.global_batch(0, 16)
    keys, values, lengths = b.as_kjt_parts()
    assert keys == [f"cat_{i}" for i in range(26)]
    assert values.dtype == lengths.dtype == torch.int64
    assert lengths.shape == (26 * 16,)
    assert int(lengths.sum()) == values.numel()
    # Feature-major layout: feature 1's lengths follow all 16 of feature 0's.
    assert torch.equal(lengths[16:32], b.lengths(1))
    assert torch.equal(values[: b.sparse[0][0].numel()], b.sparse[0][0])
    moved = b.to("cpu")
    assert moved.equal(b) and moved.batch_size == 16
    with pytest.raises(ValueError):
        Batch(dense=b.dense, sparse=b.sparse, labels=b.labels[:3])


def test_generation_speed():
    g = SyntheticCriteo(SyntheticConfig(seed=15))
    g.global_batch(0, 2048)  # warm-up
    best = min(_timed(lambda i=i: g.global_batch(i, 2048)) for i in range(5))
    assert best < 0.05, f"2048-sample Kaggle batch took {best * 1e3:.1f} ms"


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def test_oracle_logits_reproduce_labels_distribution():
    g = SyntheticCriteo(SyntheticConfig(seed=16))
    b = g.samples(0, 50_000, split="eval")
    logits = g.logits(b)
    auc = roc_auc(logits.numpy(), b.labels.numpy())
    assert 0.76 < auc < 0.84  # oracle AUC ~0.80 by construction
    # Calibration: mean predicted CTR matches the empirical CTR.
    assert torch.sigmoid(logits).mean().item() == pytest.approx(b.labels.mean().item(), abs=0.01)
    assert 0.15 < b.labels.mean().item() < 0.35


def test_planted_signal_is_learnable():
    torch.manual_seed(0)
    cfg = SyntheticConfig(rows_cap=1000, seed=17)
    g = SyntheticCriteo(cfg)
    rows = torch.tensor(cfg.table_rows)
    base = torch.cumsum(rows, 0) - rows  # row offset of each feature in one stacked table
    nf = cfg.num_sparse
    emb = torch.nn.EmbeddingBag(int(rows.sum()), 1, mode="mean")
    torch.nn.init.zeros_(emb.weight)
    lin = torch.nn.Linear(cfg.num_dense, 1)
    opt = torch.optim.Adam([*emb.parameters(), *lin.parameters()], lr=0.05)

    def forward(b: Batch) -> torch.Tensor:
        _, values, lengths = b.as_kjt_parts()
        shift = base.repeat_interleave(lengths.view(nf, -1).sum(1))
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
        pooled = emb(values + shift, offsets).view(nf, b.batch_size).sum(0)
        return pooled + lin(b.dense).squeeze(1)

    for b in g.batches(1024, 150):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(forward(b), b.labels)
        opt.zero_grad()
        loss.backward()
        opt.step()

    ev = g.samples(0, 16_384, split="eval")
    with torch.no_grad():
        auc = roc_auc(forward(ev).numpy(), ev.labels.numpy())
    oracle = roc_auc(g.logits(ev).numpy(), ev.labels.numpy())
    assert oracle > 0.7
    assert auc > 0.65, f"learned AUC {auc:.3f} (oracle {oracle:.3f})"
