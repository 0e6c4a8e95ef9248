"""The batch record shared by every data source (synthetic generator, Criteo TSV reader).

A :class:`Batch` is the unit the training loop and the benchmarks consume: dense features, one
EmbeddingBag-style ``(ids, offsets)`` pair per categorical feature, and click labels.  The offsets
follow the ``include_last_offset=True`` convention (``B + 1`` entries, ``offsets[0] == 0``,
``offsets[-1] == len(ids)``) because that is what both ``nn.EmbeddingBag`` and FBGEMM's TBE take
without an extra concat on the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
import torch
from torch import Tensor


def default_keys(num_features: int) -> tuple[str, ...]:
    """TorchRec's Criteo feature names (``torchrec.datasets.criteo.DEFAULT_CAT_NAMES``)."""
    return tuple(f"cat_{i}" for i in range(num_features))


def _check_shapes(batch: Batch) -> None:
    # Shape-only checks: they never read tensor values, so they cost no device sync.
    if batch.dense.dim() != 2:
        raise ValueError(f"dense must be [B, num_dense], got shape {tuple(batch.dense.shape)}")
    b = batch.dense.shape[0]
    if tuple(batch.labels.shape) != (b,):
        raise ValueError(f"labels must be [{b}], got shape {tuple(batch.labels.shape)}")
    if len(batch.keys) != len(batch.sparse):
        raise ValueError(f"{len(batch.keys)} keys for {len(batch.sparse)} sparse features")
    for f, (ids, offsets) in enumerate(batch.sparse):
        if ids.dim() != 1:
            raise ValueError(f"feature {f}: ids must be 1-D, got shape {tuple(ids.shape)}")
        if tuple(offsets.shape) != (b + 1,):
            raise ValueError(f"feature {f}: offsets must be [{b + 1}], got shape {tuple(offsets.shape)}")


