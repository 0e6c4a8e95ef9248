"""`sparselift bench seq`: a DIN-style sequence model, PyTorch-Baseline vs TorchRec vs SparseLift.

The model (:mod:`sparselift.models.din`): a history of up to 50 items (jagged, mean about 30)
and a target item looked up in one 1M x 64 item table, their categories in a 1,000 x 16 table
(both unpooled ``nn.Embedding`` lookups), a pooled 1M x 32 user table, DIN's target attention
and a top MLP; batch 1,024 per rank, real table sizes by default. The systems, side by side in
one run on the same data (:mod:`sparselift.data.din_synthetic`) and the same seeded weights:

* PyTorch-Baseline: the DLRM reference's distributed style (tables split across ranks by count,
  sparse gradients, an all-to-all of the looked-up vectors; :mod:`sparselift.bench.seq_systems`);
* TorchRec: sharded EmbeddingCollections (item, category) plus an EmbeddingBagCollection (user),
  fused SGD, TrainPipelineSparseDist (:mod:`sparselift.bench.seq_torchrec`);
* SparseLift: DIN compiled by ``sparselift.compile``, trained through its TrainPipeline;
* SparseLift (TorchRec model), when named in ``--systems``: the same, compiling DIN as written
  with the TorchRec peer's collections (``sparselift_ec``; KJT inputs, jagged histories).

The tables train with `--sparse-optimizer` (default SGD) at `--lr` in every system that has it,
as in `bench dlrm` (a peer without it is skipped, the reason printed and in the JSON's
`sparse_optimizer.skipped`); the dense part with SGD.

Everything else is `bench dlrm`'s (:mod:`sparselift.bench.dlrm`): interleaved rounds, warmup and
setup excluded from timing, the dense-only floor (the same attention and MLPs with the
embeddings given), the five stage columns, the memory a system adds per rank, the JSON keys
(``ratios.sparselift_vs_torchrec`` among them) and the plot.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import Any

from sparselift.bench.dlrm import (
    SYSTEMS,
    BenchConfig,
    apply_host_memory,
    available_systems,
    cli_main,
    compiled_options,
    format_table,
    measure_systems,
    optimizer_summary,
    sparse_optimizer_record,
    summarize,
)

LABELS = {
    "baseline": "PyTorch-Baseline",
    "torchrec": "TorchRec",
    "sparselift": "SparseLift",
    "sparselift_ec": "SparseLift (TorchRec model)",
    "dense_only": "dense-only",
}
# Run only when named (`--systems ...,sparselift_ec`): SparseLift compiling DIN as written with
# TorchRec's collections, the very modules the TorchRec peer shards.
EXTRA_SYSTEMS = ("sparselift_ec",)
TITLE = "Sequence-model benchmark (DIN)"
format_seq_table = functools.partial(format_table, title=TITLE, labels=LABELS)


def default_config(**overrides: Any) -> BenchConfig:
    """`bench seq`'s configuration: DIN at its real sizes, batch 1,024 per rank."""
    return BenchConfig(**{"model": "din", "batch_size": 1024, "rows_cap": None, **overrides})


def _build_runner(name: str, cfg: BenchConfig, config: Any, rank: int, world: int, locals_: list) -> Any:
    """One system on this rank (its tables on the meta device, materialized per shard)."""
    import itertools

    from sparselift.bench import seq_systems as systems

    record = sparse_optimizer_record(cfg.sparse_optimizer, cfg.lr)
    if name == "baseline":
        return systems.DINBaselineRunner(config, rank, world, cfg.lr, cfg.seed, sparse_optimizer=record)
    if name == "torchrec":
        from sparselift.bench.baselines import quiet_torchrec_setup
        from sparselift.bench.seq_torchrec import DINTorchRecRunner

        with quiet_torchrec_setup():
            return DINTorchRecRunner(
                config, rank, world, cfg.lr, cfg.seed, itertools.cycle(locals_), sparse_optimizer=record
            )
    if name == "sparselift":
        return systems.din_sparselift_runner(
            config, rank, world, cfg.lr, cfg.seed, locals_[0], **compiled_options(cfg, locals_)
        )
    if name == "sparselift_ec":
        from sparselift.bench.seq_torchrec import din_ec_sparselift_runner

        return din_ec_sparselift_runner(
            config, rank, world, cfg.lr, cfg.seed, locals_[0], **compiled_options(cfg, locals_)
        )
    if name == "dense_only":
        return systems.DINDenseOnlyRunner(config, rank, world, cfg.lr, cfg.seed)
    raise ValueError(f"unknown system '{name}'; use {', '.join((*SYSTEMS, *EXTRA_SYSTEMS))}")


def bench_worker(rank: int, world: int, cfg: BenchConfig) -> dict[str, Any]:
    import torch

    from sparselift.bench.seq_systems import din_config, din_source

    torch.set_num_threads(cfg.threads)
    apply_host_memory(cfg)
    config = din_config(cfg.rows_cap, cfg.seed)
    source = din_source(config, seed=cfg.seed)
    globals_ = [source.global_batch(i, cfg.batch_size * world) for i in range(cfg.data_pool)]
    locals_ = [source.local_batch(i, cfg.batch_size, rank, world) for i in range(cfg.data_pool)]

    def build(name: str) -> Any:
        return _build_runner(name, cfg, config, rank, world, locals_)

    return measure_systems(cfg, rank, build, globals_, locals_)


def run(cfg: BenchConfig) -> dict[str, Any]:
    from sparselift.runtime.distributed import launch

    ran, skipped = available_systems(cfg)
    for name, reason in skipped.items():
        print(f"bench seq: skipping {LABELS.get(name, name)}: {reason}", file=sys.stderr)
    per_rank = launch(bench_worker, ran.world_size, ran, timeout_s=1800)
    return {**summarize(cfg, per_rank, LABELS), "sparse_optimizer": optimizer_summary(cfg, skipped)}


def main(argv: Sequence[str] | None = None) -> int:
    doc = __doc__.split("\n")[0]
    return cli_main(
        argv,
        "seq",
        doc,
        run,
        format_seq_table,
        models=("din",),
        batch_size=1024,
        rows_cap=None,
        extra_systems=EXTRA_SYSTEMS,
    )


if __name__ == "__main__":
    sys.exit(main())
