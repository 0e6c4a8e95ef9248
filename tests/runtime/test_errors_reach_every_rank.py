"""One rank's failure, in any phase of compile() or in a training step, is raised on every rank:
the same type, the same message naming the rank, within seconds (not the group's timeout)."""

from __future__ import annotations

import time
from unittest import mock

import pytest
import torch
from torch import nn

import sparselift
from sparselift.models import build

TIMEOUT_S = 60  # the process group's: a rank left waiting would fail only after this
PROMPT_S = 5.0  # how far apart the ranks may raise


class _Bags(nn.Module):
    def __init__(self, mode: str):
        super().__init__()
        self.emb = nn.EmbeddingBag(50, 4, mode=mode)
        self.out = nn.Linear(4, 1)

    def forward(self, ids, offsets):
        return self.out(self.emb(ids, offsets))


def _bags_inputs(bad: bool = False):
    ids = torch.arange(12) % 50
    if bad:
        ids[0] = 50
    return ids, torch.arange(0, 12, 3)


def _outcome(fn, *args) -> tuple[str, str, float]:
    """(error type, message, when it was raised) of `fn(*args)` on this rank; ("ok", "", t) without one."""
    try:
        fn(*args)
        return "ok", "", time.time()
    except Exception as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)  # str() of a KeyError quotes it
        return type(e).__name__, message, time.time()


def _compile_failing(phase: str, here: bool, cache: str) -> None:
    """Compile with a failure in `phase` when `here` (this rank only)."""
    options = sparselift.CompileOptions(cache_dir=cache, plan="none", kernels="reference")
    model = _Bags("max" if phase == "export" and here else "sum")
    inputs = _bags_inputs(bad=phase == "calibration" and here)
    patches = []
    if phase in ("plan-key", "plan-lookup", "calibration"):
        options = sparselift.CompileOptions(cache_dir=cache, plan="replan", kernels="reference", calibration_budget_s=5)
    if here and phase == "plan-key":  # this rank's cache directory is not writable
        patches.append(mock.patch("sparselift.planner.cache_dir", side_effect=PermissionError("no cache here")))
    if here and phase == "plan-lookup":  # rank 0 cannot read the plan cache
        patches.append(mock.patch("sparselift.planner._lookup", side_effect=OSError("plan cache unreadable")))
    if here and phase == "build":
        patches.append(mock.patch("sparselift.compiler.emit_plan_module", side_effect=KeyError("no emitter")))
    for p in patches:
        p.start()
    try:
        sparselift.compile(model, inputs, sharding="table_wise", options=options)
    finally:
        for p in patches:
            p.stop()


CASES = [("export", 0), ("export", 1), ("plan-key", 1), ("plan-lookup", 0), ("build", 1), ("calibration", 1)]


def _compile_phases(rank, world, cache):
    """Every case in turn, in one process group: an agreed failure leaves the group usable."""
    return [_outcome(_compile_failing, phase, rank == bad, cache) for phase, bad in CASES]


def test_a_failure_in_any_compile_phase_on_one_rank_is_raised_on_every_rank(tmp_path):
    ranks = sparselift.launch(_compile_phases, 2, str(tmp_path), timeout_s=TIMEOUT_S)
    expected = {
        ("export", 0): ("ExportError", "rank 0: module 'emb', table 'emb.weight': max pooling is not supported"),
        ("export", 1): ("ExportError", "rank 1: module 'emb', table 'emb.weight': max pooling is not supported"),
        ("plan-key", 1): ("PermissionError", "rank 1: no cache here"),
        ("plan-lookup", 0): ("OSError", "rank 0: plan cache unreadable"),
        ("build", 1): ("KeyError", "rank 1: no emitter"),
        ("calibration", 1): (
            "ValueError",
            "rank 1: feature 'ids' (table 'emb'): id 50 is out of range for a table of 50 rows",
        ),
    }
    for i, case in enumerate(CASES):
        outcomes = [r[i] for r in ranks]
        kind, start = expected[case]
        assert {o[0] for o in outcomes} == {kind}, (case, outcomes)
        assert len({o[1] for o in outcomes}) == 1 and outcomes[0][1].startswith(start), (case, outcomes)
        times = [o[2] for o in outcomes]
        assert max(times) - min(times) < PROMPT_S, (case, times)


def _bad(inputs, rank, bad_rank, how):
    """`inputs` of the two-tower model, its first feature spoiled on `bad_rank`."""
    ids, offsets = list(inputs[0]), list(inputs[1])
    if rank == bad_rank and how == "id":
        ids[0] = torch.full_like(ids[0], 100)
    if rank == bad_rank and how == "offsets":
        offsets[0] = offsets[0].flip(0)
    return (ids, offsets, *inputs[2:])


