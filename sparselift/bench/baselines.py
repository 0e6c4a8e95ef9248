"""The peer systems SparseLift is benchmarked against, plus the dense-only floor.

All runners start from the same seeded weights (:func:`~sparselift.models.dlrm.build_dlrm` with
the same ``seed`` on every rank), use the same data, the same per-rank batch, BCE-with-logits
(mean over the rank's local rows) and one learning rate for dense and sparse parameters: plain
SGD for the dense ones, and for the tables SGD or the optimizer `sparse_optimizer=` gives (a
`sparselift.optim` record; `sparselift.bench.dlrm.UNAVAILABLE` says which a peer lacks).

* :class:`BaselineRunner` ("DLRM-Baseline") re-implements the distributed path of the DLRM
  reference (facebookresearch/dlrm ``dlrm_s_pytorch.py --dist-backend`` with
  ``extend_distributed.py``): one ``nn.EmbeddingBag(sparse=True)`` per table looked up in a
  Python loop; tables split across ranks by count in contiguous slices (``get_my_slice``);
  every rank reads the *global* batch's ids for its own tables (no input all-to-all) and only
  its slice of the dense features and labels; the concatenated pooled outputs go through one
  asynchronous ``all_to_all_single`` that overlaps the bottom MLP (``All2All_Req`` /
  ``All2All_Wait``), and the pooled gradients through the matching all-to-all in backward (it
  overlaps the bottom MLP's backward); embeddings are updated by ``torch.optim.SGD`` on sparse
  gradients (or ``torch.optim.Adagrad``, the one other torch optimizer of sparse gradients the
  benchmark's optimizers have), the bottom and top MLPs are each wrapped in DDP (gloo), like the
  reference.
* :class:`TorchRecRunner` ("TorchRec"): ``EmbeddingBagCollection`` with the same tables,
  ``DistributedModelParallel`` with table-wise sharding on FBGEMM's fused TBE
  (``EmbeddingComputeKernel.FUSED``) and SGD fused into backward
  (``apply_optimizer_in_backward`` -> ``EXACT_SGD``; ``EXACT_ADAGRAD`` / ``EXACT_ROWWISE_ADAGRAD``
  for Adagrad / row-wise Adagrad, FBGEMM's only others on CPU), the DLRM dense part under DMP's DDP, and
  ``TrainPipelineSparseDist`` (input distribution of batch i+1 overlaps batch i). The
  ``pipeline`` attribute says which pipeline ran ("sparse_dist", or "base" as the fallback).
* :class:`DenseOnlyRunner` (:func:`dense_only_step`): the MLPs + interaction with the pooled
  embeddings given as (random) inputs: forward + backward + SGD, DDP for the dense gradients,
  no lookups and no embedding communication; the floor no sparse-path optimization can beat.

Gradient scaling (the one semantic difference between the peers). Each rank's loss is the mean
over its ``B`` local rows and DDP *averages* the dense gradients over the ``W`` ranks, so dense
parameters see the gradient of the global-batch mean loss, exactly as single-process training
on the global batch would. An embedding table's owner, however, receives the pooled gradients
of all ranks' local-mean losses through the backward all-to-all and *sums* them, which is
``W`` times the global-mean gradient:

* the DLRM reference does nothing about it (its sparse parameters effectively train with
  ``W * lr``): ``BaselineRunner(..., grad_division=False)`` reproduces that;
* TorchRec divides the pooled gradient by ``W`` in the output all-to-all's backward
  (``torchrec.distributed.comm_ops.GRADIENT_DIVISION``, default True), which makes sharded
  training equal to single-process global-batch training. ``BaselineRunner`` does the same by
  default (``grad_division=True``) so that all systems train the same model.

Stage timing (``enable_stage_timing()``; off by default and then costless): see
:mod:`sparselift.bench.timing`. ``runner.stage_times`` lists one
:class:`~sparselift.bench.timing.StageTimes` per timed step, ``runner.stage_summary(skip)`` is
the column-wise median.

All runners are built inside an initialized default process group (e.g. by
:func:`sparselift.runtime.distributed.launch`); `sparselift bench dlrm`
(:mod:`sparselift.bench.dlrm`) runs them side by side.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from typing import Any

import attrs
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd import Function
from torch.nn.parallel import DistributedDataParallel as DDP

from sparselift.bench.timing import StageTimer, StageTimes, hook_backward_subgraph, remove_hooks
from sparselift.data.batch import Batch, default_keys
from sparselift.frontend.quiet import silenced
from sparselift.models.dlrm import DLRMConfig, build_dlrm

__all__ = [
    "BaselineRunner",
    "DenseOnlyRunner",
    "TorchRecRunner",
    "dense_only_step",
    "get_my_slice",
    "get_split_lengths",
    "in_backward_optimizer",
    "interact",
    "sparse_torch_optimizer",
    "synthetic_source",
    "to_torchrec_batch",
]


# -- shared pieces ---------------------------------------------------------------------------------


def get_my_slice(n: int, rank: int, world: int) -> slice:
    """The reference's ``get_my_slice``: contiguous near-equal split, the first ``n % world``
    ranks get one extra item (equals ``[r*n/W, (r+1)*n/W)`` when ``W`` divides ``n``)."""
    k, m = divmod(n, world)
    return slice(rank * k + min(rank, m), (rank + 1) * k + min(rank + 1, m))


def get_split_lengths(n: int, world: int) -> list[int]:
    """Sizes of the ``world`` slices of :func:`get_my_slice`."""
    k, m = divmod(n, world)
    return [k + 1 if r < m else k for r in range(world)]


def interact(x: Tensor, pooled: Tensor, li: Tensor, lj: Tensor) -> Tensor:
    """DLRM "dot" interaction with the pooled embeddings as one ``[B, F*D]`` tensor.

    Same as ``DLRM.interact_features(x, [p_0, .., p_{F-1}])`` (``torch.cat`` of the list equals
    the flat tensor): bmm of ``[x; p_0..p_{F-1}]``, strict lower triangle, concatenated with ``x``.
    """
    d = x.shape[1]
    t = torch.cat([x, pooled], dim=1).view(x.shape[0], -1, d)
    z = torch.bmm(t, t.transpose(1, 2))
    return torch.cat([x, z[:, li, lj]], dim=1)


def sparse_torch_optimizer(
    record: Any, lr: float, params: Iterable[Tensor], reference: bool = False
) -> torch.optim.Optimizer:
    """A baseline's embedding optimizer on sparse gradients: `record`'s torch optimizer (None: SGD
    at `lr`); `reference`: the reference semantics where torch has none (quality runs)."""
    from sparselift.bench.sparse_optimizers import torch_sparse_optimizer
    from sparselift.optim import SGD

    return torch_sparse_optimizer(record if record is not None else SGD(lr=lr), list(params), reference)


def in_backward_optimizer(record: Any, lr: float) -> tuple[type, dict[str, float]]:
    """TorchRec's `apply_optimizer_in_backward` class and kwargs for `record` (None: SGD at `lr`)."""
    from sparselift.bench.sparse_optimizers import torchrec_optimizer
    from sparselift.optim import SGD

    return torchrec_optimizer(record if record is not None else SGD(lr=lr))


