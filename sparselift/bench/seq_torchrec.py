"""TorchRec as the peer of `sparselift bench seq`: DIN on a sharded EmbeddingCollection + EBC.

The tables of :class:`~sparselift.models.din.DIN` as TorchRec modules: an ``EmbeddingCollection``
with table ``item`` (features ``hist_item``, ``target_item``), one with table ``cat``
(``hist_cat``, ``target_cat``; a collection's tables must share one dim), unpooled, and an
``EmbeddingBagCollection`` with table ``user`` (sum pooling);
the same dense module (``DIN.dense``) and the same seeded table values. Sharded by
``DistributedModelParallel`` (table-wise, FBGEMM's fused TBE, SGD, or the optimizer
``sparse_optimizer=`` gives where FBGEMM has it on CPU, fused into backward) and
trained through ``TrainPipelineSparseDist``, like the DLRM peer (:mod:`sparselift.bench.baselines`,
whose ``_TorchRecTrainer`` this runner shares). The history, a JaggedTensor per sample, is padded
to ``[B, L, D]`` (``to_padded_dense``) and masked by its lengths for the same attention.

This module imports torchrec at import time: import it lazily.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

import attrs
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, PoolingType
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
from torchrec.streamable import Pipelineable

from sparselift.bench.baselines import _TorchRecTrainer, _world_group, check_pipeline, in_backward_optimizer
from sparselift.bench.seq_systems import meta_din
from sparselift.bench.systems import CompiledRunner
from sparselift.bench.timing import StageTimer
from sparselift.data.din_synthetic import KJT_FEATURES, DINBatch
from sparselift.models.din import DIN, DINConfig, DINDense

__all__ = [
    "DINOnCollections",
    "DINTorchRecRunner",
    "TorchRecDIN",
    "TorchRecDINBatch",
    "din_collections",
    "din_ec_sparselift_runner",
    "kjt_inputs",
    "to_torchrec_din",
]

STATE_KEYS = {
    "item": "ec_item.embeddings.item.weight",
    "cat": "ec_cat.embeddings.cat.weight",
    "user": "ebc.embedding_bags.user.weight",
}


class TorchRecDINBatch(Pipelineable):
    """A DIN batch as TorchRec's pipelines take it: one KJT per table (``item``, ``cat``,
    ``user``; see ``KJT_FEATURES``) and the labels."""

    def __init__(self, item: KeyedJaggedTensor, cat: KeyedJaggedTensor, user: KeyedJaggedTensor, labels: Tensor):
        self.item, self.cat, self.user, self.labels = item, cat, user, labels

    def _parts(self) -> tuple[Any, ...]:
        return self.item, self.cat, self.user, self.labels

    def to(self, device: torch.device, non_blocking: bool = False) -> TorchRecDINBatch:
        return TorchRecDINBatch(*(x.to(device=device, non_blocking=non_blocking) for x in self._parts()))

    def record_stream(self, stream: Any) -> None:
        for x in self._parts():
            x.record_stream(stream)

    def pin_memory(self) -> TorchRecDINBatch:
        return TorchRecDINBatch(*(x.pin_memory() for x in self._parts()))


def to_torchrec_din(batch: DINBatch) -> TorchRecDINBatch:
    kjts = batch.to_kjts()
    return TorchRecDINBatch(kjts["item"], kjts["cat"], kjts["user"], batch.labels)


def din_collections(config: DINConfig, device: torch.device) -> dict[str, nn.Module]:
    """DIN's tables as TorchRec modules: an EmbeddingCollection each for the item and category
    tables (a collection's tables must share one dim) and an EmbeddingBagCollection (user)."""
    (item_rows, item_dim), (cat_rows, cat_dim), (user_rows, user_dim) = config.tables.values()

    def ec(name: str, rows: int, dim: int) -> EmbeddingCollection:
        features = list(KJT_FEATURES[name])
        table = EmbeddingConfig(name=name, embedding_dim=dim, num_embeddings=rows, feature_names=features)
        return EmbeddingCollection(tables=[table], device=device)

    user = EmbeddingBagConfig(
        name="user", embedding_dim=user_dim, num_embeddings=user_rows, feature_names=["user"], pooling=PoolingType.SUM
    )
    return {
        "ec_item": ec("item", item_rows, item_dim),
        "ec_cat": ec("cat", cat_rows, cat_dim),
        "ebc": EmbeddingBagCollection(tables=[user], device=device),
    }


def padded_history(item: dict[str, Any], cat: dict[str, Any], length: int) -> tuple[Tensor, Tensor, Tensor]:
    """The collections' JaggedTensors as DIN's dense part takes them: the history padded to
    `[B, length, D]`, its mask, and the target."""
    hist_item, lengths = item["hist_item"], item["hist_item"].lengths()
    hist = torch.cat([hist_item.to_padded_dense(length), cat["hist_cat"].to_padded_dense(length)], dim=-1)
    target = torch.cat([item["target_item"].values(), cat["target_cat"].values()], dim=1)
    mask = torch.arange(length, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)
    return hist, mask, target


class DINOnCollections(nn.Module):
    """DIN on unsharded TorchRec collections, as a user writes it:
    ``forward(item_kjt, cat_kjt, user_kjt) -> logits [B]``. What `bench seq`'s "sparselift_ec"
    system compiles with `sparselift.compile` (the TorchRec peer shards the same modules)."""

    def __init__(self, ec_item: nn.Module, ec_cat: nn.Module, ebc: nn.Module, dense: DINDense, length: int) -> None:
        super().__init__()
        self.ec_item, self.ec_cat, self.ebc, self.dense = ec_item, ec_cat, ebc, dense
        self.max_history = length

    def forward(self, item: KeyedJaggedTensor, cat: KeyedJaggedTensor, user: KeyedJaggedTensor) -> Tensor:
        hist, mask, target = padded_history(self.ec_item(item), self.ec_cat(cat), self.max_history)
        return self.dense(hist, mask, target, self.ebc(user)["user"])


def kjt_inputs(batch: DINBatch) -> tuple[KeyedJaggedTensor, ...]:
    """`DINOnCollections`' forward arguments for a batch: one KJT per table."""
    kjts = batch.to_kjts()
    return kjts["item"], kjts["cat"], kjts["user"]


def din_ec_sparselift_runner(
    config: DINConfig, rank: int, world: int, lr: float, seed: int, example: DINBatch, **options: Any
) -> CompiledRunner:
    """SparseLift on DIN written with TorchRec's collections (`DINOnCollections`), built on the
    meta device, every table filled with `DIN.init_table`'s values (the other systems' too);
    compiled for histories of up to `config.max_history` items. `options`: `CompiledRunner`'s
    (its `sparse_optimizer` among them: the model carries no in-backward optimizer of its own)."""
    _world_group(world)
    din = meta_din(config, seed)
    tables = din_collections(config, torch.device("meta"))
    model = DINOnCollections(**tables, dense=din.dense, length=config.max_history)
    by_ir_name = {key.removesuffix(".weight"): name for name, key in STATE_KEYS.items()}

    def table_init(table: str, shard: Tensor, row_offset: int) -> None:
        din.init_table(by_ir_name[table], shard, row_offset)

    lengths = {"hist_item": config.max_history, "hist_cat": config.max_history}
    return CompiledRunner(model, example, kjt_inputs, lr, table_init=table_init, max_lengths=lengths, **options)


class TorchRecDIN(nn.Module):
    """DIN on TorchRec collections; ``forward(batch) -> (loss, (loss, logits))``. Symbolically
    traceable (TrainPipelineSparseDist rewrites it)."""

    def __init__(self, ec_item: nn.Module, ec_cat: nn.Module, ebc: nn.Module, dense: DINDense, length: int) -> None:
        super().__init__()
        self.ec_item, self.ec_cat, self.ebc, self.dense = ec_item, ec_cat, ebc, dense
        self.max_history = length
        self.timer: StageTimer | None = None
        self.last_pooled: list[Tensor] | None = None

    def logits(self, batch: TorchRecDINBatch) -> Tensor:
        timer = self.timer
        if timer is not None:
            timer.push("sparse_fwd")
        item = self.ec_item(batch.item)  # each sharded module's output exchange is in flight ...
        cat = self.ec_cat(batch.cat)
        user = self.ebc(batch.user)["user"]  # ... until its result is read
        hist, mask, target = padded_history(item, cat, self.max_history)
        if timer is not None:
            timer.switch("other_fwd")
            self.last_pooled = [hist, target, user]
        logits = self.dense(hist, mask, target, user)
        if timer is not None:
            timer.pop()
        return logits

    def forward(self, batch: TorchRecDINBatch) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        logits = self.logits(batch)
        loss = F.binary_cross_entropy_with_logits(logits, batch.labels)
        return loss, (loss.detach(), logits.detach())


class DINTorchRecRunner(_TorchRecTrainer):
    """TorchRec DMP on DIN (table-wise, fused TBE + in-backward SGD, or ``sparse_optimizer``'s
    record where FBGEMM has it on CPU), ``TrainPipelineSparseDist``.

    ``batches`` yields this rank's local :class:`DINBatch` es; ``progress()`` trains one and
    returns the loss; ``forward(local_batch)`` returns logits ``[B]`` without gradients.
    """

    def __init__(
        self,
        config: DINConfig,
        rank: int,
        world: int,
        lr: float,
        seed: int,
        batches: Iterable[DINBatch],
        *,
        pipeline: str = "sparse_dist",
        batch_size_hint: int | None = None,
        sparse_optimizer: Any = None,
    ) -> None:
        from torchrec.distributed.embedding import EmbeddingCollectionSharder
        from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
        from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

        check_pipeline(pipeline)
        _world_group(world)
        self.config, self.rank, self.world, self.lr = config, rank, world, lr
        model = DIN(attrs.evolve(config, seed=seed), device="meta")
        tables = din_collections(config, torch.device("meta"))
        params = [p for m in tables.values() for p in m.parameters()]
        cls, kwargs = in_backward_optimizer(sparse_optimizer, lr)
        apply_optimizer_in_backward(cls, params, kwargs)
        net = TorchRecDIN(**tables, dense=model.dense, length=config.max_history)
        sharders = [EmbeddingCollectionSharder(), EmbeddingBagCollectionSharder()]
        self._shard(net, sharders, list(STATE_KEYS), world, batch_size_hint)
        for name, (_, dim) in config.tables.items():
            self._fill_table(STATE_KEYS[name], dim, partial(model.init_table, name))
        del model
        self._start(lr, batches, to_torchrec_din, pipeline)
