"""The benchmark's peer systems (DLRM-Baseline, TorchRec, dense-only) against single-process DLRM.

One 2-rank gloo launch runs every runner on a tiny DLRM (4 tables x 100 rows x dim 8, multi-hot
bags) and returns logits, losses and stage times; the tests compare them with single-process
training of the same seeded model on the global batches (SGD, BCE-with-logits, mean over the
global batch).
"""

from __future__ import annotations

import math
import types

import attrs
import pytest
import torch
import torch.nn.functional as F

from sparselift.bench.baselines import (
    BaselineRunner,
    DenseOnlyRunner,
    TorchRecRunner,
    get_my_slice,
    get_split_lengths,
    synthetic_source,
)
from sparselift.bench.timing import STAGES, StageTimer, StageTimes
from sparselift.models.dlrm import DLRMConfig, build_dlrm
from sparselift.runtime.distributed import launch

WORLD = 2
B = 8  # rows per rank
STEPS = 3
LR = 0.1
SEED = 3
ATOL = 2e-5

TINY = DLRMConfig(
    name="tiny",
    cardinalities=(100,) * 4,
    embedding_dim=8,
    bottom_mlp=(13, 16, 8),
    top_mlp=(16, 1),
    pooling=(3,) * 4,
)
# Uneven: 5 tables on 2 ranks (3 + 2) and a 17-row global batch (9 + 8 rows).
UNEVEN = attrs.evolve(TINY, name="uneven", cardinalities=(100, 50, 70, 30, 90), pooling=(2, 1, 3, 1, 2))
UNEVEN_G = 17


def _worker(rank: int, world: int) -> dict:
    torch.set_num_threads(1)  # two ranks on a 2-core machine
    out: dict = {}
    src = synthetic_source(TINY, seed=SEED)
    g = B * world
    gbs = [src.global_batch(i, g) for i in range(STEPS)]

    # DLRM-Baseline, TorchRec-style gradient division (default).
    br = BaselineRunner(TINY, rank, world, LR, SEED)
    rows = br.local_rows(g)
    out["rows"] = (rows.start, rows.stop)
    out["base_fwd0"] = br.forward(gbs[0], rows)
    br.enable_stage_timing()
    out["base_losses"] = [br.step(gbs[i], rows) for i in range(2)]
    out["base_fwd2"] = br.forward(gbs[2], rows)
    out["base_stages"] = br.stage_times

    # DLRM-Baseline with the reference's semantics (no division: sparse grads are W x larger).
    br_ref = BaselineRunner(TINY, rank, world, LR, SEED, grad_division=False)
    for i in range(2):
        br_ref.step(gbs[i], rows)
    out["base_nodiv_fwd2"] = br_ref.forward(gbs[2], rows)

    # Uneven tables and rows.
    src_u = synthetic_source(UNEVEN, seed=SEED)
    gbu = [src_u.global_batch(i, UNEVEN_G) for i in range(STEPS)]
    bu = BaselineRunner(UNEVEN, rank, world, LR, SEED)
    ru = bu.local_rows(UNEVEN_G)
    out["uneven_losses"] = [bu.step(gbu[i], ru) for i in range(2)]
    out["uneven_fwd2"] = bu.forward(gbu[2], ru)
    try:
        bu.step(gbu[0], slice(0, 1))
    except ValueError as e:
        out["bad_rows_error"] = str(e)

    # TorchRec.
    local = list(src.batches(B, STEPS, rank=rank, world_size=world))
    tr = TorchRecRunner(TINY, rank, world, LR, SEED, local, batch_size_hint=B)
    out["pipeline"] = tr.pipeline
    out["pipeline_error"] = tr.pipeline_error
    out["tr_fwd0"] = tr.forward(local[0])
    tr.enable_stage_timing()
    out["tr_losses"], out["tr_logits"] = [], []
    for _ in range(STEPS):
        out["tr_losses"].append(tr.progress())
        out["tr_logits"].append(tr.last_logits)
    try:
        tr.progress()
        out["tr_stop"] = False
    except StopIteration:
        out["tr_stop"] = True
    batch3 = next(src.batches(B, 1, rank=rank, world_size=world, start_step=STEPS))
    out["tr_fwd_after3"] = tr.forward(batch3)
    out["tr_stages"] = tr.stage_times

    # Dense-only floor.
    dr = DenseOnlyRunner(TINY, rank, world, LR, SEED)
    dr.enable_stage_timing()
    out["dense_losses"] = [dr.step(b) for b in local]
    out["dense_stages"] = dr.stage_times
    out["dense_params"] = [p.detach().clone() for p in dr.net.parameters()]
    return out


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return launch(_worker, WORLD, timeout_s=150)


