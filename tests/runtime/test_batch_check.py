"""One batch check and one batch-size agreement per step, whatever the number of routes.

A DLRM on `auto` placement has two sharding groups (table-wise and replicated), so two routes a
step. Each used to end in its own all-to-all of the batch sizes, and each of these synchronized
the ranks (bench/RESULTS.md: 4.3 ms a step at Kaggle's real size). The plan module now checks
every route's features and agrees once, before the first segment (`PlanBase.check_batch`), or
in `start` for a pipelined batch, whose forward reuses that agreement. The agreement also says
whether every rank's bags all hold one id (Criteo's do): then the lengths exchange is skipped.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from parity_models import count_calls, small_kaggle  # tests/runtime is on sys.path

import sparselift
from sparselift.models.registry import build
from sparselift.runtime import collectives, routing
from sparselift.runtime.routing import RidingAgreement

PASSES = "generate-kernels,hide-latency"


def _worker(rank, world, cache, passes):
    compiled = small_kaggle(passes, cache)
    source = compiled.plan.source
    calls = count_calls(routing, "exchange_sizes")
    exchanges = count_calls(collectives, "_all_to_all_single")  # on whichever transport
    reduces = count_calls(collectives, "all_reduce_sum_start")
    splits = count_calls(compiled.regions["sparse_inputs"], "forward")  # ids into features
    dense = torch.optim.SGD([p for _, p in compiled.dense_named_parameters()], lr=0.1)
    batches = [(build("dlrm-kaggle", rows_cap=5000, batch_size=16, seed=s)[1], None) for s in range(1, 6)]
    pipeline = sparselift.TrainPipeline(compiled, dense, iter(batches), lambda out, _: F.softplus(out).mean())
    per_step, all_to_alls, all_reduces, inputs = [], [], [], []
    for _ in range(4):
        before, exchanged, reduced, split = calls[0], exchanges[0], reduces[0], splits[0]
        pipeline.progress()
        per_step.append(calls[0] - before)
        all_to_alls.append(exchanges[0] - exchanged)
        all_reduces.append(reduces[0] - reduced)
        inputs.append(splits[0] - split)
    return {
        "routes": source.count("rt.route("),
        "checked": source.count("checked="),
        "per_step": per_step,
        "all_to_alls": all_to_alls,
        "all_reduces": all_reduces,
        "inputs": inputs,
    }


def test_a_pipelined_step_with_two_routes_agrees_once(tmp_path):
    for r in sparselift.launch(_worker, 2, str(tmp_path), PASSES, timeout_s=240):
        assert r["routes"] == 2 and r["checked"] == 2  # both groups' routes are covered by the check
        # The first step checks its own batch and, in `start`, the next one; every later step
        # checks only the next batch (its own was agreed during the previous step).
        assert r["per_step"] == [2, 1, 1, 1]
        # Likewise the ids are split into features once a batch: `start` did it for the batch
        # the next forward gets (the same tensors), which reuses it.
        assert r["inputs"] == [2, 1, 1, 1]


def test_with_nothing_to_start_ahead_the_agreement_rides_in_the_dense_all_reduce(tmp_path):
    passes = "aggregate-comm{roles=dense_grad},generate-kernels"  # replicated tables' gradients ride too
    for r in sparselift.launch(_worker, 2, str(tmp_path), passes, timeout_s=240):
        assert r["routes"] == 2 and r["checked"] == 2
        # The first batch is checked by its own forward (no backward came between its `start`
        # and its forward); every later batch's agreement rode in the previous step's
        # dense-gradient all-reduce: no collective of its own.
        assert r["per_step"] == [1, 0, 0, 0]
        # Criteo's bags hold one id each, so the lengths exchange is skipped too: the ids, the
        # pooled outputs and their gradients are a steady step's three all-to-alls.
        assert r["all_to_alls"] == [4, 3, 3, 3]
        # One all-reduce a step: the dense gradients' one bucket, carrying the replicated tables'
        # gradients and the next batch's agreement. A steady step has four collectives in all.
        assert r["all_reduces"] == [1, 1, 1, 1]


def _local(own: int, mask: int = 0, error=None):
    return SimpleNamespace(own=own, one_id_mask=mask, error=error, routed=["r0"], agree=lambda plan: "agreed now")


def test_a_riding_verdict_sums_exactly_and_one_too_large_for_its_slot_falls_back_on_every_rank():
    plan = SimpleNamespace(world=2, pg=None)
    rank0, rank1 = RidingAgreement(_local(16, mask=0b11), 0, 2), RidingAgreement(_local(9, mask=0b01), 1, 2)
    rank0.receive(rank0.slots + rank1.slots)  # what the all-reduce hands back
    agreed = rank0.resolve(plan)
    assert agreed.ranks == (16, 9) and agreed.one_id_mask == 0b01 and agreed.routed == ["r0"]
    # A batch of 2^24 samples does not fit a float32 slot: that rank writes -1, which every rank
    # sees in the sum, so they all agree the usual way (same vector size everywhere).
    big = RidingAgreement(_local(1 << 24), 1, 2)
    assert big.slots.tolist() == [0.0, 0.0, -1.0, 0.0]
    rank0 = RidingAgreement(_local(16), 0, 2)
    rank0.receive(rank0.slots + big.slots)
    assert rank0.resolve(plan) == "agreed now"
    # Not carried (no backward came between `start` and the forward): agreed now too.
    assert RidingAgreement(_local(16), 0, 2).resolve(plan) == "agreed now"
