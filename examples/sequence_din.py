"""A sequence model (DIN-style target attention over a user's history) compiled by SparseLift.

The history is a padded `[B, L]` tensor of item ids (0 is padding) looked up unpooled by an
`nn.Embedding(padding_idx=0)`; the same table looks up the target item. An attention MLP scores
each history position against the target, the scores are masked by the history's length, and
the weighted history, the target and a user embedding go through a top MLP to one logit.

Synthetic data with a planted signal: every item has one of a few genres, a user's history is
mostly of one favourite genre, and the label says whether the target is of that genre: the
model learns it by comparing the target with the history (and with what it learns of the user).

    python examples/sequence_din.py
    torchrun --nproc_per_node=2 examples/sequence_din.py
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import sparselift

ITEMS, USERS, GENRES, MAX_HISTORY, DIM = 200, 100, 4, 20, 16


class DIN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.item = nn.Embedding(ITEMS, DIM, padding_idx=0)  # read by the history and the target
        self.user = nn.Embedding(USERS, DIM)
        self.attention = nn.Sequential(nn.Linear(4 * DIM, 32), nn.ReLU(), nn.Linear(32, 1))
        self.top = nn.Sequential(nn.Linear(4 * DIM, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, history: torch.Tensor, lengths: torch.Tensor, target_item: torch.Tensor, user: torch.Tensor):
        h = self.item(history)  # [B, L, D]: unpooled; padding (id 0) reads zeros
        target = self.item(target_item)  # [B, D]: the same table
        t = target.unsqueeze(1).expand_as(h)
        scores = self.attention(torch.cat([h, t, h - t, h * t], dim=-1)).squeeze(-1)  # [B, L]
        mask = torch.arange(history.shape[1]) < lengths.unsqueeze(1)
        weights = torch.softmax(scores.masked_fill(~mask, -1e9), dim=1)
        interest = (weights.unsqueeze(-1) * h).sum(1)
        return self.top(torch.cat([interest, target, interest * target, self.user(user)], dim=1)).squeeze(1)


def synthetic_batch(g: torch.Generator, n: int):
    """Histories of 1..MAX_HISTORY items, 80% of them of the user's favourite genre (item % GENRES);
    the label is 1 exactly when the target is of that genre (half the samples)."""
    user = torch.randint(0, USERS, (n,), generator=g)
    favourite = user % GENRES
    lengths = torch.randint(1, MAX_HISTORY + 1, (n,), generator=g)
    noise = torch.randint(0, GENRES, (n, MAX_HISTORY), generator=g)
    genre = torch.where(torch.rand(n, MAX_HISTORY, generator=g) < 0.8, favourite[:, None], noise)
    history = genre + GENRES * torch.randint(1, ITEMS // GENRES, (n, MAX_HISTORY), generator=g)
    history[torch.arange(MAX_HISTORY) >= lengths[:, None]] = 0  # padding
    label = torch.rand(n, generator=g) < 0.5
    other = (favourite + torch.randint(1, GENRES, (n,), generator=g)) % GENRES
    target = torch.where(label, favourite, other) + GENRES * torch.randint(1, ITEMS // GENRES, (n,), generator=g)
    return (history, lengths, target, user), label.float()


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
    p.add_argument("--lr", type=float, default=0.01, help="learning rate (tables' and dense Adam)")
    args = p.parse_args()

    if "WORLD_SIZE" in os.environ:  # launched by torchrun
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0

    torch.manual_seed(0)  # the same initial weights on every rank
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own samples
    model = DIN()
    example, _ = synthetic_batch(g, args.batch_size)
    compiled = sparselift.compile(model, example, sparse_optimizer=sparselift.optim.Adam(lr=args.lr))
    dense_opt = torch.optim.Adam([p for _, p in compiled.dense_named_parameters()], lr=args.lr)

    compiled.train()
    for step in range(1, args.steps + 1):
        inputs, labels = synthetic_batch(g, args.batch_size)
        dense_opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(compiled(*inputs), labels)
        loss.backward()  # updates the item and user tables
        dense_opt.step()
        if rank == 0 and (step % 50 == 0 or step == args.steps):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)

    compiled.eval()
    with torch.no_grad():
        inputs, labels = synthetic_batch(torch.Generator().manual_seed(7), 2000)
        scores = compiled(*inputs)  # every rank scores the same held-out samples
    if rank == 0:
        print(f"eval AUC {auc(scores, labels):.4f}", flush=True)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
