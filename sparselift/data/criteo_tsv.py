"""Streaming reader for the raw Criteo Kaggle / Terabyte TSV files, for quality runs on real data.

Each line is ``label \\t I1 .. I13 \\t C1 .. C26``.  Standard DLRM preprocessing is applied on the
fly: missing or negative integer features become 0 and are transformed with ``log(x + 1)``
(float32); categorical features are 8-digit hex hashes, parsed as integers and reduced modulo the
feature's table size (missing -> 0).  Every bag is one-hot.

Rank slicing matches :class:`sparselift.data.synthetic.SyntheticCriteo`: line ``g`` (0-based over
all files in order) belongs to global batch ``g // G`` (``G = batch_size * world_size``), and rank
``r`` gets lines ``[i*G + r*B, i*G + (r+1)*B)`` of global batch ``i``.  Every rank reads the whole
stream but only parses its own lines; the other lines only get a cheap field-count check, so a
malformed line fails on every rank, not just its owner.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from sparselift.data.batch import Batch
from sparselift.data.synthetic import KAGGLE_CARDINALITIES, NUM_DENSE

PathLike = str | os.PathLike[str]


def open_text(path: PathLike) -> io.TextIOBase:
    """Open a (possibly gzip-compressed, by ``.gz`` suffix) text file for reading."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


class CriteoTSV:
    """Batched, rank-sliced reader of one or more Criteo TSV files (read in the given order)."""

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        *,
        cardinalities: Sequence[int] = KAGGLE_CARDINALITIES,
        rows_cap: int | None = None,
        num_dense: int = NUM_DENSE,
    ) -> None:
        if isinstance(paths, str | os.PathLike):
            paths = [paths]
        self.paths: list[Path] = [Path(p) for p in paths]
        if not self.paths:
            raise ValueError("no input files")
        if rows_cap is not None and rows_cap < 1:
            raise ValueError(f"rows_cap must be >= 1, got {rows_cap}")
        if any(int(c) < 1 for c in cardinalities):
            raise ValueError("cardinalities must be >= 1")
        self.table_rows: tuple[int, ...] = tuple(
            int(c) if rows_cap is None else min(int(c), rows_cap) for c in cardinalities
        )
        self.num_dense = num_dense
        self.num_sparse = len(self.table_rows)
        self.num_fields = 1 + num_dense + self.num_sparse

    def batches(
        self,
        batch_size: int,
        num_batches: int | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = True,
    ) -> Iterator[Batch]:
        """Yield this rank's local batches (at most ``num_batches``; ``None`` = until the data ends).

        With ``drop_last=False`` a trailing partial global batch is yielded too; then every rank
        still yields the same number of batches, but the last one may be smaller or even empty.
        """
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"bad batch_size/rank/world_size: {batch_size}, {rank}, {world_size}")
        if num_batches is not None and num_batches <= 0:
            return
        g = batch_size * world_size
        lo, hi = rank * batch_size, (rank + 1) * batch_size  # this rank's positions in a global batch
        tabs = self.num_fields - 1
        pos = 0  # position within the current global batch
        pending: list[tuple[str, Path, int]] = []
        produced = 0
        for path in self.paths:
            with open_text(path) as fh:
                for lineno, line in enumerate(fh, start=1):
                    if lo <= pos < hi:
                        pending.append((line, path, lineno))
                    elif line.count("\t") != tabs:
                        raise ValueError(self._field_count_error(path, lineno, line.count("\t") + 1))
                    pos += 1
                    if pos == g:
                        yield self._parse(pending)
                        produced += 1
                        if num_batches is not None and produced >= num_batches:
                            return
                        pos, pending = 0, []
        if pos and not drop_last:
            yield self._parse(pending)

    def read_all(self) -> Batch:
        """The whole input as one batch (small files and tests)."""
        return Batch.concat(list(self.batches(1 << 16, drop_last=False)))

    # -- internals -------------------------------------------------------------------------------

    def _field_count_error(self, path: Path, lineno: int, got: int) -> str:
        return f"{path}:{lineno}: expected {self.num_fields} tab-separated fields, got {got}"

    def _parse(self, lines: list[tuple[str, Path, int]]) -> Batch:
        nd, ns = self.num_dense, self.num_sparse
        labels: list[int] = []
        dense: list[int] = []
        cats: list[int] = []
        for line, path, lineno in lines:
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != self.num_fields:
                raise ValueError(self._field_count_error(path, lineno, len(fields)))
            label = fields[0].strip()
            if label not in ("0", "1"):
                raise ValueError(f"{path}:{lineno}: label must be 0 or 1, got {fields[0]!r}")
            labels.append(int(label))
            try:
                dense.extend([int(x) if x else 0 for x in fields[1 : 1 + nd]])
            except ValueError:
                raise ValueError(f"{path}:{lineno}: integer feature is not an integer: {line!r}") from None
            try:
                cats.extend([int(x, 16) if x else 0 for x in fields[1 + nd :]])
            except ValueError:
                raise ValueError(f"{path}:{lineno}: categorical feature is not hex: {line!r}") from None
        n = len(lines)
        dense_np = np.array(dense, dtype=np.int64).reshape(n, nd)
        # Negative counts (a few Criteo columns have -1/-2) are clamped, as in the DLRM reference.
        dense_f = np.log1p(np.maximum(dense_np, 0).astype(np.float64)).astype(np.float32)
        cat_np = np.array(cats, dtype=np.int64).reshape(n, ns) % np.array(self.table_rows, dtype=np.int64)
        return Batch.from_one_hot(
            dense=torch.from_numpy(dense_f),
            ids=torch.from_numpy(cat_np),
            labels=torch.tensor(labels, dtype=torch.float32),
        )