def _dlrm(config: DLRMConfig, seed: int, sparse: bool):
    """The seeded DLRM with its tables on the meta device: each system materializes only the
    rows it holds (`DLRM.init_table`, the same values for every system and placement)."""
    cfg = attrs.evolve(config, sparse=sparse, return_logits=True)
    model, _ = build_dlrm(cfg, batch_size=1, seed=seed, device="meta")
    return model


def check_pipeline(pipeline: str) -> None:
    if pipeline not in ("sparse_dist", "base"):
        raise ValueError(f"pipeline must be 'sparse_dist' or 'base', got {pipeline!r}")


def _world_group(world: int) -> None:
    if not dist.is_initialized():
        raise RuntimeError("runners need an initialized default process group (e.g. launch())")
    if dist.get_world_size() != world:
        raise ValueError(f"world={world} but the process group has {dist.get_world_size()} ranks")


# -- DLRM-Baseline: the reference's all-to-all as a pair of autograd Functions ---------------------


class _A2AState:
    """What the Req/Wait pair shares for one forward (the reference keeps it in a global).

    ``widths``: the width of each global output (rank 0's outputs first, ``sum(table_splits)``
    of them); by default every output is ``dim`` wide (the reference's pooled ``[N, D]``)."""

    __slots__ = (
        "divide",
        "local_rows",
        "rank",
        "recv",
        "row_splits",
        "send",
        "table_splits",
        "widths",
        "work",
        "world",
    )

    def __init__(
        self,
        rank: int,
        world: int,
        row_splits: list[int],
        table_splits: list[int],
        dim: int,
        divide: bool,
        widths: Sequence[int] | None = None,
    ):
        self.rank = rank
        self.world = world
        self.row_splits = row_splits  # rows of the global batch owned by each rank
        self.table_splits = table_splits  # outputs (tables) owned by each rank
        self.local_rows = row_splits[rank]
        self.widths = list(widths) if widths is not None else [dim] * sum(table_splits)
        if len(self.widths) != sum(table_splits):
            raise ValueError(f"{len(self.widths)} output widths for {sum(table_splits)} outputs")
        self.divide = divide
        self.work: Any = None
        self.send: Tensor | None = None
        self.recv: Tensor | None = None

    def rank_widths(self, r: int) -> list[int]:
        """Widths of rank ``r``'s outputs."""
        first = sum(self.table_splits[:r])
        return self.widths[first : first + self.table_splits[r]]


