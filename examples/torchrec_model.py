"""A TorchRec model moved from `DistributedModelParallel` to `sparselift.compile`.

The model is what a TorchRec user writes: dense features through a bottom MLP, an
`EmbeddingBagCollection` over a `KeyedJaggedTensor`, both into a top MLP; the tables' optimizer is
fused into backward by `apply_optimizer_in_backward`. Every line changed for SparseLift carries a
`# SparseLift:` comment showing what the DMP version had there. The data are synthetic, with a
planted signal (each id has a hidden weight), so the loss falls and the eval AUC rises.

Run it on 2 local ranks, or as one process:

    torchrun --nproc_per_node=2 examples/torchrec_model.py
    python examples/torchrec_model.py --steps 200
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from torchrec.optim import RowWiseAdagrad, apply_optimizer_in_backward
from torchrec.optim.keyed import KeyedOptimizerWrapper

import sparselift  # SparseLift: was `from torchrec.distributed import DistributedModelParallel`

FEATURES = {"user": 1000, "item": 500, "tags": 100}  # feature -> table rows
NUM_DENSE, DIM = 4, 8


class SmallDLRM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        tables = [
            EmbeddingBagConfig(name=f"t_{f}", num_embeddings=rows, embedding_dim=DIM, feature_names=[f])
            for f, rows in FEATURES.items()
        ]
        self.ebc = EmbeddingBagCollection(tables=tables, device=torch.device("cpu"))
        self.bottom = nn.Sequential(nn.Linear(NUM_DENSE, DIM), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(DIM * (1 + len(FEATURES)), 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, dense: torch.Tensor, kjt: KeyedJaggedTensor) -> torch.Tensor:
        pooled = self.ebc(kjt).values()  # [B, F * DIM]
        return self.top(torch.cat([self.bottom(dense), pooled], dim=1)).squeeze(1)


def synthetic_batch(g: torch.Generator, n: int, hidden: dict[str, torch.Tensor]):
    """`n` samples: 1-3 ids per feature; the label's log-odds are the ids' hidden weights plus
    the first dense feature."""
    dense = torch.randn(n, NUM_DENSE, generator=g)
    logit = dense[:, 0].clone()
    lengths, values = [], []
    for f, rows in FEATURES.items():
        lens = torch.randint(1, 4, (n,), generator=g)
        ids = torch.randint(0, rows, (int(lens.sum()),), generator=g)
        logit += torch.zeros(n).index_add_(0, torch.arange(n).repeat_interleave(lens), hidden[f][ids])
        lengths.append(lens)
        values.append(ids)
    kjt = KeyedJaggedTensor(keys=list(FEATURES), values=torch.cat(values), lengths=torch.cat(lengths))
    return dense, kjt, torch.bernoulli(torch.sigmoid(2 * logit), generator=g)


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """ROC AUC from ranks (tied scores share their mean rank)."""
    _, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ranks = (counts.cumsum(0) - (counts - 1) / 2)[inverse]
    pos = labels == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="training steps")
    p.add_argument("--batch-size", type=int, default=128, help="samples per rank and step")
    p.add_argument("--lr", type=float, default=0.1, help="the tables' row-wise Adagrad learning rate")
    args = p.parse_args()

    if "WORLD_SIZE" in os.environ:  # launched by torchrun
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)

    hidden = {f: torch.randn(rows, generator=torch.Generator().manual_seed(1)) for f, rows in FEATURES.items()}
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own samples
    model = SmallDLRM()
    apply_optimizer_in_backward(RowWiseAdagrad, model.ebc.parameters(), {"lr": args.lr})
    dense, kjt, _ = synthetic_batch(g, args.batch_size, hidden)  # SparseLift: added, an example batch
    # SparseLift: was `model = DistributedModelParallel(model, device=torch.device("cpu"))`
    model = sparselift.compile(model, (dense, kjt))
    dense_opt = KeyedOptimizerWrapper(
        # SparseLift: was `dict(in_backward_optimizer_filter(model.named_parameters()))`
        dict(model.dense_named_parameters()),
        lambda params: torch.optim.Adagrad(params, lr=0.05),
    )

    model.train()
    for step in range(1, args.steps + 1):
        dense, kjt, labels = synthetic_batch(g, args.batch_size, hidden)
        dense_opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(dense, kjt), labels)
        loss.backward()  # the tables are updated here, by the fused row-wise Adagrad
        dense_opt.step()
        if rank == 0 and (step % 50 == 0 or step == args.steps):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)

    model.eval()
    with torch.no_grad():
        dense, kjt, labels = synthetic_batch(torch.Generator().manual_seed(7), 2000, hidden)
        scores = model(dense, kjt)  # every rank scores the same held-out samples
    if rank == 0:
        print(f"eval AUC {auc(scores, labels):.4f}", flush=True)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
