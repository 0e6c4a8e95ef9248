"""Train a DLRM-style model on MovieLens-100k (real data) with SparseLift, checkpoint it, resume.

The model (`sparselift.models.movielens`, "dlrm") is a TorchRec one: an `EmbeddingBagCollection`
over a `KeyedJaggedTensor` (user, movie, age, gender, occupation, zip, the movie's genres and the
user's history of movies), pairwise dot products, an MLP. The label: was the rating 4 or more?
The test split is each user's last ratings. What it shows:

- `sparselift.compile` with `--sparse-optimizer adam|rowwise-adagrad` and `grad_reduction="mean"`:
  each rank trains on its share of each global batch, as one process would on the whole batch;
- one warmup-and-decay schedule driving the dense optimizer and the tables' alike
  (`compiled.sparse_optimizer` is a torch optimizer for `torch.optim.lr_scheduler`);
- evaluation after each epoch (`compiled.eval()`, `torch.no_grad()`), test ROC AUC on rank 0;
- a DCP checkpoint after each epoch (`dcp.save(compiled.sharded_state_dict(), ...)`: each rank
  its own rows) and `--resume` from one (`sparselift.load_checkpoint`), at any world size.

Get the data with `make data`, then:

    torchrun --nproc_per_node=2 examples/movielens_dlrm.py --epochs 3 --checkpoint ckpt
    torchrun --nproc_per_node=2 examples/movielens_dlrm.py --epochs 4 --resume ckpt/epoch-3
    python examples/movielens_dlrm.py --train-rows 20000   # one process, a quick run
"""

import argparse
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F

import sparselift
from sparselift.data.movielens import MovieLensMissing, load_movielens
from sparselift.models.movielens import MovieLensConfig, build, kjt_inputs


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """ROC AUC from ranks (tied scores share their mean rank)."""
    _, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ranks = (counts.cumsum(0) - (counts - 1) / 2)[inverse]
    pos = labels == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def warmup_then_decay(total_steps: int, warmup: int):
    """The learning rate's factor at each step: linear warmup, then a cosine decay to 10%."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", help="the MovieLens-100k files (default: where `make data` puts them)")
    p.add_argument("--epochs", type=int, default=3, help="epochs in all (a resumed run counts the saved ones)")
    p.add_argument("--batch-size", type=int, default=512, help="global batch, split over the ranks")
    p.add_argument("--train-rows", type=int, help="train on this prefix of the training split only")
    p.add_argument("--sparse-optimizer", choices=("adam", "rowwise-adagrad"), default="adam")
    p.add_argument("--lr", type=float, help="the tables' peak learning rate (default: 0.01 adam, 0.1 rowwise-adagrad)")
    p.add_argument("--dense-lr", type=float, default=0.003, help="the dense Adam's peak learning rate")
    p.add_argument("--checkpoint", help="save a checkpoint into DIR/epoch-N after each epoch")
    p.add_argument("--resume", metavar="DIR", help="continue from a checkpoint (a DIR/epoch-N of --checkpoint)")
    args = p.parse_args()

    try:
        data = load_movielens(args.data_dir)
    except MovieLensMissing as e:
        if int(os.environ.get("RANK", 0)) == 0:
            print(e, file=sys.stderr)
        raise SystemExit(1) from None
    if "WORLD_SIZE" in os.environ:  # launched by torchrun
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)

    train, test = data.train, data.test
    if args.train_rows is not None:
        train = train.select(torch.arange(min(args.train_rows, len(train))))
    model = build("dlrm", MovieLensConfig(cardinalities=data.cardinalities, max_history=data.max_history), seed=0)
    keys = model.POOLED_KEYS
    if args.sparse_optimizer == "adam":
        tables_opt = sparselift.optim.Adam(lr=args.lr or 0.01)
    else:
        tables_opt = sparselift.optim.RowWiseAdagrad(lr=args.lr or 0.1)
    example = kjt_inputs(train, torch.arange(args.batch_size // world), keys)  # one rank's batch
    options = sparselift.CompileOptions(grad_reduction="mean")  # the default: the global batch's mean
    compiled = sparselift.compile(model, example, sparse_optimizer=tables_opt, options=options)
    dense_opt = torch.optim.Adam([p for _, p in compiled.dense_named_parameters()], lr=args.dense_lr)
    steps_per_epoch = len(train) // args.batch_size
    factor = warmup_then_decay(steps_per_epoch * args.epochs, warmup=max(1, steps_per_epoch // 2))
    schedules = [torch.optim.lr_scheduler.LambdaLR(opt, factor) for opt in (dense_opt, compiled.sparse_optimizer)]

    first_epoch = 1
    if args.resume:
        sparselift.load_checkpoint(compiled, args.resume)  # tables, their optimizer state, dense weights
        saved = torch.load(os.path.join(args.resume, "trainer.pt"))
        dense_opt.load_state_dict(saved["dense_optimizer"])
        compiled.sparse_optimizer.load_state_dict(saved["sparse_optimizer"])
        for schedule, state in zip(schedules, saved["schedules"]):
            schedule.load_state_dict(state)
        first_epoch = saved["epoch"] + 1
        if rank == 0:
            print(f"resumed from {args.resume} after epoch {saved['epoch']}", flush=True)

    for epoch in range(first_epoch, args.epochs + 1):
        compiled.train()
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(epoch))  # same on every rank
        losses = []
        for step in range(steps_per_epoch):
            rows = order[step * args.batch_size : (step + 1) * args.batch_size].tensor_split(world)[rank]
            dense_opt.zero_grad()
            loss = F.binary_cross_entropy_with_logits(compiled(*kjt_inputs(train, rows, keys)), train.label[rows])
            loss.backward()  # the tables are updated here
            dense_opt.step()
            for schedule in schedules:
                schedule.step()
            losses.append(loss.item())

        compiled.eval()
        rows = torch.arange(len(test)).tensor_split(world)[rank]
        with torch.no_grad():
            scores = compiled(*kjt_inputs(test, rows, keys))
        mean_loss = torch.tensor(sum(losses) / max(1, len(losses)))
        everyone = [scores]
        if world > 1:
            everyone = [None] * world
            dist.all_gather_object(everyone, scores)
            dist.all_reduce(mean_loss)
        if rank == 0:
            train_loss, test_auc = float(mean_loss) / world, auc(torch.cat(everyone), test.label)
            lr = compiled.sparse_optimizer.param_groups[0]["lr"]  # the tables' (group 0)
            print(f"epoch {epoch}: train loss {train_loss:.4f}, test AUC {test_auc:.4f}, lr {lr:.2e}", flush=True)

        if args.checkpoint:
            path = os.path.join(args.checkpoint, f"epoch-{epoch}")
            dcp.save(compiled.sharded_state_dict(), checkpoint_id=path, no_dist=world == 1)  # each rank its own rows
            if rank == 0:  # the rest of the training state, the same on every rank
                schedules_state = [s.state_dict() for s in schedules]
                trainer = {"epoch": epoch, "dense_optimizer": dense_opt.state_dict(), "schedules": schedules_state}
                trainer["sparse_optimizer"] = compiled.sparse_optimizer.state_dict()
                torch.save(trainer, os.path.join(path, "trainer.pt"))
                print(f"saved checkpoint {path}", flush=True)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
