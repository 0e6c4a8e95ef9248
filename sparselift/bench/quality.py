"""`sparselift bench quality`: does SparseLift train the same model as the DLRM reference?

Both systems start from identical weights and see identical data (the synthetic Criteo stream,
whose planted click signal makes AUC meaningful). Reported, as in the paper's quality table:
ROC-AUC, AP and LogLoss on the held-out split for both, and the MAE / RMSE between the two
training-loss curves over matched steps; `--plot` draws the curves, their difference and the
metrics. `--sparse-optimizer NAME` trains both systems' tables with that optimizer at `--lr`
(the dense parts with SGD); the reference has SGD and Adagrad only (torch's optimizers of sparse
gradients), so the others are refused with the reason.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any

import attrs

from sparselift.bench.dlrm import add_optimizer_arguments, unavailable
from sparselift.bench.metrics import average_precision, log_loss, roc_auc
from sparselift.tools.arguments import rows_cap_arg


@attrs.frozen
class QualityConfig:
    model: str = "dlrm-kaggle"
    world_size: int = 2
    steps: int = 300
    eval_batches: int = 8
    batch_size: int = 256  # per rank
    rows_cap: int | None = 10_000
    lr: float = 0.1
    seed: int = 0
    threads: int = 1
    # SparseLift's table placement. table_wise is the reference's placement class (whole tables
    # split across ranks), so any difference in the curves is the compiler's; auto also
    # replicates small tables, whose all-reduced dense gradients round differently.
    sharding: str = "table_wise"
    sparse_optimizer: str = "sgd"  # an OptimizerKind value: the tables' optimizer in both systems


def quality_worker(rank: int, world: int, cfg: QualityConfig) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from sparselift.bench.baselines import BaselineRunner, synthetic_source
    from sparselift.bench.dlrm import BenchConfig, dlrm_config, sparse_optimizer_record
    from sparselift.bench.systems import SparseLiftRunner

    torch.set_num_threads(cfg.threads)
    config = dlrm_config(BenchConfig(model=cfg.model, rows_cap=cfg.rows_cap))
    source = synthetic_source(config, seed=cfg.seed)
    global_bs = cfg.batch_size * world
    first = next(iter(source.batches(cfg.batch_size, 1, rank=rank, world_size=world)))
    record = sparse_optimizer_record(cfg.sparse_optimizer, cfg.lr)
    baseline = BaselineRunner(config, rank, world, cfg.lr, cfg.seed, sparse_optimizer=record, reference_optimizer=True)
    sparselift = SparseLiftRunner(
        config, rank, world, cfg.lr, cfg.seed, first, sharding=cfg.sharding, sparse_optimizer=record
    )
    losses: dict[str, list[float]] = {"baseline": [], "sparselift": []}
    for step in range(cfg.steps):
        gb = source.global_batch(step, global_bs)
        lb = next(iter(source.batches(cfg.batch_size, 1, rank=rank, world_size=world, start_step=step)))
        for name, loss in (
            ("baseline", baseline.step(gb, baseline.local_rows(global_bs))),
            ("sparselift", sparselift.step(lb)),
        ):
            t = torch.tensor([loss])
            dist.all_reduce(t)
            losses[name].append(float(t) / world)
    scores: dict[str, list[float]] = {"baseline": [], "sparselift": []}
    labels: list[float] = []
    for i in range(cfg.eval_batches):
        gb = source.global_batch(i, global_bs, split="eval")
        lb = next(iter(source.batches(cfg.batch_size, 1, rank=rank, world_size=world, start_step=i, split="eval")))
        scores["baseline"] += baseline.forward(gb, baseline.local_rows(global_bs)).reshape(-1).tolist()
        scores["sparselift"] += sparselift.forward(lb).reshape(-1).tolist()
        labels += lb.labels.tolist()
    return {"losses": losses, "scores": scores, "labels": labels}


SYSTEMS = {"baseline": "DLRM-Baseline", "sparselift": "SparseLift"}


def summarize(cfg: QualityConfig, per_rank: list[dict[str, Any]], systems: dict[str, str] = SYSTEMS) -> dict[str, Any]:
    """`systems`: the two compared systems' keys in the ranks' records -> their labels, the
    reference first."""
    labels = [y for r in per_rank for y in r["labels"]]
    out: dict[str, Any] = {"auc": {}, "ap": {}, "logloss": {}}
    for name in systems:
        scores = [s for r in per_rank for s in r["scores"][name]]
        out["auc"][name] = roc_auc(scores, labels)
        out["ap"][name] = average_precision(scores, labels)
        out["logloss"][name] = log_loss(scores, labels)
    ref, other = systems
    a, b = per_rank[0]["losses"][ref], per_rank[0]["losses"][other]
    diffs = [x - y for x, y in zip(a, b)]
    out["loss_mae"] = sum(abs(d) for d in diffs) / len(diffs)
    out["loss_rmse"] = math.sqrt(sum(d * d for d in diffs) / len(diffs))
    out["losses"] = {ref: a, other: b}
    out["systems"] = dict(systems)
    out["config"] = attrs.asdict(cfg)
    out["eval_samples"] = len(labels)
    return out


def format_table(r: dict[str, Any]) -> str:
    cfg = r["config"]
    (ref, ref_label), (other, other_label) = r.get("systems", SYSTEMS).items()
    w1, w2 = max(15, len(ref_label) + 2), max(13, len(other_label) + 2)
    lines = [
        f"Training quality: {cfg['model']}, {cfg['world_size']} ranks, {cfg['steps']} steps of "
        f"{cfg['batch_size']} per rank, eval on {r['eval_samples']} held-out samples, "
        f"SparseLift sharding {cfg['sharding']}, sparse optimizer {cfg.get('sparse_optimizer', 'sgd')} "
        f"(lr {cfg['lr']}; dense SGD)",
        "",
        f"{'metric':<10}{ref_label:>{w1}}{other_label:>{w2}}{'difference':>13}",
    ]
    for key, label in (("auc", "ROC-AUC"), ("ap", "AP"), ("logloss", "LogLoss")):
        a, b = r[key][ref], r[key][other]
        lines.append(f"{label:<10}{a:>{w1}.5f}{b:>{w2}.5f}{b - a:>13.2e}")
    lines += [
        "",
        f"training loss over {cfg['steps']} matched steps: MAE {r['loss_mae']:.3e}, RMSE {r['loss_rmse']:.3e}",
    ]
    return "\n".join(lines)


def plot(r: dict[str, Any], path: str, window: int = 25) -> None:
    """A PNG: both training-loss curves (moving average over `window` steps), their per-step
    difference, and the held-out metrics side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = r["config"]
    (ref, ref_label), (other, other_label) = r.get("systems", SYSTEMS).items()
    a, b = r["losses"][ref], r["losses"][other]
    w = max(1, min(window, len(a)))

    def smooth(xs: list[float]) -> list[float]:
        return [sum(xs[i - w + 1 : i + 1]) / w for i in range(w - 1, len(xs))]

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.6))
    steps = range(w, len(a) + 1)
    ax1.plot(steps, smooth(a), label=ref_label, lw=2.5, alpha=0.6)
    ax1.plot(steps, smooth(b), label=other_label, lw=1.2, ls="--")
    ax1.set_xlabel("training step")
    ax1.set_ylabel(f"training loss (mean of {w} steps)")
    ax1.set_title(f"Training loss: {cfg['model']}, {cfg['world_size']} ranks, sharding {cfg['sharding']}")
    ax1.legend(fontsize=8)
    ax2.plot(range(1, len(a) + 1), [y - x for x, y in zip(a, b)], lw=0.8, color="C3")
    ax2.axhline(0.0, color="0.5", lw=0.6)
    ax2.set_xlabel("training step")
    ax2.set_ylabel(f"loss difference ({other_label} - {ref_label})")
    ax2.set_title(f"Per-step difference: MAE {r['loss_mae']:.2e}, RMSE {r['loss_rmse']:.2e}")
    names = (("auc", "ROC-AUC"), ("ap", "AP"), ("logloss", "LogLoss"))
    x = range(len(names))
    ax3.bar([i - 0.2 for i in x], [r[k][ref] for k, _ in names], width=0.4, label=ref_label)
    ax3.bar([i + 0.2 for i in x], [r[k][other] for k, _ in names], width=0.4, label=other_label)
    ax3.set_xticks(list(x), [label for _, label in names])
    ax3.set_title(f"Held-out metrics ({r['eval_samples']} samples)")
    ax3.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser(
    prog: str = "sparselift bench quality",
    models: Sequence[str] = ("dlrm-kaggle", "dlrm-bench", "dlrm-terabyte"),
    description: str | None = None,
) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description or __doc__.split("\n")[0])
    p.add_argument("--model", default=models[0], choices=models)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--rows-cap", type=rows_cap_arg, default=10_000)
    add_optimizer_arguments(p)
    p.add_argument(
        "--sharding",
        default="table_wise",
        choices=("table_wise", "auto", "row_wise", "data_parallel"),
        help="SparseLift's table placement (default: table_wise, the reference's placement class)",
    )
    p.add_argument("--json", help="write the results as JSON")
    p.add_argument("--plot", help="write a PNG: the two loss curves, their difference, the held-out metrics")
    return p


