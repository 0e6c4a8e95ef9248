"""The documented auto placement and ShardingPlan checks."""

from __future__ import annotations

import pytest

from sparselift.placement import ShardingPlan, TablePlacement, TableStats, auto_shard, uniform_plan

TABLES = [
    TableStats("huge", rows=10_000_000, dim=64),
    TableStats("mid_a", rows=100_000, dim=64, pooling_factor=20),
    TableStats("mid_b", rows=100_000, dim=64, pooling_factor=10),
    TableStats("mid_c", rows=100_000, dim=64, pooling_factor=10),
    TableStats("tiny", rows=10, dim=16),
]


def test_auto_mixes_row_wise_table_wise_and_data_parallel():
    plan = auto_shard(TABLES, 2)
    assert plan["huge"] == TablePlacement("row_wise", (0, 1), (0, 5_000_000, 10_000_000))
    assert plan["tiny"].kind == "data_parallel"
    # mid_a carries as much load as mid_b + mid_c: the greedy balance splits them 1 / 2.
    assert plan["mid_a"].ranks != plan["mid_b"].ranks == plan["mid_c"].ranks
    plan.check(TABLES)


def test_auto_keeps_big_mean_and_unpooled_tables_whole_but_row_wise_may_split_unpooled():
    # A row-wise shard of an unpooled table returns a row per id position and sample (mostly
    # zeros) from every rank; of a mean-pooled one, inexact partial means.
    tables = [TableStats("items", rows=1_000_000, dim=64, pooling="none"), *TABLES[1:]]
    assert auto_shard(tables, 2)["items"].kind == "table_wise"
    mean = [TableStats("huge", rows=10_000_000, dim=64, pooling="mean"), *TABLES[1:]]
    assert auto_shard(mean, 2)["huge"].kind == "table_wise"
    # Asked for, row-wise shards of an unpooled table are exact (its bags hold one id at most).
    assert uniform_plan("row_wise", tables, 2)["items"].kind == "row_wise"
    assert uniform_plan("row_wise", mean, 2)["huge"].kind == "table_wise"


def test_auto_world_size_one_and_determinism():
    assert all(p == TablePlacement.table_wise(0) for p in auto_shard(TABLES, 1).tables.values())
    assert auto_shard(TABLES, 3) == auto_shard(list(TABLES), 3)


def test_uniform_plans():
    assert uniform_plan("row_wise", TABLES[:1], 4)["huge"].row_bounds == (
        0,
        2_500_000,
        5_000_000,
        7_500_000,
        10_000_000,
    )
    assert uniform_plan("data_parallel", TABLES, 2)["mid_a"].kind == "data_parallel"
    assert {p.ranks[0] for p in uniform_plan("table_wise", TABLES, 2).tables.values()} == {0, 1}


def test_json_roundtrip_and_describe():
    plan = auto_shard(TABLES, 2)
    assert ShardingPlan.from_json(plan.to_json()) == plan
    text = plan.describe()
    assert "huge" in text and "row_wise" in text and "every rank" in text


@pytest.mark.parametrize(
    "tables, message",
    [
        ({"huge": TablePlacement.table_wise(2)}, "rank 2 is out of range for world size 2"),
        ({"huge": TablePlacement("row_wise", (0, 1), (0, 5, 9))}, "row_wise bounds"),
        ({"huge": TablePlacement.table_wise(0), "ghost": TablePlacement.table_wise(0)}, "unknown table 'ghost'"),
        ({}, "does not place table 'huge'"),
    ],
)
def test_plan_check_errors_name_the_table(tables, message):
    with pytest.raises(ValueError, match=message):
        ShardingPlan(2, tables).check(TABLES[:1])
