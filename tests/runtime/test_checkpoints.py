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
    return sparselift.compile(model, example, sharding="auto", sparse_optimizer=sparselift.optim.RowWiseAdagrad(lr=0.1))


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

    # Round trip of the gathered state dict (tables and Adagrad accumulators) is exact, and
    # training on from it equals not stopping.
    other = _compile()
    other.load_state_dict(torch.load(_saved(full, ckpt_dir, rank)))
    again = other.state_dict()
    exact = all(torch.equal(again[k], full[k]) for k in full)
    _train(other, batches[2:], rank, 2)
    from_full = other.state_dict()
    full_resume_diff = max((from_full[k] - want[k]).abs().max().item() for k in want)
    # Only rank 0 receives tables with gather_to="rank0"; the others hold the dense parameters.
    on_rank0 = other.state_dict(gather_to="rank0")
    rank0_keys = sorted(on_rank0)
    rank0_equal = all(torch.equal(on_rank0[k], from_full[k]) for k in on_rank0)

    # Resume from the sharded checkpoint (with optimizer state) and finish the run.
    resumed = _compile()
    dcp.load(resumed.sharded_state_dict(), checkpoint_id=ckpt_dir)
    batches_rest = batches[2:]
    _train(resumed, batches_rest, rank, 2)
    got = resumed.state_dict()
    diff = max((got[k] - want[k]).abs().max().item() for k in want)
    return {
        "exact_roundtrip": exact,
        "resume_diff": diff,
        "keys": sorted(full),
        "full_resume_diff": full_resume_diff,
        "rank0_keys": rank0_keys,
        "rank0_equal": rank0_equal,
        "tables": [info.param for info in other.table_facts],
    }


def _saved(state, directory, rank):
    import os

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"full-{rank}.pt")
    torch.save(state, path)
    return path


def test_checkpoint_roundtrip_and_resume(tmp_path):
    results = sparselift.launch(_resume_worker, 2, str(tmp_path / "ckpt"), timeout_s=120)
    model, _ = build(MODEL, rows_cap=ROWS, batch_size=BATCH)
    tables = results[0]["tables"]
    dense = sorted(name for name, _ in model.named_parameters() if name not in tables)
    for r in results:
        assert r["exact_roundtrip"]
        assert r["resume_diff"] < 1e-6
        assert r["full_resume_diff"] == 0.0  # the accumulators came back too: the run goes on exactly
        assert r["rank0_equal"]
    assert tables and results[0]["keys"] == sorted([*dense, *tables, *(f"{t}.momentum" for t in tables)])
    assert results[0]["rank0_keys"] == results[0]["keys"] and results[1]["rank0_keys"] == dense
    assert any(p.name.endswith(".distcp") for p in (tmp_path / "ckpt").iterdir())


def test_load_state_dict_names_what_is_wrong():
    import pytest

    compiled = _compile()
    state = compiled.state_dict()
    table = compiled.table_facts[0].param
    with pytest.raises(KeyError, match=rf"missing keys \['{table}.momentum'\].*'<table>.momentum'"):
        compiled.load_state_dict({k: v for k, v in state.items() if k != f"{table}.momentum"})
    with pytest.raises(KeyError, match=r"unexpected keys \['extra'\]"):
        compiled.load_state_dict({**state, "extra": torch.zeros(1)})
    rows, dim = state[table].shape
    with pytest.raises(ValueError, match=rf"'{table}' has shape \({rows}, {dim + 1}\).*is \({rows}, {dim}\)"):
        compiled.load_state_dict({**state, table: torch.zeros(rows, dim + 1)})
    before = compiled.state_dict()
    result = compiled.load_state_dict({k: v for k, v in state.items() if k != table}, strict=False)
    assert result.missing_keys == [table] and torch.equal(compiled.state_dict()[table], before[table])
