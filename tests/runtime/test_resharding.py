"""Checkpoints that reshard: saved with `torch.distributed.checkpoint` at one world size and
placement, loaded exactly at another (1, 2 or 3 ranks; table-wise, row-wise, auto), training on
as single-process training would, and loaded by the plain, uncompiled model in one process."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed.checkpoint as dcp

import sparselift
from sparselift.optim import RowWiseAdagrad
from sparselift.runtime.distributed import launch
from sparselift.runtime.parity import _loss, build_model, reference_table_step

MODEL = "parity_models:any_batch"
OPTIMIZER = RowWiseAdagrad(lr=0.1, eps=1e-8)
LR = 0.1  # the dense parameters' SGD


def _batch(world: int, step: int, rank: int):
    return build_model(MODEL, rows_cap=None, batch_size=6, seed=1000 + 31 * step + 7 * world + rank)[1]


def _compile(sharding: str, cache: str):
    model, example = build_model(MODEL, rows_cap=None, batch_size=8, seed=0)
    options = sparselift.CompileOptions(plan="none", grad_reduction="mean", cache_dir=cache)
    return sparselift.compile(model, example, sharding=sharding, sparse_optimizer=OPTIMIZER, options=options)


def _train(compiled, rank: int, world: int, steps) -> None:
    dense = torch.optim.SGD([p for _, p in compiled.dense_named_parameters()], lr=LR)
    for step in steps:
        dense.zero_grad()
        _loss(compiled(*_batch(world, step, rank))).backward()
        dense.step()


def _save(rank: int, world: int, sharding: str, path: str, cache: str) -> dict:
    compiled = _compile(sharding, cache)
    _train(compiled, rank, world, [0, 1])
    dcp.save(compiled.sharded_state_dict(), checkpoint_id=path)
    compiled.eval()
    with torch.no_grad():
        out = compiled(*_batch(world, 9, 0))
    return {"state": compiled.state_dict(), "out": out}


def _resume(rank: int, world: int, sharding: str, path: str, cache: str) -> dict:
    compiled = _compile(sharding, cache)
    dcp.load(compiled.sharded_state_dict(), checkpoint_id=path)
    loaded = compiled.state_dict()
    _train(compiled, rank, world, [2])
    return {"loaded": loaded, "final": compiled.state_dict()}


def _reference(worlds: tuple[int, int]) -> dict[str, torch.Tensor]:
    """Three steps in one process: two on the saving world's batches, one on the loading one's."""
    model, _ = build_model(MODEL, rows_cap=None, batch_size=8, seed=0)
    model = copy.deepcopy(model)
    tables = {n for n, p in model.named_parameters() if n.startswith("emb.")}
    states: dict[str, dict] = {}
    for step, world in enumerate((worlds[0], worlds[0], worlds[1])):
        model.zero_grad()
        sum(_loss(model(*_batch(world, step, r))) / world for r in range(world)).backward()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name in tables:
                    reference_table_step(OPTIMIZER, OPTIMIZER.lr, p, p.grad, states.setdefault(name, {}), step + 1)
                else:
                    p -= LR * p.grad
    return {n: p.detach() for n, p in model.named_parameters()}


@pytest.mark.parametrize(
    "saved, loaded",
    [
        pytest.param((2, "table_wise"), (3, "row_wise"), id="ws2-table-wise-to-ws3-row-wise"),
        pytest.param((3, "row_wise"), (2, "table_wise"), id="ws3-row-wise-to-ws2-table-wise"),
        pytest.param((2, "auto"), (1, "auto"), id="ws2-auto-to-ws1"),
        pytest.param((1, "auto"), (3, "auto"), id="ws1-to-ws3-auto"),
    ],
)
def test_a_checkpoint_loads_at_another_world_size_and_placement(tmp_path, saved, loaded):
    path, cache = str(tmp_path / "ckpt"), str(tmp_path / "cache")
    before = launch(_save, saved[0], saved[1], path, cache, timeout_s=120)[0]["state"]
    after = launch(_resume, loaded[0], loaded[1], path, cache, timeout_s=120)
    want = _reference((saved[0], loaded[0]))
    for rank, result in enumerate(after):
        assert sorted(result["loaded"]) == sorted(before)
        for key, value in before.items():  # every table, accumulator and dense parameter, exactly
            assert torch.equal(result["loaded"][key], value), (rank, key)
        for name, value in want.items():
            torch.testing.assert_close(result["final"][name], value, atol=1e-5, rtol=1e-4, msg=f"{name} on rank {rank}")


def test_the_plain_model_loads_a_sharded_checkpoint(tmp_path):
    path, cache = str(tmp_path / "ckpt"), str(tmp_path / "cache")
    saved = launch(_save, 2, "row_wise", path, cache, timeout_s=120)[0]
    model, _ = build_model(MODEL, rows_cap=None, batch_size=8, seed=1)  # other weights, all overwritten
    state = model.state_dict()
    dcp.load(state, storage_reader=dcp.FileSystemReader(path), no_dist=True)
    model.load_state_dict(state)
    for key, value in model.state_dict().items():
        assert torch.equal(value, saved["state"][key]), key
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(*_batch(2, 9, 0)), saved["out"], atol=1e-6, rtol=1e-6)
