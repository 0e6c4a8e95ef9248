"""Synthetic Criteo-shaped data with Zipf-skewed ids and a planted, learnable click signal.

Used by the benchmarks (realistic table sizes and id skew without the 1 TB dataset) and by quality
runs (the planted signal gives a known achievable AUC, so a broken sparse path shows up as an AUC
drop rather than only as a speed number).

Design:

* **Counter-based randomness.**  Every random draw is a splitmix64 hash of
  ``(seed, split, global sample index, draw slot)``, so sample ``j`` of a split is the same no
  matter how the stream is cut into batches or ranks.  Global batch ``i`` of size ``G`` is samples
  ``[i*G, (i+1)*G)`` and rank ``r`` of ``W`` (local size ``B = G / W``) gets samples
  ``[i*G + r*B, i*G + (r+1)*B)``; concatenating the ranks' local batches reproduces the global batch
  bit for bit, and any batch can be generated without generating the ones before it.
* **Zipf ids without tables.**  A rank is drawn from a continuous power law on ``[1, n+1)`` by
  inverse CDF and floored (O(1) memory even for 45M-row tables), then mapped through a fixed
  per-feature affine permutation ``rank * a + b mod n`` (``gcd(a, n) == 1``) so the hot ids are
  spread over the table instead of sitting in its first rows.
* **Planted signal.**  The hidden weight of id ``i`` of feature ``f`` is a hash of
  ``(seed, f, i)`` mapped to ``N(0, 1/F)``; nothing is stored.  The logit is
  ``bias + signal_scale * (sum_f mean_{i in bag f} w_f(i) + dense_effect)`` and the label is
  Bernoulli(sigmoid(logit)).  The same signal is used by the train and eval streams.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Literal, cast

import attrs
import numpy as np
import torch

from sparselift.data.batch import Batch, offsets_from_lengths

KAGGLE_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip
TERABYTE_CARDINALITIES: tuple[int, ...] = (
    45833188, 36746, 17245, 7413, 20243, 3, 7114, 1441, 62, 29275261, 1572176, 345138, 10,
    2209, 11267, 128, 4, 974, 14, 48937457, 11316796, 40094537, 452104, 12606, 104, 35,
)  # fmt: skip
# Mean multi-hot bag sizes of the MLPerf DLRM-v2 (DCNv2) synthetic multi-hot Criteo dataset.
DLRM_V2_POOLING: tuple[int, ...] = (
    3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1,
)  # fmt: skip

NUM_DENSE = 13
Split = Literal["train", "eval"]

# ---------------------------------------------------------------------------------------------
# splitmix64 hashing on uint64 numpy arrays (numpy integer array arithmetic wraps mod 2**64,
# which is what the hash needs; torch int64 overflow is UB in C++ and has no logical shift).
_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
_U64 = np.uint64


def _mix_int(x: int) -> int:
    """splitmix64 on a Python int (for deriving scalar keys)."""
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * _MUL1) & _MASK
    x = ((x ^ (x >> 27)) * _MUL2) & _MASK
    return x ^ (x >> 31)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 on a uint64 array (returns a new array)."""
    with np.errstate(over="ignore"):
        x = x + _U64(_GOLDEN)
        x = (x ^ (x >> _U64(30))) * _U64(_MUL1)
        x = (x ^ (x >> _U64(27))) * _U64(_MUL2)
        return x ^ (x >> _U64(31))


def _uniform53(h: np.ndarray) -> np.ndarray:
    """Uniform in the open interval (0, 1) from the top 53 bits of a hash."""
    return (h >> _U64(11)).astype(np.float64) * 2.0**-53 + 2.0**-54


def _normal(h: np.ndarray) -> np.ndarray:
    """Standard normal from one 64-bit hash: Box-Muller on its two 32-bit halves."""
    u1 = (h >> _U64(32)).astype(np.float64) * 2.0**-32 + 2.0**-33
    u2 = (h & _U64(0xFFFFFFFF)).astype(np.float64) * 2.0**-32
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


# Draw-slot kinds; a slot is (kind << 56) | (feature << 40) | position.
_K_DENSE, _K_LEN, _K_ID, _K_LABEL = 1, 2, 3, 4
_SPLIT_TAGS = {"train": 0x7472_6169_6E00_0001, "eval": 0x6576_616C_0000_0002}
_SIGNAL_TAG = 0x5349_474E_414C_0003
_PERM_TAG = 0x5045_524D_0000_0004


def _slot(kind: int, feature: int, position: int = 0) -> int:
    return (kind << 56) | (feature << 40) | position