class _AllToAllReq(Function):
    """Start the pooled all-to-all (forward); wait for the gradient all-to-all (backward).

    Forward: ``inputs`` are this rank's ``lS`` outputs ``[N, w_k]`` over the global batch (the
    reference's pooled ``[N, D]``); rank ``j`` is sent rows ``row_splits[j]`` of their
    concatenation ``[N, sum w_k]``. Returns the (still being filled) flat receive buffer: per
    source rank ``i`` a ``[lN, sum of rank i's widths]`` block.
    """

    @staticmethod
    def forward(ctx, state: _A2AState, *inputs: Tensor) -> Tensor:
        ctx.state = state
        width = sum(state.rank_widths(state.rank))
        send = torch.cat(inputs, dim=1) if len(inputs) > 1 else inputs[0].contiguous()
        recv = send.new_empty(state.local_rows * sum(state.widths))
        in_splits = [n * width for n in state.row_splits]
        out_splits = [state.local_rows * sum(state.rank_widths(r)) for r in range(state.world)]
        state.send = send  # keep alive until the collective completes
        state.work = dist.all_to_all_single(recv, send.view(-1), out_splits, in_splits, async_op=True)
        return recv

    @staticmethod
    def backward(ctx, _grad_recv: Tensor):
        state: _A2AState = ctx.state
        state.work.wait()
        state.work = None
        mine = state.rank_widths(state.rank)
        grad = state.recv.view(sum(state.row_splits), sum(mine))
        state.recv = state.send = None
        if state.divide:
            grad.div_(state.world)
        grads = [g.contiguous() for g in grad.split(mine, dim=1)] if len(mine) > 1 else [grad]
        return (None, *grads)


class _AllToAllWait(Function):
    """Wait for the pooled all-to-all (forward); start the gradient all-to-all (backward).

    Returns one ``[lN, w]`` tensor per *global* output (rank 0's first), views of the receive
    buffer.
    """

    @staticmethod
    def forward(ctx, state: _A2AState, recv: Tensor) -> tuple[Tensor, ...]:
        ctx.state = state
        ctx.zeros = recv.new_zeros(())
        state.work.wait()
        state.work = None
        state.send = None
        ln = state.local_rows
        outs: list[Tensor] = []
        blocks = recv.split([ln * sum(state.rank_widths(r)) for r in range(state.world)])
        for r, block in enumerate(blocks):
            outs.extend(block.view(ln, -1).split(state.rank_widths(r), dim=1))
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads: Tensor):
        state: _A2AState = ctx.state
        ln = state.local_rows
        blocks, k = [], 0
        for s in state.table_splits:
            gs = [
                g if g is not None else ctx.zeros.expand(ln, w)
                for g, w in zip(grads[k : k + s], state.widths[k : k + s], strict=True)
            ]
            blocks.append(torch.cat(gs, dim=1).reshape(-1))
            k += s
        send = torch.cat(blocks)
        width = sum(state.rank_widths(state.rank))
        recv = send.new_empty(sum(state.row_splits) * width)
        in_splits = [ln * sum(state.rank_widths(r)) for r in range(state.world)]
        out_splits = [n * width for n in state.row_splits]
        state.send, state.recv = send, recv
        state.work = dist.all_to_all_single(recv, send, out_splits, in_splits, async_op=True)
        # The gradient of the forward receive buffer is exactly ``send`` (same layout): hand it
        # to _AllToAllReq.backward, which ignores it and waits for the collective instead (as
        # the reference's All2All_Req/All2All_Wait do).
        return None, send


class _StageTiming:
    """Stage timing shared by the runners: off (and costless) until `enable_stage_timing()`."""

    stage_timer: StageTimer | None = None

    def enable_stage_timing(self, on: bool = True) -> None:
        self.stage_timer = StageTimer() if on else None

    @property
    def stage_times(self) -> list[StageTimes]:
        return list(self.stage_timer.steps) if self.stage_timer is not None else []

    def stage_summary(self, skip: int = 0) -> StageTimes:
        return StageTimes.median(self.stage_times[skip:])