@attrs.frozen(eq=False)  # eq=False: tensor __eq__ is elementwise, so a generated __eq__ would be wrong
class Batch:
    """One (local) training batch.

    Attributes:
        dense: ``[B, num_dense]`` float32.
        sparse: per categorical feature, ``(ids, offsets)``: ``ids`` 1-D int64, ``offsets`` ``[B + 1]``
            int64 with ``offsets[0] == 0`` and ``offsets[-1] == len(ids)``.
        labels: ``[B]`` float32 in {0, 1}.
        keys: feature names, defaults to ``cat_0 .. cat_{F-1}``.
    """

    dense: Tensor
    sparse: list[tuple[Tensor, Tensor]] = attrs.field(converter=lambda s: [(i, o) for i, o in s])
    labels: Tensor
    keys: tuple[str, ...] = attrs.field(
        default=attrs.Factory(lambda self: default_keys(len(self.sparse)), takes_self=True),
        converter=tuple[str, ...],  # not a bare `tuple`: mypy's attrs plugin cannot type a generic one
    )

    def __attrs_post_init__(self) -> None:
        _check_shapes(self)

    @property
    def batch_size(self) -> int:
        return int(self.dense.shape[0])

    @property
    def num_sparse(self) -> int:
        return len(self.sparse)

    @property
    def num_dense(self) -> int:
        return int(self.dense.shape[1])

    @property
    def device(self) -> torch.device:
        return self.dense.device

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy of this batch on ``device``."""

        def mv(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)

        return Batch(
            dense=mv(self.dense),
            sparse=[(mv(i), mv(o)) for i, o in self.sparse],
            labels=mv(self.labels),
            keys=self.keys,
        )

    def pin_memory(self) -> Batch:
        return Batch(
            dense=self.dense.pin_memory(),
            sparse=[(i.pin_memory(), o.pin_memory()) for i, o in self.sparse],
            labels=self.labels.pin_memory(),
            keys=self.keys,
        )

    def lengths(self, feature: int) -> Tensor:
        """Bag lengths ``[B]`` int64 of one feature."""
        offsets = self.sparse[feature][1]
        return offsets[1:] - offsets[:-1]

    def as_kjt_parts(self) -> tuple[list[str], Tensor, Tensor]:
        """``(keys, values, lengths)`` for ``KeyedJaggedTensor(keys=..., values=..., lengths=...)``.

        Both ``values`` and ``lengths`` are feature-major: all ``B`` bags of feature 0, then feature 1, ...
        """
        if not self.sparse:
            empty = torch.empty(0, dtype=torch.int64, device=self.device)
            return [], empty, empty
        values = torch.cat([ids for ids, _ in self.sparse])
        lengths = torch.cat([self.lengths(f) for f in range(self.num_sparse)])
        return list(self.keys), values, lengths

    def validate(self, cardinalities: Sequence[int] | None = None) -> None:
        """Full consistency check (reads values; meant for tests and loaders, not the hot path)."""
        _check_shapes(self)
        if self.dense.dtype != torch.float32 or self.labels.dtype != torch.float32:
            raise ValueError("dense and labels must be float32")
        for f, (ids, offsets) in enumerate(self.sparse):
            if ids.dtype != torch.int64 or offsets.dtype != torch.int64:
                raise ValueError(f"feature {f}: ids and offsets must be int64")
            if int(offsets[0]) != 0 or int(offsets[-1]) != ids.numel():
                raise ValueError(f"feature {f}: offsets must start at 0 and end at len(ids)")
            if bool((offsets[1:] < offsets[:-1]).any()):
                raise ValueError(f"feature {f}: offsets must be non-decreasing")
            if ids.numel() and int(ids.min()) < 0:
                raise ValueError(f"feature {f}: negative id")
            if cardinalities is not None and ids.numel() and int(ids.max()) >= cardinalities[f]:
                raise ValueError(f"feature {f}: id {int(ids.max())} >= cardinality {cardinalities[f]}")

    @classmethod
    def from_one_hot(cls, dense: Tensor, ids: Tensor, labels: Tensor, keys: Sequence[str] | None = None) -> Batch:
        """Build a one-hot batch from ``ids[B, F]`` (exactly one id per bag)."""
        b, nf = ids.shape
        offsets = torch.arange(b + 1, dtype=torch.int64, device=ids.device)
        sparse = [(ids[:, f].contiguous(), offsets) for f in range(nf)]
        if keys is None:
            return cls(dense=dense, sparse=sparse, labels=labels)
        return cls(dense=dense, sparse=sparse, labels=labels, keys=tuple(keys))

    @classmethod
    def concat(cls, batches: Sequence[Batch]) -> Batch:
        """Concatenate batches along the sample dimension (e.g. all ranks' slices of one global step)."""
        if not batches:
            raise ValueError("concat of no batches")
        first = batches[0]
        sparse = []
        for f in range(first.num_sparse):
            ids = torch.cat([bt.sparse[f][0] for bt in batches])
            lengths = torch.cat([bt.lengths(f) for bt in batches])
            offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
            torch.cumsum(lengths, 0, out=offsets[1:])
            sparse.append((ids, offsets))
        return cls(
            dense=torch.cat([bt.dense for bt in batches]),
            sparse=sparse,
            labels=torch.cat([bt.labels for bt in batches]),
            keys=first.keys,
        )

    def equal(self, other: Batch) -> bool:
        """Exact equality of every tensor and the keys."""
        return (
            self.keys == other.keys
            and self.num_sparse == other.num_sparse
            and torch.equal(self.dense, other.dense)
            and torch.equal(self.labels, other.labels)
            and all(
                torch.equal(a, c) and torch.equal(b, d)
                for (a, b), (c, d) in zip(self.sparse, other.sparse, strict=True)
            )
        )


def offsets_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """``[B + 1]`` int64 offsets (include_last_offset convention) from ``[B]`` bag lengths."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets
