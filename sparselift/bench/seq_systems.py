"""The systems of `sparselift bench seq` on the DIN model: the plain-PyTorch baseline, SparseLift
and the dense-only floor (TorchRec's is in :mod:`sparselift.bench.seq_torchrec`).

All start from the same seeded weights (:class:`~sparselift.models.din.DIN` with the same seed,
its tables drawn by ``DIN.init_table``), train on the same data
(:mod:`sparselift.data.din_synthetic`) with BCE-with-logits (mean over the rank's local rows)
and one learning rate, the dense part with SGD and the tables with SGD or the optimizer
``sparse_optimizer=`` gives, like the DLRM peers of :mod:`sparselift.bench.baselines`.

* :class:`DINBaselineRunner` ("PyTorch-Baseline") is the DLRM reference's distributed path
  applied to DIN (:class:`~sparselift.bench.baselines.BaselineRunner`'s steps): the three
  tables (item, cat, user) split across ranks by count in contiguous slices, each a
  ``nn.Embedding(sparse=True)`` / ``nn.EmbeddingBag(sparse=True)``; every rank looks up the
  *global* batch's ids of its own tables; the looked-up vectors (the padded history
  ``[G, L*D]``, the target ``[G, D]``, the pooled user ``[G, 32]``) go through one
  asynchronous all-to-all (and their gradients through the matching one in backward, divided by
  the world size as TorchRec does); SGD (or Adagrad) on sparse gradients; the dense part in DDP.
* :func:`din_sparselift_runner`: DIN compiled by ``sparselift.compile`` (tables on the meta
  device, materialized per shard by ``DIN.table_init``), trained through ``TrainPipeline``.
* :class:`DINDenseOnlyRunner`: the attention and top MLPs with the embeddings given (random,
  requiring grad), the mask from the batch: the floor no sparse-path optimization can beat.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel as DDP

from sparselift.bench.baselines import (
    BaselineRunner,
    DenseFloor,
    _A2AState,
    _AllToAllReq,
    _AllToAllWait,
    _world_group,
    get_my_slice,
    random_leaf,
    sparse_torch_optimizer,
)
from sparselift.bench.systems import CompiledRunner
from sparselift.bench.timing import StageTimer
from sparselift.data.din_synthetic import DINBatch, DINSynthetic
from sparselift.models.din import DIN, DINConfig

__all__ = ["DINBaselineRunner", "DINDenseOnlyRunner", "din_sparselift_runner", "din_config", "din_source"]

TABLES: tuple[str, ...] = ("item", "cat", "user")


def din_config(rows_cap: int | None, seed: int = 0) -> DINConfig:
    """The benchmark's DIN: the real sizes (1M x 64 items, 1,000 x 16 categories, 1M x 32 users)
    unless ``rows_cap`` caps them."""
    return DINConfig(rows_cap=rows_cap, seed=seed)


def din_source(config: DINConfig, seed: int = 0) -> DINSynthetic:
    return DINSynthetic.for_model(config, seed=seed)


def din_inputs(batch: DINBatch) -> tuple[Tensor, ...]:
    return batch.inputs()


def meta_din(config: DINConfig, seed: int, sparse: bool = False) -> DIN:
    """The seeded DIN with its tables on the meta device (each system materializes its rows)."""
    return DIN(attrs.evolve(config, seed=seed, sparse=sparse), device="meta")


class DINBaselineRunner(BaselineRunner):
    """PyTorch-Baseline on DIN (see the module docstring): ``step(global_batch, local_rows)``,
    ``forward(global_batch, local_rows)`` and ``local_rows(G)`` as :class:`BaselineRunner`'s."""

    name = "PyTorch-Baseline"

    def __init__(
        self,
        config: DINConfig,
        rank: int,
        world: int,
        lr: float,
        seed: int,
        *,
        grad_division: bool = True,
        sparse_optimizer: Any = None,
        reference_optimizer: bool = False,
    ) -> None:
        """`reference_optimizer`: the tables' optimizer's reference semantics where torch has no
        sparse form of it (quality runs)."""
        _world_group(world)
        if len(TABLES) < world:
            raise ValueError(f"the baseline needs at least one table per rank ({len(TABLES)} tables, {world} ranks)")
        self.config, self.rank, self.world, self.lr = config, rank, world, lr
        self.grad_division = grad_division
        model = meta_din(config, seed, sparse=True)
        self.table_slice = get_my_slice(len(TABLES), rank, world)
        mine = TABLES[self.table_slice]
        for name in mine:  # this rank's tables only; the others stay shapes on the meta device
            emb = getattr(model, name)
            emb.weight = nn.Parameter(model.init_table(name, torch.empty(emb.weight.shape), 0))
        self.emb_l = nn.ModuleDict({name: getattr(model, name) for name in mine})
        # The looked-up outputs each table sends, in order: the history and target of the item and
        # category tables, the user's pooled bag.
        length = config.max_history
        widths = {"item": [length * config.item_dim, config.item_dim], "cat": [length * config.cat_dim, config.cat_dim]}
        widths["user"] = [config.user_dim]
        self.widths = [w for name in TABLES for w in widths[name]]
        self.table_splits = [
            sum(len(widths[t]) for t in TABLES[get_my_slice(len(TABLES), r, world)]) for r in range(world)
        ]
        self.dense: nn.Module = DDP(model.dense) if world > 1 else model.dense
        self.emb_opt = sparse_torch_optimizer(sparse_optimizer, lr, self.emb_l.parameters(), reference_optimizer)
        self.dense_opt = torch.optim.SGD(self.dense.parameters(), lr=lr)
        self.stage_timer: StageTimer | None = None

    def _check_rows(self, global_batch: Any, local_rows: slice) -> list[int]:
        return self._row_splits(global_batch.batch_size, local_rows)

    def _lookups(self, gb: DINBatch) -> list[Tensor]:
        n, out = gb.batch_size, []
        for name, emb in self.emb_l.items():
            if name == "user":
                out.append(emb(gb.user_ids, gb.user_offsets[:-1]))
                continue
            hist, target = (gb.history_items, gb.target_item) if name == "item" else (gb.history_cats, gb.target_cat)
            out += [emb(hist).view(n, -1), emb(target)]
        return out

    def _forward(self, gb: DINBatch, rows: slice, row_splits: list[int], t: StageTimer | None):
        if t is not None:
            t.push("sparse_fwd")
        ly = self._lookups(gb)
        if self.world > 1:
            state = _A2AState(self.rank, self.world, row_splits, self.table_splits, 0, self.grad_division, self.widths)
            recv = _AllToAllReq.apply(state, *ly)
        if t is not None:
            t.switch("other_fwd")
        mask = gb.history_items[rows] != 0
        if t is not None:
            t.switch("sparse_fwd")
        outs = list(_AllToAllWait.apply(state, recv)) if self.world > 1 else ly
        if t is not None:
            t.switch("other_fwd")
        item_hist, item_target, cat_hist, cat_target, user = outs
        n, length = mask.shape
        hist = torch.cat([item_hist.reshape(n, length, -1), cat_hist.reshape(n, length, -1)], dim=-1)
        logits = self.dense(hist, mask, torch.cat([item_target, cat_target], dim=1), user)
        if t is not None:
            t.pop()
        return logits, outs


def din_sparselift_runner(
    config: DINConfig, rank: int, world: int, lr: float, seed: int, example: DINBatch, **options: Any
) -> CompiledRunner:
    """SparseLift on DIN: built on the meta device (each rank materializes its shards with
    ``DIN.table_init``), compiled, trained with SGD (the tables: ``sparse_optimizer``'s);
    ``options``: :class:`CompiledRunner`'s (``kernels``, ``sharding``, ``batches``, ``passes``,
    ``sparse_optimizer``)."""
    _world_group(world)
    model = meta_din(config, seed)
    return CompiledRunner(model, example, din_inputs, lr, table_init=model.table_init, **options)


class DINDenseOnlyRunner(DenseFloor):
    """DIN's attention and top MLPs with random history, target and user embeddings given."""

    def __init__(self, config: DINConfig, rank: int, world: int, lr: float, seed: int) -> None:
        _world_group(world)
        self.config, self.rank, self.world = config, rank, world
        dense = meta_din(config, seed).dense  # same init as the other systems; tables unused
        self.net = DDP(dense) if world > 1 else dense
        self.opt = torch.optim.SGD(self.net.parameters(), lr=lr)
        self._gen = torch.Generator().manual_seed(seed + 1000 + rank)
        self._given: tuple[Tensor, ...] = ()
        self.stage_timer: StageTimer | None = None

    def net_inputs(self, local_batch: DINBatch) -> tuple:
        b, c = local_batch.batch_size, self.config
        if not self._given or self._given[0].shape[0] != b:
            shapes = ((b, c.max_history, c.embed_dim), (b, c.embed_dim), (b, c.user_dim))
            self._given = tuple(random_leaf(s, c.init_bound, self._gen) for s in shapes)
        for x in self._given:
            x.grad = None
        hist, target, user = self._given
        return hist, local_batch.mask(), target, user
