"""The Python API as a user drives it: compile, plan introspection, cache reuse, options."""

from __future__ import annotations

import logging

import pytest
import torch

import sparselift
from sparselift.models import build


def test_compile_exposes_plan_ir_source_and_explain(tmp_path):
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    compiled = sparselift.compile(model, inputs, options=sparselift.CompileOptions(cache_dir=str(tmp_path)))
    plan = compiled.plan
    assert "sparse.lookup " in plan.ir_text and "sparse.embedding_bag_collection" not in plan.ir_text
    assert plan.source.startswith('"""SparseLift plan module')
    assert "plan hash: " in plan.source and "class Plan(rt.PlanBase):" in plan.source
    assert plan.path.exists() and plan.path.read_text() == plan.source
    text = plan.explain()
    assert plan.hash in text and "sharding plan for world size 1" in text
    # The lowering says how lift-sparse ran: the compiler's defaults that differ from the pass's.
    assert plan.lowering.startswith("lift-sparse{") and 'replicated_grads="with-dense"' in plan.lowering
    assert f"lowering: {plan.lowering}" in text


def test_second_compile_reuses_the_cached_plan(tmp_path, caplog):
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    options = sparselift.CompileOptions(cache_dir=str(tmp_path))
    with caplog.at_level(logging.INFO, logger="sparselift"):
        first = sparselift.compile(model, inputs, options=options)
        assert "written to" in caplog.text
        caplog.clear()
        second = sparselift.compile(model, inputs, options=options)
    assert "found in the cache" in caplog.text and "nothing rebuilt" in caplog.text
    assert first.plan.hash == second.plan.hash


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSELIFT_CACHE_DIR", str(tmp_path / "env-cache"))
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    compiled = sparselift.compile(model, inputs)
    assert compiled.plan.path.parent == tmp_path / "env-cache"


def test_compiled_matches_model_and_trains_tables():
    model, inputs = build("dlrm-kaggle", rows_cap=1000, batch_size=8)
    reference = build("dlrm-kaggle", rows_cap=1000, batch_size=8)[0]
    compiled = sparselift.compile(model, inputs, sparse_optimizer=sparselift.optim.SGD(lr=0.5))
    torch.testing.assert_close(compiled(*inputs), reference(*inputs))
    before = compiled.table("emb_l.0").clone()
    compiled(*inputs).sum().backward()
    assert not torch.equal(compiled.table("emb_l.0.weight"), before)
    grads = [p.grad for _, p in compiled.dense_named_parameters()]
    assert all(g is not None for g in grads)


def test_invalid_options_are_rejected():
    with pytest.raises(ValueError):
        sparselift.CompileOptions(grad_reduction="max")


def test_benchmark_mode_records_four_in_module_stages_and_is_off_by_default():
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    plain = sparselift.compile(model, inputs)
    plain(*inputs).sum().backward()
    assert plain.stage_times == [] and plain.runner.timing is None
    timed = sparselift.compile(model, inputs, options=sparselift.CompileOptions(benchmark=True))
    for _ in range(2):
        timed(*inputs).sum().backward()
    assert len(timed.stage_times) == 2
    for step in timed.stage_times:
        assert set(step) == {"sparse_fwd", "other_fwd", "sparse_bwd", "other_bwd"}
        assert all(v >= 0 for v in step.values()) and step["sparse_fwd"] > 0 and step["sparse_bwd"] > 0


def test_works_under_torch_compile():
    model, inputs = build("two-tower", rows_cap=100, batch_size=8)
    reference = build("two-tower", rows_cap=100, batch_size=8)[0]
    compiled = sparselift.compile(model, inputs, sparse_optimizer=sparselift.optim.SGD(lr=0.5))
    before = compiled.table("user.emb.0").clone()
    out = torch.compile(compiled)(*inputs)
    torch.testing.assert_close(out, reference(*inputs))
    out.sum().backward()
    assert not torch.equal(compiled.table("user.emb.0"), before)


