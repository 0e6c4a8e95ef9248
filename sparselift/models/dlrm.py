"""DLRM reference architecture (facebookresearch/dlrm ``dlrm_s_pytorch.py``) and its presets.

The model mirrors the reference closely so that torch.export produces the graph the
reference would: one ``nn.EmbeddingBag(n, d, mode="sum")`` per sparse feature in an
``nn.ModuleList`` named ``emb_l`` looked up one by one, a bottom MLP ``bot_l`` (Linear+ReLU,
ReLU on the last layer too), the "dot" interaction (bmm of [dense; emb_0..emb_k], strict lower
triangle, concatenated with the dense output) and a top MLP ``top_l`` whose last layer is
followed by a sigmoid.

Inputs follow the reference's ``lS_i`` / ``lS_o`` convention: per feature a 1-D id tensor and
a 1-D offsets tensor of length B (start of each bag, *without* ``include_last_offset``).

Presets: :func:`dlrm_kaggle`, :func:`dlrm_terabyte`, :func:`dlrm_bench` (from the reference's
run scripts and ``bench/dlrm_s_benchmark.sh``). ``rows_cap`` caps every table's rows, like the
reference's ``--max-ind-range``, so that 10M-row tables fit in memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import torch
from torch import Tensor, nn

from sparselift.init import fill_rows, uniform_init

__all__ = [
    "DLRM",
    "DLRMConfig",
    "KAGGLE_CARDINALITIES",
    "TERABYTE_CARDINALITIES",
    "build_dlrm",
    "dlrm_bench",
    "dlrm_kaggle",
    "dlrm_terabyte",
    "example_inputs",
]

KAGGLE_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip
TERABYTE_CARDINALITIES: tuple[int, ...] = (
    45833188, 36746, 17245, 7413, 20243, 3, 7114, 1441, 62, 29275261, 1572176, 345138, 10,
    2209, 11267, 128, 4, 974, 14, 48937457, 11316796, 40094537, 452104, 12606, 104, 35,
)  # fmt: skip

_ID_DTYPES = {"int64": torch.int64, "int32": torch.int32}


def _tuple_of_ints(xs: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(x) for x in xs)


@attrs.frozen
class DLRMConfig:
    """Shape of a DLRM model (and of the example inputs generated for it).

    ``bottom_mlp`` includes the dense input width as its first entry (reference
    ``--arch-mlp-bot``, e.g. ``13-512-256-64-16``); ``top_mlp`` lists the top layers' output
    widths only (reference ``--arch-mlp-top``); the top input width is derived from the
    interaction (:attr:`top_in`).
    """

    name: str
    cardinalities: tuple[int, ...] = attrs.field(converter=_tuple_of_ints)
    embedding_dim: int
    bottom_mlp: tuple[int, ...] = attrs.field(converter=_tuple_of_ints)
    top_mlp: tuple[int, ...] = attrs.field(converter=_tuple_of_ints)
    # Ids per bag for each feature; example bags have 1..pooling ids (reference random data,
    # which draws round(r * min(rows, pooling)) ids, at least 1) unless fixed_pooling is set.
    pooling: tuple[int, ...] = attrs.field(converter=_tuple_of_ints)
    rows_cap: int | None = None
    seed: int = 0
    mode: str = "sum"
    weighted: bool = False
    id_dtype: str = "int64"
    sparse: bool = False
    return_logits: bool = False
    fixed_pooling: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.cardinalities:
            raise ValueError(f"{self.name}: at least one embedding table is needed")
        if any(n < 1 for n in self.cardinalities):
            raise ValueError(f"{self.name}: every table needs at least one row")
        if len(self.pooling) != len(self.cardinalities):
            raise ValueError(
                f"{self.name}: pooling has {len(self.pooling)} entries for {len(self.cardinalities)} tables"
            )
        if any(p < 1 for p in self.pooling):
            raise ValueError(f"{self.name}: pooling sizes must be >= 1")
        if len(self.bottom_mlp) < 2 or len(self.top_mlp) < 1:
            raise ValueError(f"{self.name}: bottom_mlp needs input+output widths, top_mlp at least one layer")
        if self.bottom_mlp[-1] != self.embedding_dim:
            # The dot interaction stacks the dense output with the embeddings.
            raise ValueError(
                f"{self.name}: bottom MLP output {self.bottom_mlp[-1]} must equal embedding_dim {self.embedding_dim}"
            )
        if self.mode not in ("sum", "mean"):
            raise ValueError(f"{self.name}: mode must be 'sum' or 'mean', got {self.mode!r}")
        if self.weighted and self.mode != "sum":
            raise ValueError(f"{self.name}: per_sample_weights need mode='sum' (nn.EmbeddingBag restriction)")
        if self.id_dtype not in _ID_DTYPES:
            raise ValueError(f"{self.name}: id_dtype must be one of {sorted(_ID_DTYPES)}, got {self.id_dtype!r}")
        if self.rows_cap is not None and self.rows_cap < 1:
            raise ValueError(f"{self.name}: rows_cap must be >= 1 or None")

    @property
    def num_tables(self) -> int:
        return len(self.cardinalities)

    @property
    def num_rows(self) -> tuple[int, ...]:
        """Rows per table after ``rows_cap``."""
        if self.rows_cap is None:
            return self.cardinalities
        return tuple(min(n, self.rows_cap) for n in self.cardinalities)

    @property
    def dense_in(self) -> int:
        return self.bottom_mlp[0]

    @property
    def top_in(self) -> int:
        """Dense output + strict lower triangle of the (k+1) x (k+1) dot products."""
        k = self.num_tables + 1
        return self.embedding_dim + k * (k - 1) // 2

    @property
    def torch_id_dtype(self) -> torch.dtype:
        return _ID_DTYPES[self.id_dtype]


def dlrm_kaggle(rows_cap: int | None = None) -> DLRMConfig:
    """Criteo Kaggle DLRM: 26 one-hot tables, dim 16, bottom 13-512-256-64-16, top 367-512-256-1."""
    return DLRMConfig(
        name="dlrm-kaggle",
        cardinalities=KAGGLE_CARDINALITIES,
        embedding_dim=16,
        bottom_mlp=(13, 512, 256, 64, 16),
        top_mlp=(512, 256, 1),
        pooling=(1,) * len(KAGGLE_CARDINALITIES),
        rows_cap=rows_cap,
    )


def dlrm_terabyte(rows_cap: int | None = None) -> DLRMConfig:
    """Criteo Terabyte DLRM: 26 one-hot tables, dim 64, bottom 13-512-256-64, top 415-512-512-256-1.

    The reference runs it with ``--max-ind-range=10000000``; pass ``rows_cap=10_000_000`` for
    that (uncapped, the tables hold ~244M rows, ~62 GB at fp32).
    """
    return DLRMConfig(
        name="dlrm-terabyte",
        cardinalities=TERABYTE_CARDINALITIES,
        embedding_dim=64,
        bottom_mlp=(13, 512, 256, 64),
        top_mlp=(512, 512, 256, 1),
        pooling=(1,) * len(TERABYTE_CARDINALITIES),
        rows_cap=rows_cap,
    )


def dlrm_bench(rows_cap: int | None = None) -> DLRMConfig:
    """``bench/dlrm_s_benchmark.sh``: 8 x 1M-row tables, dim 64, up to 100 ids per bag,
    512 dense inputs, bottom 512-512-64, top 100-1024-1024-1024-1."""
    return DLRMConfig(
        name="dlrm-bench",
        cardinalities=(1_000_000,) * 8,
        embedding_dim=64,
        bottom_mlp=(512, 512, 64),
        top_mlp=(1024, 1024, 1024, 1),
        pooling=(100,) * 8,
        rows_cap=rows_cap,
    )


def _mlp(sizes: Sequence[int], generator: torch.Generator) -> nn.Sequential:
    """Linear+ReLU stack with the reference's init: W ~ N(0, sqrt(2/(in+out))), b ~ N(0, sqrt(1/out))."""
    layers: list[nn.Module] = []
    for n, m in zip(sizes[:-1], sizes[1:]):
        lin = nn.Linear(n, m, bias=True)
        with torch.no_grad():
            lin.weight.normal_(0.0, math.sqrt(2.0 / (m + n)), generator=generator)
            lin.bias.normal_(0.0, math.sqrt(1.0 / m), generator=generator)
        layers += [lin, nn.ReLU()]
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """DLRM with "dot" interaction.

    ``forward(dense, indices, offsets, per_sample_weights=None)``: ``dense`` is ``[B, dense_in]``;
    ``indices[k]`` / ``offsets[k]`` are feature k's ids and bag starts (length B);
    ``per_sample_weights[k]`` (weighted configs only) has one weight per id. Returns the click
    probability ``[B, 1]``, or the logit when ``config.return_logits``.
    """

    # The interaction's index buffers (registered in __init__; typed here for nn.Module's __getattr__).
    li: Tensor
    lj: Tensor

    def __init__(self, config: DLRMConfig, device: str | torch.device = "cpu") -> None:
        """`device="meta"` builds the tables on the meta device (shapes only; the MLPs are small
        and stay on the CPU): `sparselift.compile(..., options=CompileOptions(table_init=
        model.table_init))` then materializes each rank's shard only."""
        super().__init__()
        self.config = config
        g = torch.Generator().manual_seed(config.seed)
        d = config.embedding_dim
        tables: list[nn.Module] = []
        for k, n in enumerate(config.num_rows):
            # Reference init U(-sqrt(1/n), sqrt(1/n)), drawn chunk by chunk (sparselift.init) so
            # that any shard can be drawn alone and equals the same rows of the whole table.
            # Passing _weight skips EmbeddingBag's own normal_ init (double the cost at 10M rows).
            w = torch.empty(n, d, device=device)
            if w.device.type != "meta":
                self.init_table(k, w, 0)
            tables.append(nn.EmbeddingBag(n, d, mode=config.mode, sparse=config.sparse, _weight=w))
        self.emb_l = nn.ModuleList(tables)
        self.bot_l = _mlp(config.bottom_mlp, g)
        top = _mlp((config.top_in, *config.top_mlp), g)
        # Drop the last ReLU: the reference puts a Sigmoid there; we apply it in forward so the
        # logits stay available (BCEWithLogits).
        self.top_l = nn.Sequential(*list(top)[:-1])
        # Interaction indices, built once (the reference rebuilds them every step with
        # torch.tensor, which torch.export would turn into lifted constants).
        li, lj = torch.tril_indices(config.num_tables + 1, config.num_tables + 1, offset=-1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)

    def init_table(self, k: int, shard: Tensor, row_offset: int) -> Tensor:
        """Fill rows `row_offset ..` of table k with its seeded initial values."""
        return fill_rows(
            shard, row_offset, uniform_init(self.config.num_rows[k]), seed=self.config.seed, table=f"emb_l.{k}"
        )

    def table_init(self, name: str, shard: Tensor, row_offset: int) -> None:
        """`CompileOptions(table_init=...)` for a meta-device DLRM: table `emb_l.<k>`'s shard."""
        prefix, _, k = name.rpartition(".")
        if prefix != "emb_l" or not k.isdigit():
            raise KeyError(f"DLRM has no table '{name}' (its tables are emb_l.0 .. emb_l.{len(self.emb_l) - 1})")
        self.init_table(int(k), shard, row_offset)

    def apply_emb(
        self,
        indices: Sequence[Tensor],
        offsets: Sequence[Tensor],
        per_sample_weights: Sequence[Tensor] | None,
    ) -> list[Tensor]:
        if len(indices) != len(self.emb_l) or len(offsets) != len(self.emb_l):
            raise ValueError(f"expected {len(self.emb_l)} id/offset tensors, got {len(indices)}/{len(offsets)}")
        ly = []
        for k, emb in enumerate(self.emb_l):
            psw = per_sample_weights[k] if per_sample_weights is not None else None
            ly.append(emb(indices[k], offsets[k], per_sample_weights=psw))
        return ly

    def interact_features(self, x: Tensor, ly: list[Tensor]) -> Tensor:
        batch_size, d = x.shape
        t = torch.cat([x, *ly], dim=1).view(batch_size, -1, d)
        z = torch.bmm(t, torch.transpose(t, 1, 2))
        zflat = z[:, self.li, self.lj]
        return torch.cat([x, zflat], dim=1)

    def forward(
        self,
        dense: Tensor,
        indices: list[Tensor],
        offsets: list[Tensor],
        per_sample_weights: list[Tensor] | None = None,
    ) -> Tensor:
        if self.config.weighted and per_sample_weights is None:
            raise ValueError(f"{self.config.name} is weighted: pass per_sample_weights")
        x = self.bot_l(dense)
        ly = self.apply_emb(indices, offsets, per_sample_weights)
        z = self.top_l(self.interact_features(x, ly))
        return z if self.config.return_logits else torch.sigmoid(z)


