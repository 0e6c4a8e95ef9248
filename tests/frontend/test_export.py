"""`sparselift.export` on the built-in models: IR shape, regions that recompute the model, clear errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sparselift.codegen.table_facts import (
    batch_size,
    describe_features,
    describe_tables,
    group_names,
    sharding_plan,
)
from sparselift.frontend.errors import ExportError
from sparselift.frontend.export import export
from sparselift.ir.sparse import EmbeddingBagCollectionOp
from sparselift.models import build
from sparselift.placement import ShardingPlan, TablePlacement


def ops_named(program, name):
    return [op for op in program.module.walk() if op.name == name]


def run_regions(program, model, inputs):
    """Recompute the model from the exported regions and plain embedding_bag calls."""
    import torch.utils._pytree as pytree

    flat = pytree.tree_leaves((inputs, {}))
    step = program.module.body.block.first_op
    values = {arg: flat[i] for arg, i in zip(step.forward.block.args, program.tensor_inputs)}
    params = dict(model.named_parameters())
    tables = {t.name: t for t in describe_tables(program.module)}
    for op in step.forward.block.ops:
        if op.name == "sched.dense":
            region = program.regions[op.callee.root_reference.data]
            outs = region(*[values[v] for v in op.args])
            if op.callee.root_reference.data == "sparse_inputs":
                outs = [x for triple in outs for x in triple if x is not None]
            values.update(zip(op.res, outs))
        elif isinstance(op, EmbeddingBagCollectionOp):
            weights = iter(op.weights)
            for f, ids, offs, res in zip(op.features.data, op.ids, op.offsets, op.pooled):
                table = tables[f.table.data]
                psw = values[next(weights)] if f.is_weighted else None
                values[res] = F.embedding_bag(
                    values[ids],
                    params[table.param],
                    values[offs],
                    mode="sum" if table.pooling == "none" else table.pooling,  # unpooled: one-id bags
                    per_sample_weights=psw,
                    include_last_offset=True,
                )
        elif op.name == "sched.yield":
            return [values[v] for v in op.values]


@pytest.mark.parametrize(
    "name, n_lookups",
    [("dlrm-kaggle", 26), ("dlrm-terabyte", 26), ("dlrm-bench", 8), ("two-tower", 6), ("torchrec-ebc", 5)],
)
def test_export_builtin_models(name, n_lookups):
    model, inputs = build(name, rows_cap=200, batch_size=6)
    program = export(model, inputs, world_size=2, sharding="table_wise")
    ebcs = ops_named(program, "sparse.embedding_bag_collection")
    assert sum(len(op.features) for op in ebcs) == n_lookups
    assert {op.name for op in program.module.walk()} >= {"sched.step", "sched.dense", "sched.yield"}
    assert batch_size(program.module) == 6
    out = run_regions(program, model, inputs)
    expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(out, expected):
        torch.testing.assert_close(got, want)


def test_torchrec_shared_table_and_weighted_features():
    model, inputs = build("torchrec-ebc", batch_size=4)
    program = export(model, inputs, world_size=2, sharding="table_wise")
    features = describe_features(program.module)
    shared = [f for f in features if f.table.endswith("t_shared")]
    assert [f.name for f in shared] == ["f_a", "f_b"]
    assert any(f.weighted for f in features)
    ebcs = ops_named(program, "sparse.embedding_bag_collection")
    assert {op.module.data for op in ebcs} == {"ebc", "weighted_ebc"}


def test_two_towers_stay_distinct_groups():
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    program = export(model, inputs, world_size=2, sharding="table_wise")
    assert {op.module.data for op in ops_named(program, "sparse.embedding_bag_collection")} == {"user", "item"}


@pytest.mark.parametrize("sharding", ["table_wise", "row_wise", "data_parallel", "auto"])
def test_sharding_choices_place_every_table_once(sharding):
    model, inputs = build("dlrm-kaggle", rows_cap=20_000, batch_size=4)
    program = export(model, inputs, world_size=3, sharding=sharding)
    placed = [p.table.data for op in ops_named(program, "sparse.embedding_bag_collection") for p in op.placements.data]
    assert sorted(placed) == sorted(t.name for t in describe_tables(program.module))
    if sharding != "auto":
        assert all(sharding in g for g in group_names(program.module))


def test_auto_sharding_on_kaggle_shapes():
    # Capped Kaggle: tiny tables (3..1460 rows) replicate, the rest table-wise, balanced by load.
    model, inputs = build("dlrm-kaggle", rows_cap=200_000, batch_size=4)
    program = export(model, inputs, world_size=2)
    placements = sharding_plan(program.module).tables
    kinds = {t: p.kind for t, p in placements.items()}
    assert kinds["emb_l.8"] == "data_parallel"  # 3 rows
    assert kinds["emb_l.2"] == "table_wise"
    ranks = [p.ranks[0] for p in placements.values() if p.kind == "table_wise"]
    assert abs(ranks.count(0) - ranks.count(1)) <= 1


def test_sharding_plan_json_roundtrip_and_use():
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    first = export(model, inputs, world_size=2)
    plan = ShardingPlan.from_json(sharding_plan(first.module).to_json())
    assert plan == sharding_plan(first.module)
    tables = dict(plan.tables)
    name = next(iter(tables))
    tables[name] = TablePlacement.row_wise_even(100, [0, 1])
    second = export(model, inputs, world_size=2, sharding=ShardingPlan(2, tables))
    assert sharding_plan(second.module)[name].kind == "row_wise"
    assert sharding_plan(second.module) == ShardingPlan(2, tables)


def test_world_size_one_places_everything_on_rank_zero():
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    program = export(model, inputs, world_size=1)
    assert all(p.owners(1) == (0,) for p in sharding_plan(program.module).tables.values())


def test_stats_override_pooling_factor():
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    program = export(model, inputs, world_size=2, stats={"user_indices_0": 42.0})
    feats = [f for op in ops_named(program, "sparse.embedding_bag_collection") for f in op.features.data]
    assert next(f for f in feats if f.feature_name.data == "user_indices_0").pooling_factor.data == 42.0


class _MaxPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(10, 4, mode="max")

    def forward(self, ids, offsets):
        return self.emb(ids, offsets)


class _NoEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def forward(self, x):
        return self.lin(x)


class _Tangled(nn.Module):
    """The first lookup's output decides the second lookup's ids."""

    def __init__(self):
        super().__init__()
        self.a = nn.EmbeddingBag(10, 1)
        self.b = nn.EmbeddingBag(10, 4)

    def forward(self, ids, offsets):
        pooled = self.a(ids, offsets)
        ids2 = (pooled.abs() * 100).long().clamp(0, 9).reshape(-1)
        return self.b(ids2, torch.arange(ids2.numel()))


class _Inconsistent(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.EmbeddingBag(10, 4)
        self.b = nn.EmbeddingBag(10, 4)

    def forward(self, ids_a, offs_a, ids_b, offs_b):
        return self.a(ids_a, offs_a).sum() + self.b(ids_b, offs_b).sum()


def ids(n):
    return torch.arange(n) % 10


@pytest.mark.parametrize(
    "model, inputs, message",
    [
        (
            _MaxPool(),
            (ids(6), torch.tensor([0, 2, 4])),
            "module 'emb', table 'emb.weight': max pooling is not supported",
        ),
        (_NoEmbedding(), (torch.randn(4, 3),), "model '_NoEmbedding' has no embedding lookups"),
        (_Tangled(), (ids(6), torch.tensor([0, 2, 4])), "table 'a.weight': its pooled output feeds the ids"),
        (
            _Inconsistent(),
            (ids(6), torch.tensor([0, 2, 4]), ids(6), torch.tensor([0, 3])),
            "batch is not consistent across features: 'ids_a' has 3, 'ids_b' has 2",
        ),
    ],
)
def test_unsupported_models_fail_clearly(model, inputs, message):
    with pytest.raises(ExportError, match=message.replace("(", r"\(").replace(")", r"\)")):
        export(model, inputs, world_size=2)


def test_2d_input_and_int32_ids_and_functional_lookup():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.EmbeddingBag(50, 8, mode="mean")
            self.raw = nn.Parameter(torch.randn(30, 4))

        def forward(self, ids2d, ids32, offs32):
            a = self.emb(ids2d)
            b = F.embedding_bag(ids32, self.raw, offs32, mode="sum")
            return torch.cat([a, b], 1)

    model = M()
    inputs = (
        torch.randint(0, 50, (5, 3)),
        torch.randint(0, 30, (9,), dtype=torch.int32),
        torch.tensor([0, 1, 3, 5, 7], dtype=torch.int32),
    )
    program = export(model, inputs, world_size=2, sharding="table_wise")
    assert "tensor<?xi32>" in program.text
    out = run_regions(program, model, inputs)
    torch.testing.assert_close(out[0], model(*inputs))


def test_an_export_of_a_trace_made_before_is_the_export():
    from sparselift.frontend.export import trace

    model, inputs = build("dlrm-kaggle", rows_cap=1000, batch_size=8)
    fresh = export(model, inputs, world_size=2)
    reused = export(model, inputs, world_size=2, traced=trace(model, inputs))
    assert str(reused.module) == str(fresh.module) and reused.graph_code == fresh.graph_code
    other, _ = build("dlrm-kaggle", rows_cap=1000, batch_size=8)
    with pytest.raises(ValueError, match="trace of another model"):
        export(other, inputs, world_size=2, traced=trace(model, inputs))