def _backward_nodes(out):
    seen, stack, names = set(), [out.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(type(fn).__name__)
        stack.extend(f for f, _ in fn.next_functions)
    return names


def test_eager_steps_skip_the_op_dispatcher_and_compiled_ones_keep_the_op():
    model, inputs = build("two-tower", rows_cap=100, batch_size=8)
    compiled = sparselift.compile(model, inputs, sparse_optimizer=sparselift.optim.SGD(lr=0.5))
    eager = _backward_nodes(compiled(*inputs))
    assert any(n.startswith("_EagerSegment") for n in eager), eager
    traced = _backward_nodes(torch.compile(compiled)(*inputs))
    assert not any(n.startswith("_EagerSegment") for n in traced), traced


def test_torch_compile_of_several_compiled_models_in_one_process():
    # Dynamo makes the plan handle symbolic once it has seen two; the op specializes it again.
    for _ in range(3):
        model, inputs = build("two-tower", rows_cap=100, batch_size=8)
        reference = build("two-tower", rows_cap=100, batch_size=8)[0]
        compiled = sparselift.compile(model, inputs, sparse_optimizer=sparselift.optim.SGD(lr=0.5))
        out = torch.compile(compiled)(*inputs)
        torch.testing.assert_close(out, reference(*inputs))
        out.sum().backward()


def test_dense_gradients_form_one_all_reduce_unless_the_plan_overlaps_them():
    from sparselift.runtime.compiled import _GradBuckets

    params = [torch.nn.Parameter(torch.zeros(n)) for n in (300, 200, 100, 400)]  # 4-byte floats
    overlapped = _GradBuckets(params, None, 2, bucket_bytes=1600, overlap=True)
    # Reverse registration order (backward's), a new bucket once one would pass 1600 bytes.
    assert [[p.numel() for p in b] for b in overlapped.buckets] == [[400], [100, 200], [300]]
    after_backward = _GradBuckets(params, None, 2, bucket_bytes=1600, overlap=False)
    assert [[p.numel() for p in b] for b in after_backward.buckets] == [[400, 100, 200, 300]]


def _trace_and_broadcast_order(rank: int, world: int) -> list[str]:
    """What this rank's compile does, in order: its torch.export traces and rank 0's broadcast."""
    import torch.distributed as dist

    import sparselift.compiler as compiler

    events: list[str] = []
    trace, broadcast = compiler.trace, dist.broadcast_object_list

    def traced(*args, **kwargs):
        events.append("trace")
        return trace(*args, **kwargs)

    def broadcasted(*args, **kwargs):
        events.append("broadcast")
        return broadcast(*args, **kwargs)

    compiler.trace, dist.broadcast_object_list = traced, broadcasted  # this rank's process only
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    sparselift.compile(model, inputs, options=sparselift.CompileOptions(plan="none"))
    return events


def test_every_rank_traces_its_model_once_before_rank_0s_decisions_arrive():
    # The trace needs no decision, so no rank waits for another's before making it.
    from sparselift.runtime.distributed import launch

    assert launch(_trace_and_broadcast_order, 2, timeout_s=120) == [["trace", "broadcast"]] * 2


def _seeded_by_rank_worker(rank, world, cache):
    torch.manual_seed(rank)  # each rank draws its own initial weights, as a DMP user's ranks may
    model, inputs = build("dlrm-kaggle", rows_cap=100, batch_size=16, seed=rank)
    compiled = sparselift.compile(
        model, inputs, sharding="auto", options=sparselift.CompileOptions(cache_dir=cache, plan="none")
    )
    replicated = [f.param for f in compiled.table_facts if f.placement == "data_parallel"]
    return {"state": compiled.state_dict(), "replicated": replicated}


@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_starts_from_rank_0s_dense_weights_and_replicated_tables(tmp_path, world):
    """As under DDP and DistributedModelParallel: ranks that built the model from different seeds
    train one model, rank 0's (its dense parameters and replicated tables); sharded tables are
    their owners'. Without the broadcast, every dense parameter differs between the ranks."""
    results = sparselift.launch(_seeded_by_rank_worker, world, str(tmp_path), timeout_s=120)
    first = results[0]["state"]
    assert results[0]["replicated"], "auto replicates the small tables"
    for r in results[1:]:
        assert sorted(r["state"]) == sorted(first)
        for key, value in first.items():
            assert torch.equal(r["state"][key], value), key