def example_inputs(
    config: DLRMConfig, batch_size: int, seed: int | None = None
) -> tuple[Tensor, list[Tensor], list[Tensor]] | tuple[Tensor, list[Tensor], list[Tensor], list[Tensor]]:
    """Random inputs in the reference's random-data format.

    Dense features are U[0, 1); feature k gets ``batch_size`` bags of 1..pooling[k] ids (exactly
    pooling[k] with ``fixed_pooling``), ids uniform in the (capped) table. Returns
    ``(dense, indices, offsets)`` plus ``per_sample_weights`` for weighted configs.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    g = torch.Generator().manual_seed(config.seed + 1 if seed is None else seed)
    dtype = config.torch_id_dtype
    dense = torch.rand(batch_size, config.dense_in, generator=g)
    indices, offsets, weights = [], [], []
    for rows, pooling in zip(config.num_rows, config.pooling):
        cap = min(rows, pooling)
        if config.fixed_pooling:
            lengths = torch.full((batch_size,), pooling, dtype=torch.int64)
        else:
            lengths = torch.randint(1, cap + 1, (batch_size,), generator=g)
        total = int(lengths.sum())
        indices.append(torch.randint(0, rows, (total,), generator=g, dtype=dtype))
        offsets.append((torch.cumsum(lengths, 0) - lengths).to(dtype))
        if config.weighted:
            weights.append(torch.rand(total, generator=g))
    if config.weighted:
        return dense, indices, offsets, weights
    return dense, indices, offsets


def build_dlrm(
    config: DLRMConfig, batch_size: int = 128, seed: int | None = None, device: str | torch.device = "cpu"
) -> tuple[DLRM, tuple]:
    """Build a seeded :class:`DLRM` and example inputs for it (``seed`` defaults to config.seed);
    ``device="meta"``: tables on the meta device (see :class:`DLRM`)."""
    if seed is not None:
        config = attrs.evolve(config, seed=seed)
    model = DLRM(config, device=device)
    return model, example_inputs(config, batch_size)