class BaselineRunner(_StageTiming):
    """DLRM-Baseline: the DLRM reference's distributed training path (see module docstring).

    ``step(global_batch, local_rows)`` runs forward + backward + SGD and returns this rank's
    loss; ``local_rows`` must be this rank's :func:`get_my_slice` of the global batch (use
    :meth:`local_rows`). ``forward(global_batch, local_rows)`` returns this rank's logits
    ``[lN, 1]`` without gradients.
    """

    name = "DLRM-Baseline"

    def __init__(
        self,
        config: DLRMConfig,
        rank: int,
        world: int,
        lr: float,
        seed: int,
        *,
        grad_division: bool = True,
        sparse_optimizer: Any = None,
        reference_optimizer: bool = False,
    ) -> None:
        """`sparse_optimizer`: the tables' `sparselift.optim` record (default SGD at `lr`);
        `reference_optimizer`: its reference semantics where torch has no sparse form of it."""
        _world_group(world)
        n = config.num_tables
        if n < world:
            raise ValueError(f"the baseline needs at least one table per rank ({n} tables, {world} ranks)")
        self.config, self.rank, self.world, self.lr = config, rank, world, lr
        self.grad_division = grad_division
        model = _dlrm(config, seed, sparse=True)
        self.table_slice = get_my_slice(n, rank, world)
        self.table_splits = get_split_lengths(n, world)
        mine = range(n)[self.table_slice]
        for k in mine:  # this rank's tables only; the others stay shapes on the meta device
            emb = model.emb_l[k]
            emb.weight = nn.Parameter(model.init_table(k, torch.empty(emb.weight.shape), 0))
        self.emb_l = nn.ModuleList([model.emb_l[k] for k in mine])
        model.emb_l = nn.ModuleList()  # drop the other ranks' tables
        self.li, self.lj = model.li, model.lj
        if world > 1:  # the reference wraps each MLP in its own DDP
            self.bot_l: nn.Module = DDP(model.bot_l)
            self.top_l: nn.Module = DDP(model.top_l)
        else:
            self.bot_l, self.top_l = model.bot_l, model.top_l
        self.emb_opt = sparse_torch_optimizer(sparse_optimizer, lr, self.emb_l.parameters(), reference_optimizer)
        self.dense_opt = torch.optim.SGD([*self.bot_l.parameters(), *self.top_l.parameters()], lr=lr)
        self.stage_timer: StageTimer | None = None

    # -- steps ---------------------------------------------------------------------------------

    def local_rows(self, global_batch_size: int) -> slice:
        return get_my_slice(global_batch_size, self.rank, self.world)

    def _row_splits(self, n: int, local_rows: slice) -> list[int]:
        """The ranks' rows of an ``n``-row global batch, ``local_rows`` checked to be this rank's."""
        mine = get_my_slice(n, self.rank, self.world)
        start, stop, step = local_rows.indices(n)
        if (start, stop, step) != (mine.start, mine.stop, 1):
            raise ValueError(f"rank {self.rank}: local_rows {local_rows} is not this rank's slice {mine} of {n} rows")
        return get_split_lengths(n, self.world)

    def _check_rows(self, global_batch: Batch, local_rows: slice) -> list[int]:
        row_splits = self._row_splits(global_batch.batch_size, local_rows)
        if global_batch.num_sparse != self.config.num_tables:
            raise ValueError(f"batch has {global_batch.num_sparse} sparse features, model {self.config.num_tables}")
        return row_splits

    def _forward(self, gb: Batch, rows: slice, row_splits: list[int], t: StageTimer | None):
        if t is not None:
            t.push("sparse_fwd")
        ly = [
            emb(ids, offsets[:-1]) for emb, (ids, offsets) in zip(self.emb_l, gb.sparse[self.table_slice], strict=True)
        ]
        if self.world > 1:
            state = _A2AState(
                self.rank,
                self.world,
                row_splits,
                self.table_splits,
                self.config.embedding_dim,
                self.grad_division,
            )
            recv = _AllToAllReq.apply(state, *ly)
        if t is not None:
            t.switch("other_fwd")
        x = self.bot_l(gb.dense[rows])
        if t is not None:
            t.switch("sparse_fwd")
        pooled = list(_AllToAllWait.apply(state, recv)) if self.world > 1 else ly
        if t is not None:
            t.switch("other_fwd")
        z = interact(x, torch.cat(pooled, dim=1), self.li, self.lj)
        logits = self.top_l(z)
        if t is not None:
            t.pop()
        return logits, pooled

    def forward(self, global_batch: Batch, local_rows: slice) -> Tensor:
        row_splits = self._check_rows(global_batch, local_rows)
        with torch.no_grad():
            logits, _ = self._forward(global_batch, local_rows, row_splits, None)
        return logits

    def step(self, global_batch: Batch, local_rows: slice) -> float:
        row_splits = self._check_rows(global_batch, local_rows)
        t = self.stage_timer
        if t is not None:
            t.begin_step("other")
        try:
            logits, pooled = self._forward(global_batch, local_rows, row_splits, t)
            if t is not None:
                t.push("other_fwd")
            loss = F.binary_cross_entropy_with_logits(logits.reshape(-1), global_batch.labels[local_rows])
            if t is not None:
                t.pop()
            self.emb_opt.zero_grad()
            self.dense_opt.zero_grad()
            handles = hook_backward_subgraph(t, pooled) if t is not None else []
            if t is not None:
                t.push("other_bwd")
            loss.backward()
            if t is not None:
                t.pop()
                remove_hooks(handles)
                t.push("sparse_bwd")
            self.emb_opt.step()
            if t is not None:
                t.pop()
            self.dense_opt.step()
            out = float(loss.detach())
        except BaseException:
            if t is not None:
                t.abort_step()
            raise
        if t is not None:
            t.end_step()
        return out