def _step(compiled, inputs) -> None:
    compiled(*inputs).sum().backward()


def _train_with_bad_batches(rank, world, cache, sharding):
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    compiled = sparselift.compile(
        model, inputs, sharding=sharding, options=sparselift.CompileOptions(cache_dir=cache, plan="none")
    )
    before = {k: v.clone() for k, v in compiled.tables.items()}
    out = {}
    for how in ("id", "offsets"):
        out[how] = _outcome(_step, compiled, _bad(inputs, rank, 1, how))
    out["unchanged"] = all(torch.equal(t, before[k]) for k, t in compiled.tables.items())
    compiled(*inputs).sum().backward()  # the group still works: every rank stopped at the same point
    out["trained"] = any(not torch.equal(t, before[k]) for k, t in compiled.tables.items())
    return out


@pytest.mark.parametrize("sharding", ["table_wise", "row_wise"])
def test_a_bad_batch_on_one_rank_fails_every_rank_and_changes_no_table(tmp_path, sharding):
    # Row-wise, the route's C counting sort checks the ids as it buckets them by range.
    ranks = sparselift.launch(_train_with_bad_batches, 2, str(tmp_path), sharding, timeout_s=TIMEOUT_S)
    messages = {
        "id": "rank 1: feature 'user_indices_0' (table 'user.emb.0'): id 100 is out of range for a table of 100 rows",
        "offsets": "rank 1: feature 'user_indices_0' (table 'user.emb.0'): offsets must start at 0",
    }
    for how, message in messages.items():
        outcomes = [r[how] for r in ranks]
        assert all(o[0] == "ValueError" and o[1].startswith(message) for o in outcomes), outcomes
        assert max(o[2] for o in outcomes) - min(o[2] for o in outcomes) < PROMPT_S
    assert all(r["unchanged"] for r in ranks), "a rejected batch changed a table"
    assert any(r["trained"] for r in ranks)


def _progress_until_failure(pipeline, tables) -> tuple[tuple[str, str, float], bool]:
    """The failing `progress()`'s outcome, and whether that call left every table as it was."""
    while True:
        before = {k: v.clone() for k, v in tables.items()}
        outcome = _outcome(pipeline.progress)
        if outcome[0] != "ok":
            return outcome, all(torch.equal(t, before[k]) for k, t in tables.items())


def _pipeline_with_a_bad_batch(rank, world, cache, passes):
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    # hide-latency: each batch is routed, and its ids exchange started, during the previous step.
    # Without it, each batch is checked during the previous step and the ranks' verdicts ride in
    # that step's dense-gradient all-reduce (the error surfaces in the bad batch's own forward).
    options = sparselift.CompileOptions(cache_dir=cache, plan="none", passes=passes)
    compiled = sparselift.compile(model, inputs, sharding="table_wise", options=options)
    assert "ahead=True" in compiled.plan.source, "the plan does not check batches ahead"
    assert ("ride=True" in compiled.plan.source) == (passes == ""), "the agreement rides iff nothing starts ahead"
    dense = torch.optim.SGD([p for _, p in compiled.dense_named_parameters()], lr=0.1)
    batches = [(inputs, None), (inputs, None), (_bad(inputs, rank, 2, "id"), None), (inputs, None)]
    pipeline = sparselift.TrainPipeline(compiled, dense, iter(batches), lambda out, _: out.sum())
    return _progress_until_failure(pipeline, compiled.tables)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("passes", ["hide-latency", ""], ids=["started-ahead", "agreement-rides"])
def test_three_ranks_a_bad_prefetched_batch_on_the_last_rank_fails_every_rank(tmp_path, passes):
    ranks = sparselift.launch(_pipeline_with_a_bad_batch, 3, str(tmp_path), passes, timeout_s=TIMEOUT_S)
    failed = [r[0] for r in ranks]
    assert {f[0] for f in failed} == {"ValueError"}, failed
    assert len({f[1] for f in failed}) == 1 and failed[0][1].startswith("rank 2: feature 'user_indices_0'"), failed
    assert max(f[2] for f in failed) - min(f[2] for f in failed) < PROMPT_S
    assert all(r[1] for r in ranks), "a rejected batch changed a table"


