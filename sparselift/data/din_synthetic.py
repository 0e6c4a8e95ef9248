"""Synthetic DIN-shaped data: jagged item histories, Zipf-skewed ids, a planted learnable click signal.

The data of `sparselift bench seq` (:mod:`sparselift.models.din`). Like
:mod:`sparselift.data.synthetic`, every draw is a splitmix64 hash of ``(seed, split, global sample
index, slot)``: sample ``j`` is the same however the stream is cut into batches and ranks, global
batch ``i`` of size ``G`` is samples ``[i*G, (i+1)*G)``, and rank ``r`` of ``W`` gets the ``r``-th
of its ``W`` contiguous slices (concatenated, they are the global batch bit for bit).

Per sample:

* a history length in ``[1, max_history]``: ``ceil(max * u**k)`` with ``k`` set so that the mean
  is about ``mean_history`` (a long-history majority and a tail of short ones);
* history items: Zipf ranks (``zipf_ranks``) mapped through a fixed affine permutation onto
  ``[1, item_rows)`` (0 is the padding id); an item's category is a fixed hash of its id into
  ``[1, cat_rows)``;
* the target item: with probability ``repeat_prob`` one of the history's items, else a fresh draw;
* the user bag: ``1 + Poisson(user_bag - 1)`` Zipf-skewed ids in ``[0, user_rows)``;
* the label: Bernoulli(sigmoid(logit)), ``logit = bias + signal_scale * (w(target) +
  (2 * [the history holds an item of the target's category] - 1) + mean w(user ids)) / sqrt(3)``
  with hashed per-id weights ``w ~ N(0, 1)``: the target's own weight, a history-target
  interaction that DIN's attention can find, and the user.

A batch (:class:`DINBatch`) carries one form of the ids and gives two: padded tensors
(``inputs()``: DIN's forward arguments, what SparseLift and the plain baseline take) and
KeyedJaggedTensors (``to_kjts()``: one per table, for TorchRec's EmbeddingCollections and
EmbeddingBagCollection).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import numpy as np
import torch
from torch import Tensor

from sparselift.data.batch import offsets_from_lengths
from sparselift.data.synthetic import _U64, Split, _mix, _mix_int, _normal, _poisson_cdf, _uniform53, zipf_ranks

__all__ = ["KJT_FEATURES", "DINBatch", "DINSynthetic", "DINSyntheticConfig"]

# KJT feature names per table: the item and category tables' EmbeddingCollections (TorchRec's
# collections need one dim per collection) and the user table's EmbeddingBagCollection.
KJT_FEATURES: dict[str, tuple[str, ...]] = {
    "item": ("hist_item", "target_item"),
    "cat": ("hist_cat", "target_cat"),
    "user": ("user",),
}

_K_LEN, _K_HIST, _K_PICK, _K_TARGET, _K_ULEN, _K_USER, _K_LABEL = range(1, 8)
_SPLIT_TAGS = {"train": 0x5345_5154_5241_494E, "eval": 0x5345_5145_5641_4C00}
_TAGS = {"item_perm": 0x4954_454D_5045_524D, "user_perm": 0x5553_4552_5045_524D, "cat": 0x4341_5400_0000_0001}
_TAGS |= {"w_item": 0x5749_5445_4D00_0001, "w_user": 0x5755_5345_5200_0001}


def _slot(kind: int, position: int = 0) -> int:
    return (kind << 56) | position


@attrs.frozen
class DINSyntheticConfig:
    item_rows: int = 1_000_000
    cat_rows: int = 1_000
    user_rows: int = 1_000_000
    max_history: int = 50
    mean_history: float = 30.0
    user_bag: float = 4.0
    zipf_alpha: float = 1.05
    repeat_prob: float = 0.5
    signal_scale: float = 1.5
    bias: float = -0.5
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        if min(self.item_rows, self.cat_rows) < 2 or self.user_rows < 1:
            raise ValueError("item_rows and cat_rows must be >= 2 (id 0 pads), user_rows >= 1")
        if not 1 <= self.mean_history <= self.max_history:
            raise ValueError(f"mean_history must lie in [1, {self.max_history}], got {self.mean_history}")
        if self.user_bag < 1:
            raise ValueError(f"user_bag must be >= 1, got {self.user_bag}")

    @property
    def length_exponent(self) -> float:
        """``k`` of ``ceil(max * u**k)``: E = max / (k + 1) + ~1/2 (the ceiling) = mean_history."""
        return max(0.0, self.max_history / max(self.mean_history - 0.5, 1e-9) - 1.0)


@attrs.frozen(eq=False)
class DINBatch:
    """One batch of DIN samples: ``history_items``/``history_cats`` ``[B, L]`` int64 padded with 0
    after ``history_lengths[b]`` ids; ``target_item``/``target_cat`` ``[B]``; ``user_ids`` 1-D with
    ``user_offsets`` ``[B + 1]`` (include_last_offset); ``labels`` ``[B]`` float32."""

    history_items: Tensor
    history_cats: Tensor
    history_lengths: Tensor
    target_item: Tensor
    target_cat: Tensor
    user_ids: Tensor
    user_offsets: Tensor
    labels: Tensor

    @property
    def batch_size(self) -> int:
        return int(self.labels.shape[0])

    def inputs(self) -> tuple[Tensor, ...]:
        """DIN's forward arguments (user offsets as bag starts, ``[B]``)."""
        return (
            self.history_items,
            self.history_cats,
            self.target_item,
            self.target_cat,
            self.user_ids,
            self.user_offsets[:-1],
        )

    def mask(self) -> Tensor:
        """``[B, L]`` bool: which history positions hold an item."""
        return self.history_items != 0

    def kjt_parts(self) -> dict[str, tuple[list[str], Tensor, Tensor]]:
        """Per table (``KJT_FEATURES``) the ``(keys, values, lengths)`` of its features' KJT."""
        mask = self.mask()
        ones = torch.ones(self.batch_size, dtype=torch.int64)
        item = torch.cat([self.history_items[mask], self.target_item])
        cat = torch.cat([self.history_cats[mask], self.target_cat])
        seq_lengths = torch.cat([self.history_lengths, ones])
        user_lengths = self.user_offsets[1:] - self.user_offsets[:-1]
        values = {"item": (item, seq_lengths), "cat": (cat, seq_lengths), "user": (self.user_ids, user_lengths)}
        return {t: (list(KJT_FEATURES[t]), v, n) for t, (v, n) in values.items()}

    def to_kjts(self) -> dict[str, Any]:
        """The same ids as one KeyedJaggedTensor per table (``KJT_FEATURES``)."""
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

        return {t: KeyedJaggedTensor(keys=k, values=v, lengths=n) for t, (k, v, n) in self.kjt_parts().items()}

    def rows(self, rows: slice) -> DINBatch:
        """Samples ``rows`` (a contiguous slice) as a batch."""
        start, stop, _ = rows.indices(self.batch_size)
        a, b = int(self.user_offsets[start]), int(self.user_offsets[stop])
        return attrs.evolve(
            self,
            history_items=self.history_items[rows],
            history_cats=self.history_cats[rows],
            history_lengths=self.history_lengths[rows],
            target_item=self.target_item[rows],
            target_cat=self.target_cat[rows],
            user_ids=self.user_ids[a:b],
            user_offsets=self.user_offsets[start : stop + 1] - a,
            labels=self.labels[rows],
        )

    @classmethod
    def concat(cls, batches: Sequence[DINBatch]) -> DINBatch:
        """Batches one after the other (e.g. all ranks' slices of one global step)."""
        lengths = torch.cat([b.user_offsets[1:] - b.user_offsets[:-1] for b in batches])
        offsets = torch.from_numpy(offsets_from_lengths(lengths.numpy()))
        fields = ("history_items", "history_cats", "history_lengths", "target_item", "target_cat", "labels")
        cat = {f: torch.cat([getattr(b, f) for b in batches]) for f in fields}
        return cls(**cat, user_ids=torch.cat([b.user_ids for b in batches]), user_offsets=offsets)

    def equal(self, other: DINBatch) -> bool:
        return all(torch.equal(getattr(self, f.name), getattr(other, f.name)) for f in attrs.fields(DINBatch))


