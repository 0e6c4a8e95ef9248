"""`sparselift bench quality --data movielens-100k`: does SparseLift train a real recommender as
single-process PyTorch does, and how does TorchRec's training compare?

Real data: MovieLens-100k as a CTR task (`sparselift.data.movielens`: rating >= 4, a time-based
split). Two models (`sparselift.models.movielens`): a DLRM-style one (pooled history and genres)
and a DIN-style one (unpooled history, target attention). Each is trained for `epochs` epochs,
with the same seed, weights and batch order, by three systems side by side:

- `baseline`: the model in one process on the global batch (the tables' optimizer by its
  reference formulas, `runtime.parity.reference_table_step`; dense SGD);
- `torchrec`: `DistributedModelParallel` with the optimizer fused by `apply_optimizer_in_backward`
  (its default planner and loss convention: each rank's mean, tables' gradients summed);
- `sparselift`: `sparselift.compile` with `grad_reduction="mean"` (the global batch's mean).

Reported per model: test ROC-AUC and log loss per system, the loss curves, and the RMSE of
SparseLift's per-step loss against the baseline's. `--plot` draws them.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import attrs

SYSTEMS = {"baseline": "PyTorch (1 process)", "torchrec": "TorchRec", "sparselift": "SparseLift"}


@attrs.frozen
class MovieLensQualityConfig:
    models: tuple[str, ...] = ("dlrm", "din")
    world_size: int = 2
    epochs: int = 3
    batch_size: int = 256  # per rank
    lr: float = 0.05  # the tables' optimizer's and the dense SGD's
    sparse_optimizer: str = "rowwise_adagrad"
    seed: int = 0
    data_dir: str | None = None
    train_rows: int | None = None  # a prefix of the (time-ordered) training split, for tests
    systems: tuple[str, ...] = tuple(SYSTEMS)
    threads: int = 1


def _batches(n: int, global_batch: int, epoch: int, seed: int):
    """Each step's global rows, shuffled per epoch by a seeded generator (the same on every
    rank and for every system), the last partial batch dropped."""
    import torch

    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    return [order[i : i + global_batch] for i in range(0, n - global_batch + 1, global_batch)]


class _Baseline:
    """The model in one process, on the global batch."""

    def __init__(self, model, record, lr: float):
        import torch

        from sparselift.models.movielens import table_parameters

        self.model, self.record, self.lr, self.count = model, record, lr, 0
        self.tables = table_parameters(model)
        dense = [p for n, p in model.named_parameters() if n not in self.tables]
        self.dense = torch.optim.SGD(dense, lr=lr)
        self.states: dict[str, dict] = {n: {} for n in self.tables}

    def step(self, inputs, labels, local_rows) -> float:
        import torch
        import torch.nn.functional as F

        from sparselift.runtime.parity import reference_table_step

        self.dense.zero_grad()
        for p in self.tables.values():
            p.grad = None
        loss = F.binary_cross_entropy_with_logits(self.model(*inputs), labels)
        loss.backward()
        self.dense.step()
        self.count += 1
        with torch.no_grad():
            for name, p in self.tables.items():
                reference_table_step(self.record, self.lr, p.data, p.grad, self.states[name], self.count)
        return float(loss)

    def scores(self, inputs, local_rows):
        import torch

        with torch.no_grad():
            return self.model(*inputs)


class _SparseLift:
    def __init__(self, model, record, lr: float, example, cache_dir: str | None):
        import torch

        import sparselift

        options = sparselift.CompileOptions(grad_reduction="mean", cache_dir=cache_dir)
        self.compiled = sparselift.compile(model, example, sparse_optimizer=record, options=options)
        self.dense = torch.optim.SGD([p for _, p in self.compiled.dense_named_parameters()], lr=lr)

    def step(self, inputs, labels, local_rows) -> float:
        import torch.nn.functional as F

        self.compiled.train()
        self.dense.zero_grad()
        loss = F.binary_cross_entropy_with_logits(self.compiled(*inputs), labels)
        loss.backward()
        self.dense.step()
        return float(loss)

    def scores(self, inputs, local_rows):
        import torch

        self.compiled.eval()
        with torch.no_grad():
            return self.compiled(*inputs)


class _TorchRec:
    """DistributedModelParallel as a TorchRec user sets it up: the tables' optimizer fused into
    backward (`apply_optimizer_in_backward`), the dense parameters' SGD beside it."""

    def __init__(self, model, record, lr: float):
        import torch
        import torch.distributed as dist
        import torchrec.optim
        from torchrec.distributed.model_parallel import DistributedModelParallel
        from torchrec.distributed.types import ShardingEnv
        from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
        from torchrec.optim.optimizers import in_backward_optimizer_filter

        from sparselift.bench.sparse_optimizers import torchrec_optimizer
        from sparselift.models.movielens import table_parameters

        cls, kwargs = torchrec_optimizer(record)
        torchrec.optim.apply_optimizer_in_backward(cls, table_parameters(model).values(), kwargs)
        pg = dist.GroupMember.WORLD
        self.dmp = DistributedModelParallel(model, env=ShardingEnv.from_process_group(pg), device=torch.device("cpu"))
        dense = KeyedOptimizerWrapper(
            dict(in_backward_optimizer_filter(self.dmp.named_parameters())), lambda ps: torch.optim.SGD(ps, lr=lr)
        )
        self.optimizer = CombinedOptimizer([self.dmp.fused_optimizer, dense])

    def step(self, inputs, labels, local_rows) -> float:
        import torch.nn.functional as F

        self.dmp.train()
        self.optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(self.dmp(*inputs), labels)
        loss.backward()
        self.optimizer.step()
        return float(loss)

    def scores(self, inputs, local_rows):
        import torch

        self.dmp.eval()
        with torch.no_grad():
            return self.dmp(*inputs)


