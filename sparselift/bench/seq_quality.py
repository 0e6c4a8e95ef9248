"""`sparselift bench seq-quality`: does SparseLift train the DIN model as plain PyTorch does?

Plain single-process PyTorch (``DIN`` + SGD on the *global* batch: the reference, run on every
rank) and a distributed system (SparseLift by default; ``--system baseline`` or ``torchrec``
checks the peers of `bench seq` the same way) start from identical weights and see identical data
(the synthetic DIN stream, whose planted click signal makes AUC meaningful) for ``--steps``
steps (default 300). Reported as by `bench quality` (:mod:`sparselift.bench.quality`, whose
summary, table and plot this reuses): the MAE and RMSE between the two training-loss curves
(the target: RMSE <= 1e-4) and ROC-AUC, AP and LogLoss on the held-out split.
`--sparse-optimizer NAME` trains both sides' tables with that optimizer at `--lr` (the reference's
with the torch optimizer, so SGD and Adagrad only; the dense parts with SGD).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import attrs

from sparselift.bench.quality import QualityConfig, build_parser, check_optimizer, config_from_args, run_and_report

REFERENCE = "reference"
LABELS = {
    REFERENCE: "PyTorch (1 process)",
    "sparselift": "SparseLift",
    "baseline": "PyTorch-Baseline",
    "torchrec": "TorchRec",
}


@attrs.frozen
class SeqQualityConfig(QualityConfig):
    model: str = "din"
    system: str = "sparselift"  # what is checked against the reference


def _system(cfg: SeqQualityConfig, config: Any, rank: int, world: int, source: Any) -> Any:
    from sparselift.bench.dlrm import sparse_optimizer_record
    from sparselift.bench.seq_systems import DINBaselineRunner, din_sparselift_runner

    record = sparse_optimizer_record(cfg.sparse_optimizer, cfg.lr)
    if cfg.system == "sparselift":
        first = source.local_batch(0, cfg.batch_size, rank, world)
        return din_sparselift_runner(
            config, rank, world, cfg.lr, cfg.seed, first, sharding=cfg.sharding, sparse_optimizer=record
        )
    if cfg.system == "baseline":
        return DINBaselineRunner(
            config, rank, world, cfg.lr, cfg.seed, sparse_optimizer=record, reference_optimizer=True
        )
    from sparselift.bench.baselines import quiet_torchrec_setup
    from sparselift.bench.seq_torchrec import DINTorchRecRunner

    with quiet_torchrec_setup():
        batches = source.batches(cfg.batch_size, cfg.steps, rank=rank, world_size=world)
        return DINTorchRecRunner(config, rank, world, cfg.lr, cfg.seed, batches, sparse_optimizer=record)


def reference_optimizers(cfg: SeqQualityConfig, reference: Any) -> list[Any]:
    """The single-process reference's optimizers: its tables' (the torch optimizer of the
    benchmark's record) and SGD for the rest."""
    import torch

    from sparselift.bench.dlrm import sparse_optimizer_record, torch_sparse_optimizer

    tables = [p for name in ("item", "cat", "user") for p in getattr(reference, name).parameters()]
    ids = {id(p) for p in tables}
    dense = [p for p in reference.parameters() if id(p) not in ids]
    record = sparse_optimizer_record(cfg.sparse_optimizer, cfg.lr)
    return [torch_sparse_optimizer(record, tables, reference=True), torch.optim.SGD(dense, lr=cfg.lr)]


def _train_step(cfg: SeqQualityConfig, runner: Any, gb: Any, lb: Any) -> float:
    if cfg.system == "baseline":
        return runner.step(gb, runner.local_rows(gb.batch_size))
    if cfg.system == "torchrec":
        return runner.progress()
    return runner.step(lb)


def _forward(cfg: SeqQualityConfig, runner: Any, gb: Any, lb: Any) -> Any:
    if cfg.system == "baseline":
        return runner.forward(gb, runner.local_rows(gb.batch_size))
    return runner.forward(lb)


def quality_worker(rank: int, world: int, cfg: SeqQualityConfig) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from sparselift.bench.baselines import get_my_slice
    from sparselift.bench.seq_systems import din_config, din_source
    from sparselift.models.din import DIN

    torch.set_num_threads(cfg.threads)
    config = din_config(cfg.rows_cap, cfg.seed)
    source = din_source(config, seed=cfg.seed)
    global_bs = cfg.batch_size * world
    rows = get_my_slice(global_bs, rank, world)
    reference = DIN(config)
    ref_opts = reference_optimizers(cfg, reference)
    system = _system(cfg, config, rank, world, source)
    losses: dict[str, list[float]] = {REFERENCE: [], cfg.system: []}
    for step in range(cfg.steps):
        gb = source.global_batch(step, global_bs)
        lb = source.local_batch(step, cfg.batch_size, rank, world)
        for opt in ref_opts:
            opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(reference(*gb.inputs()), gb.labels)
        loss.backward()
        for opt in ref_opts:
            opt.step()
        losses[REFERENCE].append(float(loss.detach()))
        t = torch.tensor([_train_step(cfg, system, gb, lb)])
        dist.all_reduce(t)
        losses[cfg.system].append(float(t) / world)
    scores: dict[str, list[float]] = {REFERENCE: [], cfg.system: []}
    labels: list[float] = []
    for i in range(cfg.eval_batches):
        gb = source.global_batch(i, global_bs, split="eval")
        lb = source.local_batch(i, cfg.batch_size, rank, world, split="eval")
        with torch.no_grad():
            scores[REFERENCE] += reference(*gb.inputs())[rows].reshape(-1).tolist()
        scores[cfg.system] += _forward(cfg, system, gb, lb).reshape(-1).tolist()
        labels += lb.labels.tolist()
    return {"losses": losses, "scores": scores, "labels": labels}


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser("sparselift bench seq-quality", models=("din",), description=__doc__.split("\n")[0])
    p.add_argument(
        "--system",
        default="sparselift",
        choices=("sparselift", "baseline", "torchrec"),
        help="the distributed system checked against single-process PyTorch (default sparselift)",
    )
    a = p.parse_args(argv)
    cfg = config_from_args(a, SeqQualityConfig, system=a.system)
    systems = {REFERENCE: LABELS[REFERENCE], cfg.system: LABELS[cfg.system]}
    check_optimizer(p, cfg.sparse_optimizer, systems)
    run_and_report(cfg, quality_worker, "seq-quality", argv, a, systems)
    return 0


if __name__ == "__main__":
    sys.exit(main())
