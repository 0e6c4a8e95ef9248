"""`train()` and `eval()` as the user's loop runs them: eval forwards equal the eager model's
`.eval()` ones (dropout off, batch norm on its running statistics), under `torch.no_grad()` and
`torch.inference_mode()` with batches built inside the block, at world sizes 2 and 3; batch norm
keeps each rank's own running statistics (DDP without SyncBatchNorm), which eval reads and
`state_dict()` holds; `train()` after `eval()` trains on exactly as without it."""

from __future__ import annotations

import copy
import gc
import threading
import weakref

import pytest
import torch
from torch import nn

import sparselift
from sparselift.runtime.distributed import launch


class DropoutBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(60, 8, mode="sum")
        self.bn = nn.BatchNorm1d(10)
        self.drop = nn.Dropout(0.5)
        self.out = nn.Linear(10, 1)

    def forward(self, dense, ids, offsets):
        x = torch.cat([dense, self.emb(ids, offsets)], dim=1)
        return self.out(self.drop(torch.relu(self.bn(x))))


def _batch(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 4, (n,), generator=g)
    ids = torch.randint(0, 60, (int(lengths.sum()),), generator=g)
    return torch.randn(n, 2, generator=g), ids, lengths.cumsum(0) - lengths


def _compiled(cache: str):
    torch.manual_seed(0)
    model = DropoutBatchNorm()
    eager = copy.deepcopy(model)
    options = sparselift.CompileOptions(cache_dir=cache, plan="none", grad_reduction="mean")
    compiled = sparselift.compile(model, _batch(8, 0), options=options)
    return compiled, eager


def _eval_worker(rank: int, world: int, cache: str) -> dict:
    compiled, eager = _compiled(cache)
    before = {k: v.clone() for k, v in compiled.state_dict().items()}
    compiled.eval()
    eager.eval()
    local = _batch(6, 10 + rank)
    first, second = compiled(*local), compiled(*local)
    out = {"eval": float((first - eager(*local)).abs().max()), "repeat_equal": bool(torch.equal(first, second))}
    sizes = (3, 1, 0) if rank == world - 1 else (3, 1, 2)
    for n in sizes:
        with torch.inference_mode():  # the batch built inside the block
            got = compiled(*_batch(n, 20 + n))
            want = eager(*_batch(n, 20 + n))
        out[f"inference_{n}"] = float((got - want).abs().max()) if n else float(got.numel())
    with torch.no_grad():
        out["no_grad"] = float((compiled(*local) - eager(*local)).abs().max())
    after = compiled.state_dict()
    out["eval_changed"] = [k for k in before if not torch.equal(before[k], after[k])]
    # One training step: batch norm's running statistics are this rank's own, from its batch.
    compiled.train()
    eager.train()
    train_batch = _batch(8, 30 + rank)
    compiled(*train_batch).square().mean().backward()
    eager(*train_batch)  # the same weights before the step: the same statistics
    state = compiled.state_dict()
    out["running_mean"] = float((state["bn.running_mean"] - eager.bn.running_mean).abs().max())
    out["running_var"] = float((state["bn.running_var"] - eager.bn.running_var).abs().max())
    out["tracked"] = int(state["bn.num_batches_tracked"])
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_eval_forwards_equal_the_eager_models(world, tmp_path):
    for rank, out in enumerate(launch(_eval_worker, world, str(tmp_path), timeout_s=120)):
        assert out["eval"] <= 1e-6 and out["no_grad"] <= 1e-6, (rank, out)
        assert out["repeat_equal"], (rank, out)
        assert all(out[f"inference_{n}"] <= 1e-6 for n in (3, 1)), (rank, out)
        assert out["eval_changed"] == [], (rank, out)  # no table, state or running statistic
        assert out["running_mean"] <= 1e-6 and out["running_var"] <= 1e-6 and out["tracked"] == 1, (rank, out)


def _resume_worker(rank: int, world: int, cache: str, with_eval: bool) -> dict:
    compiled, _ = _compiled(cache)
    torch.manual_seed(1 + rank)  # dropout's draws: the same in both runs
    for step in range(2):
        compiled(*_batch(8, 40 + 7 * step + rank)).square().mean().backward()
        if with_eval and step == 0:
            compiled.eval()
            with torch.no_grad():
                compiled(*_batch(5, 99))
            compiled.train()
    return compiled.state_dict()