def test_other_ranks_raise_a_type_they_know_naming_the_original_class():
    import sparselift.compiler  # noqa: F401 - registers ExportError, as every rank's compile() does
    from sparselift.frontend.errors import ExportError
    from sparselift.runtime import agree

    class PlanCacheFull(OSError):
        pass

    cases = [
        (PlanCacheFull("disk full"), OSError, "rank 3: PlanCacheFull: disk full"),
        (ExportError("max pooling"), ExportError, "rank 3: max pooling"),
        (KeyError("no table 'x'"), KeyError, "rank 3: no table 'x'"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad byte"), ValueError, "rank 3: UnicodeDecodeError: "),
    ]
    for error, kind, message in cases:
        rebuilt = agree._rebuild(*agree._describe(error), 3)
        assert type(rebuilt) is kind and agree._message(rebuilt).startswith(message), (error, rebuilt)


def test_one_process_raises_the_error_itself():
    from sparselift.runtime.agree import same_outcome

    original = ValueError("bad ids")
    with pytest.raises(ValueError) as info:
        with same_outcome(None, 1):
            raise original
    assert info.value is original and str(info.value) == "bad ids"


def _train_with_a_short_history(rank, world, cache):
    from parity_models import sequence_model  # tests/runtime is on sys.path

    model, inputs = sequence_model(batch_size=4)
    options = sparselift.CompileOptions(cache_dir=cache, plan="none")
    compiled = sparselift.compile(model, inputs, sharding="table_wise", options=options)
    short = (inputs[0][:, :2], *inputs[1:]) if rank == 1 else inputs  # 2 history ids, compiled for 4
    return _refused_then_trains(compiled, short, inputs)


def _refused_then_trains(compiled, bad, good) -> dict:
    """A step on `bad` inputs (the outcome, and whether it left every table as it was), then a
    step on `good` ones (whether it trained: the group still works)."""
    before = {k: v.clone() for k, v in compiled.tables.items()}
    out = {"bad": _outcome(_step, compiled, bad)}
    out["unchanged"] = all(torch.equal(t, before[k]) for k, t in compiled.tables.items())
    compiled(*good).sum().backward()
    out["trained"] = any(not torch.equal(t, before[k]) for k, t in compiled.tables.items())
    return out


def _refused_on_every_rank(ranks: list[dict], message: str) -> None:
    outcomes = [r["bad"] for r in ranks]
    assert all(o[0] == "ValueError" and o[1] == message for o in outcomes), outcomes
    assert max(o[2] for o in outcomes) - min(o[2] for o in outcomes) < PROMPT_S
    assert all(r["unchanged"] for r in ranks) and any(r["trained"] for r in ranks)


def test_features_that_cannot_be_computed_on_one_rank_fail_every_rank(tmp_path):
    # The ids become features before the batch check; a failure there, on one rank, used to leave
    # the other ranks waiting in the batch agreement until the group's timeout.
    ranks = sparselift.launch(_train_with_a_short_history, 2, str(tmp_path), timeout_s=TIMEOUT_S)
    message = "rank 1: table 'item': unpooled ids of shape (4, 2), but the model was compiled for 4 ids per sample"
    _refused_on_every_rank(ranks, message)


def _train_with_a_long_history(rank, world, cache):
    from parity_models import collection_model  # tests/runtime is on sys.path
    from torchrec import KeyedJaggedTensor

    model, inputs = collection_model(batch_size=4)
    options = sparselift.CompileOptions(cache_dir=cache, plan="none", max_lengths={"hist": 4})
    compiled = sparselift.compile(model, inputs, sharding="table_wise", options=options)
    kjt = inputs[0]
    if rank == 1:  # sample 0's history holds 5 items, compiled for at most 4
        hist_lengths = torch.tensor([5, 1, 2, 0])
        hist = torch.arange(8) % 60
        kjt = KeyedJaggedTensor(
            keys=kjt.keys(),
            values=torch.cat([hist, torch.arange(4), hist % 12]),
            lengths=torch.cat([hist_lengths, torch.ones(4, dtype=torch.int64), hist_lengths]),
        )
    return _refused_then_trains(compiled, (kjt, *inputs[1:]), inputs)


def test_a_jagged_bag_longer_than_compiled_for_on_one_rank_fails_every_rank(tmp_path):
    ranks = sparselift.launch(_train_with_a_long_history, 2, str(tmp_path), timeout_s=TIMEOUT_S)
    message = (
        "rank 1: table 'ec.embeddings.item', feature 'hist': a sample holds 5 ids, more than the 4 the model was "
        "compiled for; compile with max_lengths={'hist': 5} (or more)"
    )
    _refused_on_every_rank(ranks, message)