def _systems(cfg: MovieLensQualityConfig, name: str, mcfg, example, record) -> dict[str, Any]:
    from sparselift.models.movielens import build

    made: dict[str, Any] = {}
    for system in cfg.systems:
        model = build(name, mcfg, seed=cfg.seed)  # the same weights for every system
        if system == "baseline":
            made[system] = _Baseline(model, record, cfg.lr)
        elif system == "sparselift":
            made[system] = _SparseLift(model, record, cfg.lr, example, None)
        elif system == "torchrec":
            made[system] = _TorchRec(model, record, cfg.lr)
        else:
            raise ValueError(f"unknown system {system!r}; known: {', '.join(SYSTEMS)}")
    return made


def _train_and_score(cfg: MovieLensQualityConfig, name: str, data, rank: int, world: int) -> dict[str, Any]:
    """One model: train every system over the epochs (per-step global mean losses), then score
    the test split (every rank's share gathered, in order)."""
    import torch
    import torch.distributed as dist

    from sparselift.bench.sparse_optimizers import sparse_optimizer_record
    from sparselift.models.movielens import MODELS, MovieLensConfig, kjt_inputs

    keys = MODELS[name].POOLED_KEYS
    mcfg = MovieLensConfig(cardinalities=data.cardinalities, max_history=data.max_history)
    train = data.train
    if cfg.train_rows is not None:
        train = train.select(torch.arange(min(cfg.train_rows, len(train))))
    global_batch = cfg.batch_size * world
    mine = slice(rank * cfg.batch_size, (rank + 1) * cfg.batch_size)
    example = kjt_inputs(train, torch.arange(cfg.batch_size), keys)
    record = sparse_optimizer_record(cfg.sparse_optimizer, cfg.lr)
    systems = _systems(cfg, name, mcfg, example, record)
    losses: dict[str, list[float]] = {s: [] for s in systems}
    for epoch in range(cfg.epochs):
        for rows in _batches(len(train), global_batch, epoch, cfg.seed):
            local = rows[mine]
            for system, runner in systems.items():
                batch = rows if system == "baseline" else local
                loss = runner.step(kjt_inputs(train, batch, keys), train.label[batch], local)
                if system != "baseline":
                    t = torch.tensor([loss])
                    dist.all_reduce(t)
                    loss = float(t) / world
                losses[system].append(loss)
    test = data.test
    n_test = len(test) - len(test) % world  # every rank an equal share of each eval batch
    scores: dict[str, list[float]] = {s: [] for s in systems}
    for start in range(0, n_test, global_batch):
        rows = torch.arange(start, min(start + global_batch, n_test))
        share = rows.numel() // world
        local = rows[rank * share : (rank + 1) * share]
        for system, runner in systems.items():
            if system == "baseline":
                scores[system] += runner.scores(kjt_inputs(test, rows, keys), rows).tolist()
                continue
            got: list[Any] = [None] * world
            dist.all_gather_object(got, runner.scores(kjt_inputs(test, local, keys), local).tolist())
            scores[system] += [s for part in got for s in part]
    return {"losses": losses, "scores": scores, "labels": test.label[:n_test].tolist()}


def quality_worker(rank: int, world: int, cfg: MovieLensQualityConfig) -> dict[str, Any]:
    import torch

    from sparselift.data.movielens import load_movielens

    torch.set_num_threads(cfg.threads)
    data = load_movielens(cfg.data_dir)
    out = {name: _train_and_score(cfg, name, data, rank, world) for name in cfg.models}
    return out if rank == 0 else {}


