"""Extra models for parity tests: int32 ids and empty bags (importable by spawned ranks)."""

from __future__ import annotations

import torch
from torch import nn

# The parity tests' optimizers (kind, lr, eps) and the four optimizations as one pipeline.
SGD = ("sgd", 0.05, 0.0)
ADAGRAD = ("rowwise_adagrad", 0.1, 1e-8)
ALL_FOUR = "aggregate-comm,parallelize-tables{groups=2},generate-kernels,hide-latency"


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


class SequenceModel(nn.Module):
    """Unpooled lookups beside pooled ones, DIN-like: an item table read by a padded history
    `[B, L]` and by the target `[B]` (one table, two lookups), a category table read per
    history position, and pooled user bags (sum, and mean with a padding id)."""

    def __init__(self, items=60, cats=12, users=40, history=4):
        super().__init__()
        self.item = nn.Embedding(items, 8, padding_idx=0)
        self.cat = nn.Embedding(cats, 4, padding_idx=0)
        self.user = nn.EmbeddingBag(users, 6, mode="sum")
        self.tags = nn.EmbeddingBag(users, 4, mode="mean", padding_idx=1)
        self.score = nn.Linear(8 + 4, 1)
        self.top = nn.Linear(8 + 4 + 8 + 6 + 4, 1)
        self.history = history

    def forward(self, hist, hist_cat, target, user_ids, user_offsets, tags):
        h = torch.cat([self.item(hist), self.cat(hist_cat)], dim=-1)  # [B, L, 12]
        t = self.item(target)  # [B, 8]
        mask = (hist != 0).unsqueeze(-1).to(h.dtype)
        attention = torch.sigmoid(self.score(h)) * mask  # [B, L, 1]
        interest = (attention * h[..., :8]).sum(1)
        # Unmasked, so a padding position's row would get a gradient if it were looked up.
        categories = h[..., 8:].sum(1)
        pooled = torch.cat([interest, categories, t, self.user(user_ids, user_offsets), self.tags(tags)], dim=1)
        return self.top(pooled)


def sequence_model(rows_cap=None, batch_size=8, seed=0):
    """`SequenceModel` and a batch: histories padded with id 0 (some empty), tags [B, 3] with
    padding id 1 (one bag all padding)."""
    torch.manual_seed(0)  # same weights whatever the data seed
    model = SequenceModel()
    g = torch.Generator().manual_seed(seed)
    n, history = batch_size, model.history
    lengths = torch.randint(0, history + 1, (n,), generator=g)
    hist = torch.randint(1, model.item.num_embeddings, (n, history), generator=g)
    hist[torch.arange(history).expand(n, history) >= lengths.unsqueeze(1)] = 0
    hist_cat = torch.where(hist == 0, 0, hist % (model.cat.num_embeddings - 1) + 1)
    target = torch.randint(1, model.item.num_embeddings, (n,), generator=g)
    user_lengths = torch.randint(1, 3, (n,), generator=g)
    user_ids = torch.randint(0, model.user.num_embeddings, (int(user_lengths.sum()),), generator=g)
    user_offsets = user_lengths.cumsum(0) - user_lengths
    tags = torch.randint(0, model.tags.num_embeddings, (n, 3), generator=g)
    if n:
        tags[0] = 1
    return model, (hist, hist_cat, target, user_ids, user_offsets, tags)


class CollectionModel(nn.Module):
    """TorchRec's `EmbeddingCollection` (unpooled lookups of a KeyedJaggedTensor's jagged
    values) beside a pooled `nn.EmbeddingBag`, DIN-like: an item table read by the history and
    the target (two keys of one table), a category table read by the history's categories."""

    def __init__(self, items=60, cats=12, users=40, history=4):
        from torchrec import EmbeddingCollection, EmbeddingConfig

        super().__init__()
        tables = [
            EmbeddingConfig(name="item", embedding_dim=8, num_embeddings=items, feature_names=["hist", "target"]),
            EmbeddingConfig(name="cat", embedding_dim=8, num_embeddings=cats, feature_names=["hist_cat"]),
        ]
        self.ec = EmbeddingCollection(tables=tables, device=torch.device("cpu"))
        self.user = nn.EmbeddingBag(users, 6, mode="sum")
        self.score = nn.Linear(16, 1)
        self.top = nn.Linear(8 + 8 + 8 + 6, 1)
        self.history = history

    def forward(self, kjt, user_ids, user_offsets):
        out = self.ec(kjt)
        hist = out["hist"]
        h = torch.cat([hist.to_padded_dense(self.history), out["hist_cat"].to_padded_dense(self.history)], dim=-1)
        mask = (torch.arange(self.history) < hist.lengths().unsqueeze(1)).unsqueeze(-1).to(h.dtype)
        attention = torch.sigmoid(self.score(h)) * mask  # [B, L, 1]
        # The history's values are also read as they are (a batch-wide sum), so its padding is
        # not folded into the lookup (the categories' is): both ways back to jagged are trained.
        interest = (attention * h[..., :8]).sum(1) + 0.01 * hist.values().sum(0, keepdim=True)
        categories = h[..., 8:].sum(1)  # unmasked: past the history, to_padded_dense gives zeros
        target = out["target"].values()  # one id per sample: [B, 8]
        return self.top(torch.cat([interest, categories, target, self.user(user_ids, user_offsets)], dim=1))


def collection_model(rows_cap=None, batch_size=8, seed=0):
    """`CollectionModel` and a batch: a KeyedJaggedTensor of histories of 0-4 items (their
    categories alongside) and one target each, and pooled user bags."""
    from torchrec import KeyedJaggedTensor

    torch.manual_seed(0)  # same weights whatever the data seed
    model = CollectionModel()
    g = torch.Generator().manual_seed(seed)
    n = batch_size
    lengths = torch.randint(0, model.history + 1, (n,), generator=g)
    hist = torch.randint(0, 60, (int(lengths.sum()),), generator=g)
    target = torch.randint(0, 60, (n,), generator=g)
    kjt = KeyedJaggedTensor(
        keys=["hist", "target", "hist_cat"],
        values=torch.cat([hist, target, hist % 12]),
        lengths=torch.cat([lengths, torch.ones(n, dtype=torch.int64), lengths]),
    )
    user_lengths = torch.randint(1, 3, (n,), generator=g)
    user_ids = torch.randint(0, model.user.num_embeddings, (int(user_lengths.sum()),), generator=g)
    return model, (kjt, user_ids, user_lengths.cumsum(0) - user_lengths)