def zipf_ranks(u: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """Popularity ranks in ``[0, n)`` (0 = hottest) for uniforms ``u`` in (0, 1).

    Inverse CDF of the continuous density ``~ x**-alpha`` on ``[1, n+1)``, floored: rank ``k`` has
    probability proportional to ``integral_{k+1}^{k+2} x**-alpha dx``, close to a discrete Zipf law.
    ``alpha == 0`` is uniform.  Costs O(len(u)) time and O(1) extra memory for any ``n``.
    """
    if n <= 1:
        return np.zeros(u.shape, dtype=np.int64)
    if alpha == 0.0:
        x = u * n
    else:
        a = 1.0 - alpha
        log_n1 = math.log(n + 1.0)
        if abs(a) < 1e-9:  # alpha == 1: the density integrates to a log
            x = np.exp(u * log_n1) - 1.0
        else:  # expm1/log1p keep precision for alpha near 1
            x = np.exp(np.log1p(u * math.expm1(a * log_n1)) / a) - 1.0
    return np.clip(np.floor(x), 0, n - 1).astype(np.int64)


def _poisson_cdf(lam: float) -> np.ndarray:
    """CDF table of Poisson(lam) up to far in the tail (inverse-CDF sampling from hashed uniforms)."""
    if lam <= 0:
        return np.ones(1)
    kmax = int(math.ceil(lam + 12.0 * math.sqrt(lam) + 12.0))
    k = np.arange(kmax + 1, dtype=np.float64)
    log_pmf = k * math.log(lam) - lam - np.array([math.lgamma(v + 1.0) for v in k])
    cdf = np.cumsum(np.exp(log_pmf))
    cdf[-1] = 1.0  # the truncated tail mass is < 1e-20; avoid searchsorted running off the end
    return cdf


def _to_pooling(value: str | Sequence[float]) -> str | tuple[float, ...]:
    if isinstance(value, str):
        return value
    return tuple(float(v) for v in value)


@attrs.frozen
class SyntheticConfig:
    """Shape, skew and signal of a synthetic Criteo-like dataset.

    Attributes:
        cardinalities: rows per categorical feature (default: Criteo Kaggle's 26 tables).
        rows_cap: if set, every table has ``min(cardinality, rows_cap)`` rows.
        zipf_alpha: id skew exponent; 0 means uniform ids.
        pooling: ``"one-hot"`` (one id per bag) or per-feature mean bag sizes (multi-hot).
        pooling_dist: multi-hot bag-length law: ``"poisson"`` (``Poisson(mean)`` if empty bags are
            allowed, else ``1 + Poisson(mean - 1)``) or ``"fixed"`` (every bag has ``round(mean)`` ids).
        allow_empty_bags: whether multi-hot bags may have zero ids.
        seed: selects the whole dataset (ids, dense values, planted signal).
        num_dense: number of dense features.
        signal_scale: multiplies the planted logit; the default gives a Bayes-optimal (oracle) AUC
            of about 0.8 for one-hot data.
        dense_signal_std: standard deviation of the dense features' share of the (unscaled) logit;
            the sparse share has standard deviation ~1 for one-hot data.
        bias: logit offset (sets the click-through rate; the default gives a CTR of about 0.245).
    """

    cardinalities: tuple[int, ...] = attrs.field(default=KAGGLE_CARDINALITIES, converter=tuple)
    rows_cap: int | None = None
    zipf_alpha: float = 1.05
    pooling: str | tuple[float, ...] = attrs.field(default="one-hot", converter=_to_pooling)
    pooling_dist: Literal["poisson", "fixed"] = "poisson"
    allow_empty_bags: bool = False
    seed: int = 0
    num_dense: int = NUM_DENSE
    signal_scale: float = 1.15
    dense_signal_std: float = 0.7
    bias: float = -1.35

    def __attrs_post_init__(self) -> None:
        if not self.cardinalities or any(int(c) < 1 or int(c) >= 2**32 for c in self.cardinalities):
            raise ValueError("cardinalities must be a non-empty list of ints in [1, 2**32)")
        if self.rows_cap is not None and self.rows_cap < 1:
            raise ValueError(f"rows_cap must be >= 1, got {self.rows_cap}")
        if self.zipf_alpha < 0:
            raise ValueError(f"zipf_alpha must be >= 0, got {self.zipf_alpha}")
        if isinstance(self.pooling, str):
            if self.pooling != "one-hot":
                raise ValueError(f"pooling must be 'one-hot' or a list of mean bag sizes, got {self.pooling!r}")
        else:
            if len(self.pooling) != len(self.cardinalities):
                raise ValueError(f"pooling has {len(self.pooling)} entries for {len(self.cardinalities)} features")
            low = 0.0 if self.allow_empty_bags else 1.0
            if any(m < low for m in self.pooling):
                raise ValueError(f"mean bag sizes must be >= {low} (allow_empty_bags={self.allow_empty_bags})")
        if self.pooling_dist not in ("poisson", "fixed"):
            raise ValueError(f"pooling_dist must be 'poisson' or 'fixed', got {self.pooling_dist!r}")
        if self.num_dense < 0:
            raise ValueError("num_dense must be >= 0")

    @property
    def num_sparse(self) -> int:
        return len(self.cardinalities)

    @property
    def table_rows(self) -> tuple[int, ...]:
        """Effective rows per table (cardinality after ``rows_cap``); ids lie in ``[0, rows)``."""
        cap = self.rows_cap
        return tuple(int(c) if cap is None else min(int(c), cap) for c in self.cardinalities)

    @property
    def multi_hot(self) -> bool:
        return not isinstance(self.pooling, str)


class SyntheticCriteo:
    """Deterministic, randomly accessible stream of synthetic Criteo-like batches."""

    def __init__(self, config: SyntheticConfig | None = None) -> None:
        self.config = cfg = config if config is not None else SyntheticConfig()
        self.table_rows = cfg.table_rows
        key = _mix_int(cfg.seed & _MASK)
        self._split_keys = {s: _U64(_mix_int(key ^ tag)) for s, tag in _SPLIT_TAGS.items()}
        signal_key = _mix_int(key ^ _SIGNAL_TAG)
        self._weight_keys = [_U64(_mix_int(signal_key ^ f)) for f in range(cfg.num_sparse)]
        self._weight_std = 1.0 / math.sqrt(cfg.num_sparse)

        # Per-feature affine permutation rank -> id: a*rank + b mod n with gcd(a, n) == 1 is a bijection.
        perm_key = _mix_int(key ^ _PERM_TAG)
        self._perm: list[tuple[int, int]] = []
        for f, n in enumerate(self.table_rows):
            h = _mix_int(perm_key ^ f)
            a = (h % n) | 1 if n > 2 else 1
            while math.gcd(a, n) != 1:
                a = (a + 2) % n
            b = _mix_int(h) % n
            self._perm.append((a, b))

        # Dense features: count = floor(exp(mu + s*z)), feature = log(count + 1).  Parameters and the
        # linear dense effect's weights come from the seed; the effect is linear in the (standardized)
        # float32 feature values so a linear model can represent it exactly.
        rng = np.random.default_rng(np.random.SeedSequence([cfg.seed & _MASK, 0xD5]))
        nd = cfg.num_dense
        self._dense_mu = rng.uniform(-0.5, 4.0, nd)
        self._dense_sigma = rng.uniform(0.8, 2.0, nd)
        probe = self._dense_from_normals(rng.standard_normal((1 << 16, nd))).astype(np.float64)
        self._dense_mean = probe.mean(axis=0)
        self._dense_std = probe.std(axis=0) + 1e-6
        v = rng.standard_normal(nd)
        self._dense_w = v * (cfg.dense_signal_std / max(float(np.linalg.norm(v)), 1e-12))

        self._len_cdfs: list[np.ndarray] = []
        if cfg.multi_hot:
            for m in cast("tuple[float, ...]", cfg.pooling):  # multi_hot: per-feature mean bag sizes
                lam = m if cfg.allow_empty_bags else m - 1.0
                self._len_cdfs.append(_poisson_cdf(lam))

    # -- public API ------------------------------------------------------------------------------

    def samples(self, start: int, count: int, *, split: Split = "train") -> Batch:
        """Samples ``[start, start + count)`` of ``split`` as one batch (the random-access primitive)."""
        if start < 0 or count < 0:
            raise ValueError(f"start and count must be >= 0, got {start}, {count}")
        if split not in self._split_keys:
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        cfg = self.config
        idx = np.arange(start, start + count, dtype=np.uint64)
        hs = _mix(self._split_keys[split] ^ _mix(idx))  # one base hash per sample

        dense = self._dense(hs)
        logit = self._dense_effect(dense)
        sparse: list[tuple[torch.Tensor, torch.Tensor]] = []
        for f in range(cfg.num_sparse):
            lengths = self._bag_lengths(hs, f)
            if lengths is None:  # one-hot: skip the repeat/position bookkeeping
                h = _mix(hs ^ _U64(_mix_int(_slot(_K_ID, f))))
                ids = self._ids(h, f)
                logit += self._weights(f, ids)
                offsets = np.arange(count + 1, dtype=np.int64)
            else:
                offsets = offsets_from_lengths(lengths)
                bag = np.repeat(np.arange(count), lengths)
                pos = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[:-1][bag]
                slot = _mix(_U64(_slot(_K_ID, f)) + pos.astype(np.uint64))
                ids = self._ids(_mix(hs[bag] ^ slot), f)
                sums = np.bincount(bag, weights=self._weights(f, ids), minlength=count)
                logit += sums / np.maximum(lengths, 1)  # empty bags contribute 0
            sparse.append((torch.from_numpy(ids), torch.from_numpy(offsets)))

        logit = cfg.bias + cfg.signal_scale * logit
        p = 1.0 / (1.0 + np.exp(-logit))
        u = _uniform53(_mix(hs ^ _U64(_mix_int(_slot(_K_LABEL, 0)))))
        labels = (u < p).astype(np.float32)
        return Batch(dense=torch.from_numpy(dense), sparse=sparse, labels=torch.from_numpy(labels))

    def global_batch(self, step: int, global_batch_size: int, *, split: Split = "train") -> Batch:
        """Global batch ``step`` (samples ``[step*G, (step+1)*G)``), for single-process references."""
        return self.samples(step * global_batch_size, global_batch_size, split=split)

    def batches(
        self,
        batch_size: int,
        num_batches: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        split: Split = "train",
        start_step: int = 0,
    ) -> Iterator[Batch]:
        """Yield ``num_batches`` local batches of ``batch_size`` for ``rank`` of ``world_size``.

        Local batch ``i`` is rank ``rank``'s slice of global batch ``start_step + i`` (global size
        ``batch_size * world_size``), so ``Batch.concat`` of all ranks' step-``i`` batches equals
        ``global_batch(start_step + i, batch_size * world_size)`` exactly.
        """
        if batch_size < 1 or num_batches < 0 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"bad batch_size/num_batches/rank/world_size: {batch_size}, {num_batches}, {rank}, {world_size}"
            )
        g = batch_size * world_size
        for step in range(start_step, start_step + num_batches):
            yield self.samples(step * g + rank * batch_size, batch_size, split=split)

    def hidden_weights(self, feature: int, ids: torch.Tensor | np.ndarray) -> torch.Tensor:
        """The planted per-id weights (float64) of ``feature`` for ``ids``."""
        ids_np = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
        return torch.from_numpy(self._weights(feature, ids_np.astype(np.int64)))

    def logits(self, batch: Batch) -> torch.Tensor:
        """The true (oracle) logits ``[B]`` float64 that the batch's labels were drawn from."""
        cfg = self.config
        logit = self._dense_effect(batch.dense.detach().cpu().numpy())
        for f, (ids, offsets) in enumerate(batch.sparse):
            ids_np = ids.detach().cpu().numpy()
            lengths = np.diff(offsets.detach().cpu().numpy())
            bag = np.repeat(np.arange(batch.batch_size), lengths)
            sums = np.bincount(bag, weights=self._weights(f, ids_np), minlength=batch.batch_size)
            logit += sums / np.maximum(lengths, 1)
        return torch.from_numpy(cfg.bias + cfg.signal_scale * logit)

    # -- internals -------------------------------------------------------------------------------

    def _dense_from_normals(self, z: np.ndarray) -> np.ndarray:
        # Criteo's integer features are heavy-tailed counts with many zeros; floor(lognormal) gives both.
        counts = np.floor(np.exp(self._dense_mu + self._dense_sigma * z))
        return np.log1p(counts).astype(np.float32)

    def _dense(self, hs: np.ndarray) -> np.ndarray:
        nd = self.config.num_dense
        slots = np.array([_mix_int(_slot(_K_DENSE, j)) for j in range(nd)], dtype=np.uint64)
        z = _normal(_mix(hs[:, None] ^ slots[None, :]))
        return self._dense_from_normals(z)

    def _dense_effect(self, dense: np.ndarray) -> np.ndarray:
        # Computed from the float32 values so logits(batch) reproduces the generator's logits exactly.
        x = (dense.astype(np.float64) - self._dense_mean) / self._dense_std
        return x @ self._dense_w

    def _bag_lengths(self, hs: np.ndarray, f: int) -> np.ndarray | None:
        cfg = self.config
        if not cfg.multi_hot:
            return None
        mean = cast("tuple[float, ...]", cfg.pooling)[f]  # multi_hot: per-feature mean bag sizes
        if cfg.pooling_dist == "fixed":
            return np.full(hs.shape, int(round(mean)), dtype=np.int64)
        u = _uniform53(_mix(hs ^ _U64(_mix_int(_slot(_K_LEN, f)))))
        lengths = np.searchsorted(self._len_cdfs[f], u, side="left").astype(np.int64)
        return lengths if cfg.allow_empty_bags else lengths + 1

    def _ids(self, h: np.ndarray, f: int) -> np.ndarray:
        n = self.table_rows[f]
        ranks = zipf_ranks(_uniform53(h), n, self.config.zipf_alpha)
        a, b = self._perm[f]
        # rank < n < 2**32 and a < n, so rank*a + b fits in uint64 without wrapping.
        return ((ranks.astype(np.uint64) * _U64(a) + _U64(b)) % _U64(n)).astype(np.int64)

    def _weights(self, f: int, ids: np.ndarray) -> np.ndarray:
        return _normal(_mix(self._weight_keys[f] ^ ids.astype(np.uint64))) * self._weight_std