class DINSynthetic:
    """Deterministic, randomly accessible stream of synthetic DIN batches."""

    def __init__(self, config: DINSyntheticConfig | None = None) -> None:
        self.config = cfg = config if config is not None else DINSyntheticConfig()
        key = _mix_int(cfg.seed & ((1 << 64) - 1))
        self._split_keys = {s: _U64(_mix_int(key ^ tag)) for s, tag in _SPLIT_TAGS.items()}
        self._keys = {name: _U64(_mix_int(key ^ tag)) for name, tag in _TAGS.items()}
        self._item_perm = _affine_perm(int(self._keys["item_perm"]), cfg.item_rows - 1)
        self._user_perm = _affine_perm(int(self._keys["user_perm"]), cfg.user_rows)
        self._user_cdf = _poisson_cdf(cfg.user_bag - 1.0)
        self._hist_slots = np.array([_mix_int(_slot(_K_HIST, p)) for p in range(cfg.max_history)], dtype=np.uint64)

    @classmethod
    def for_model(cls, model_config: Any, seed: int = 0, **overrides: Any) -> DINSynthetic:
        """The stream shaped like a :class:`~sparselift.models.din.DINConfig` (its capped rows)."""
        c = model_config
        return cls(
            DINSyntheticConfig(
                item_rows=c.num_item_rows,
                cat_rows=c.num_cat_rows,
                user_rows=c.num_user_rows,
                max_history=c.max_history,
                mean_history=c.mean_history,
                user_bag=c.user_bag,
                seed=seed,
                **overrides,
            )
        )

    def item_category(self, items: np.ndarray | Tensor) -> np.ndarray:
        """The fixed category in ``[1, cat_rows)`` of item ids (0 for the padding id 0)."""
        ids = np.asarray(items, dtype=np.int64)
        cats = 1 + (_mix(self._keys["cat"] ^ ids.astype(np.uint64)) % _U64(self.config.cat_rows - 1)).astype(np.int64)
        return np.where(ids == 0, 0, cats)

    def samples(self, start: int, count: int, *, split: Split = "train") -> DINBatch:
        """Samples ``[start, start + count)`` of ``split`` (the random-access primitive)."""
        if start < 0 or count < 0:
            raise ValueError(f"start and count must be >= 0, got {start}, {count}")
        cfg = self.config
        hs = _mix(self._split_keys[split] ^ _mix(np.arange(start, start + count, dtype=np.uint64)))
        u_len = _uniform53(self._hash(hs, _K_LEN))
        lengths = np.clip(np.ceil(cfg.max_history * u_len**cfg.length_exponent), 1, cfg.max_history).astype(np.int64)
        hist = self._items(_mix(hs[:, None] ^ self._hist_slots[None, :]))
        hist[np.arange(cfg.max_history)[None, :] >= lengths[:, None]] = 0
        pick = _uniform53(self._hash(hs, _K_PICK))
        repeat = pick < cfg.repeat_prob
        position = np.minimum((pick / cfg.repeat_prob * lengths).astype(np.int64), lengths - 1)
        target = np.where(repeat, hist[np.arange(count), np.where(repeat, position, 0)], 0)
        target = np.where(repeat, target, self._items(self._hash(hs, _K_TARGET)))
        user_lengths = 1 + np.searchsorted(self._user_cdf, _uniform53(self._hash(hs, _K_ULEN))).astype(np.int64)
        user_offsets = offsets_from_lengths(user_lengths)
        bag = np.repeat(np.arange(count), user_lengths)
        pos = (np.arange(int(user_offsets[-1])) - user_offsets[:-1][bag]).astype(np.uint64)
        user_ids = _apply_perm(
            zipf_ranks(_uniform53(_mix(hs[bag] ^ _mix(_U64(_slot(_K_USER)) + pos))), cfg.user_rows, cfg.zipf_alpha),
            self._user_perm,
            cfg.user_rows,
        )
        cats, target_cat = self.item_category(hist), self.item_category(target)
        match = ((cats == target_cat[:, None]) & (hist != 0)).any(axis=1)
        user_w = np.bincount(
            bag, weights=_normal(_mix(self._keys["w_user"] ^ user_ids.astype(np.uint64))), minlength=count
        )
        z = _normal(_mix(self._keys["w_item"] ^ target.astype(np.uint64))) + (2.0 * match - 1.0)
        z += user_w / user_lengths
        logit = cfg.bias + cfg.signal_scale * z / math.sqrt(3.0)
        labels = (_uniform53(self._hash(hs, _K_LABEL)) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
        t = torch.from_numpy
        return DINBatch(
            history_items=t(hist),
            history_cats=t(cats),
            history_lengths=t(lengths),
            target_item=t(target),
            target_cat=t(target_cat),
            user_ids=t(user_ids),
            user_offsets=t(user_offsets),
            labels=t(labels),
        )

    def global_batch(self, step: int, global_batch_size: int, *, split: Split = "train") -> DINBatch:
        return self.samples(step * global_batch_size, global_batch_size, split=split)

    def local_batch(
        self, step: int, batch_size: int, rank: int, world_size: int, *, split: Split = "train"
    ) -> DINBatch:
        """Rank ``rank``'s slice (``batch_size`` samples) of global batch ``step``."""
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"bad batch_size/rank/world_size: {batch_size}, {rank}, {world_size}")
        return self.samples(step * batch_size * world_size + rank * batch_size, batch_size, split=split)

    def batches(
        self, batch_size: int, num_batches: int, *, rank: int = 0, world_size: int = 1, start_step: int = 0
    ) -> Iterator[DINBatch]:
        for step in range(start_step, start_step + num_batches):
            yield self.local_batch(step, batch_size, rank, world_size)

    # -- internals -------------------------------------------------------------------------------

    def _hash(self, hs: np.ndarray, kind: int) -> np.ndarray:
        return _mix(hs ^ _U64(_mix_int(_slot(kind))))

    def _items(self, h: np.ndarray) -> np.ndarray:
        n = self.config.item_rows - 1  # ids 1 .. item_rows - 1
        return 1 + _apply_perm(zipf_ranks(_uniform53(h), n, self.config.zipf_alpha), self._item_perm, n)


def _affine_perm(h: int, n: int) -> tuple[int, int]:
    """``rank -> (a * rank + b) mod n`` with ``gcd(a, n) == 1``: a fixed bijection of ``[0, n)``."""
    a = (h % n) | 1 if n > 2 else 1
    while math.gcd(a, n) != 1:
        a = (a + 2) % n
    return a, _mix_int(h) % n


def _apply_perm(ranks: np.ndarray, perm: tuple[int, int], n: int) -> np.ndarray:
    a, b = perm
    return ((ranks.astype(np.uint64) * _U64(a) + _U64(b)) % _U64(n)).astype(np.int64)
