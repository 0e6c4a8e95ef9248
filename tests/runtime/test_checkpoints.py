"""Checkpoints: state_dict round-trips exactly, resuming equals not stopping, DCP saves shards without gathering."""

from __future__ import annotations

import torch

import sparselift
from sparselift.models import build
from sparselift.runtime.parity import local_batches

MODEL, ROWS, BATCH = "two-tower", 200, 8


def _train(compiled, batches, rank, steps):
    opt = torch.optim.SGD([p for _, p in compiled.dense_named_parameters()], lr=0.05)
    for step in range(steps):
        opt.zero_grad()
        compiled(*batches[step][rank]).pow(2).mean().backward()
        opt.step()


def _compile():
    model, example = build(MODEL, rows_cap=ROWS, batch_size=BATCH)
    return sparselift.compile(model, example, sharding="auto",
                              sparse_optimizer=sparselift.optim.RowWiseAdagrad(lr=0.1))


def _resume_worker(rank, world, ckpt_dir):
    import torch.distributed.checkpoint as dcp

    batches = local_batches(MODEL, world, 4, BATCH, ROWS, 0)
    straight = _compile()
    _train(straight, batches, rank, 4)
    want = straight.state_dict()

    first = _compile()
    _train(first, batches, rank, 2)
    full = first.state_dict()
    dcp.save(first.sharded_state_dict(), checkpoint_id=ckpt_dir)

    # Round trip of the gathered state dict is exact.
    other = _compile()
    other.load_state_dict(full)
    again = other.state_dict()
    exact = all(torch.equal(again[k], full[k]) for k in full)

    # Resume from the sharded checkpoint (with optimizer state) and finish the run.
    resumed = _compile()
    dcp.load(resumed.sharded_state_dict(), checkpoint_id=ckpt_dir)
    batches_rest = batches[2:]
    _train(resumed, batches_rest, rank, 2)
    got = resumed.state_dict()
    diff = max((got[k] - want[k]).abs().max().item() for k in want)
    return {"exact_roundtrip": exact, "resume_diff": diff, "keys": sorted(full)}


def test_checkpoint_roundtrip_and_resume(tmp_path):
    results = sparselift.launch(_resume_worker, 2, str(tmp_path / "ckpt"), timeout_s=120)
    for r in results:
        assert r["exact_roundtrip"]
        assert r["resume_diff"] < 1e-6
    model, _ = build(MODEL, rows_cap=ROWS, batch_size=BATCH)
    assert results[0]["keys"] == sorted(name for name, _ in model.named_parameters())
    assert any(p.name.endswith(".distcp") for p in (tmp_path / "ckpt").iterdir())