@pytest.mark.parametrize("world", [2, 3])
def test_train_after_eval_trains_on_exactly(tmp_path, world):
    plain = launch(_resume_worker, world, str(tmp_path), False, timeout_s=120)
    paused = launch(_resume_worker, world, str(tmp_path), True, timeout_s=120)
    for want, got in zip(plain, paused):
        assert sorted(want) == sorted(got)
        for key in want:
            assert torch.equal(want[key], got[key]), key


class Unpicklable(DropoutBatchNorm):
    """A model deepcopy refuses (a lock among its attributes): its eval regions are exported at
    compile time instead of from a skeleton at the first eval()."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()


def _deleted_model_worker(rank: int, world: int, cache: str, sharding: str, model_cls) -> dict:
    torch.manual_seed(0)
    model = model_cls()
    eager = copy.deepcopy(DropoutBatchNorm())  # the same weights: a fresh copy drawn from seed 0
    eager.load_state_dict(model.state_dict())
    options = sparselift.CompileOptions(cache_dir=cache, plan="none")
    compiled = sparselift.compile(model, _batch(8, 0), sharding=sharding, options=options)
    model_alive, table_alive = weakref.ref(model), weakref.ref(model.emb.weight)
    deferred = compiled.eval_regions is None
    del model
    gc.collect()
    compiled.eval()
    eager.eval()
    local = _batch(5, 50 + rank)
    with torch.no_grad():
        diff = float((compiled(*local) - eager(*local)).abs().max())
    return {
        "model_freed": model_alive() is None,
        "table_freed": table_alive() is None,
        "deferred": deferred,
        "diff": diff,
    }


@pytest.mark.parametrize(
    "world, sharding, model_cls, deferred",
    [
        (1, "auto", DropoutBatchNorm, True),  # the table's storage shared with the compiled model
        (2, "row_wise", DropoutBatchNorm, True),  # each rank's rows copied: the whole table freed
        (1, "auto", Unpicklable, False),
    ],
)
def test_eval_works_after_the_model_is_deleted_and_frees_its_tables(world, sharding, model_cls, deferred, tmp_path):
    """The user may `del model` after compiling: the model and its table are freed (the compiled
    model keeps only an eval skeleton with meta tables), and the first eval() still exports the
    eval regions and equals the eager model's eval forward. A compile never evaluated exports
    nothing more."""
    outs = launch(_deleted_model_worker, world, str(tmp_path), sharding, model_cls, timeout_s=120)
    for rank, out in enumerate(outs):
        assert out["model_freed"] and out["table_freed"], (rank, out)
        assert out["deferred"] is deferred, (rank, out)
        assert out["diff"] <= 1e-6, (rank, out)


class TwoBagsBatchNorm(DropoutBatchNorm):
    """Two tables (so the planner has candidates to time), batch norm and dropout."""

    def __init__(self):
        super().__init__()
        self.emb2 = nn.EmbeddingBag(60, 8, mode="sum")
        self.bn = nn.BatchNorm1d(18)
        self.out = nn.Linear(18, 1)

    def forward(self, dense, ids, offsets):
        x = torch.cat([dense, self.emb(ids, offsets), self.emb2(ids, offsets)], dim=1)
        return self.out(self.drop(torch.relu(self.bn(x))))


def test_planning_leaves_the_models_running_statistics_and_random_stream_as_they_were(tmp_path):
    """Calibration runs training steps: batch norm's running statistics, its step count and the
    random stream (dropout's draws) are put back, so the compiled model starts where the eager
    one is."""
    torch.manual_seed(0)
    model = TwoBagsBatchNorm()
    eager = copy.deepcopy(model)
    options = sparselift.CompileOptions(cache_dir=str(tmp_path), plan="replan", calibration_budget_s=3)
    torch.manual_seed(5)
    compiled = sparselift.compile(model, _batch(64, 0), options=options)
    after_compile = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(after_compile, torch.rand(3))  # the stream goes on as if nothing had drawn from it
    assert compiled.plan.record.measurements, "the planner calibrated"
    for name, buffer in eager.bn.named_buffers():
        assert torch.equal(getattr(model.bn, name), buffer), name
