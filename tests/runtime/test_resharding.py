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
    compiled = sparselift.compile(model, example, sharding=sharding, sparse_optimizer=OPTIMIZER, options=options)
    return compiled


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
        pytest.param((3, "data_parallel"), (2, "row_wise"), id="ws3-replicated-to-ws2-row-wise"),
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


def _legacy(rank: int, world: int, sharding: str, path: str, cache: str, save: bool) -> str:
    from sparselift.runtime.sharded import legacy_keys, load_checkpoint

    compiled = _compile(sharding, cache)
    if save:  # a checkpoint as the earlier format wrote it
        _train(compiled, rank, world, [0])
        dcp.save(legacy_keys(compiled), checkpoint_id=path)
        return "saved"
    try:
        load_checkpoint(compiled, path)
    except ValueError as e:
        return str(e)
    return "loaded"


def test_an_earlier_format_checkpoint_loads_where_it_was_saved_and_says_how_to_convert(tmp_path):
    path, cache = str(tmp_path / "ckpt"), str(tmp_path / "cache")
    launch(_legacy, 2, "table_wise", path, cache, True, timeout_s=120)
    assert launch(_legacy, 2, "table_wise", path, cache, False, timeout_s=120) == ["loaded", "loaded"]
    for message in launch(_legacy, 3, "row_wise", path, cache, False, timeout_s=120):
        assert "earlier format" in message and "save it" in message, message


def _small(rows, optimizer, cache: str):
    from parity_models import SmallModel  # tests/runtime is on sys.path

    torch.manual_seed(0)
    model = SmallModel(rows=rows)
    example = build_model(MODEL, rows_cap=None, batch_size=8, seed=0)[1]
    options = sparselift.CompileOptions(plan="none", grad_reduction="mean", cache_dir=cache)
    return sparselift.compile(model, example, sharding="row_wise", sparse_optimizer=optimizer, options=options)


def _checked_loads(rank: int, world: int, path: str, cache: str, cases) -> list[str]:
    """Save once (rows (50, 80, 30), row-wise Adagrad), then load into each of `cases`' models:
    the message of each refusal, after checking that the refused load changed nothing."""
    from sparselift.runtime.sharded import load_checkpoint

    saver = _small((50, 80, 30), OPTIMIZER, cache)
    _train(saver, rank, world, [0])
    dcp.save(saver.sharded_state_dict(), checkpoint_id=path)
    messages = []
    for rows, optimizer in cases:
        loader = _small(rows, optimizer, cache)
        before = loader.state_dict()
        try:
            load_checkpoint(loader, path)
            messages.append("loaded")
        except ValueError as e:
            messages.append(str(e))
        after = loader.state_dict()
        assert all(torch.equal(before[key], after[key]) for key in before), "a refused checkpoint changed the model"
    return messages


def test_a_checkpoint_that_does_not_fit_is_refused_on_every_rank_changing_nothing(tmp_path):
    import re

    cases = [
        ((60, 80, 30), OPTIMIZER, r"'emb\.0\.weight' is \(50, 8\), .* the compiled model's is \(60, 8\)"),
        (
            (50, 80, 30),
            sparselift.optim.Adam(lr=0.1),
            r"'emb\.0\.weight' has optimizer state \['momentum'\] in the checkpoint, but it trains with adam here "
            r"\(state \['exp_avg', 'exp_avg_sq', 'step'\]\)",
        ),
        (
            (50, 80, 30),
            sparselift.optim.SGD(lr=0.1),
            r"'emb\.0\.weight' has optimizer state \['momentum'\] in the checkpoint, but it trains with sgd",
        ),
    ]
    path, cache = str(tmp_path / "ckpt"), str(tmp_path / "cache")
    per_rank = launch(_checked_loads, 2, path, cache, [(r, o) for r, o, _ in cases], timeout_s=180)
    for k, (_, _, expected) in enumerate(cases):
        messages = [m[k] for m in per_rank]
        assert len(set(messages)) == 1 and re.search(expected, messages[0]), messages


def _from_torchrec(rank: int, world: int, path: str, cache: str) -> dict:
    """TorchRec's DistributedModelParallel saves the model (its tables set to 1.5, so they are
    recognizable); SparseLift, row-wise over the same ranks, loads that checkpoint."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    from sparselift.bench.baselines import _TorchRecTrainer
    from sparselift.models import build
    from sparselift.runtime.sharded import load_checkpoint

    torch.manual_seed(0)
    model, example = build("torchrec-ebc", rows_cap=None, batch_size=8, seed=0)
    ours = copy.deepcopy(model)
    trainer = _TorchRecTrainer.__new__(_TorchRecTrainer)  # its DMP setup alone
    names = [n.split(".")[-2] for n, _ in model.named_parameters() if ".embedding_bags." in n]
    trainer._shard(model, [EmbeddingBagCollectionSharder()], names, world, None)
    saved = trainer.dmp.state_dict()
    with torch.no_grad():
        for value in saved.values():
            for shard in getattr(value, "local_shards", list)():
                shard.tensor.fill_(1.5)
    dcp.save(saved, checkpoint_id=path)
    options = sparselift.CompileOptions(plan="none", cache_dir=cache)
    compiled = sparselift.compile(ours, example, sharding="row_wise", options=options)
    load_checkpoint(compiled, path)
    state = compiled.state_dict()
    return {k: bool((state[k] == 1.5).all()) for k in state if ".embedding_bags." in k}


def test_a_torchrec_dmp_checkpoint_of_the_same_model_loads(tmp_path):
    for tables in launch(_from_torchrec, 2, str(tmp_path / "ckpt"), str(tmp_path / "cache"), timeout_s=180):
        assert len(tables) == 4 and all(tables.values()), tables


def _load_outcome(rank: int, world: int, path: str, cache: str) -> str:
    from sparselift.runtime.sharded import load_checkpoint

    compiled = _compile("row_wise", cache)
    try:
        load_checkpoint(compiled, path)
    except RuntimeError as e:
        return str(e)
    return "loaded"


def test_a_rank_that_cannot_read_its_part_fails_every_rank(tmp_path):
    import os

    path, cache = str(tmp_path / "ckpt"), str(tmp_path / "cache")
    launch(_save, 2, "row_wise", path, cache, timeout_s=120)
    os.remove(os.path.join(path, "__1_0.distcp"))  # rank 1's rows are gone
    outcomes = launch(_load_outcome, 2, path, cache, timeout_s=120)
    assert len(outcomes) == 2 and all("could not read their part" in o for o in outcomes), outcomes