def add_data_arguments(p: argparse.ArgumentParser) -> None:
    """`--data movielens-100k` and its options (`sparselift.bench.movielens_quality`)."""
    p.add_argument(
        "--data",
        default="synthetic",
        choices=("synthetic", "movielens-100k"),
        help="synthetic: the Criteo-like stream with a planted signal (default); movielens-100k: real ratings as "
        "a CTR task (fetched by `make data`), two models, three systems (one process, TorchRec, SparseLift)",
    )
    p.add_argument("--epochs", type=int, default=3, help="movielens-100k: epochs over the training split (default 3)")
    p.add_argument("--models", default="dlrm,din", help="movielens-100k: which models, of dlrm,din (default both)")
    p.add_argument("--data-dir", help="movielens-100k: where its files are (default: where `make data` puts them)")


def config_from_args(a: argparse.Namespace, cls: type = QualityConfig, **extra: Any) -> Any:
    return cls(
        model=a.model,
        world_size=a.world_size,
        steps=a.steps,
        eval_batches=a.eval_batches,
        batch_size=a.batch_size,
        rows_cap=a.rows_cap,
        lr=a.lr,
        sharding=a.sharding,
        sparse_optimizer=a.sparse_optimizer,
        **extra,
    )


def check_optimizer(p: argparse.ArgumentParser, kind: str, systems: dict[str, str]) -> None:
    """Exit (argparse's usage error) when a compared system lacks the tables' optimizer `kind`:
    a quality comparison needs both sides. `systems`: key -> label; a baseline or reference has
    every optimizer here (the reference semantics, where torch has no sparse form of it)."""
    for name, label in systems.items():
        reason = None if name in ("baseline", "reference") else unavailable(name, kind)
        if reason:
            p.error(f"--sparse-optimizer {kind.replace('_', '-')}: {label} cannot train with it ({reason})")


def run_and_report(
    cfg: Any, worker: Any, bench: str, argv: Sequence[str] | None, a: argparse.Namespace, systems: dict[str, str]
) -> dict[str, Any]:
    """Run `worker` on the ranks, summarize, print the table, write the JSON and the plot."""
    from sparselift.bench.dlrm import report
    from sparselift.runtime.distributed import launch

    result = summarize(cfg, launch(worker, cfg.world_size, cfg, timeout_s=3600), systems)
    report(result, bench, argv, format_table, a.json)
    if a.plot:
        plot(result, a.plot)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    add_data_arguments(p)
    a = p.parse_args(argv)
    if a.data == "movielens-100k":
        from sparselift.bench.movielens_quality import SYSTEMS as MOVIELENS_SYSTEMS
        from sparselift.bench.movielens_quality import main_from_args

        check_optimizer(p, a.sparse_optimizer, MOVIELENS_SYSTEMS)
        return main_from_args(a, argv)
    check_optimizer(p, a.sparse_optimizer, SYSTEMS)
    run_and_report(config_from_args(a), quality_worker, "quality", argv, a, SYSTEMS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
