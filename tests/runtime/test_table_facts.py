"""Table facts come from the IR alone: exported and lifted IR agree, the plan module carries them,
and the runtime shards, checkpoints and builds kernels from them."""

from __future__ import annotations

import attrs
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import sparselift
from sparselift.codegen.plan_module import emit_plan_module
from sparselift.codegen.table_facts import (
    batch_size,
    describe_features,
    describe_tables,
    group_names,
    sharding_plan,
)
from sparselift.compiler import lift_pass
from sparselift.ir import make_context
from sparselift.models import build
from sparselift.optim import RowWiseAdagrad
from sparselift.passes.generate_kernels import GenerateKernels
from sparselift.passes.pipeline import run_pipeline
from sparselift.placement import ShardingPlan, TablePlacement


class _Mixed(nn.Module):
    """A weighted sum table read with i64 ids, a mean table read with i32 ids, and a functional
    lookup of a parameter whose name does not end in `.weight`."""

    def __init__(self):
        super().__init__()
        self.a = nn.EmbeddingBag(10, 4, mode="sum")
        self.b = nn.EmbeddingBag(12, 4, mode="mean")
        self.table = nn.Parameter(torch.randn(9, 4))
        self.out = nn.Linear(12, 1)

    def forward(self, ia, oa, w, ib, ob, ic, oc):
        pooled = [self.a(ia, oa, per_sample_weights=w), self.b(ib, ob), F.embedding_bag(ic, self.table, oc, mode="sum")]
        return self.out(torch.cat(pooled, 1))


def _mixed_inputs():
    i32 = torch.int32
    return (
        torch.tensor([1, 2, 3, 9]),
        torch.tensor([0, 2]),
        torch.rand(4),
        torch.tensor([5, 6, 11], dtype=i32),
        torch.tensor([0, 1], dtype=i32),
        torch.tensor([0, 8, 4]),
        torch.tensor([0, 1]),
    )


def _lifted(program, narrow_ids: bool = False):
    """The program lifted (ids routed as the model gives them, unless `narrow_ids`) and fused."""
    module = program.module.clone()
    lift = lift_pass(RowWiseAdagrad(lr=0.1, eps=1e-3), sparselift.CompileOptions(narrow_ids=narrow_ids))
    run_pipeline(module, (lift, GenerateKernels()), make_context())
    return module


def test_facts_of_exported_and_lifted_ir_agree():
    plan = ShardingPlan(
        2,
        {
            "a": TablePlacement.row_wise_even(10, [0, 1]),
            "b": TablePlacement.table_wise(1),
            "table": TablePlacement.data_parallel(),
        },
    )
    program = sparselift.export(_Mixed(), _mixed_inputs(), world_size=2, sharding=plan)
    exported = {t.name: t for t in describe_tables(program.module)}
    lifted = {t.name: t for t in describe_tables(_lifted(program))}
    assert list(exported) == ["a", "b", "table"]  # model order
    a, b, c = exported["a"], exported["b"], exported["table"]
    assert (a.param, a.rows, a.dim, a.dtype, a.pooling, a.weighted, a.module) == (
        "a.weight",
        10,
        4,
        "f32",
        "sum",
        True,
        "a",
    )
    assert a.shards == ((0, 0, 5), (1, 5, 10)) and a.shard_rows(1) == (5, 10)
    assert (b.pooling, b.index_dtype, b.shards, b.owners) == ("mean", "i32", ((1, 0, 12),), (1,))
    assert a.index_dtype == "i64" and not b.holds(0)
    # The parameter name the IR name does not imply travels on the step.
    assert c.param == "table" and c.shards == ((0, 0, 9), (1, 0, 9))
    step = program.module.body.block.first_op
    assert step.table_params is not None and step.param_name(c.name) == c.param != f"{c.name}.weight"
    # Lifting adds the optimizer and the kernels; every other fact is the same.
    for name, before in exported.items():
        after = lifted[name]
        assert (after.optimizer, after.optimizer_group) == ("rowwise_adagrad", 0)
        assert attrs.evolve(after, optimizer=None, optimizer_group=None, kernel_spec=None, module="") == attrs.evolve(
            before, kernel_spec=None, module=""
        )
        assert after.kernel_spec.index_dtype == before.index_dtype
        assert (after.kernel_spec.dim, after.kernel_spec.weighted, after.kernel_spec.optimizer) == (
            4,
            before.weighted,
            "rowwise_adagrad",
        )
    # The compiler's default lowering routes every id as i32 here (the tables have few rows), and
    # the generated kernels read them so.
    narrowed = {t.name: t for t in describe_tables(_lifted(program, narrow_ids=True))}
    assert {n: (t.index_dtype, t.kernel_spec.index_dtype) for n, t in narrowed.items()} == {
        n: ("i32", "i32") for n in exported
    }
    assert sharding_plan(program.module) == plan
    assert [f.name for f in describe_features(program.module)] == ["ia", "ib", "ic"]
    assert batch_size(program.module) == 2 and len(group_names(program.module)) == 3


def test_plan_module_carries_the_tables():
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    program = sparselift.export(model, inputs, world_size=2, sharding="row_wise")
    lifted = _lifted(program)
    namespace: dict = {}
    exec(compile(emit_plan_module(lifted), "plan", "exec"), namespace)
    assert list(namespace["TABLES"]) == describe_tables(lifted)
    assert namespace["Plan"].TABLES is namespace["TABLES"]


def test_compiled_model_shards_and_checkpoints_from_the_plan():
    torch.manual_seed(0)
    model = _Mixed()
    compiled = sparselift.compile(
        model,
        _mixed_inputs(),
        sharding="table_wise",
        sparse_optimizer=RowWiseAdagrad(lr=0.1),
        # The model's own id dtypes (int64 and int32), not narrowed: kernels of both.
        options=sparselift.CompileOptions(plan="none", narrow_ids=False),
    )
    assert [t.name for t in compiled.table_facts] == ["a", "b", "table"]
    assert {t.name: t for t in compiled.table_facts}["b"].kernel_spec.index_dtype == "i32"
    keys = compiled.state_keys()
    assert keys["table"] == ((9, 4), torch.float32) and keys["table.momentum"] == ((9,), torch.float32)
    assert torch.equal(compiled.state_dict()["table"], model.table.detach())
    if compiled.kernels is not None:  # the kernels were built from the plan's specs (i32 ids included)
        assert {s.index_dtype for s in compiled.kernels.specs} >= {"i32", "i64"}


def test_storage_that_disagrees_with_the_plan_is_refused():
    from sparselift.runtime.tables import check_storage, take_local_shards

    program = sparselift.export(_Mixed(), _mixed_inputs(), world_size=1)
    facts = describe_tables(program.module)
    local = take_local_shards(facts, dict(_Mixed().named_parameters()), rank=0, optimizers="sgd", inits={})
    check_storage(facts, local, 0)
    local.tables["a"] = local.tables["a"][:5]
    with pytest.raises(RuntimeError, match=r"shard of table 'a' is \(5, 4\).*expects rows \[0, 10\)"):
        check_storage(facts, local, 0)