def summarize(cfg: MovieLensQualityConfig, per_model: dict[str, Any]) -> dict[str, Any]:
    from sparselift.bench.metrics import log_loss, roc_auc

    models: dict[str, Any] = {}
    for name, r in per_model.items():
        labels = r["labels"]
        m: dict[str, Any] = {"auc": {}, "logloss": {}, "losses": r["losses"], "test_samples": len(labels)}
        for system, scores in r["scores"].items():
            m["auc"][system] = roc_auc(scores, labels)
            m["logloss"][system] = log_loss(scores, labels)
        if "baseline" in r["losses"] and "sparselift" in r["losses"]:
            diffs = [a - b for a, b in zip(r["losses"]["baseline"], r["losses"]["sparselift"])]
            m["loss_rmse"] = math.sqrt(sum(d * d for d in diffs) / len(diffs))
            m["auc_difference"] = m["auc"]["sparselift"] - m["auc"]["baseline"]
        m["positive_rate"] = sum(labels) / len(labels)
        models[name] = m
    systems = {s: SYSTEMS[s] for s in cfg.systems}
    return {"data": "movielens-100k", "models": models, "systems": systems, "config": attrs.asdict(cfg)}


def format_table(r: dict[str, Any]) -> str:
    cfg = r["config"]
    systems = r["systems"]
    lines = [
        f"Training quality on MovieLens-100k (rating >= 4, last 10% of each user's ratings as test): "
        f"{cfg['world_size']} ranks, {cfg['epochs']} epochs of {cfg['batch_size']} per rank, tables' optimizer "
        f"{cfg['sparse_optimizer']} (lr {cfg['lr']}; dense SGD)",
        "",
        f"{'model':<8}{'metric':<10}" + "".join(f"{label:>22}" for label in systems.values()),
    ]
    for name, m in r["models"].items():
        for key, label in (("auc", "ROC-AUC"), ("logloss", "LogLoss")):
            lines.append(f"{name:<8}{label:<10}" + "".join(f"{m[key][s]:>22.5f}" for s in systems))
        if "loss_rmse" in m:
            lines.append(
                f"{name:<8}SparseLift against one process: AUC difference {m['auc_difference']:+.2e}, "
                f"training-loss RMSE {m['loss_rmse']:.2e} over {len(m['losses']['sparselift'])} steps "
                f"({m['test_samples']} test samples, {m['positive_rate']:.1%} positive)"
            )
    return "\n".join(lines)


def plot(r: dict[str, Any], path: str, window: int = 20) -> None:
    """A PNG: per model, the systems' training-loss curves (moving average) and test AUCs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = r["models"]
    fig, axes = plt.subplots(len(models), 2, figsize=(13, 4.2 * len(models)), squeeze=False)
    for (name, m), (ax1, ax2) in zip(models.items(), axes):
        for i, (system, label) in enumerate(r["systems"].items()):
            xs = m["losses"][system]
            w = max(1, min(window, len(xs)))
            smooth = [sum(xs[j - w + 1 : j + 1]) / w for j in range(w - 1, len(xs))]
            ax1.plot(range(w, len(xs) + 1), smooth, label=label, lw=2.4 - 0.7 * i, ls=("-", "--", ":")[i % 3])
        ax1.set_xlabel("training step")
        ax1.set_ylabel(f"training loss (mean of {window} steps)")
        ax1.set_title(f"MovieLens-100k, {name}: training loss")
        ax1.legend(fontsize=8)
        labels = list(r["systems"].values())
        aucs = [m["auc"][s] for s in r["systems"]]
        ax2.bar(labels, aucs, color=[f"C{i}" for i in range(len(labels))])
        ax2.set_ylim(min(aucs) - 0.03, max(aucs) + 0.02)
        for i, a in enumerate(aucs):
            ax2.text(i, a + 0.002, f"{a:.4f}", ha="center", fontsize=9)
        ax2.set_title(f"{name}: test ROC-AUC ({m['test_samples']} samples)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(cfg: MovieLensQualityConfig) -> dict[str, Any]:
    from sparselift.runtime.distributed import launch

    per_rank = launch(quality_worker, cfg.world_size, cfg, timeout_s=3600)
    return summarize(cfg, per_rank[0])


def main_from_args(a: Any, argv: Sequence[str] | None) -> int:
    """`bench quality --data movielens-100k` (its parser is `bench.quality`'s)."""
    from sparselift.bench.dlrm import report
    from sparselift.data.movielens import MovieLensDataError, MovieLensMissing, load_movielens

    cfg = MovieLensQualityConfig(
        models=tuple(a.models.split(",")),
        world_size=a.world_size,
        epochs=a.epochs,
        batch_size=a.batch_size,
        lr=a.lr,
        sparse_optimizer=a.sparse_optimizer,
        data_dir=a.data_dir,
    )
    try:
        load_movielens(cfg.data_dir)  # missing or malformed files: one line here, before any rank starts
    except (MovieLensMissing, MovieLensDataError) as e:
        print(f"sparselift bench quality: {e}", file=sys.stderr)
        return 1
    result = run(cfg)
    report(result, "quality", argv, format_table, a.json)
    if a.plot:
        plot(result, a.plot)
    return 0