# -- TorchRec ----------------------------------------------------------------------------------------


# What TorchRec (and torch, on the first KJT) says while the TorchRec system is set up that a
# benchmark user cannot act on: its planner's storage heuristics and DDP's renamed argument.
_TORCHREC_SETUP_WARNINGS = (
    r"HeuristicalStorageReservation is known to cause issues",
    r"`broadcast_buffers` is deprecated",
)
_TORCHREC_SETUP_RECORDS = {
    "torchrec.distributed.planner.storage_reservations": (r"known issue with TorchRec's dense tensor size",),
    "torch.fx._symbolic_trace": (r"is_fx_tracing will return true for both",),
}


@contextlib.contextmanager
def quiet_torchrec_setup() -> Iterator[None]:
    """Set up the TorchRec system without its unactionable notices (anything else comes through).

    torch's is_fx_tracing notice comes once per process, at the first KJT: one is made here."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    with silenced(_TORCHREC_SETUP_WARNINGS, _TORCHREC_SETUP_RECORDS):
        KeyedJaggedTensor(
            keys=["k"], values=torch.zeros(0, dtype=torch.int64), lengths=torch.zeros(1, dtype=torch.int64)
        )
        yield


def to_torchrec_batch(batch: Batch) -> Any:
    """A :class:`Batch` as ``torchrec.datasets.utils.Batch`` (dense, KJT, labels)."""
    from torchrec.datasets.utils import Batch as TRBatch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    keys, values, lengths = batch.as_kjt_parts()
    kjt = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths)
    return TRBatch(dense_features=batch.dense, sparse_features=kjt, labels=batch.labels)


class _TorchRecDLRM(nn.Module):
    """DLRM on an EmbeddingBagCollection; ``forward(batch) -> (loss, (loss, logits))``.

    The EBC is called first (its output all-to-all is a lazy awaitable), then the bottom MLP,
    then the pooled values are read (the wait), so the output distribution overlaps the
    bottom MLP like the reference's. Symbolically traceable (TrainPipelineSparseDist needs it).
    """

    def __init__(
        self, ebc: nn.Module, bot_l: nn.Module, top_l: nn.Module, li: Tensor, lj: Tensor, keys: Sequence[str]
    ) -> None:
        super().__init__()
        self.keys = list(keys)
        self.ebc = ebc
        self.bot_l = bot_l
        self.top_l = top_l
        self.register_buffer("li", li.clone(), persistent=False)
        self.register_buffer("lj", lj.clone(), persistent=False)
        self.timer: StageTimer | None = None
        self.last_pooled: Tensor | None = None

    def forward(self, batch: Any) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        timer = self.timer
        if timer is not None:
            timer.push("sparse_fwd")
        kt = self.ebc(batch.sparse_features)
        if timer is not None:
            timer.switch("other_fwd")
        x = self.bot_l(batch.dense_features)
        if timer is not None:
            timer.switch("sparse_fwd")
        # Sharding reorders the KeyedTensor's keys (by rank): regroup into model order, as
        # TorchRec's own DLRM SparseArch does.
        by_key = kt.to_dict()
        pooled = torch.cat([by_key[k] for k in self.keys], dim=1)
        if timer is not None:
            timer.switch("other_fwd")
            self.last_pooled = pooled
        d = x.shape[1]
        t = torch.cat([x, pooled], dim=1).view(x.shape[0], -1, d)
        z = torch.bmm(t, torch.transpose(t, 1, 2))
        logits = self.top_l(torch.cat([x, z[:, self.li, self.lj]], dim=1))
        loss = F.binary_cross_entropy_with_logits(logits.squeeze(1), batch.labels)
        if timer is not None:
            timer.pop()
        return loss, (loss.detach(), logits.detach())


def _timed_pipeline_class(base: type) -> type:
    """``base`` (a TorchRec pipeline class) with stage-timer boundaries around input
    distribution (sparse fwd) and backward (other bwd, sparse nodes -> sparse bwd)."""

    class Timed(base):  # type: ignore[misc, valid-type]
        timer: StageTimer | None = None
        net: _TorchRecDLRM | None = None

        def _backward(self, losses: Tensor) -> None:
            t = self.timer
            if t is None or not t.in_step or self.net is None or self.net.last_pooled is None:
                return super()._backward(losses)
            roots = self.net.last_pooled
            handles = hook_backward_subgraph(t, roots if isinstance(roots, list) else [roots])
            t.push("other_bwd")
            try:
                super()._backward(losses)
            finally:
                t.pop()
                remove_hooks(handles)
                self.net.last_pooled = None

        def start_sparse_data_dist(self, *args: Any, **kwargs: Any) -> Any:
            t = self.timer
            if t is None:
                return super().start_sparse_data_dist(*args, **kwargs)
            with t.stage("sparse_fwd"):
                return super().start_sparse_data_dist(*args, **kwargs)

        def wait_sparse_data_dist(self, *args: Any, **kwargs: Any) -> Any:
            t = self.timer
            if t is None:
                return super().wait_sparse_data_dist(*args, **kwargs)
            with t.stage("sparse_fwd"):
                return super().wait_sparse_data_dist(*args, **kwargs)

    Timed.__name__ = Timed.__qualname__ = f"Timed{base.__name__}"
    return Timed


class _TorchRecTrainer(_StageTiming):
    """What the TorchRec peers share: table-wise FUSED sharding under DistributedModelParallel,
    the fused (in-backward) SGD plus a keyed SGD for the dense parameters, a train pipeline,
    ``progress()``, ``forward()`` and stage timing. A subclass builds its net (a module whose
    ``forward(batch) -> (loss, (loss, logits))`` with ``timer`` and ``last_pooled`` attributes)
    and calls :meth:`_shard`, fills its tables (:meth:`_fill_table`), then :meth:`_start`."""

    name = "TorchRec"

    def _shard(self, net: nn.Module, sharders: list, tables: Sequence[str], world: int, hint: int | None) -> None:
        from torchrec.distributed.embedding_types import EmbeddingComputeKernel
        from torchrec.distributed.model_parallel import DistributedModelParallel
        from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
        from torchrec.distributed.planner.types import ParameterConstraints
        from torchrec.distributed.types import ShardingEnv, ShardingType

        constraints = {
            t: ParameterConstraints(
                sharding_types=[ShardingType.TABLE_WISE.value],
                compute_kernels=[EmbeddingComputeKernel.FUSED.value],
            )
            for t in tables
        }
        try:  # torchrec >= 1.8 warns unless the topology comes from its factory
            from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig

            topology = TopologyFactory.create_topology(
                TrainerConfig(world_size=world, local_world_size=world),
                kernel_config=KernelConfig(compute_device="cpu"),
            )
        except ImportError:
            topology = Topology(world_size=world, local_world_size=world, compute_device="cpu")
        planner = EmbeddingShardingPlanner(
            topology=topology, constraints=constraints, **({"batch_size": hint} if hint else {})
        )
        pg = dist.GroupMember.WORLD
        self.net = net
        self.plan = planner.collective_plan(net, sharders, pg)
        self.dmp = DistributedModelParallel(
            net, env=ShardingEnv.from_process_group(pg), device=torch.device("cpu"), plan=self.plan, sharders=sharders
        )

    def _fill_table(self, suffix: str, dim: int, init: Any) -> None:
        """Draw this rank's shards of the table whose state key ends in ``suffix`` (any sharding
        type): ``init(rows [n, dim], row_offset)`` fills the rows a shard holds."""
        state = self.dmp.state_dict()
        key = next(k for k in state if k.endswith(suffix))
        with torch.no_grad():
            for shard in state[key].local_shards():
                (r0, c0), (nr, nc) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                rows = init(torch.empty(nr, dim), r0)
                shard.tensor.copy_(rows[:, c0 : c0 + nc])

    def _start(self, lr: float, batches: Iterable[Any], convert: Any, pipeline: str) -> None:
        from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
        from torchrec.optim.optimizers import in_backward_optimizer_filter

        check_pipeline(pipeline)
        dense_opt = KeyedOptimizerWrapper(
            dict(in_backward_optimizer_filter(self.dmp.named_parameters())),
            lambda params: torch.optim.SGD(params, lr=lr),
        )
        self.optimizer = CombinedOptimizer([self.dmp.fused_optimizer, dense_opt])
        self._convert = convert
        self._batches: Iterator[Any] = (convert(b) for b in batches)
        self.pipeline = pipeline
        self.pipeline_error: str | None = None
        self._pipe = self._make_pipeline(pipeline)
        self.stage_timer: StageTimer | None = None
        self.last_logits: Tensor | None = None

    def _make_pipeline(self, kind: str) -> Any:
        from torchrec.distributed.train_pipeline import TrainPipelineBase, TrainPipelineSparseDist

        device = torch.device("cpu")
        if kind == "sparse_dist":
            try:
                pipe = _timed_pipeline_class(TrainPipelineSparseDist)(
                    self.dmp, self.optimizer, device, execute_all_batches=True
                )
                pipe.net = self.net
                return pipe
            except Exception as e:  # noqa: BLE001 - recorded, then the base pipeline is used
                self.pipeline_error = f"{type(e).__name__}: {e}"
                self.pipeline = "base"
        pipe = _timed_pipeline_class(TrainPipelineBase)(self.dmp, self.optimizer, device)
        pipe.net = self.net
        return pipe

    # -- timing --------------------------------------------------------------------------------

    def enable_stage_timing(self, on: bool = True) -> None:
        super().enable_stage_timing(on)
        self.net.timer = self.stage_timer
        self._pipe.timer = self.stage_timer

    # -- steps ---------------------------------------------------------------------------------

    def progress(self) -> float:
        t = self.stage_timer
        if t is not None:
            t.begin_step("other")
        try:
            loss, logits = self._pipe.progress(self._batches)
        except BaseException:
            if t is not None:
                t.abort_step()
            raise
        if t is not None:
            t.end_step()
        self.last_logits = logits
        return float(loss)

    def forward(self, local_batch: Any) -> Tensor:
        if getattr(self._pipe, "_pipelined_modules", None) and getattr(self._pipe, "_model_attached", False):
            self._pipe.detach()
        with torch.no_grad():
            _, (_, logits) = self.dmp(self._convert(local_batch))
        return logits

    def table_owners(self) -> dict[str, list[int]]:
        """Table name -> ranks holding its shards, from the plan."""
        out: dict[str, list[int]] = {}
        for module_plan in self.plan.plan.values():
            for name, ps in module_plan.items():  # type: ignore[union-attr]
                out[name] = list(ps.ranks or [])
        return out


class TorchRecRunner(_TorchRecTrainer):
    """TorchRec DMP (table-wise, fused TBE + in-backward SGD) driven by a train pipeline.

    ``batches`` yields this rank's *local* :class:`Batch` es (e.g.
    ``SyntheticCriteo.batches(B, n, rank=, world_size=)``); they are converted to TorchRec
    batches (KJT) lazily, inside the pipeline's data step. ``progress()`` runs one pipeline step
    and returns the loss (``last_logits`` keeps that step's logits); it raises StopIteration
    when the batches are exhausted and drained. ``forward(local_batch)`` returns logits without
    gradients; it may be called at any time (mid-training it detaches the pipeline, which
    re-attaches on the next ``progress()``; training continues unchanged).

    ``pipeline``: ``"sparse_dist"`` (default) or ``"base"``; if TrainPipelineSparseDist cannot
    be built, the runner falls back to TrainPipelineBase and ``self.pipeline`` says "base".
    ``sparse_optimizer``: the tables' ``sparselift.optim`` record, fused into backward by FBGEMM
    (default SGD at ``lr``; one FBGEMM lacks on CPU is a ValueError saying so).
    """

    def __init__(
        self,
        config: DLRMConfig,
        rank: int,
        world: int,
        lr: float,
        seed: int,
        batches: Iterable[Batch],
        *,
        pipeline: str = "sparse_dist",
        batch_size_hint: int | None = None,
        keys: Sequence[str] | None = None,
        sparse_optimizer: Any = None,
    ) -> None:
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
        from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
        from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

        check_pipeline(pipeline)
        _world_group(world)
        self.config, self.rank, self.world, self.lr = config, rank, world, lr
        dlrm = _dlrm(config, seed, sparse=False)
        keys = list(keys) if keys is not None else list(default_keys(config.num_tables))
        self.keys = keys
        pooling = PoolingType.SUM if config.mode == "sum" else PoolingType.MEAN
        tables = [
            EmbeddingBagConfig(
                name=f"t_{i}",
                embedding_dim=config.embedding_dim,
                num_embeddings=rows,
                feature_names=[keys[i]],
                pooling=pooling,
            )
            for i, rows in enumerate(config.num_rows)
        ]
        ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
        cls, kwargs = in_backward_optimizer(sparse_optimizer, lr)
        apply_optimizer_in_backward(cls, ebc.parameters(), kwargs)
        net = _TorchRecDLRM(ebc, dlrm.bot_l, dlrm.top_l, dlrm.li, dlrm.lj, keys)
        names = [t.name for t in tables]
        self._shard(net, [EmbeddingBagCollectionSharder()], names, world, batch_size_hint)
        for i, name in enumerate(names):
            self._fill_table(f"ebc.embedding_bags.{name}.weight", config.embedding_dim, partial(dlrm.init_table, i))
        del dlrm
        self._start(lr, batches, to_torchrec_batch, pipeline)


# -- dense-only floor ----------------------------------------------------------------------------------


class _DenseNet(nn.Module):
    def __init__(self, bot_l: nn.Module, top_l: nn.Module, li: Tensor, lj: Tensor) -> None:
        super().__init__()
        self.bot_l, self.top_l = bot_l, top_l
        self.register_buffer("li", li.clone(), persistent=False)
        self.register_buffer("lj", lj.clone(), persistent=False)

    def forward(self, dense: Tensor, pooled: Tensor) -> Tensor:
        return self.top_l(interact(self.bot_l(dense), pooled, self.li, self.lj))


class DenseFloor(_StageTiming):
    """The dense-only floor's step: ``step(local_batch)`` = the net on :meth:`net_inputs` (the
    batch's dense inputs plus random embeddings that require grad) + BCE + backward (DDP
    all-reduce) + SGD. No lookups, no embedding communication. Subclasses set ``net`` and
    ``opt`` and define ``net_inputs``."""

    name = "Dense-only"
    net: nn.Module
    opt: torch.optim.Optimizer

    def net_inputs(self, local_batch: Any) -> tuple:
        raise NotImplementedError

    def step(self, local_batch: Any) -> float:
        t = self.stage_timer
        if t is not None:
            t.begin_step("other")
        inputs = self.net_inputs(local_batch)
        if t is not None:
            t.push("other_fwd")
        logits = self.net(*inputs)
        loss = F.binary_cross_entropy_with_logits(logits.reshape(-1), local_batch.labels)
        if t is not None:
            t.pop()
        self.opt.zero_grad()
        if t is not None:
            t.push("other_bwd")
        loss.backward()
        if t is not None:
            t.pop()
        self.opt.step()
        out = float(loss.detach())
        if t is not None:
            t.end_step()
        return out

    __call__ = step


def random_leaf(shape: tuple[int, ...], bound: float, generator: torch.Generator) -> Tensor:
    """U(-bound, bound) embeddings that require grad (the floors' given embeddings)."""
    return torch.empty(shape).uniform_(-bound, bound, generator=generator).requires_grad_(True)


class DenseOnlyRunner(DenseFloor):
    """The DLRM dense part alone: bottom MLP + interaction with random pooled embeddings
    ``[B, F*D]`` (requiring grad, so the interaction backward is complete) + top MLP."""

    def __init__(self, config: DLRMConfig, rank: int, world: int, lr: float, seed: int) -> None:
        _world_group(world)
        self.config, self.rank, self.world = config, rank, world
        model = _dlrm(config, seed, sparse=False)  # same init as the other systems; tables unused
        net = _DenseNet(model.bot_l, model.top_l, model.li, model.lj)
        del model
        self.net = DDP(net) if world > 1 else net
        self.opt = torch.optim.SGD(self.net.parameters(), lr=lr)
        self._gen = torch.Generator().manual_seed(seed + 1000 + rank)
        self._pooled: Tensor | None = None
        self.stage_timer: StageTimer | None = None

    def _embeddings(self, b: int) -> Tensor:
        width = self.config.num_tables * self.config.embedding_dim
        if self._pooled is None or self._pooled.shape[0] != b:
            bound = math.sqrt(1.0 / max(min(self.config.num_rows), 1))
            self._pooled = random_leaf((b, width), bound, self._gen)
        self._pooled.grad = None
        return self._pooled

    def net_inputs(self, local_batch: Batch) -> tuple:
        return local_batch.dense, self._embeddings(local_batch.batch_size)


def dense_only_step(config: DLRMConfig, rank: int, world: int, lr: float, seed: int) -> DenseOnlyRunner:
    """The dense-only floor runner; call ``.step(local_batch)`` (or the runner itself) per step."""
    return DenseOnlyRunner(config, rank, world, lr, seed)


# -- measuring ------------------------------------------------------------------------------------------


def synthetic_source(config: DLRMConfig, seed: int = 0, zipf_alpha: float = 1.05) -> Any:
    """A :class:`~sparselift.data.SyntheticCriteo` stream shaped like ``config``."""
    from sparselift.data.synthetic import SyntheticConfig, SyntheticCriteo

    pooling: Any = "one-hot" if all(p == 1 for p in config.pooling) else tuple(float(p) for p in config.pooling)
    return SyntheticCriteo(
        SyntheticConfig(
            cardinalities=config.cardinalities,
            rows_cap=config.rows_cap,
            zipf_alpha=zipf_alpha,
            pooling=pooling,
            seed=seed,
            num_dense=config.dense_in,
        )
    )
