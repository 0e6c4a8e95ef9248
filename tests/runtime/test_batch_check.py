"""One batch check and one batch-size agreement per step, whatever the number of routes.

A DLRM on `auto` placement has two sharding groups (table-wise and replicated), so two routes a
step. Each used to end in its own all-to-all of the batch sizes, and each of these synchronized
the ranks (bench/RESULTS.md: 4.3 ms a step at Kaggle's real size). The plan module now checks
every route's features and agrees once, before the first segment (`PlanBase.check_batch`), or
in `start` for a pipelined batch, whose forward reuses that agreement.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import sparselift
from sparselift.models.registry import build
from sparselift.runtime import routing

PASSES = "generate-kernels,hide-latency"


def _count_agreements(monkeypatch_target) -> list[int]:
    calls = [0]
    original = monkeypatch_target.exchange_sizes

    def counted(plan, send, async_op=False):
        calls[0] += 1
        return original(plan, send, async_op)

    monkeypatch_target.exchange_sizes = counted
    return calls


def _worker(rank, world, cache, passes):
    torch.manual_seed(0)
    model, example = build("dlrm-kaggle", rows_cap=5000, batch_size=16, seed=0)
    compiled = sparselift.compile(
        model,
        example,
        sharding="auto",
        options=sparselift.CompileOptions(passes=passes, plan="none", cache_dir=cache),
    )
    source = compiled.plan.source
    calls = _count_agreements(routing)
    dense = torch.optim.SGD([p for _, p in compiled.dense_named_parameters()], lr=0.1)
    batches = [(build("dlrm-kaggle", rows_cap=5000, batch_size=16, seed=s)[1], None) for s in range(1, 6)]
    pipeline = sparselift.TrainPipeline(compiled, dense, iter(batches), lambda out, _: F.softplus(out).mean())
    per_step = []
    for _ in range(4):
        before = calls[0]
        pipeline.progress()
        per_step.append(calls[0] - before)
    return {"routes": source.count("rt.route("), "checked": source.count("checked=True"), "per_step": per_step}


def test_a_pipelined_step_with_two_routes_agrees_once(tmp_path):
    for r in sparselift.launch(_worker, 2, str(tmp_path), PASSES, timeout_s=240):
        assert r["routes"] == 2 and r["checked"] == 2  # both groups' routes are covered by the check
        # The first step checks its own batch and, in `start`, the next one; every later step
        # checks only the next batch (its own was agreed during the previous step).
        assert r["per_step"] == [2, 1, 1, 1]


def test_an_unpipelined_step_with_two_routes_agrees_once(tmp_path):
    for r in sparselift.launch(_worker, 2, str(tmp_path), "generate-kernels", timeout_s=240):
        assert r["routes"] == 2 and r["checked"] == 2
        assert r["per_step"] == [1, 1, 1, 1]  # no `start` ops: each forward checks its own batch