def _reference(config: DLRMConfig, g: int, steps: int, emb_lr: float = LR) -> list[torch.Tensor]:
    """Single-process SGD on global batches; logits of batch k with the weights after k steps.

    The loss is the mean over ranks of each rank's local mean loss: with equal slices that is
    the global-batch mean; with unequal slices it is what DDP averaging (and TorchRec-style
    gradient division) optimizes.
    """
    model, _ = build_dlrm(attrs.evolve(config, return_logits=True), seed=SEED)
    emb = list(model.emb_l.parameters())
    dense = [p for n, p in model.named_parameters() if not n.startswith("emb_l.")]
    opt = torch.optim.SGD([{"params": emb, "lr": emb_lr}, {"params": dense, "lr": LR}])
    src = synthetic_source(config, seed=SEED)
    logits_per_step = []
    for i in range(steps):
        gb = src.global_batch(i, g)
        logits = model(gb.dense, [ids for ids, _ in gb.sparse], [o[:-1] for _, o in gb.sparse])
        logits_per_step.append(logits.detach())
        per_rank = [
            F.binary_cross_entropy_with_logits(logits.squeeze(1)[sl], gb.labels[sl])
            for sl in (get_my_slice(g, r, WORLD) for r in range(WORLD))
        ]
        loss = torch.stack(per_rank).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return logits_per_step


@pytest.fixture(scope="module")
def ref() -> dict:
    g = B * WORLD
    src = synthetic_source(TINY, seed=SEED)
    return {
        "logits": _reference(TINY, g, STEPS + 1),
        "labels": [src.global_batch(i, g).labels for i in range(STEPS)],
        "nodiv": _reference(TINY, g, STEPS, emb_lr=LR * WORLD),
        "uneven": _reference(UNEVEN, UNEVEN_G, STEPS),
        "uneven_labels": [synthetic_source(UNEVEN, seed=SEED).global_batch(i, UNEVEN_G).labels for i in range(2)],
    }


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=ATOL, rtol=1e-5)


