"""A small DLRM trained by SparseLift on Criteo-format TSV files.

Each line is `label, I1..I13, C1..C26`, tab-separated (the Criteo Kaggle / Terabyte format;
`.gz` files are read too). `sparselift.data.criteo_tsv.CriteoTSV` reads them the DLRM way:
`log(1 + x)` on the integer features, the hex categorical values hashed (modulo) into `--rows`
rows per table. The model is DLRM's: a bottom MLP on the integer features, one
`nn.EmbeddingBag` per categorical feature, their pairwise dot products and a top MLP. Each rank
reads its own share of every global batch; `--test-file` is scored after each epoch (ROC AUC).

    python examples/criteo_tsv.py --files day_0.tsv --test-file day_1.tsv
    torchrun --nproc_per_node=2 examples/criteo_tsv.py --files train.tsv.gz --test-file test.tsv.gz --rows 100000
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import sparselift
from sparselift.data.criteo_tsv import CriteoTSV

NUM_DENSE, NUM_TABLES = 13, 26


def mlp(*sizes: int) -> nn.Sequential:
    layers = [m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
    return nn.Sequential(*layers[:-1])  # no ReLU after the last layer


class DLRM(nn.Module):
    def __init__(self, rows: int, dim: int = 16) -> None:
        super().__init__()
        self.bottom = mlp(NUM_DENSE, 64, dim)
        # include_last_offset: the reader's offsets are [B + 1], the last one the number of ids.
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(rows, dim, mode="sum", include_last_offset=True) for _ in range(NUM_TABLES)
        )
        for t in self.tables:  # DLRM's initialization: small rows keep the dot products small
            nn.init.uniform_(t.weight, -(rows**-0.5), rows**-0.5)
        n = NUM_TABLES + 1
        self.register_buffer("pairs", torch.triu_indices(n, n, offset=1), persistent=False)
        self.top = mlp(dim + n * (n - 1) // 2, 64, 1)

    def forward(self, dense: torch.Tensor, ids: list[torch.Tensor], offsets: list[torch.Tensor]) -> torch.Tensor:
        x = self.bottom(dense)
        vectors = torch.stack([x] + [t(i, o) for t, i, o in zip(self.tables, ids, offsets)], dim=1)  # [B, 27, D]
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)


def model_inputs(batch) -> tuple:
    """A reader's `Batch` as the model's arguments: dense features, ids and offsets per table."""
    return batch.dense, [ids for ids, _ in batch.sparse], [offsets for _, offsets in batch.sparse]


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """ROC AUC from ranks (tied scores share their mean rank)."""
    _, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ranks = (counts.cumsum(0) - (counts - 1) / 2)[inverse]
    pos = labels == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", nargs="+", required=True, help="training TSV files, read in order")
    p.add_argument("--test-file", help="a TSV file to score after each epoch")
    p.add_argument("--rows", type=int, default=10_000, help="rows per table (categorical values are hashed into them)")
    p.add_argument("--batch-size", type=int, default=128, help="samples per rank and step")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05, help="learning rate of both Adagrads (tables' row-wise)")
    args = p.parse_args()

    if "WORLD_SIZE" in os.environ:  # launched by torchrun
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)

    train = CriteoTSV(args.files, cardinalities=[args.rows] * NUM_TABLES)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = DLRM(args.rows)
    example = next(train.batches(args.batch_size, 1, rank=rank, world_size=world))
    compiled = sparselift.compile(
        model, model_inputs(example), sparse_optimizer=sparselift.optim.RowWiseAdagrad(lr=args.lr)
    )
    dense_opt = torch.optim.Adagrad([p for _, p in compiled.dense_named_parameters()], lr=args.lr)

    for epoch in range(1, args.epochs + 1):
        compiled.train()
        total, steps = 0.0, 0
        for batch in train.batches(args.batch_size, rank=rank, world_size=world):
            dense_opt.zero_grad()
            loss = F.binary_cross_entropy_with_logits(compiled(*model_inputs(batch)), batch.labels)
            loss.backward()
            dense_opt.step()
            total, steps = total + loss.item(), steps + 1
        mean_loss = torch.tensor(total / max(steps, 1))
        if world > 1:
            dist.all_reduce(mean_loss)  # every rank's mean, summed
        if rank == 0:
            print(f"epoch {epoch}: {steps} steps, mean training loss {float(mean_loss) / world:.4f}", flush=True)
        if args.test_file:
            compiled.eval()
            scores, labels = [], []
            with torch.no_grad():  # the last batch may be short, or empty on some rank
                for batch in CriteoTSV(args.test_file, cardinalities=[args.rows] * NUM_TABLES).batches(
                    args.batch_size, rank=rank, world_size=world, drop_last=False
                ):
                    scores.append(compiled(*model_inputs(batch)))
                    labels.append(batch.labels)
            mine = (torch.cat(scores), torch.cat(labels))
            everyone = [mine] * world
            if world > 1:
                dist.all_gather_object(everyone, mine)
            if rank == 0:
                s, y = (torch.cat(parts) for parts in zip(*everyone))
                print(f"epoch {epoch}: test AUC {auc(s, y):.4f} on {len(y)} samples", flush=True)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