def _local_loss(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return float(F.binary_cross_entropy_with_logits(logits.squeeze(1), labels))


# -- forward equality ----------------------------------------------------------------------------------


def test_baseline_forward_matches_single_process(results, ref):
    for r, out in enumerate(results):
        sl = slice(r * B, (r + 1) * B)
        assert out["rows"] == (sl.start, sl.stop)
        _close(out["base_fwd0"], ref["logits"][0][sl])


def test_torchrec_forward_matches_single_process(results, ref):
    for r, out in enumerate(results):
        _close(out["tr_fwd0"], ref["logits"][0][r * B : (r + 1) * B])


# -- training equality -----------------------------------------------------------------------------------


def test_baseline_two_sgd_steps_match_single_process(results, ref):
    for r, out in enumerate(results):
        sl = slice(r * B, (r + 1) * B)
        for k in range(2):
            want = _local_loss(ref["logits"][k][sl], ref["labels"][k][sl])
            assert math.isclose(out["base_losses"][k], want, rel_tol=1e-5, abs_tol=1e-6)
        _close(out["base_fwd2"], ref["logits"][2][sl])


def test_baseline_without_grad_division_is_the_reference_semantics(results, ref):
    # The DLRM reference sums the ranks' pooled gradients: its tables train with W x lr.
    for r, out in enumerate(results):
        sl = slice(r * B, (r + 1) * B)
        _close(out["base_nodiv_fwd2"], ref["nodiv"][2][sl])
        assert (out["base_nodiv_fwd2"] - ref["logits"][2][sl]).abs().max() > 1e-3


def test_baseline_uneven_tables_and_rows(results, ref):
    splits = get_split_lengths(UNEVEN_G, WORLD)
    assert splits == [9, 8]
    for r, out in enumerate(results):
        sl = get_my_slice(UNEVEN_G, r, WORLD)
        for k in range(2):
            want = _local_loss(ref["uneven"][k][sl], ref["uneven_labels"][k][sl])
            assert math.isclose(out["uneven_losses"][k], want, rel_tol=1e-5, abs_tol=1e-6)
        _close(out["uneven_fwd2"], ref["uneven"][2][sl])
        assert "not this rank's slice" in out["bad_rows_error"]


def test_torchrec_training_matches_single_process(results, ref):
    for r, out in enumerate(results):
        assert out["pipeline"] == "sparse_dist", out["pipeline_error"]
        sl = slice(r * B, (r + 1) * B)
        for k in range(STEPS):  # step k's forward sees the weights after k updates
            _close(out["tr_logits"][k], ref["logits"][k][sl])
            want = _local_loss(ref["logits"][k][sl], ref["labels"][k][sl])
            assert math.isclose(out["tr_losses"][k], want, rel_tol=1e-5, abs_tol=1e-6)
        assert out["tr_stop"]
        # forward() after the pipeline drained: batch 3 with the weights after three updates.
        _close(out["tr_fwd_after3"], ref["logits"][3][sl])


def test_dense_only_runner_trains_in_sync(results):
    for out in results:
        assert all(math.isfinite(x) for x in out["dense_losses"])
    for a, b in zip(results[0]["dense_params"], results[1]["dense_params"]):
        torch.testing.assert_close(a, b)  # DDP keeps the replicas equal


# -- stage timing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, n", [("base_stages", 2), ("tr_stages", STEPS), ("dense_stages", STEPS)])
def test_stage_timing_has_five_nonnegative_columns(results, key, n):
    for out in results:
        recs = out[key]
        assert len(recs) == n
        for rec in recs:
            vals = rec.values()
            assert len(vals) == 5 and all(v >= 0 for v in vals)
            assert rec.total > 0
            if key == "dense_stages":
                assert rec.sparse_fwd == 0 and rec.sparse_bwd == 0
            else:
                assert rec.sparse_fwd > 0 and rec.sparse_bwd > 0 and rec.other_fwd > 0 and rec.other_bwd > 0


class _FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_stage_timer_is_exclusive_and_nested():
    clock = _FakeClock()
    timer = StageTimer(clock=clock)
    timer.push("sparse_fwd")  # outside a step: ignored
    timer.begin_step()
    clock.t += 0.001  # other
    with timer.stage("sparse_fwd"):
        clock.t += 0.002
        timer.switch("other_fwd")
        clock.t += 0.003
        timer.push("sparse_fwd")
        clock.t += 0.004
        timer.pop()
        clock.t += 0.005  # other_fwd again
    timer.start("other_bwd")
    clock.t += 0.006
    timer.stop()
    timer.pop()  # unmatched: keeps the base stage
    clock.t += 0.007  # other
    rec = timer.end_step()
    assert rec.as_dict(with_total=False) == pytest.approx(
        {"sparse_fwd": 6.0, "other_fwd": 8.0, "sparse_bwd": 0.0, "other_bwd": 6.0, "other": 8.0}
    )
    assert rec.total == pytest.approx(28.0)
    with pytest.raises(ValueError):
        timer.begin_step("bogus")


def test_stage_summary_is_columnwise_median():
    recs = [StageTimes(1, 2, 3, 4, 5), StageTimes(3, 2, 1, 0, 9), StageTimes(2, 8, 2, 1, 1)]
    assert StageTimes.median(recs) == StageTimes(2, 2, 2, 1, 5)
    timer = StageTimer()
    timer.steps.extend(recs)
    assert timer.summary(skip=1) == StageTimes(2.5, 5, 1.5, 0.5, 5)
    assert tuple(StageTimes().as_dict()) == (*STAGES, "total")
    assert StageTimes.from_seconds({"sparse_fwd": 0.002, "other_bwd": 0.5}) == StageTimes(2, 0, 0, 500, 0)
    with pytest.raises(ValueError):
        StageTimes.from_seconds({"optimizer": 1.0})


def test_get_my_slice_matches_reference_split():
    for n in range(1, 12):
        for w in range(1, 5):
            slices = [get_my_slice(n, r, w) for r in range(w)]
            assert slices[0].start == 0 and slices[-1].stop == n
            assert all(a.stop == b.start for a, b in zip(slices, slices[1:]))
            assert [s.stop - s.start for s in slices] == get_split_lengths(n, w)


def test_the_report_keeps_a_test_the_budget_ended_before_its_first_round():
    # A schedule screened below the incumbent whose paired test got 0 rounds (the family's part
    # of the budget spent) has no measured increment; the report still lists it, and drops only
    # the candidates rejected before any measurement.
    from sparselift.bench.systems import plan_decisions
    from sparselift.passes.plan_candidates import Decision

    def dec(label, reason, accepted=False, measured=None):
        return Decision("latency-hiding", label, None, (), accepted, reason, measured_us=measured)

    record = types.SimpleNamespace(
        decisions=(
            dec("kept", "in the start plan T0", accepted=True),
            dec("screened", "screened at 221.46 ms against the incumbent's 231.20 ms: not a contender", measured=-9.7),
            dec("raced", "unclear: mean gain +0.00 ms +- inf ms (1 s.e.) over 0 paired rounds (budget spent)"),
            dec("untried", "not tried: calibration budget exhausted (10.2 s of 10.455 s)"),
            dec("unscreened", "not screened: this family's part of the budget leaves room to screen and test 1"),
            dec("infeasible", "memory cap: in-flight buffers 10 bytes > memory-cap-bytes 1"),
        )
    )
    lines = plan_decisions(record)
    assert [line.split(": ")[0].split()[-1] for line in lines] == ["kept", "screened", "raced", "untried", "unscreened"]
    assert lines[0].startswith("[accepted] latency-hiding kept") and plan_decisions(None) == []
